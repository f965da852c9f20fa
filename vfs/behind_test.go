package vfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/watermark"
)

// openBehind opens a store whose mount mutations are answered from memory
// (the default for a grouped, trash-less store), failing the test on any
// queued mutation that does not run as it was answered.
func openBehind(t *testing.T) *Store {
	t.Helper()
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour, Owner: NewAttr{Uid: 1000, Gid: 1000}})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	if !s.behindOn() {
		t.Fatal("the write-behind is off on a grouped store")
	}
	behindFailHook = func(err error) { t.Errorf("a queued mutation was lost: %v", err) }
	t.Cleanup(func() { behindFailHook = nil })
	return s
}

// committedDir makes directory d, commits it, and has the memo learn its
// attributes (a directory the memo saw made starts with a complete
// listing): creates in it are answered from memory.
func committedDir(t *testing.T, s *Store) Attr {
	t.Helper()
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	must(t, s.Sync(ctx))
	if _, err := s.GetAttr(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	return d
}

func queuedSoFar(s *Store) uint64 {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	return s.mem.seq
}

// answerWhileHeld runs fn with the writer held by the test: everything fn
// does must be answered without the writer, leaving queued mutations
// queued. Then it frees the writer, waits for a Sync to run them, and
// fails the test on any error.
func answerWhileHeld(t *testing.T, s *Store, queued int64, fn func() error) {
	t.Helper()
	s.wmu.Lock()
	held := true
	defer func() {
		if held {
			s.wmu.Unlock()
		}
	}()
	done := make(chan error, 1)
	reached := make(chan struct{})
	go func() {
		if err := fn(); err != nil {
			done <- err
			return
		}
		close(reached)
		done <- s.Sync(ctx) // runs the queue: it waits for the writer
	}()
	select {
	case <-reached:
	case err := <-done:
		t.Fatalf("returned before the writer was free: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("a mutation waited for the writer")
	}
	if n := s.queuedN.Load(); n != queued {
		t.Fatalf("%d mutations queued, want %d", n, queued)
	}
	held = false
	s.wmu.Unlock()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the mutations did not finish once the writer was free")
	}
}

// queueHeld takes the writer and runs fn, so that every mutation fn makes
// is answered from memory and waits in the queue; it fails the test, the
// writer freed, unless fn succeeds with want mutations queued. The caller
// frees the writer (s.wmu.Unlock), inside what it measures of the run.
func queueHeld(t *testing.T, s *Store, want int64, fn func() error) {
	t.Helper()
	s.wmu.Lock()
	err := fn()
	if n := s.queuedN.Load(); err == nil && n != want {
		err = fmt.Errorf("%d mutations queued, want %d", n, want)
	}
	if err != nil {
		s.wmu.Unlock()
		t.Fatal(err)
	}
}

// syncCounted frees the writer queueHeld took and returns the statements
// the Sync that runs the queue (and the queue's goroutine) ran.
func syncCounted(t *testing.T, s *Store) []string {
	t.Helper()
	return countStatementsOn(t, nil, func() {
		s.wmu.Unlock()
		must(t, s.Sync(ctx))
	})
}

// writeAndRelease writes b at the start of h's file and releases h (its
// commit).
func writeAndRelease(h *Handle, b string) error {
	if _, err := h.WriteAt(ctx, []byte(b), 0); err != nil {
		return err
	}
	return h.Release(ctx)
}

// While another writer holds the store (a long commit, an apply), a
// create, mkdir, unlink and rmdir in a directory the memo knows, and the
// lookups and stats of what they made, are answered without it; the rows
// they leave once they run are what was answered.
func TestBehindAnswersWhileTheWriterIsHeld(t *testing.T) {
	s := openBehind(t)
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	_, err = s.Create(ctx, d.Ino, "old", NewAttr{Mode: 0o644})
	must(t, err)
	_, err = s.Mkdir(ctx, d.Ino, "olddir", NewAttr{Mode: 0o755})
	must(t, err)
	must(t, s.Sync(ctx))
	if _, _, err := s.ReadDirAttrs(ctx, d.Ino, "", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAttr(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}

	answered := map[string]Attr{}
	answerWhileHeld(t, s, 6, func() error {
		f, h, err := s.CreateOpen(ctx, d.Ino, "f", NewAttr{Mode: 0o640, Uid: 7, Gid: 8})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		answered["f"] = f
		if _, err := h.WriteAt(ctx, []byte("hello"), 0); err != nil {
			return err
		}
		sub, err := s.Mkdir(ctx, d.Ino, "sub", NewAttr{Mode: 0o700})
		if err != nil {
			return fmt.Errorf("mkdir: %w", err)
		}
		answered["sub"] = sub
		if _, err := s.Create(ctx, sub.Ino, "inner", NewAttr{Mode: 0o600}); err != nil {
			return fmt.Errorf("create below a new directory: %w", err)
		}
		if err := s.Unlink(ctx, d.Ino, "old"); err != nil {
			return fmt.Errorf("unlink: %w", err)
		}
		if err := s.Rmdir(ctx, d.Ino, "olddir"); err != nil {
			return fmt.Errorf("rmdir: %w", err)
		}
		for name, want := range map[string]error{"old": ErrNotExist, "olddir": ErrNotExist, "f": nil, "sub": nil} {
			if _, err := s.Lookup(ctx, d.Ino, name); !errors.Is(err, want) {
				return fmt.Errorf("lookup %q: %v, want %v", name, err, want)
			}
		}
		if err := s.Rmdir(ctx, d.Ino, "sub"); !errors.Is(err, ErrNotEmpty) {
			return fmt.Errorf("rmdir of a directory with a queued create: %v, want ErrNotEmpty", err)
		}
		if _, err := s.Create(ctx, d.Ino, "f", NewAttr{Mode: 0o644}); !errors.Is(err, ErrExist) {
			return fmt.Errorf("create over a queued create: %v, want ErrExist", err)
		}
		// The memo's answers now: sub's times moved with its create.
		madeSub := answered["sub"]
		for name, ino := range map[string]Ino{"d": d.Ino, "sub": madeSub.Ino, "f": answered["f"].Ino} {
			if answered[name], err = s.GetAttr(ctx, ino); err != nil {
				return err
			}
		}
		if a := answered["sub"]; a.Ino != madeSub.Ino || a.Rev != madeSub.Rev || a.Mode != madeSub.Mode || a.Mtime.Before(madeSub.Mtime) {
			return fmt.Errorf("sub: made %+v, then %+v", madeSub, a)
		}
		if answered["d"].Mtime.Before(answered["sub"].Mtime) {
			return fmt.Errorf("the parent's times after the mutations: %+v", answered["d"])
		}
		return h.Release(ctx) // its commit is queued too
	})
	must(t, s.Sync(ctx))
	for name, a := range answered {
		ino := a.Ino
		n, err := s.viewNode(ctx, ino)
		must(t, err)
		row := n.attr()
		if name == "f" {
			// The release committed its bytes since.
			row.Size, row.Mtime, row.Ctime, row.Rev = a.Size, a.Mtime, a.Ctime, a.Rev
		}
		if row != a {
			t.Errorf("%s: answered %+v, the row holds %+v", name, a, n.attr())
		}
	}
	if got := string(readFile(t, s, "d/f")); got != "hello" {
		t.Errorf("d/f holds %q", got)
	}
	if _, err := s.Stat(ctx, "d/old"); !errors.Is(err, ErrNotExist) {
		t.Errorf("d/old after its queued unlink: %v", err)
	}
}

// git writes each loose object as a temporary file that it links to the
// object's name and then unlinks: the link, and the unlink of one name of
// several, are answered from memory as well, and leave the rows they were
// answered with.
func TestBehindLinksWhileTheWriterIsHeld(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	var answered Attr
	// Queued: the create with its commit folded in, the link, the unlink.
	answerWhileHeld(t, s, 3, func() error {
		tmp, h, err := s.CreateOpen(ctx, d.Ino, "tmp_obj", NewAttr{Mode: 0o444})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if _, err := h.WriteAt(ctx, []byte("blob"), 0); err != nil {
			return err
		}
		if err := h.Release(ctx); err != nil {
			return err
		}
		a, err := s.Link(ctx, tmp.Ino, d.Ino, "obj")
		if err != nil {
			return fmt.Errorf("link: %w", err)
		}
		if a.Nlink != 2 || a.Ino != tmp.Ino || a.Size != 4 {
			return fmt.Errorf("link answered %+v", a)
		}
		if _, err := s.Link(ctx, tmp.Ino, d.Ino, "obj"); !errors.Is(err, ErrExist) {
			return fmt.Errorf("link over a queued link: %v, want ErrExist", err)
		}
		if err := s.Unlink(ctx, d.Ino, "tmp_obj"); err != nil {
			return fmt.Errorf("unlink: %w", err)
		}
		if _, err := s.Lookup(ctx, d.Ino, "tmp_obj"); !errors.Is(err, ErrNotExist) {
			return fmt.Errorf("lookup of the unlinked name: %v", err)
		}
		if answered, err = s.Lookup(ctx, d.Ino, "obj"); err != nil {
			return err
		}
		if answered.Nlink != 1 || answered.Ctime.Before(a.Ctime) {
			return fmt.Errorf("after the unlink of its other name: %+v (linked: %+v)", answered, a)
		}
		return nil
	})
	n, err := s.viewNode(ctx, answered.Ino)
	must(t, err)
	if row := n.attr(); row != answered {
		t.Errorf("answered %+v, the row holds %+v", answered, row)
	}
	if got := string(readFile(t, s, "d/obj")); got != "blob" {
		t.Errorf("d/obj holds %q", got)
	}
	if _, err := s.Stat(ctx, "d/tmp_obj"); !errors.Is(err, ErrNotExist) {
		t.Errorf("d/tmp_obj after its queued unlink: %v", err)
	}
}

// The memo's answers are the rows' after a random mix of every mutation
// the mount makes, queued or not, with pulls out of the store between.
func TestBehindMatchesTheRows(t *testing.T) {
	s := openBehind(t)
	peer := newStore(t)
	var cursor watermark.Cursor
	rnd := rand.New(rand.NewPCG(3, 9))
	dirs := []Ino{RootIno}
	names := []string{"a", "b", "c", "d", "e", "f"}
	pagesCompared := 0 // entries of listings the memo answered, checked
	check := func(step int, what string) {
		t.Helper()
		type answer struct {
			a   Attr
			err error
		}
		got := map[string]answer{}
		listed := map[Ino][]DirEntryAttr{}
		for _, d := range dirs {
			for _, name := range names {
				a, err := s.Lookup(ctx, d, name)
				got[fmt.Sprint(d, "/", name)] = answer{a, err}
			}
			a, err := s.GetAttr(ctx, d)
			got[fmt.Sprint(d)] = answer{a, err}
			if page, ok := s.memoPage(d, "", 256); ok {
				listed[d] = page
			}
		}
		must(t, s.Sync(ctx))
		for d, page := range listed {
			pagesCompared += len(page)
			rows, err := s.readDirPage(ctx, d, "", 256, nil)
			must(t, err)
			if !slices.Equal(page, rows) {
				t.Fatalf("step %d (%s): the memo lists %d as %+v, the rows as %+v", step, what, d, page, rows)
			}
		}
		for _, d := range dirs {
			for _, name := range names {
				var want answer
				n, err := lookupNode(ctx, s.rq, d, name)
				if err == nil {
					want.a = s.overlay(n.attr())
				} else {
					want.err = err
				}
				g := got[fmt.Sprint(d, "/", name)]
				if g.a != want.a || !errors.Is(g.err, want.err) && (g.err != nil || want.err != nil) {
					t.Fatalf("step %d (%s): Lookup(%d, %q) = %+v, %v; the rows hold %+v, %v", step, what, d, name, g.a, g.err, want.a, want.err)
				}
			}
			n, err := getNode(ctx, s.rq, d)
			g := got[fmt.Sprint(d)]
			if err != nil {
				if g.err == nil {
					t.Fatalf("step %d (%s): GetAttr of removed directory %d = %+v", step, what, d, g.a)
				}
				continue
			}
			if want := n.attr(); g.a != want {
				t.Fatalf("step %d (%s): GetAttr(%d) = %+v, the row holds %+v", step, what, d, g.a, want)
			}
		}
	}
	for step := range 600 {
		d := dirs[rnd.IntN(len(dirs))]
		name := names[rnd.IntN(len(names))]
		var what string
		switch k := rnd.IntN(12); {
		case k < 3:
			what = "create"
			if _, h, err := s.CreateOpen(ctx, d, name, NewAttr{Mode: 0o644}); err == nil {
				if rnd.IntN(2) == 0 {
					_, err = h.WriteAt(ctx, []byte(what), 0)
					must(t, err)
				}
				must(t, h.Release(ctx))
			}
		case k < 5:
			what = "mkdir"
			if a, err := s.Mkdir(ctx, d, name, NewAttr{Mode: 0o755}); err == nil {
				dirs = append(dirs, a.Ino)
			}
		case k < 7:
			what = "unlink"
			s.Unlink(ctx, d, name)
		case k < 8:
			what = "rmdir"
			s.Rmdir(ctx, d, name)
		case k < 9:
			what = "rename"
			s.Rename(ctx, d, name, dirs[rnd.IntN(len(dirs))], names[rnd.IntN(len(names))], 0)
		case k < 10:
			what = "link"
			if a, err := s.Lookup(ctx, d, name); err == nil && a.Kind == KindFile {
				s.Link(ctx, a.Ino, dirs[rnd.IntN(len(dirs))], names[rnd.IntN(len(names))])
			}
		case k < 11:
			what = "chmod, chown, utimes"
			if a, err := s.Lookup(ctx, d, name); err == nil {
				mode := uint32(0o600 + rnd.IntN(0o100))
				uid := uint32(rnd.IntN(3))
				at := time.Unix(int64(step), 0)
				sa := []SetAttr{{Mode: &mode}, {Uid: &uid}, {Atime: &at, Mtime: &at}}[rnd.IntN(3)]
				s.SetAttr(ctx, a.Ino, sa)
			}
		default:
			what = "readdir"
			s.ReadDirAttrs(ctx, d, "", 256)
		}
		if step%7 == 0 {
			check(step, what)
		}
		if step%100 == 99 {
			cursor = syncInto(t, s, peer, cursor, Ignore{})
			if diff := diffTrees(tree(t, s), tree(t, peer)); diff != "" {
				t.Fatalf("step %d: the peer's tree differs after a pull:\n%s", step, diff)
			}
		}
	}
	check(600, "end")
	if n := queuedSoFar(s); n < 100 {
		t.Fatalf("only %d mutations were answered from memory: the test checks little of the memo", n)
	}
	if pagesCompared < 100 {
		t.Fatalf("only %d listed entries were answered from memory: the test checks little of the memo's listings", pagesCompared)
	}
	t.Logf("%d mutations answered from memory, %d listed entries", queuedSoFar(s), pagesCompared)
}

// observeLoss reports whether s's observers have heard, since the call,
// that mutations answered to the kernel were lost (Invalidation.All:
// the mount then drops everything the kernel caches).
func observeLoss(t *testing.T, s *Store) func() bool {
	var heard atomic.Bool
	t.Cleanup(s.Observe(func(inv []Invalidation) {
		if len(inv) == 1 && inv[0].All {
			heard.Store(true)
		}
	}))
	return heard.Load
}

// A queued mutation that fails (a disk that filled) is lost with every
// mutation answered after it, and nothing before it: the store holds a
// prefix of the answered mutations, the next Sync reports the loss, and
// the store goes on.
func TestBehindFailureLosesASuffix(t *testing.T) {
	s := openBehind(t)
	behindFailHook = nil
	d := committedDir(t, s)
	lost := observeLoss(t, s)
	// Hold the writer so the mutations queue, then fail the fourth.
	var mu sync.Mutex
	ran := 0
	behindRunHook = func(what string) error {
		mu.Lock()
		defer mu.Unlock()
		ran++
		if ran == 4 {
			return errors.New("the disk filled")
		}
		return nil
	}
	t.Cleanup(func() { behindRunHook = nil })
	queueHeld(t, s, 8, func() error {
		for i := range 8 {
			if _, err := s.Create(ctx, d.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644}); err != nil {
				return err
			}
		}
		return nil
	})
	s.wmu.Unlock()
	err := s.Sync(ctx)
	if err == nil || !strings.Contains(err.Error(), "the disk filled") || !strings.Contains(err.Error(), "4 mutations answered after it") {
		t.Fatalf("Sync after a lost queued mutation: %v", err)
	}
	testutil.WaitFor(t, "the observers to hear of the loss", 10*time.Second, lost)
	for i := range 8 {
		_, err := s.Stat(ctx, fmt.Sprint("d/f", i))
		if i < 3 && err != nil || i >= 3 && !errors.Is(err, ErrNotExist) {
			t.Errorf("d/f%d: %v", i, err)
		}
		if _, lerr := s.Lookup(ctx, d.Ino, fmt.Sprint("f", i)); errors.Is(lerr, ErrNotExist) != errors.Is(err, ErrNotExist) {
			t.Errorf("lookup of f%d answers %v where the rows say %v", i, lerr, err)
		}
	}
	must(t, s.Sync(ctx)) // reported once
	if _, err := s.Create(ctx, d.Ino, "after", NewAttr{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	must(t, s.Sync(ctx))
	if _, err := s.Stat(ctx, "d/after"); err != nil {
		t.Fatalf("a create after the loss: %v", err)
	}
}

// TestLostNumbersAreNotHandedOutAgain: the inode numbers of queued creates
// that were answered and then lost (a disk that filled) stay used: the
// kernel may hold those nodes, and a later node under the same number
// would take their place in its caches (and escape an invalidation,
// which skips nodes a commit made). No later node takes one: not an
// apply's, in bulk or one entry at a time, nor a local mutation's that
// runs at once.
func TestLostNumbersAreNotHandedOutAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, s *Store, d Attr) []Ino
	}{
		{"apply in bulk", func(t *testing.T, s *Store, d Attr) []Ino {
			return applyAndStat(t, s, ChangeEntry{Kind: EntryDir, Path: "up", Mode: 0o755}, ChangeEntry{Kind: EntryFile, Path: "up/x", Mode: 0o644})
		}},
		{"apply over a path", func(t *testing.T, s *Store, d Attr) []Ino {
			return applyAndStat(t, s, ChangeEntry{Kind: EntrySymlink, Path: "d/kept", Target: "elsewhere"})
		}},
		{"symlink", func(t *testing.T, s *Store, d Attr) []Ino {
			a, err := s.Symlink(ctx, d.Ino, "link", "target", NewAttr{Mode: 0o777})
			must(t, err)
			return []Ino{a.Ino}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openBehind(t)
			behindFailHook = nil
			d := committedDir(t, s)
			_, err := s.Create(ctx, d.Ino, "kept", NewAttr{Mode: 0o644})
			must(t, err)
			must(t, s.Sync(ctx))
			ran := 0
			behindRunHook = func(string) error {
				if ran++; ran == 2 {
					return errors.New("the disk filled")
				}
				return nil
			}
			t.Cleanup(func() { behindRunHook = nil })
			var answered Ino
			queueHeld(t, s, 4, func() error {
				for i := range 4 {
					a, err := s.Create(ctx, d.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
					if err != nil {
						return err
					}
					answered = max(answered, a.Ino)
				}
				return nil
			})
			s.wmu.Unlock()
			if err := s.Sync(ctx); err == nil {
				t.Fatal("Sync after a lost queued mutation reported nothing")
			}
			behindRunHook = nil
			if got := tc.make(t, s, d); slices.Min(got) <= answered {
				t.Errorf("nodes made after the loss got inodes %v; up to %d were answered", got, answered)
			}
		})
	}
}

// applyAndStat applies es from upstream and returns the inode numbers
// their paths then have.
func applyAndStat(t *testing.T, s *Store, es ...ChangeEntry) []Ino {
	t.Helper()
	for i := range es {
		es[i].Rev = 1
	}
	_, err := s.Apply(ctx, es, ApplyOptions{Source: Upstream})
	must(t, err)
	var inos []Ino
	for _, e := range es {
		st, err := s.Stat(ctx, e.Path)
		must(t, err)
		inos = append(inos, st.Ino)
	}
	return inos
}

// Concurrent creates and removals in shared and separate directories,
// with renames and pulls between, end with the memo and the rows in
// agreement and no queued mutation lost.
func TestBehindConcurrentWriters(t *testing.T) {
	s := openBehind(t)
	peer := newStore(t)
	shared, err := s.Mkdir(ctx, RootIno, "shared", NewAttr{Mode: 0o755})
	must(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, err := s.Mkdir(ctx, RootIno, fmt.Sprint("own", w), NewAttr{Mode: 0o755})
			if err != nil {
				errs <- err
				return
			}
			for i := range 150 {
				dir := own.Ino
				if i%2 == 0 {
					dir = shared.Ino
				}
				name := fmt.Sprint("w", w, "-", i%10)
				switch i % 5 {
				case 0, 1, 2:
					if _, err := s.Create(ctx, dir, name, NewAttr{Mode: 0o644}); err != nil && !errors.Is(err, ErrExist) {
						errs <- fmt.Errorf("create: %w", err)
						return
					}
				case 3:
					if err := s.Unlink(ctx, dir, name); err != nil && !errors.Is(err, ErrNotExist) {
						errs <- fmt.Errorf("unlink: %w", err)
						return
					}
				default:
					s.Rename(ctx, dir, name, dir, name+"x", 0)
				}
			}
		}()
	}
	var cursor watermark.Cursor
	for range 5 {
		cursor = syncInto(t, s, peer, cursor, Ignore{})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	cursor = syncInto(t, s, peer, cursor, Ignore{})
	if diff := diffTrees(tree(t, s), tree(t, peer)); diff != "" {
		t.Fatalf("the peer's tree differs:\n%s", diff)
	}
	_ = cursor
	// Every name the memo answers for is a row, and the other way round.
	for _, dir := range []string{"shared", "own0", "own7"} {
		a, err := s.Stat(ctx, dir)
		must(t, err)
		for i := range 10 {
			for _, suffix := range []string{"", "x"} {
				name := fmt.Sprint("w0-", i, suffix)
				la, lerr := s.Lookup(ctx, a.Ino, name)
				n, rerr := lookupNode(ctx, s.committed(), a.Ino, name)
				if !errors.Is(lerr, rerr) && (lerr != nil || rerr != nil) || rerr == nil && la.Ino != n.ino {
					t.Errorf("%s/%s: lookup %+v %v, rows %d %v", dir, name, la, lerr, n.ino, rerr)
				}
			}
		}
	}
	if queuedSoFar(s) == 0 {
		t.Fatal("nothing was answered from memory")
	}
}

// An open of a small file the memo holds whole (a listing page read its
// attributes and chunk list) reads no row, and reads what the file holds;
// a file whose content changed since (an apply) is read from its row.
func TestBehindOpenReadsNoRow(t *testing.T) {
	s := openBehind(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	writeFile(t, s, "d/small", []byte("small content"))
	writeFile(t, s, "d/empty", nil)
	must(t, s.Sync(ctx))
	d, err := s.Stat(ctx, "d")
	must(t, err)
	if _, _, err := s.ReadDirAttrs(ctx, d.Ino, "", 256); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"small": "small content", "empty": ""} {
		a, err := s.Lookup(ctx, d.Ino, name)
		must(t, err)
		var h *Handle
		got := countStatementsOn(t, nil, func() {
			h, _, err = s.OpenHandleAttr(ctx, a.Ino)
			must(t, err)
		})
		if len(got) != 0 {
			t.Errorf("open of %s ran %d statements:\n  %s", name, len(got), strings.Join(got, "\n  "))
		}
		buf := make([]byte, 64)
		n, err := h.ReadAt(ctx, buf, 0)
		if err != nil && n == 0 && want != "" {
			t.Fatal(err)
		}
		if string(buf[:n]) != want {
			t.Errorf("%s reads %q, want %q", name, buf[:n], want)
		}
		must(t, h.Release(ctx))
	}
	// Replaced by an apply (another writer): the memo forgets, the open
	// reads the row.
	writeFile(t, s, "d/small", []byte("replaced"))
	a, err := s.Lookup(ctx, d.Ino, "small")
	must(t, err)
	h, _, err := s.OpenHandleAttr(ctx, a.Ino)
	must(t, err)
	buf := make([]byte, 64)
	n, _ := h.ReadAt(ctx, buf, 0)
	if string(buf[:n]) != "replaced" {
		t.Errorf("after a rewrite: reads %q", buf[:n])
	}
	must(t, h.Release(ctx))
}

// A group opened by a queued mutation checks the free space too: once the
// disk is below the floor, mutations are no longer answered from memory
// but commit before they are answered (ENOSPC reaches the caller).
func TestBehindStopsBelowTheFreeSpaceFloor(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	// The disk fills; the memo still holds the room the last group found,
	// so the next create is answered from memory, and no group is open:
	// that create opens the next one when it runs.
	s.wmu.Lock()
	s.groupMinFree = 1 << 62 // no disk has this much free
	s.wmu.Unlock()
	if _, err := s.Create(ctx, d.Ino, "queued", NewAttr{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if queuedSoFar(s) == 0 {
		t.Fatal("the create was not answered from memory: the test needs it")
	}
	must(t, s.Sync(ctx)) // the queued create has run, opened a group and found no room
	before := queuedSoFar(s)
	if _, err := s.Create(ctx, d.Ino, "after", NewAttr{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if queuedSoFar(s) != before || s.grpOpen.Load() {
		t.Fatalf("a create below the floor was answered before it committed (queued %d -> %d, group open %v)", before, queuedSoFar(s), s.grpOpen.Load())
	}
	if _, err := lookupNode(ctx, s.rq, d.Ino, "after"); err != nil {
		t.Fatalf("the create below the floor is not committed: %v", err)
	}
}

// The commit of a file queued right after the file's last mutation reads
// neither the file's row nor its names when the queue runs them: that
// mutation, queued too, keeps them for it (kept.go), as a create and
// commit that run at once do (TestMountMutationStatements). Here the
// first commit folds into the create (TestBehindFoldsACommitIntoItsCreate)
// and the second follows it.
func TestBehindQueuedCommitReadsNoRow(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	// Queued: 3 creates with their first commits, 3 second commits.
	queueHeld(t, s, 6, func() error {
		for i := range 3 {
			_, h, err := s.CreateOpen(ctx, d.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
			if err != nil {
				return err
			}
			if _, err := h.WriteAt(ctx, []byte("first"), 0); err != nil {
				return err
			}
			if err := h.Flush(ctx); err != nil {
				return err
			}
			if err := writeAndRelease(h, "content"); err != nil {
				return err
			}
		}
		return nil
	})
	got := syncCounted(t, s)
	for _, q := range got {
		if strings.HasPrefix(q, "SELECT n.ino, n.kind") && strings.Contains(q, "FROM nodes n WHERE n.ino = ?") ||
			q == "SELECT parent, name FROM dirents WHERE child = ?" {
			t.Errorf("the queue read a node or its names: %s", q)
		}
		// The memo found each name free when it answered the create.
		if strings.HasPrefix(q, "SELECT p.kind, d.child FROM nodes p") {
			t.Errorf("the queue read a created name: %s", q)
		}
	}
	for i := range 3 {
		if got := string(readFile(t, s, fmt.Sprint("d/f", i))); got != "content" {
			t.Errorf("d/f%d holds %q", i, got)
		}
	}
}

// A file's first commit, answered while the file's create is the last
// mutation queued, folds into it: one row inserted with the content. The
// rows, the change rows and the parent's times end as the memo answered
// them, which is what the create and the commit would leave; a commit
// with another mutation queued after the create queues as ever.
func TestBehindFoldsACommitIntoItsCreate(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	answered := map[string]Attr{}
	// Queued: f1 with its content; f2's create, f3's create, f2's commit,
	// f3's commit (neither create was the last queued at its commit).
	answerWhileHeld(t, s, 5, func() error {
		f1, h1, err := s.CreateOpen(ctx, d.Ino, "f1", NewAttr{Mode: 0o600, Uid: 5, Gid: 6})
		if err != nil {
			return err
		}
		if err := writeAndRelease(h1, "one"); err != nil {
			return err
		}
		if a, err := s.GetAttr(ctx, f1.Ino); err != nil || a.Rev != f1.Rev+1 || a.Size != 3 {
			return fmt.Errorf("f1 created as rev %d, then %+v, %v", f1.Rev, a, err)
		}
		_, h2, err := s.CreateOpen(ctx, d.Ino, "f2", NewAttr{Mode: 0o644})
		if err != nil {
			return err
		}
		_, h3, err := s.CreateOpen(ctx, d.Ino, "f3", NewAttr{Mode: 0o644})
		if err != nil {
			return err
		}
		if err := writeAndRelease(h2, "two!"); err != nil {
			return err
		}
		if err := writeAndRelease(h3, "three"); err != nil {
			return err
		}
		for _, name := range []string{"f1", "f2", "f3"} {
			a, err := s.Lookup(ctx, d.Ino, name)
			if err != nil {
				return err
			}
			answered[name] = a
		}
		a, err := s.GetAttr(ctx, d.Ino)
		answered["."] = a
		return err
	})
	for name, a := range answered {
		n, err := s.viewNode(ctx, a.Ino)
		must(t, err)
		if row := n.attr(); row != a {
			t.Errorf("%s: answered %+v, the row holds %+v", name, a, row)
		}
		if name == "." {
			continue
		}
		var rev int64
		must(t, s.rq.QueryRowContext(ctx, `SELECT rev FROM changes WHERE path = ?`, "d/"+name).Scan(&rev))
		if rev != a.Rev {
			t.Errorf("%s: change row at rev %d, the node at %d", name, rev, a.Rev)
		}
	}
	for name, want := range map[string]string{"f1": "one", "f2": "two!", "f3": "three"} {
		if b := string(readFile(t, s, "d/"+name)); b != want {
			t.Errorf("%s holds %q, want %q", name, b, want)
		}
	}
	if cur := s.CurrentRev(); cur != answered["f3"].Rev {
		t.Errorf("the store is at rev %d, the last mutation answered %d", cur, answered["f3"].Rev)
	}
	var bytes int64
	must(t, s.rq.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'usage_bytes'`).Scan(&bytes))
	if u := s.Usage(); u.Bytes != 12 || bytes != 12 {
		t.Errorf("usage %+v, %d bytes persisted, want 12", u, bytes)
	}
}

// A folded create and commit that fails loses both, and what was answered
// after them, as a failed queued mutation does: the store holds a prefix.
func TestBehindFoldedFailureLosesBoth(t *testing.T) {
	s := openBehind(t)
	behindFailHook = nil
	d := committedDir(t, s)
	behindRunHook = func(what string) error {
		if strings.Contains(what, `"f1"`) {
			return errors.New("the disk filled")
		}
		return nil
	}
	t.Cleanup(func() { behindRunHook = nil })
	// Queued: three creates, each with its content folded in.
	queueHeld(t, s, 3, func() error {
		for i := range 3 {
			_, h, err := s.CreateOpen(ctx, d.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
			if err != nil {
				return err
			}
			if err := writeAndRelease(h, "data"); err != nil {
				return err
			}
		}
		return nil
	})
	s.wmu.Unlock()
	err := s.Sync(ctx)
	if err == nil || !strings.Contains(err.Error(), "with its first content") || !strings.Contains(err.Error(), "1 mutations answered after it") {
		t.Fatalf("Sync after a lost folded mutation: %v", err)
	}
	for i := range 3 {
		_, err := s.Stat(ctx, fmt.Sprint("d/f", i))
		if i == 0 && err != nil || i > 0 && !errors.Is(err, ErrNotExist) {
			t.Errorf("d/f%d: %v", i, err)
		}
	}
	if b := string(readFile(t, s, "d/f0")); b != "data" {
		t.Errorf("d/f0 holds %q", b)
	}
	if u := s.Usage(); u.Bytes != 4 {
		t.Errorf("usage %+v after the loss, want f0's 4 bytes", u)
	}
}

// A directory the memo knows whole (it saw it made, or listed it whole)
// lists with no query, page by page in name order: rm -rf and find list
// every directory of a tree. Once a name comes or goes, or the directory
// is gone, the listing says so.
func TestBehindListsFromMemory(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	e, err := s.Mkdir(ctx, d.Ino, "e", NewAttr{Mode: 0o755})
	must(t, err)
	list := func(limit int) (names []string, statements int) {
		t.Helper()
		after := ""
		got := countStatementsOn(t, nil, func() {
			for {
				page, _, err := s.ReadDirAttrs(ctx, e.Ino, after, limit)
				must(t, err)
				for _, p := range page {
					names = append(names, p.Name)
				}
				if len(page) < limit {
					return
				}
				after = page[len(page)-1].Name
			}
		})
		return names, len(got)
	}
	if names, n := list(256); len(names) != 0 || n != 0 {
		t.Errorf("listing an empty directory the memo saw made: %v, %d statements", names, n)
	}
	want := []string{"a", "b", "c", "d", "e"}
	for _, name := range []string{"c", "a", "e", "b", "d"} {
		_, err := s.Create(ctx, e.Ino, name, NewAttr{Mode: 0o644})
		must(t, err)
	}
	if names, n := list(2); !slices.Equal(names, want) || n != 0 {
		t.Errorf("listing in pages of 2: %v, %d statements; want %v and none", names, n, want)
	}
	must(t, s.Unlink(ctx, e.Ino, "c"))
	if names, _ := list(256); !slices.Equal(names, []string{"a", "b", "d", "e"}) {
		t.Errorf("after an unlink: %v", names)
	}
	// A directory larger than the memo lists is read from the rows.
	big, err := s.Mkdir(ctx, d.Ino, "big", NewAttr{Mode: 0o755})
	must(t, err)
	for i := range maxMemoPage + 1 {
		_, err := s.Create(ctx, big.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
		must(t, err)
	}
	if _, ok := s.memoPage(big.Ino, "", 256); ok {
		t.Errorf("the memo listed a directory of %d names", maxMemoPage+1)
	}
	page, _, err := s.ReadDirAttrs(ctx, big.Ino, "", 256)
	if err != nil || len(page) != 256 {
		t.Fatalf("listing the large directory: %d entries, %v", len(page), err)
	}
	for _, name := range []string{"a", "b", "d", "e"} {
		must(t, s.Unlink(ctx, e.Ino, name))
	}
	must(t, s.Rmdir(ctx, d.Ino, "e"))
	if _, _, err = s.ReadDirAttrs(ctx, e.Ino, "", 256); !errors.Is(err, ErrNotExist) {
		t.Fatalf("listing a removed directory: %v, want ErrNotExist", err)
	}
}

// The queue runs by itself, whether the goroutine naps (a burst: nobody
// wakes it) or sleeps (it must be woken): nothing else touches the store
// here, and every answered mutation still runs.
func TestBehindQueueRunsByItself(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	for round := range 3 {
		testutil.WaitFor(t, "the goroutine to sleep", 30*time.Second, func() bool { return s.bhSleeping.Load() })
		for i := range 5 {
			_, err := s.Create(ctx, d.Ino, fmt.Sprintf("f%d-%d", round, i), NewAttr{Mode: 0o644})
			must(t, err)
		}
		testutil.WaitFor(t, "the queued creates to run", 30*time.Second, func() bool { return s.queuedN.Load() == 0 })
	}
	must(t, s.Sync(ctx))
	page, _, err := s.ReadDirAttrs(ctx, d.Ino, "", 256)
	must(t, err)
	if len(page) != 15 {
		t.Fatalf("%d files after 15 creates", len(page))
	}
}

// A removal answered from the memo runs without reading what the name
// holds; the entry's removal checks it, so a memo that was wrong (a bug)
// fails the mutation instead of deleting another node.
// A queued create runs no query for its name (the memo found it free),
// and the entry's insert still refuses a name in use: the create fails,
// and neither the name's node nor the store's next number changes.
func TestBehindCreateRefusesANameInUse(t *testing.T) {
	s := openBehind(t)
	behindFailHook = nil
	a, err := s.Create(ctx, RootIno, "a", NewAttr{Mode: 0o644})
	must(t, err)
	err = s.mutate(ctx, s.createFn(RootIno, "a", newNode{kind: KindFile, attr: NewAttr{Mode: 0o644}}, nil, new(node), true))
	if err == nil {
		t.Fatal("a create answered for a name in use ran")
	}
	got, err := s.Lookup(ctx, RootIno, "a")
	if err != nil || got.Ino != a.Ino {
		t.Errorf("a after the refused create: %+v, %v", got, err)
	}
	names, err := s.ReadDir(ctx, RootIno, "", 10)
	must(t, err)
	if len(names) != 1 {
		t.Errorf("the root lists %d names, want 1: %+v", len(names), names)
	}
}

func TestBehindRemoveChecksTheNameItWasAnsweredFor(t *testing.T) {
	s := openBehind(t)
	behindFailHook = nil
	a, err := s.Create(ctx, RootIno, "a", NewAttr{Mode: 0o644})
	must(t, err)
	b, err := s.Create(ctx, RootIno, "b", NewAttr{Mode: 0o644})
	must(t, err)
	err = s.mutate(ctx, s.removeFn(RootIno, "a", false, &node{ino: b.Ino, kind: KindFile, nlink: 1}))
	if !errors.Is(err, ErrNotExist) {
		t.Fatalf("removing a with b's node: %v, want ErrNotExist", err)
	}
	for name, ino := range map[string]Ino{"a": a.Ino, "b": b.Ino} {
		got, err := s.Lookup(ctx, RootIno, name)
		if err != nil || got.Ino != ino {
			t.Errorf("%s after the failed removal: %+v, %v", name, got, err)
		}
	}
}

// Queued creates run no statement of their own: their node rows, names
// and parents' times wait in the group and go in multi-row statements
// before anything else reads or writes the group's transaction. The rows
// are the ones each create would have written, a directory made by a
// queued create gives its path to the creates below it without a query,
// and no create takes a savepoint.
func TestBehindCreatesWriteTheirRowsInBulk(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	answered := map[string]Attr{}
	// Queued: a mkdir, 10 creates with their content, 10 empty creates.
	queueHeld(t, s, 21, func() error {
		sub, err := s.Mkdir(ctx, d.Ino, "sub", NewAttr{Mode: 0o750})
		if err != nil {
			return err
		}
		answered["sub"] = sub
		for i := range 10 {
			_, h, err := s.CreateOpen(ctx, sub.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
			if err != nil {
				return err
			}
			if err := writeAndRelease(h, fmt.Sprint("content ", i)); err != nil {
				return err
			}
			if _, err := s.Create(ctx, d.Ino, fmt.Sprint("e", i), NewAttr{Mode: 0o600}); err != nil {
				return err
			}
		}
		for _, dir := range []Attr{d, sub} {
			page, ok := s.memoPage(dir.Ino, "", 1000)
			if !ok {
				return fmt.Errorf("the memo does not list directory %d whole", dir.Ino)
			}
			for _, e := range page {
				answered[e.Name] = e.Attr
			}
		}
		for name, ino := range map[string]Ino{".": d.Ino, "sub": sub.Ino} {
			if answered[name], err = s.GetAttr(ctx, ino); err != nil {
				return err
			}
		}
		return nil
	})
	got := syncCounted(t, s)
	nodes := 0
	for _, q := range got {
		switch {
		case strings.HasPrefix(q, "SAVEPOINT"):
			t.Errorf("a queued create took a savepoint: %s", q)
		case strings.HasPrefix(q, "SELECT parent, name FROM dirents"):
			t.Errorf("a create below a queued mkdir read its path: %s", q)
		case strings.HasPrefix(q, "INSERT INTO nodes"):
			nodes += strings.Count(q, "(?")
		}
	}
	if nodes != 21 || len(got) > 15 {
		t.Errorf("%d statements wrote %d node rows, want 21 rows in a few:\n  %s", len(got), nodes, strings.Join(got, "\n  "))
	}
	if len(answered) != 22 {
		t.Fatalf("answered %d names", len(answered))
	}
	for name, a := range answered {
		n, err := s.viewNode(ctx, a.Ino)
		must(t, err)
		if row := n.attr(); row != a {
			t.Errorf("%s: answered %+v, the row holds %+v", name, a, row)
		}
	}
	for i := range 10 {
		if b := string(readFile(t, s, fmt.Sprint("d/sub/f", i))); b != fmt.Sprint("content ", i) {
			t.Errorf("d/sub/f%d holds %q", i, b)
		}
	}
}

// Rows of queued creates waiting in the group are written before any other
// writer or reader of the group's transaction: a rename of a file whose
// create waits, a listing that reads the store, a hard link.
func TestBehindPendingRowsMeetOtherStatements(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	for i := range 5 {
		if _, err := s.Create(ctx, d.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	s.lockW() // runs the queue: the rows wait in the group
	pending := len(s.grp.t.tx.pending.nodes)
	s.wmu.Unlock()
	if pending != 5 {
		t.Fatalf("%d rows wait in the group, want 5", pending)
	}
	must(t, s.Rename(ctx, d.Ino, "f0", d.Ino, "renamed", 0))
	page, _, err := s.ReadDirAttrs(ctx, d.Ino, "", 100)
	must(t, err)
	var names []string
	for _, e := range page {
		names = append(names, e.Name)
	}
	if want := []string{"f1", "f2", "f3", "f4", "renamed"}; !slices.Equal(names, want) {
		t.Errorf("listed %v, want %v", names, want)
	}
	f1, err := s.Lookup(ctx, d.Ino, "f1")
	must(t, err)
	if _, err := s.Create(ctx, d.Ino, "g", NewAttr{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Link(ctx, f1.Ino, d.Ino, "f1-link"); err != nil {
		t.Fatal(err)
	}
	must(t, s.Sync(ctx))
	for _, p := range []string{"d/renamed", "d/f1", "d/f1-link", "d/g"} {
		if _, err := s.Stat(ctx, p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := s.Stat(ctx, "d/f0"); !errors.Is(err, ErrNotExist) {
		t.Errorf("d/f0 after its rename: %v", err)
	}
}

// When the rows of queued creates fail to write (here a name the memo
// believed free was taken behind its back, so the entries' insert refuses
// it), the group is lost as a failed group commit loses it: reported by
// the next Sync, once, a prefix of the answered mutations kept, and the
// store writable again with a memo that learns anew.
func TestBehindPendingRowsFailLoseTheGroup(t *testing.T) {
	s := openBehind(t)
	behindFailHook = nil
	d := committedDir(t, s)
	lost := observeLoss(t, s)
	a, err := s.Create(ctx, d.Ino, "a", NewAttr{Mode: 0o644})
	must(t, err)
	must(t, s.Sync(ctx))
	s.wmu.Lock()
	_, err = s.w.ExecContext(ctx, `INSERT INTO dirents(parent, name, child) VALUES(?, 'x', ?)`, d.Ino, a.Ino)
	s.wmu.Unlock()
	must(t, err)
	for _, name := range []string{"b", "x"} {
		if _, err := s.Create(ctx, d.Ino, name, NewAttr{Mode: 0o644}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	err = s.Sync(ctx)
	if err == nil || !strings.Contains(err.Error(), "queued creates") {
		t.Fatalf("Sync after the rows failed: %v", err)
	}
	testutil.WaitFor(t, "the observers to hear of the loss", 10*time.Second, lost)
	must(t, s.Sync(ctx)) // reported once
	if _, err := s.Stat(ctx, "d/b"); !errors.Is(err, ErrNotExist) {
		t.Errorf("d/b, answered in the lost group: %v", err)
	}
	if x, err := s.Lookup(ctx, d.Ino, "x"); err != nil || x.Ino != a.Ino {
		t.Errorf("lookup of x after the loss: %+v, %v (the memo must learn the rows again)", x, err)
	}
	if _, err := s.Create(ctx, d.Ino, "c", NewAttr{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	must(t, s.Sync(ctx))
	if _, err := s.Stat(ctx, "d/c"); err != nil {
		t.Errorf("a create after the loss: %v", err)
	}
}

// A queued commit that did not fold into its create (another create was
// queued between them) finds the file's row waiting in the group and
// changes it in place: no savepoint, no UPDATE, the row as answered.
func TestBehindQueuedCommitChangesAWaitingRow(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	var f Attr
	// Queued: two creates, then f's commit.
	queueHeld(t, s, 3, func() error {
		_, h, err := s.CreateOpen(ctx, d.Ino, "f", NewAttr{Mode: 0o644})
		if err != nil {
			return err
		}
		if _, err := s.Create(ctx, d.Ino, "g", NewAttr{Mode: 0o644}); err != nil {
			return err
		}
		if err := writeAndRelease(h, "after g"); err != nil {
			return err
		}
		f, err = s.Lookup(ctx, d.Ino, "f")
		return err
	})
	got := syncCounted(t, s)
	for _, q := range got {
		if strings.HasPrefix(q, "SAVEPOINT") || strings.HasPrefix(q, "UPDATE nodes SET manifest") {
			t.Errorf("the commit of a waiting row ran %s", q)
		}
	}
	n, err := s.viewNode(ctx, f.Ino)
	must(t, err)
	if row := n.attr(); row != f || f.Size != 7 {
		t.Errorf("answered %+v, the row holds %+v", f, row)
	}
	if b := string(readFile(t, s, "d/f")); b != "after g" {
		t.Errorf("d/f holds %q", b)
	}
}

// tar, cp -a and rsync set a file's times (and mode, owner) after writing
// it: a queued SetAttr of a node whose row waits in the group changes the
// row in place, and a file's paths come from what its create kept. No
// savepoint, no update, no query of its names; the rows and the change
// rows as answered.
func TestBehindSetAttrChangesAWaitingRow(t *testing.T) {
	s := openBehind(t)
	d := committedDir(t, s)
	mtime := time.Unix(1_600_000_000, 123)
	mode, uid := uint32(0o755), uint32(4242)
	answered := map[string]Attr{}
	// Queued: f with its content, its two SetAttrs; g, its SetAttr.
	queueHeld(t, s, 5, func() error {
		f, h, err := s.CreateOpen(ctx, d.Ino, "f", NewAttr{Mode: 0o600})
		if err != nil {
			return err
		}
		if err := writeAndRelease(h, "extracted"); err != nil {
			return err
		}
		if _, err := s.SetAttr(ctx, f.Ino, SetAttr{Mtime: &mtime, Atime: &mtime}); err != nil {
			return err
		}
		if answered["f"], err = s.SetAttr(ctx, f.Ino, SetAttr{Mode: &mode}); err != nil {
			return err
		}
		g, err := s.Create(ctx, d.Ino, "g", NewAttr{Mode: 0o644})
		if err != nil {
			return err
		}
		answered["g"], err = s.SetAttr(ctx, g.Ino, SetAttr{Uid: &uid})
		return err
	})
	got := syncCounted(t, s)
	for _, q := range got {
		if strings.HasPrefix(q, "SAVEPOINT") || strings.HasPrefix(q, "UPDATE nodes SET mode") || strings.HasPrefix(q, "SELECT parent, name FROM dirents") {
			t.Errorf("a SetAttr of a waiting row ran %s", q)
		}
	}
	if a := answered["f"]; !a.Mtime.Equal(mtime) || a.Mode != mode || a.Size != 9 {
		t.Errorf("f answered %+v", a)
	}
	if a := answered["g"]; a.Uid != uid {
		t.Errorf("g answered %+v", a)
	}
	for name, a := range answered {
		n, err := s.viewNode(ctx, a.Ino)
		must(t, err)
		if row := n.attr(); row != a {
			t.Errorf("%s: answered %+v, the row holds %+v", name, a, row)
		}
		var rev int64
		must(t, s.rq.QueryRowContext(ctx, `SELECT rev FROM changes WHERE path = ?`, "d/"+name).Scan(&rev))
		if rev != a.Rev {
			t.Errorf("%s: change row at rev %d, the node at %d", name, rev, a.Rev)
		}
	}
	if b := string(readFile(t, s, "d/f")); b != "extracted" {
		t.Errorf("d/f holds %q", b)
	}
}
