package vfs

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wsync/wsync/watermark"
	"pgregory.net/rapid"
)

// mknodAt makes a special file of kind k at path (store form).
func mknodAt(t testing.TB, s *Store, path string, k Kind) Attr {
	t.Helper()
	parent, err := s.ResolvePath(ctx, dirOf(path))
	must(t, err)
	a, err := s.Mknod(ctx, parent, baseOf(path), k, 0, NewAttr{Mode: 0o644, Uid: 1000, Gid: 1000})
	must(t, err)
	return a
}

// scanNames lists every row ScanTree gives, by name.
func scanNames(t testing.TB, s *Store) []string {
	t.Helper()
	var out []string
	_, err := s.ScanTree(ctx, func(r *TreeRow) error {
		out = append(out, r.Name)
		return nil
	})
	must(t, err)
	slices.Sort(out)
	return out
}

func TestMknodMakesLocalNodes(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	rev := s.CurrentRev()
	for _, k := range []Kind{KindFifo, KindSocket, KindCharDev, KindBlockDev} {
		parent, err := s.ResolvePath(ctx, "d")
		must(t, err)
		a, err := s.Mknod(ctx, parent, k.String(), k, 0x0103, NewAttr{Mode: 0o640, Uid: 7, Gid: 8})
		must(t, err)
		got, err := s.GetAttr(ctx, a.Ino)
		must(t, err)
		wantRdev := uint32(0)
		if k == KindCharDev || k == KindBlockDev {
			wantRdev = 0x0103
		}
		if got.Kind != k || got.Mode != 0o640 || got.Uid != 7 || got.Rdev != wantRdev || got.Nlink != 1 || got.Rev != 0 {
			t.Errorf("%s: attr = %+v, want kind %s mode 640 uid 7 rdev %#x nlink 1 rev 0", k, got, k, wantRdev)
		}
		if _, err := s.OpenHandle(ctx, a.Ino); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: OpenHandle err = %v, want ErrInvalid", k, err)
		}
		if _, err := s.SetAttr(ctx, a.Ino, SetAttr{Size: new(int64)}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: truncate err = %v, want ErrInvalid", k, err)
		}
	}
	if got := s.CurrentRev(); got != rev {
		t.Errorf("mknod moved the rev from %d to %d: special files must stamp nothing", rev, got)
	}
	ents, err := s.ReadDir(ctx, mustResolve(t, s, "d"), "", 0)
	must(t, err)
	if len(ents) != 4 {
		t.Errorf("ReadDir = %v, want the four special files (the mount lists them)", ents)
	}
	if _, err := s.Mknod(ctx, RootIno, "f", KindFile, 0, NewAttr{Mode: 0o644}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Mknod of a file kind: err = %v, want ErrInvalid", err)
	}
	if _, err := s.Mknod(ctx, RootIno, "d", KindFifo, 0, NewAttr{Mode: 0o644}); !errors.Is(err, ErrExist) {
		t.Errorf("Mknod over a name: err = %v, want ErrExist", err)
	}
}

func mustResolve(t testing.TB, s *Store, p string) Ino {
	t.Helper()
	ino, err := s.ResolvePath(ctx, p)
	must(t, err)
	return ino
}

// Every operation on a special file leaves the synced state alone: no rev,
// no feed entry.
func TestSpecialFileOperationsStampNothing(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	writeFile(t, s, "d/keep", []byte("k"))
	rev := s.CurrentRev()
	fifo := mknodAt(t, s, "d/fifo", KindFifo)
	mknodAt(t, s, "sock", KindSocket)
	d := mustResolve(t, s, "d")
	must(t, s.Rename(ctx, d, "fifo", RootIno, "fifo2", 0))
	mode, uid, mtime := uint32(0o600), uint32(42), time.Unix(1e9, 0)
	if _, err := s.SetAttr(ctx, fifo.Ino, SetAttr{Mode: &mode, Uid: &uid, Mtime: &mtime}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Link(ctx, fifo.Ino, d, "fifo-link"); err != nil {
		t.Fatal(err)
	}
	must(t, s.Unlink(ctx, RootIno, "fifo2"))
	must(t, s.Unlink(ctx, RootIno, "sock"))
	if got := s.CurrentRev(); got != rev {
		t.Errorf("operations on special files moved the rev from %d to %d", rev, got)
	}
	if es := feed(t, s, watermark.At(rev), Ignore{}); len(es) != 0 {
		t.Errorf("feed after special-file operations = %v, want nothing", paths(es))
	}
	a, err := s.GetAttr(ctx, fifo.Ino)
	must(t, err)
	if a.Mode != 0o600 || a.Uid != 42 || a.Nlink != 1 {
		t.Errorf("fifo after chmod/chown/link/unlink = %+v", a)
	}
	if es := feed(t, s, watermark.Cursor{}, Ignore{}); !slices.Equal(paths(es), []string{"dir:d", "file:d/keep"}) {
		t.Errorf("full feed = %v, want only d and d/keep", paths(es))
	}
}

// rm f; mkfifo f on a synced path syncs as a delete, and renaming a FIFO
// over a synced file deletes the file on the peer.
func TestSpecialFileOverSyncedPathSyncsAsDelete(t *testing.T) {
	dir := t.TempDir()
	a := openStore(t, filepath.Join(dir, "a.db"))
	b := openStore(t, filepath.Join(dir, "b.db"))
	writeFile(t, a, "f", []byte("one"))
	writeFile(t, a, "g", []byte("two"))
	mknodAt(t, a, "pipe", KindFifo)
	cur := syncInto(t, a, b, watermark.Cursor{}, Ignore{})
	if d := diffTrees(tree(t, a), tree(t, b)); d != "" {
		t.Fatalf("first sync:\n%s", d)
	}
	if _, err := b.Stat(ctx, "pipe"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("the peer has the FIFO: %v", err)
	}

	must(t, a.RemovePath(ctx, "f", false))
	mknodAt(t, a, "f", KindFifo)
	must(t, a.RenamePath(ctx, "pipe", "g"))
	es := feed(t, a, cur, Ignore{})
	if got := paths(es); !slices.Equal(got, []string{"delete:f", "delete:g"}) {
		t.Errorf("feed = %v, want [delete:f delete:g]", got)
	}
	syncInto(t, a, b, cur, Ignore{})
	if d := diffTrees(tree(t, a), tree(t, b)); d != "" {
		t.Errorf("after rm+mkfifo and a FIFO renamed over a file:\n%s", d)
	}
	if got := tree(t, b); len(got) != 0 {
		t.Errorf("peer tree = %v, want empty", got)
	}
}

// Renaming a directory that holds a FIFO syncs the directory's other files
// and nothing of the FIFO.
func TestRenameDirWithSpecialSyncsOnlyFiles(t *testing.T) {
	dir := t.TempDir()
	a := openStore(t, filepath.Join(dir, "a.db"))
	b := openStore(t, filepath.Join(dir, "b.db"))
	must(t, a.MkdirPath(ctx, "d/sub", 0o755, true))
	writeFile(t, a, "d/f", []byte("x"))
	mknodAt(t, a, "d/fifo", KindFifo)
	mknodAt(t, a, "d/sub/sock", KindSocket)
	cur := syncInto(t, a, b, watermark.Cursor{}, Ignore{})
	must(t, a.RenamePath(ctx, "d", "e"))
	es := feed(t, a, cur, Ignore{})
	want := []string{"delete:d", "delete:d/f", "delete:d/sub", "dir:e", "file:e/f", "dir:e/sub"}
	if got := paths(es); !slices.Equal(got, want) {
		t.Errorf("feed = %v, want %v", got, want)
	}
	syncInto(t, a, b, cur, Ignore{})
	if d := diffTrees(tree(t, a), tree(t, b)); d != "" {
		t.Errorf("after the rename:\n%s", d)
	}
	if _, err := a.ResolvePath(ctx, "e/sub/sock"); err != nil {
		t.Errorf("the socket did not move with its directory: %v", err)
	}
}

func TestScanTreeAndEmptySkipSpecialFiles(t *testing.T) {
	s := newStore(t)
	mknodAt(t, s, "fifo", KindFifo)
	mknodAt(t, s, "dev", KindCharDev)
	empty, err := s.Empty(ctx)
	must(t, err)
	if !empty {
		t.Error("a store holding only special files is not Empty: a snapshot could not install")
	}
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	writeFile(t, s, "d/f", nil)
	mknodAt(t, s, "d/sock", KindSocket)
	if got, want := scanNames(t, s), []string{"d", "f"}; !slices.Equal(got, want) {
		t.Errorf("ScanTree rows = %v, want %v", got, want)
	}
	es, err := s.EntriesAt(ctx, []string{"fifo", "d/sock", "d/f"})
	must(t, err)
	if es[0].Kind != EntryDelete || es[1].Kind != EntryDelete || es[2].Kind != EntryFile {
		t.Errorf("EntriesAt = %v, want special files as deletes", paths(es))
	}
}

func TestApplyOverSpecialFiles(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	defer st.Release()
	mknodAt(t, s, "p", KindFifo)
	mknodAt(t, s, "q", KindSocket)
	mknodAt(t, s, "keep", KindFifo)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	mknodAt(t, s, "d/fifo", KindFifo)
	res := apply(t, s, st,
		stageEntry(t, st, "p", []byte("file now")),           // a file replaces a FIFO
		stageEntry(t, st, "q/f", []byte("below")),            // a socket in a parent's place
		ChangeEntry{Kind: EntryDelete, Rev: 1, Path: "keep"}, // not the peer's to remove
		ChangeEntry{Kind: EntryDelete, Rev: 1, Path: "d"},    // a directory goes with its specials
	)
	if res.Applied != 3 || res.Skipped != 1 {
		t.Errorf("apply = %+v, want 3 applied and the delete of a FIFO skipped", res)
	}
	if got := string(readFile(t, s, "p")); got != "file now" {
		t.Errorf("p = %q", got)
	}
	if got := string(readFile(t, s, "q/f")); got != "below" {
		t.Errorf("q/f = %q", got)
	}
	if a, err := s.GetAttr(ctx, mustResolve(t, s, "keep")); err != nil || a.Kind != KindFifo {
		t.Errorf("keep = %+v, %v: an upstream delete removed a local FIFO", a, err)
	}
	if _, err := s.ResolvePath(ctx, "d"); !errors.Is(err, ErrNotExist) {
		t.Errorf("d after its delete: %v", err)
	}
	var nodes int
	must(t, s.rq.QueryRowContext(ctx, `SELECT count(*) FROM nodes`).Scan(&nodes))
	if nodes != 5 { // root, p, q, q/f, keep
		t.Errorf("%d nodes left, want 5: a replaced special file leaked its row", nodes)
	}
}

func TestPathAPIHidesSpecialFiles(t *testing.T) {
	s := newStore(t)
	mknodAt(t, s, "fifo", KindFifo)
	writeFile(t, s, "f", nil)
	if _, err := s.Stat(ctx, "fifo"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Stat of a FIFO: err = %v, want ErrNotExist", err)
	}
	ls, err := s.List(ctx, "")
	must(t, err)
	if len(ls) != 1 || ls[0].Name != "f" {
		t.Errorf("List = %v, want only f", ls)
	}
	writeFile(t, s, "fifo", []byte("data"))
	if got := string(readFile(t, s, "fifo")); got != "data" {
		t.Errorf("WriteFile over a FIFO: %q", got)
	}
	if es := feed(t, s, watermark.Cursor{}, Ignore{}); !slices.Equal(paths(es), []string{"file:f", "file:fifo"}) {
		t.Errorf("feed = %v", paths(es))
	}
}

func TestSchemaV3MigratesToDeviceNumbers(t *testing.T) {
	path, db := oldSchema(t, 3)
	if _, err := db.Exec(`SELECT rdev FROM nodes`); err == nil {
		t.Fatal("version 3 already has nodes.rdev")
	}
	db.Close()

	s := openMigrated(t, path)
	if a, err := s.GetAttr(ctx, RootIno); err != nil || a.Rdev != 0 {
		t.Fatalf("root after migration: %+v, %v", a, err)
	}
	a, err := s.Mknod(ctx, RootIno, "null", KindCharDev, 1<<8|3, NewAttr{Mode: 0o666})
	must(t, err)
	must(t, s.Close())
	s = openStore(t, path)
	got, err := s.GetAttr(ctx, a.Ino)
	must(t, err)
	if got.Kind != KindCharDev || got.Rdev != 1<<8|3 {
		t.Errorf("after reopen: %+v, want a char device 1,3", got)
	}
}

// TestFeedReplicatesHistoriesWithSpecialFiles runs random histories that
// mix special files with synced nodes: the peer's tree always equals the
// source's synced tree, and the peer never holds a special file.
func TestFeedReplicatesHistoriesWithSpecialFiles(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := replicaPair(t)
		defer a.Close()
		defer b.Close()
		names := []string{"a", "b", "d/e", "d/f", "d/g/h", "x/y"}
		kinds := []Kind{KindFifo, KindSocket, KindCharDev}
		mknod := func(rt *rapid.T, p, _ string) {
			a.MkdirPath(ctx, dirOf(p), 0o755, true)
			if parent, err := a.ResolvePath(ctx, dirOf(p)); err == nil {
				a.Mknod(ctx, parent, baseOf(p), rapid.SampledFrom(kinds).Draw(rt, "kind"), 0, NewAttr{Mode: 0o600})
			}
		}
		step := func(rt *rapid.T) {
			randomOp(rt, a, names, mknod, mknod,
				func(rt *rapid.T, p, _ string) {
					a.MkdirPath(ctx, dirOf(p), 0o755, true)
					a.WriteFile(ctx, p, pattern(rapid.IntRange(0, 100).Draw(rt, "size"), 1), 0o644)
				},
				func(_ *rapid.T, p, _ string) {
					a.ChmodPath(ctx, p, 0o640)
					if ino, err := a.ResolvePath(ctx, p); err == nil {
						mode := uint32(0o604)
						a.SetAttr(ctx, ino, SetAttr{Mode: &mode})
					}
				})
		}
		var cur watermark.Cursor
		for round := range 3 {
			for range rapid.IntRange(1, 20).Draw(rt, "n") {
				step(rt)
			}
			cur = syncInto(t, a, b, cur, Ignore{})
			if d := diffTrees(tree(t, a), tree(t, b)); d != "" {
				rt.Fatalf("round %d:\n%s", round, d)
			}
			var specials int
			must(t, b.rq.QueryRowContext(ctx, `SELECT count(*) FROM nodes WHERE kind NOT IN `+syncedKinds).Scan(&specials))
			if specials != 0 {
				rt.Fatalf("round %d: the peer holds %d special files", round, specials)
			}
			if got, want := scanNames(t, a), scanNames(t, b); !slices.Equal(got, want) {
				rt.Fatalf("round %d: Merkle scan rows differ: %v vs %v", round, got, want)
			}
		}
	})
}
