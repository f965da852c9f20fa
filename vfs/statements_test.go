package vfs

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/watermark"
)

// countStatements counts the statements s's writer runs while fn runs.
func countStatements(t *testing.T, s *Store, fn func()) []string {
	t.Helper()
	return countStatementsOn(t, s.wc, fn)
}

// countStatementsOn counts the statements run on the database of cache c
// (any, for nil) while fn runs.
func countStatementsOn(t *testing.T, cache *stmtCache, fn func()) []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	h := func(c *stmtCache, q string) {
		if cache != nil && c != cache {
			return
		}
		mu.Lock()
		got = append(got, strings.Join(strings.Fields(q), " "))
		mu.Unlock()
	}
	stmtHook.Store(&h)
	defer stmtHook.Store(nil)
	fn()
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(got)
}

// TestMountMutationStatements holds the mount's mutations to the
// statements they need: each is about 3 us of SQL on the request path
// (docs/PERFORMANCE.md, "Mount metadata"). A group's mutation writes its
// change rows at the group's commit, reuses the directory paths the
// group's earlier mutations learnt, and runs no DELETE on xattrs for a
// node that never had one; an rmdir lists no subtree of the directory
// it just found empty; the commit of a file right after its create reads
// neither its row nor its names (kept.go).
func TestMountMutationStatements(t *testing.T) {
	// The statements of mutations that run as they are answered (the
	// write-behind's run the same ones, later: TestBehind*).
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour, NoWriteBehind: true})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	// The group learns d's path with the first mutation below it.
	_, err = s.Create(ctx, d.Ino, "first", NewAttr{Mode: 0o644})
	must(t, err)
	budget := func(what string, max int, fn func()) {
		t.Helper()
		got := countStatements(t, s, fn)
		if len(got) > max {
			t.Errorf("%s ran %d statements, want at most %d:\n  %s", what, len(got), max, strings.Join(got, "\n  "))
		}
	}
	var h *Handle
	budget("create and open", 6, func() {
		_, h, err = s.CreateOpen(ctx, d.Ino, "f", NewAttr{Mode: 0o644})
		must(t, err)
	})
	_, err = h.WriteAt(ctx, []byte("hello"), 0)
	must(t, err)
	budget("a file's commit after its create", 3, func() { must(t, h.Flush(ctx)) })
	_, err = h.WriteAt(ctx, []byte("hello, again"), 0)
	must(t, err)
	budget("a file's second commit", 3, func() { must(t, h.Flush(ctx)) })
	must(t, h.Release(ctx))
	budget("mkdir", 6, func() {
		_, err := s.Mkdir(ctx, d.Ino, "sub", NewAttr{Mode: 0o755})
		must(t, err)
	})
	budget("unlink", 6, func() { must(t, s.Unlink(ctx, d.Ino, "first")) })
	budget("rmdir", 7, func() { must(t, s.Rmdir(ctx, d.Ino, "sub")) })

	// All of it reaches the feed once the group commits.
	got := paths(feed(t, s, watermark.Cursor{}, Ignore{}))
	want := []string{"dir:d", "file:d/f", "delete:d/first", "delete:d/sub"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("feed after the group: %v, want %v", got, want)
	}
	if b := readFile(t, s, "d/f"); string(b) != "hello, again" {
		t.Fatalf("d/f holds %q", b)
	}
}

// TestCommitAfterManyDirectories: a checkout makes directories before
// the files in them; once more directories than maxKept were made, the
// commit of a file right after its create still reads neither its row
// nor its names (the kept set used to hold only the directories, with
// no room left for a file, and git clone's commits each read the row).
func TestCommitAfterManyDirectories(t *testing.T) {
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour, NoWriteBehind: true})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	d := RootIno
	for i := range 2 * maxKept {
		a, err := s.Mkdir(ctx, d, fmt.Sprint("d", i), NewAttr{Mode: 0o755})
		must(t, err)
		d = a.Ino
	}
	_, h, err := s.CreateOpen(ctx, d, "f", NewAttr{Mode: 0o644})
	must(t, err)
	_, err = h.WriteAt(ctx, []byte("hello"), 0)
	must(t, err)
	got := countStatements(t, s, func() { must(t, h.Flush(ctx)) })
	for _, q := range got {
		if strings.Contains(q, "FROM nodes n WHERE n.ino = ?") || q == "SELECT parent, name FROM dirents WHERE child = ?" {
			t.Errorf("the commit read the file's row or names: %s", q)
		}
	}
	must(t, h.Release(ctx))
}

// TestGroupPathsAfterARename: a directory renamed inside a group takes
// its new path at once for every later mutation of the group, below it
// and below its subdirectories, although the group had learnt the old
// ones.
func TestGroupPathsAfterARename(t *testing.T) {
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	a, err := s.Mkdir(ctx, RootIno, "a", NewAttr{Mode: 0o755})
	must(t, err)
	c, err := s.Mkdir(ctx, a.Ino, "c", NewAttr{Mode: 0o755})
	must(t, err)
	_, err = s.Create(ctx, c.Ino, "f1", NewAttr{Mode: 0o644})
	must(t, err)
	must(t, s.Rename(ctx, RootIno, "a", RootIno, "b", 0))
	_, err = s.Create(ctx, c.Ino, "f2", NewAttr{Mode: 0o644})
	must(t, err)
	_, err = s.Create(ctx, a.Ino, "f3", NewAttr{Mode: 0o644})
	must(t, err)
	if !s.grpOpen.Load() {
		t.Fatal("the mutations did not share a group")
	}
	got := paths(feed(t, s, watermark.Cursor{}, Ignore{}))
	slices.Sort(got)
	want := []string{"delete:a", "delete:a/c", "delete:a/c/f1", "dir:b", "dir:b/c", "file:b/c/f1", "file:b/c/f2", "file:b/f3"}
	if !slices.Equal(got, want) {
		t.Fatalf("feed: %v, want %v", got, want)
	}
}

// TestRefusedMutationLeavesNoChangeRow: a group's mutation that fails
// after recording its path (here the quota refuses a create) leaves no
// change row at the group's commit, and the group's other mutations keep
// theirs.
func TestRefusedMutationLeavesNoChangeRow(t *testing.T) {
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	entries := s.Usage().Entries
	must(t, s.SetQuota(Quota{MaxEntries: entries + 2}))
	for i := range 3 {
		_, err := s.Create(ctx, RootIno, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
		if i < 2 {
			must(t, err)
		} else if err == nil {
			t.Fatal("a create over the quota succeeded")
		}
	}
	got := paths(feed(t, s, watermark.Cursor{}, Ignore{}))
	slices.Sort(got)
	if want := []string{"file:f0", "file:f1"}; !slices.Equal(got, want) {
		t.Fatalf("feed: %v, want %v", got, want)
	}
}

// TestXattrsGoWithTheirNode: deleting a node that had xattrs deletes
// them, also when they were set before the store was reopened, and the
// statement is saved only for nodes that never had any.
func TestXattrsGoWithTheirNode(t *testing.T) {
	path := t.TempDir() + "/s.db"
	s, err := Open(ctx, path, Options{NoSync: true})
	must(t, err)
	a, err := s.Create(ctx, RootIno, "a", NewAttr{Mode: 0o644})
	must(t, err)
	must(t, s.SetXattr(ctx, a.Ino, "user.x", []byte("1"), 0))
	must(t, s.Close())
	s, err = Open(ctx, path, Options{NoSync: true})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	b, err := s.Create(ctx, RootIno, "b", NewAttr{Mode: 0o644})
	must(t, err)
	must(t, s.SetXattr(ctx, b.Ino, "user.y", []byte("2"), 0))
	_, err = s.Create(ctx, RootIno, "c", NewAttr{Mode: 0o644})
	must(t, err)
	deletes := func(name string) int {
		got := countStatements(t, s, func() { must(t, s.Unlink(ctx, RootIno, name)); must(t, s.Sync(ctx)) })
		k := 0
		for _, q := range got {
			if strings.HasPrefix(q, "DELETE FROM xattrs") {
				k++
			}
		}
		return k
	}
	if deletes("a") != 1 || deletes("b") != 1 {
		t.Fatal("the unlink of a node with xattrs ran no DELETE on them")
	}
	if k := deletes("c"); k != 0 {
		t.Fatalf("the unlink of a node that never had xattrs ran %d DELETEs on them", k)
	}
	must(t, s.Sync(ctx))
	var left int
	must(t, s.w.QueryRowContext(ctx, `SELECT count(*) FROM xattrs`).Scan(&left))
	if left != 0 {
		t.Fatalf("%d xattrs of deleted nodes left", left)
	}
}

// TestSetAttrFromKeptAttributes: a SetAttr of a node whose attributes
// are kept reads no row, and what it writes is what a SetAttr that reads
// the row writes: chown, chmod and utimes in a row (as tar makes them),
// after a create, after a file's commit, and after a link (which declares
// the node's new attributes). Without the write-behind, whose memo answers
// these first and whose goroutine would run its statements inside the
// count.
func TestSetAttrFromKeptAttributes(t *testing.T) {
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour, NoWriteBehind: true})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	uid, gid, mode := uint32(5), uint32(6), uint32(0o600)
	mt, at := time.Unix(1000, 7), time.Unix(2000, 9)
	setAll := func(what string, ino Ino, reads int) {
		t.Helper()
		got := countStatements(t, s, func() {
			for _, sa := range []SetAttr{{Uid: &uid, Gid: &gid}, {Mode: &mode}, {Mtime: &mt, Atime: &at}} {
				if _, err := s.SetAttr(ctx, ino, sa); err != nil {
					t.Fatal(err)
				}
			}
		})
		k := 0
		for _, q := range got {
			if strings.HasPrefix(q, "SELECT n.ino") {
				k++
			}
		}
		if k != reads {
			t.Errorf("%s: %d reads of the node, want %d:\n  %s", what, k, reads, strings.Join(got, "\n  "))
		}
		n, err := s.viewNode(ctx, ino)
		must(t, err)
		if n.uid != uid || n.gid != gid || n.mode != mode || n.mtime != mt.UnixNano() || n.atime != at.UnixNano() {
			t.Fatalf("%s: the row holds uid %d gid %d mode %o mtime %d atime %d", what, n.uid, n.gid, n.mode, n.mtime, n.atime)
		}
		if a, err := s.GetAttr(ctx, ino); err != nil || a != n.attr() {
			t.Fatalf("%s: GetAttr = %+v, %v; the row holds %+v", what, a, err, n.attr())
		}
		uid, gid, mode = uid+1, gid+1, mode^0o044
		mt, at = mt.Add(time.Second), at.Add(time.Second)
	}
	a, h, err := s.CreateOpen(ctx, RootIno, "f", NewAttr{Mode: 0o644})
	must(t, err)
	_, err = h.WriteAt(ctx, []byte("data"), 0)
	must(t, err)
	must(t, h.Release(ctx))
	setAll("after a file's commit", a.Ino, 0)
	b, err := s.Create(ctx, RootIno, "g", NewAttr{Mode: 0o644})
	must(t, err)
	setAll("after a create", b.Ino, 0)
	_, err = s.Link(ctx, b.Ino, RootIno, "g2")
	must(t, err)
	setAll("after a link", b.Ino, 0)
}

// TestApplyWalksEachDirectoryOnce: an Apply resolving the existing
// directories of its entries looks each one up once, starting from the
// deepest one it already resolved; a batch of new files in 50 directories
// six levels down looked up every directory from the root for each of the
// 50 (300 lookups).
func TestApplyWalksEachDirectoryOnce(t *testing.T) {
	s := newStore(t)
	var dirs, files []ChangeEntry
	for i := range 50 {
		p := fmt.Sprintf("a/b/c/d/e/d%02d", i)
		dirs = append(dirs, ChangeEntry{Kind: EntryDir, Rev: int64(i + 1), Path: p, Mode: 0o755})
		files = append(files, ChangeEntry{Kind: EntryFile, Rev: int64(i + 100), Path: p + "/f", Mode: 0o644})
	}
	_, err := s.Apply(ctx, dirs, ApplyOptions{Source: Upstream})
	must(t, err)
	lookups := 0
	for _, q := range countStatements(t, s, func() {
		_, err = s.Apply(ctx, files, ApplyOptions{Source: Upstream})
	}) {
		if strings.Contains(q, "FROM dirents d JOIN nodes n ON n.ino = d.child WHERE d.parent = ? AND d.name = ?") {
			lookups++
		}
	}
	must(t, err)
	if lookups > 55 {
		t.Errorf("applying 50 files in 50 existing directories below a/b/c/d/e looked up %d names, want at most 55", lookups)
	}
	for _, f := range files {
		if _, err := s.Stat(ctx, f.Path); err != nil {
			t.Errorf("%s: %v", f.Path, err)
		}
	}
}
