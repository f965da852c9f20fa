package converge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// emptyRoot is the root of a store with nothing in it.
var emptyRoot = ChildrenHash(nil)

func assertEmpty(t *testing.T, s *vfs.Store) {
	t.Helper()
	empty, err := s.Empty(context.Background())
	must(t, err)
	if !empty || root(t, s, []string{}) != emptyRoot || s.CurrentRev() != 0 {
		t.Fatalf("live store touched: empty %v, rev %d", empty, s.CurrentRev())
	}
}

// snapRig is a server holding es, an empty container, and a rig joining
// them.
func snapRig(t *testing.T, es []vfs.ChangeEntry) (server, cont *vfs.Store, r *rig) {
	t.Helper()
	server = newStore(t, "server")
	applyAll(t, server, es)
	cont = newStore(t, "container")
	return server, cont, newRig(t, server, cont)
}

// interruptBootstrap runs a bootstrap of 16 KiB pages over sess that is
// cancelled once its third page is staged.
func interruptBootstrap(t *testing.T, server *vfs.Store, sess *rpc.Session) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName, pageBytes: 16 << 10, Progress: func(rep BootstrapReport) {
		if rep.Pages == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted bootstrap: err = %v", err)
	}
}

// assertSameRoot fails the test unless server and cont hold the same
// tree; what names the check.
func assertSameRoot(t *testing.T, server, cont *vfs.Store, what string) {
	t.Helper()
	if a, b := root(t, server, []string{}), root(t, cont, []string{}); a != b {
		t.Fatalf("%s: %s / %s", what, a, b)
	}
}

func TestSnapshotBootstrap(t *testing.T) {
	if testing.Short() {
		t.Skip("50,000-file tree")
	}
	ctx := context.Background()
	server := templateStore(t, 50_000, "server")
	_, err := server.WriteFile(ctx, "node_modules/../x", nil, 0o644) // refused: never a write
	if err == nil {
		t.Fatal("bad path written")
	}
	must(t, server.SymlinkPath(ctx, "d000/s0/f000", "link"))
	cont := newStore(t, "container")
	r := newRig(t, server, cont)
	sess := r.session(t)
	var progress []BootstrapReport
	rep, err := Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName, Progress: func(r BootstrapReport) {
		progress = append(progress, r)
	}})
	must(t, err)
	want := 50_000 + 500 + 50 + 1
	if rep.Total != want || rep.Sent != want || rep.ResumedAt != 0 {
		t.Errorf("total %d, sent %d, resumed at %d; want %d records from 0", rep.Total, rep.Sent, rep.ResumedAt, want)
	}
	// Progress: the total up front, then every page, growing, the last
	// one the report's counts.
	if len(progress) != rep.Pages+1 || progress[0].Total != want || progress[0].Staged() != 0 {
		t.Fatalf("%d progress calls over %d pages, the first %+v", len(progress), rep.Pages, progress[0])
	}
	for i, p := range progress[1:] {
		prev := progress[i]
		if p.Total != want || p.Pages != prev.Pages+1 || p.Staged() <= prev.Staged() || p.ChunkBytes < prev.ChunkBytes || p.Chunks < prev.Chunks {
			t.Errorf("progress went from %+v to %+v", prev, p)
		}
	}
	if last := progress[len(progress)-1]; last.Staged() != want || last.Chunks != rep.Chunks || last.ChunkBytes != rep.ChunkBytes || rep.ChunkBytes == 0 {
		t.Errorf("last progress %+v, report %+v", last, rep)
	}
	if a, b := root(t, server, []string{}), root(t, cont, []string{}); a != b || a != rep.Root {
		t.Fatalf("roots after bootstrap: server %s, container %s, snapshot %s", a, b, rep.Root)
	}
	got, err := cont.ReadFile(ctx, "d010/s3/f077")
	must(t, err)
	if string(got) != string(contents[(10*1000+3*100+77)%len(contents)]) {
		t.Errorf("file content = %q", got)
	}
	t.Logf("bootstrap: %d records in %d pages, %d raw -> %d compressed bytes, %d wire bytes, %v",
		rep.Total, rep.Pages, rep.RawBytes, rep.PageBytes, rep.WireBytes, rep.Duration)

	// The watermarks take over: the next push has nothing to send, the
	// invariant holds, and verify agrees.
	drv := syncwire.NewDriver(server, peerName, r.client, syncwire.DriverOptions{})
	res, err := drv.Tick(ctx)
	must(t, err)
	if res.Push.Entries != 0 || res.Pull.Applied != 0 {
		t.Errorf("tick after bootstrap: pushed %d, pulled and applied %d", res.Push.Entries, res.Pull.Applied)
	}
	vr, err := Verify(ctx, server, sess, nil)
	must(t, err)
	if !vr.Converged {
		t.Errorf("verify after bootstrap: %q", diffPaths(vr.Differences))
	}
	// A second bootstrap into the now full store is refused.
	if _, err := Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName, claim: &Hash{3}}); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("bootstrap into a full store: err = %v, want ENOTEMPTY", err)
	}
}

func TestSnapshotResumesFromItsCursor(t *testing.T) {
	server, cont, r := snapRig(t, genEntries(5_000))
	sess := r.session(t)
	interruptBootstrap(t, server, sess)
	assertEmpty(t, cont)
	// computerd restarts: a new responder finds the staging on disk.
	r = newRig(t, server, cont)
	sess = r.session(t)
	var rep BootstrapReport
	var err error
	var reads int64
	queries := countIn(&heldQueries, func() {
		reads = countIn(&stagingReads, func() {
			rep, err = Bootstrap(context.Background(), server, sess, BootstrapOptions{Peer: peerName, pageBytes: 16 << 10})
		})
	})
	must(t, err)
	if rep.ResumedAt == 0 || rep.ResumedAt+rep.Sent != rep.Total {
		t.Fatalf("resumed at %d, sent %d of %d", rep.ResumedAt, rep.Sent, rep.Total)
	}
	// The new process saw only the last pages staged: the commit read the
	// staging back for its root.
	if reads != 1 {
		t.Errorf("the commit read the staging back %d times, want 1", reads)
	}
	// Nor did it take the holds before it: it asked the store which
	// chunks are held.
	if queries == 0 {
		t.Error("the resumed staging's pages were checked against holds the new process never saw")
	}
	assertSameRoot(t, server, cont, "roots after resumed bootstrap")
}

// countIn is how much fn adds to counter: stagingReads (the commits that
// read the staging back for the root), heldQueries (the have and page
// calls that asked the store which chunks are held).
func countIn(counter *atomic.Int64, fn func()) int64 {
	before := counter.Load()
	fn()
	return counter.Load() - before
}

// bootstrapFromMemory bootstraps r's container from server and checks that
// the receiver neither read its staging back for the root nor asked its
// store which chunks are held: it staged every page itself.
func bootstrapFromMemory(t *testing.T, server *vfs.Store, r *rig, opts BootstrapOptions) BootstrapReport {
	t.Helper()
	var rep BootstrapReport
	var err error
	var queries int64
	if got := countIn(&stagingReads, func() {
		queries = countIn(&heldQueries, func() { rep, err = Bootstrap(context.Background(), server, r.session(t), opts) })
	}); got != 0 {
		t.Errorf("the commit read the staging back %d times", got)
	}
	if queries != 0 {
		t.Errorf("the pages asked the store for holds %d times; the receiver took them all", queries)
	}
	must(t, err)
	return rep
}

// TestCommitTakesTheRootBuiltAsPagesStaged: the receiver folds each
// page's records into the root as it stages them (directories, files,
// a symlink, an empty file, files split over several records, pages of a
// few records), so the commit checks the root without reading the
// staging back; a bootstrap cut short and resumed by the same process
// keeps building it; and a wrong root is still refused. Likewise the
// pages check their chunks against the holds the receiver took, without
// asking the store.
func TestCommitTakesTheRootBuiltAsPagesStaged(t *testing.T) {
	ctx := context.Background()
	server := newStore(t, "server")
	applyAll(t, server, smallTree())
	repeatedFile(t, server, "d000/big", 700)
	repeatedFile(t, server, "z/y/x/later", 300)
	opts := BootstrapOptions{Peer: peerName, pageBytes: 4 << 10, partRefs: 64}

	t.Run("in one go", func(t *testing.T) {
		cont := newStore(t, "container")
		r := newRig(t, server, cont)
		rep := bootstrapFromMemory(t, server, r, opts)
		if rep.Pages < 10 {
			t.Fatalf("%d pages, want many", rep.Pages)
		}
		assertSameRoot(t, server, cont, "roots after bootstrap")
	})
	t.Run("cut short and resumed", func(t *testing.T) {
		cont := newStore(t, "container")
		r := newRig(t, server, cont)
		cut, cancel := context.WithCancel(ctx)
		o := opts
		o.Progress = func(rep BootstrapReport) {
			if rep.Pages == 5 {
				cancel()
			}
		}
		if _, err := Bootstrap(cut, server, r.session(t), o); !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted bootstrap: err = %v", err)
		}
		assertEmpty(t, cont)
		rep := bootstrapFromMemory(t, server, r, opts)
		if rep.ResumedAt == 0 {
			t.Fatal("the second bootstrap started over")
		}
		assertSameRoot(t, server, cont, "roots after resumed bootstrap")
	})
	t.Run("wrong root", func(t *testing.T) {
		cont := newStore(t, "container")
		r := newRig(t, server, cont)
		o := opts
		o.claim = &Hash{0xba, 0xd}
		var err error
		if got := countIn(&stagingReads, func() { _, err = Bootstrap(ctx, server, r.session(t), o) }); got != 0 {
			t.Errorf("the commit read the staging back %d times", got)
		}
		// The refusal crosses the wire as EHASH_MISMATCH.
		if !errors.Is(err, ErrRootMismatch) && !errors.Is(err, chunkstore.ErrHashMismatch) {
			t.Fatalf("err = %v, want the root refused", err)
		}
		assertEmpty(t, cont)
	})
}

func TestSnapshotWrongRootRefused(t *testing.T) {
	ctx := context.Background()
	server, cont, r := snapRig(t, smallTree())
	sess := r.session(t)
	wrong := Hash{0xba, 0xd}
	_, err := Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName, claim: &wrong})
	if !errors.Is(err, ErrRootMismatch) && !errors.Is(err, chunkstore.ErrHashMismatch) {
		t.Fatalf("err = %v, want EHASH_MISMATCH", err)
	}
	assertEmpty(t, cont)
	// The refused staging is gone; the right root installs.
	_, err = Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName})
	must(t, err)
	assertSameRoot(t, server, cont, "roots")
}

// begunSnapshot is a snapshot of smallTree begun over a real session,
// with the chunks of its first records sent.
type begunSnapshot struct {
	server, cont *vfs.Store
	sess         *rpc.Session
	st           *callStats
	tree         *Tree
	recs         []snapRecord // the first records, one entry each
	raw          []byte       // their framed encoding
}

// beginSnapshot begins the snapshot and sends the chunks of its first n
// records (n < 0: all of them).
func beginSnapshot(t *testing.T, ctx context.Context, n int) begunSnapshot {
	t.Helper()
	server, cont, r := snapRig(t, smallTree())
	b := begunSnapshot{server: server, cont: cont, sess: r.session(t), st: new(callStats)}
	var err error
	b.tree, err = BuildTree(ctx, server, vfs.NewIgnore([]string{}))
	must(t, err)
	_, err = snapBegin(ctx, b.sess, b.st, b.tree.Root, b.tree.Rev, b.tree.Len())
	must(t, err)
	var es []vfs.ChangeEntry
	b.tree.walk(func(p string, nd *node) error {
		if n >= 0 && len(es) == n {
			return nil
		}
		e, err := nd.entry(p, b.tree.Rev)
		must(t, err)
		rec := snapRecord{Tag: recEntry, Entry: e}
		b.raw, err = appendRecord(b.raw, rec)
		must(t, err)
		b.recs = append(b.recs, rec)
		es = append(es, e)
		return nil
	})
	must(t, sendChunks(ctx, b.sess, b.st, server, syncwire.DataHashes(es, nil), func(int) {}))
	return b
}

func TestSnapshotCorruptPageRefused(t *testing.T) {
	ctx := context.Background()
	b := beginSnapshot(t, ctx, 10)
	server, cont, sess, raw, n := b.server, b.cont, b.sess, b.raw, len(b.recs)
	st, tree := b.st, b.tree
	send := func(body []byte) error {
		_, err := call(ctx, sess, st, MethodSnapPage, body)
		return err
	}
	page := func(first, count int, raw []byte, mangle func([]byte)) []byte {
		z := zenc().EncodeAll(raw, nil)
		if mangle != nil {
			mangle(z)
		}
		return append(uvarints(uint64(first), uint64(count), uint64(len(raw))), z...)
	}
	hashFlipped := append([]byte(nil), raw...)
	hashFlipped[len(hashFlipped)-10] ^= 0xff // inside the last record's chunk hash
	tests := []struct {
		name string
		body []byte
		want error
	}{
		{"flipped compressed byte", page(0, n, raw, func(z []byte) { z[len(z)-6] ^= 0x55 }), rpc.ErrProtocol},
		{"truncated", page(0, n, raw, nil)[:20], rpc.ErrProtocol},
		{"truncated record", page(0, n, raw[:len(raw)-3], nil), rpc.ErrProtocol},
		{"flipped chunk hash", page(0, n, hashFlipped, nil), chunkstore.ErrUnknownHash},
		{"record count too high", page(0, n+1, raw, nil), rpc.ErrProtocol},
		{"out of order", page(5, n, raw, nil), rpc.ErrProtocol},
		{"declared length wrong", func() []byte {
			return append(uvarints(0, uint64(n), uint64(len(raw)+1)), zenc().EncodeAll(raw, nil)...)
		}(), rpc.ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := send(tt.body)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			assertEmpty(t, cont)
		})
	}
	// An incomplete snapshot does not commit.
	if _, _, err := snapCommit(ctx, sess, st, tree.Root); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("commit of an incomplete snapshot: err = %v, want EINVAL", err)
	}
	assertEmpty(t, cont)
	// A page whose chunks were never sent is refused.
	other := newStore(t, "other")
	_, err := other.WriteFile(ctx, "unsent", []byte("bytes the container never got"), 0o644)
	must(t, err)
	es2, err := other.EntriesAt(ctx, []string{"unsent"})
	must(t, err)
	raw2, err := appendRecord(nil, snapRecord{Tag: recEntry, Entry: es2[0]})
	must(t, err)
	if err := send(page(0, 1, raw2, nil)); !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Errorf("page with unsent chunks: err = %v, want EUNKNOWN_HASH", err)
	}
	// Watermarks were not written either.
	ws, err := cont.Watermarks(ctx, server.ID())
	must(t, err)
	if ws != (watermark.Set{}) {
		t.Errorf("container watermarks = %+v", ws)
	}
}

func TestSnapshotIntoMemoryStore(t *testing.T) {
	server := newStore(t, "server")
	applyAll(t, server, smallTree())
	cont, err := vfs.Open(context.Background(), vfs.Memory, vfs.Options{})
	must(t, err)
	t.Cleanup(func() { cont.Close() })
	r := newRig(t, server, cont)
	if _, err := Bootstrap(context.Background(), server, r.session(t), BootstrapOptions{Peer: peerName}); err != nil {
		t.Fatal(err)
	}
	assertSameRoot(t, server, cont, "roots")
}

// A process in the container writes in the mount while the snapshot
// stages: a directory the snapshot lacks, and a file (in a directory of
// its own mode) where the snapshot has another. The install keeps those
// changes, installs everything else, and fails the commit as ErrNotEmpty
// with the watermarks as they were, so the server's push carries on entry
// by entry, fenced, and the file's two versions meet in the server's
// conflict detection. (The install used to replace the live tree: it
// deleted the directory and overwrote the file.)
func TestSnapshotInstallKeepsTheContainersOwnChanges(t *testing.T) {
	ctx := context.Background()
	tree := smallTree()
	server, cont, r := snapRig(t, tree)
	sess := r.session(t)
	rep, err := Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName, noCommit: true})
	must(t, err)
	assertEmpty(t, cont)
	must(t, cont.MkdirPath(ctx, "stray/dir", 0o755, true))
	must(t, cont.MkdirPath(ctx, "d000/s0", 0o700, true))
	_, err = cont.WriteFile(ctx, "d000/s0/f000", []byte("a different file"), 0o600)
	must(t, err)
	var st callStats
	if _, _, err := snapCommit(ctx, sess, &st, rep.Root); !errors.Is(err, vfs.ErrNotEmpty) {
		t.Fatalf("commit over the container's own changes: %v, want ErrNotEmpty", err)
	}
	assertInstalledAround(t, server, cont, tree, map[string]string{"d000/s0": "", "d000/s0/f000": "a different file", "stray/dir": ""})
}

// A process writing in the mount between two of the install's batches is
// seen by the rev it stamps: its file stays, the commit fails as
// ErrNotEmpty, and the watermarks stay as they were.
func TestSnapshotInstallSeesAWriteBetweenItsBatches(t *testing.T) {
	ctx := context.Background()
	tree := genEntries(3_000)
	server, cont, r := snapRig(t, tree)
	batches := 0
	installBatchHook = func() error {
		if batches++; batches == 1 {
			_, err := cont.WriteFile(ctx, "during.txt", []byte("written during the install"), 0o644)
			return err
		}
		return nil
	}
	t.Cleanup(func() { installBatchHook = nil })
	_, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName})
	if !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("bootstrap with a write between the install's batches: %v, want ErrNotEmpty", err)
	}
	if batches < 2 {
		t.Fatalf("the install ran %d batches, want more than one", batches)
	}
	assertInstalledAround(t, server, cont, tree, map[string]string{"during.txt": "written during the install"})
}

// assertInstalledAround checks a container after an install that met the
// container's own changes: own holds them (path to content, "" for a
// directory), every other entry of tree is there as the server has it,
// the staging and its holds are gone, and the watermarks did not move.
func assertInstalledAround(t *testing.T, server, cont *vfs.Store, tree []vfs.ChangeEntry, own map[string]string) {
	t.Helper()
	ctx := context.Background()
	for p, want := range own {
		if want == "" {
			if a, err := cont.Stat(ctx, p); err != nil || a.Kind != vfs.KindDir {
				t.Errorf("the container's own directory %s: %+v, %v", p, a, err)
			}
			continue
		}
		if b, err := cont.ReadFile(ctx, p); err != nil || string(b) != want {
			t.Errorf("the container's own file %s: %q, %v; want %q", p, b, err, want)
		}
	}
	for _, e := range tree {
		if _, ok := own[e.Path]; ok || e.Kind != vfs.EntryFile {
			continue
		}
		got, err := cont.ReadFile(ctx, e.Path)
		must(t, err)
		want, err := server.ReadFile(ctx, e.Path)
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes installed, the server has %d", e.Path, len(got), len(want))
		}
	}
	assertNoStaging(t, StagingPath(cont))
	hs := make([]chunkstore.Hash, 0, len(tree))
	for _, e := range tree {
		for _, r := range e.Chunks {
			hs = append(hs, r.Hash)
		}
	}
	assertHeld(t, cont, hs, false, "chunks after the install")
	ws, err := cont.Watermarks(ctx, server.ID())
	must(t, err)
	if ws.AppliedPush != (watermark.Cursor{}) {
		t.Errorf("the container's applied push moved to %v; the server's push must carry on from where it was", ws.AppliedPush)
	}
}

// TestSnapshotPathStagedTwiceRefused: records are staged 256 to a
// statement; a page naming a path twice, within one statement or across
// two, is malformed, the error names the record, nothing of the page is
// staged, and the right page then stages and installs.
func TestSnapshotPathStagedTwiceRefused(t *testing.T) {
	ctx := context.Background()
	b := beginSnapshot(t, ctx, -1)
	server, cont, sess, st, tree, recs := b.server, b.cont, b.sess, b.st, b.tree, b.recs
	if len(recs) <= stageRows+10 {
		t.Fatalf("the tree has %d records, want more than a statement's %d", len(recs), stageRows)
	}
	var err error
	encode := func(rs []snapRecord) []byte {
		var raw []byte
		for _, rec := range rs {
			raw, err = appendRecord(raw, rec)
			must(t, err)
		}
		return raw
	}
	for _, tt := range []struct {
		name string
		at   int // where the copy of record 3 goes
	}{{"in one statement", 7}, {"in another statement", stageRows + 5}} {
		t.Run(tt.name, func(t *testing.T) {
			bad := slices.Clone(recs)
			bad[tt.at] = recs[3]
			_, _, _, err := snapPage(ctx, sess, st, 0, len(bad), encode(bad))
			if !errors.Is(err, rpc.ErrProtocol) || !strings.Contains(err.Error(), fmt.Sprintf("record %d: path %q staged twice", tt.at, recs[3].Entry.Path)) {
				t.Fatalf("page with record 3 again at %d: %v", tt.at, err)
			}
		})
	}
	staged, total, _, err := snapPage(ctx, sess, st, 0, len(recs), encode(recs))
	must(t, err)
	if staged != len(recs) || total != len(recs) {
		t.Fatalf("staged %d of %d, want %d", staged, total, len(recs))
	}
	_, _, err = snapCommit(ctx, sess, st, tree.Root)
	must(t, err)
	assertSameRoot(t, server, cont, "after the refused pages")
}
