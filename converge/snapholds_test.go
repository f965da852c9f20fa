package converge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/vfs"
)

// randomTree is a server store of n files of 6-12 KiB of random bytes
// (pack chunks, not rows), with their hashes.
func randomTree(t *testing.T, n int) (*vfs.Store, []chunkstore.Hash) {
	t.Helper()
	ctx := context.Background()
	server := newStore(t, "server")
	rnd := rand.New(rand.NewPCG(1, uint64(n)))
	st := server.Chunks().NewStage()
	defer st.Release()
	var es []vfs.ChangeEntry
	var hs []chunkstore.Hash
	for i := range n {
		data := make([]byte, 6<<10+rnd.IntN(6<<10))
		for k := range data {
			data[k] = byte(rnd.Uint32())
		}
		r, err := st.PutHashed(ctx, data)
		must(t, err)
		hs = append(hs, r.Hash)
		es = append(es, vfs.ChangeEntry{Kind: vfs.EntryFile, Path: fmt.Sprintf("f%03d", i), Mode: 0o644,
			Mtime: 1_700_000_000_000_000_000, Size: int64(len(data)), Chunks: chunkstore.Manifest{r}})
	}
	_, err := server.Apply(ctx, es, vfs.ApplyOptions{Source: vfs.Local, Stage: st})
	must(t, err)
	return server, hs
}

func assertHeld(t *testing.T, s *vfs.Store, hs []chunkstore.Hash, want bool, what string) {
	t.Helper()
	held, err := s.HeldChunks(context.Background(), hs)
	must(t, err)
	if i := slices.Index(held, !want); i >= 0 {
		t.Fatalf("%s: chunk %d of %d held = %v, want %v", what, i, len(hs), held[i], want)
	}
}

func assertReadable(t *testing.T, s *vfs.Store, hs []chunkstore.Hash, what string) {
	t.Helper()
	for _, h := range hs {
		b, err := s.ReadChunk(context.Background(), h)
		if err != nil || chunkstore.Sum(b) != h {
			t.Fatalf("%s: chunk %s: %v", what, h, err)
		}
	}
}

// The chunks a snapshot staged are kept in the container's store, not in
// the staging: a collection pass and a restart of the process (a store
// reopened collects once) leave them there, the resumed bootstrap sends
// none of them again, and the install gives the holds back.
func TestSnapshotChunksHeldThroughGCAndRestart(t *testing.T) {
	ctx := context.Background()
	server, hs := randomTree(t, 60)
	path := filepath.Join(t.TempDir(), "container.db")
	cont := openStore(t, path)
	r := newRig(t, server, cont)
	rep, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName, noCommit: true})
	must(t, err)
	if rep.Chunks != len(hs) {
		t.Fatalf("staged %d chunks, want %d", rep.Chunks, len(hs))
	}
	assertHeld(t, cont, hs, true, "after staging")
	_, err = cont.RunGC(ctx)
	must(t, err)
	assertHeld(t, cont, hs, true, "after a collection")
	assertReadable(t, cont, hs, "after a collection")

	// computerd restarts: the store reopens (and collects), the responder
	// registers again.
	must(t, r.resp.Close())
	must(t, cont.Close())
	cont = openStore(t, path)
	r = newRig(t, server, cont)
	assertHeld(t, cont, hs, true, "after a restart")
	rep, err = Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName})
	must(t, err)
	if rep.ResumedAt != rep.Total || rep.Chunks != 0 {
		t.Fatalf("resumed bootstrap: resumed at %d of %d, sent %d chunks; want everything staged, none sent", rep.ResumedAt, rep.Total, rep.Chunks)
	}
	assertSameRoot(t, server, cont, "after the install")
	assertHeld(t, cont, hs, false, "after the install")
	assertNoStaging(t, StagingPath(cont))
	_, err = cont.RunGC(ctx)
	must(t, err)
	assertReadable(t, cont, hs, "installed, after a collection")
}

// A staging that can no longer install gives its chunks back, and so do
// holds left without a staging (the process died between the staging's
// removal and the release): the next start releases them.
func TestAbandonedStagingReleasesItsChunks(t *testing.T) {
	ctx := context.Background()
	// staged is a container whose computerd stopped after staging a
	// snapshot of 20 files, not committed.
	staged := func(t *testing.T) (server, cont *vfs.Store, hs []chunkstore.Hash) {
		server, hs = randomTree(t, 20)
		cont = newStore(t, "container")
		r := newRig(t, server, cont)
		_, err := Bootstrap(ctx, server, r.session(t), BootstrapOptions{Peer: peerName, noCommit: true})
		must(t, err)
		must(t, r.resp.Close())
		return server, cont, hs
	}
	t.Run("the store filled", func(t *testing.T) {
		server, cont, hs := staged(t)
		applyAll(t, cont, genEntries(1))
		newRig(t, server, cont)
		assertNoStaging(t, StagingPath(cont))
		assertHeld(t, cont, hs, false, "after the staging was removed")
		_, err := cont.RunGC(ctx)
		must(t, err)
		if have, err := cont.Has(ctx, hs); err != nil || len(have) != 0 {
			t.Fatalf("after a collection the store still has %d of the abandoned snapshot's %d chunks (%v)", len(have), len(hs), err)
		}
	})
	t.Run("holds without a staging", func(t *testing.T) {
		server, cont, hs := staged(t)
		p := StagingPath(cont)
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(p + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		assertHeld(t, cont, hs, true, "the staging removed, before the restart")
		newRig(t, server, cont)
		assertHeld(t, cont, hs, false, "after the restart")
	})
}

// Chunk bytes are checked against their hash where they are staged: an
// object whose bytes hash to another name fails the call, and nothing of
// that call is held.
func TestSnapshotObjectsRefuseWrongBytes(t *testing.T) {
	ctx := context.Background()
	server, _ := randomTree(t, 1)
	cont := newStore(t, "container")
	r := newRig(t, server, cont)
	sess := r.session(t)
	var st callStats
	_, err := snapBegin(ctx, sess, &st, Hash{5}, 1, 10)
	must(t, err)
	good := []byte("the bytes of a good chunk")
	bad := syncwire.Object{Hash: chunkstore.Sum([]byte("other bytes")), Data: []byte("not those bytes")}
	objs := []syncwire.Object{{Hash: chunkstore.Sum(good), Data: good}, bad}
	o, err := sess.Open(ctx, MethodSnapObjects, nil, true)
	must(t, err)
	defer o.Close()
	// The callee may fail the call before the caller has closed its side:
	// the refusal then comes back from CloseSend, else from Reply.
	err = errors.Join(o.Send(ctx, syncwire.AppendObjects(nil, objs)), o.CloseSend())
	if !errors.Is(err, chunkstore.ErrHashMismatch) {
		_, rerr := o.Reply(ctx)
		err = errors.Join(err, rerr)
	}
	if !errors.Is(err, chunkstore.ErrHashMismatch) {
		t.Fatalf("objects with bytes of another hash: err = %v, want ErrHashMismatch", err)
	}
	assertHeld(t, cont, []chunkstore.Hash{objs[0].Hash, objs[1].Hash}, false, "after the refused call")
}

// An objects call holds the snapshot's lock only to find its staging and
// to hold chunks: a page stages while the next page's objects call is
// still open. A staging begun again during an objects call takes none of
// that call's chunks.
func TestSnapshotObjectsOverlapPagesAndFollowTheirStaging(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	b := beginSnapshot(t, ctx, 10)
	cont, sess, st, raw, n := b.cont, b.sess, b.st, b.raw, len(b.recs)

	c1, c2 := []byte("a chunk of the next page"), []byte("another chunk of the next page")
	objs := []syncwire.Object{{Hash: chunkstore.Sum(c1), Data: c1}, {Hash: chunkstore.Sum(c2), Data: c2}}
	o, err := sess.Open(ctx, MethodSnapObjects, nil, true)
	must(t, err)
	defer o.Close()
	must(t, o.Send(ctx, syncwire.AppendObjects(nil, objs[:1])))
	// The page stages with the objects call open.
	if staged, _, _, err := snapPage(ctx, sess, st, 0, n, raw); err != nil || staged != n {
		t.Fatalf("page during an objects call: staged %d, %v", staged, err)
	}
	// A new snapshot begins: the open call's chunks are not held for it.
	_, err = snapBegin(ctx, sess, st, Hash{9}, 1, 3)
	must(t, err)
	must(t, o.Send(ctx, syncwire.AppendObjects(nil, objs[1:])))
	err = o.CloseSend()
	if err == nil {
		_, err = o.Reply(ctx)
	}
	if !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("objects call across a new begin: %v, want EINVAL", err)
	}
	assertHeld(t, cont, []chunkstore.Hash{objs[0].Hash, objs[1].Hash}, false, "after the refused call")
}

// TestPagesCountOnlyThisStagingsHolds: the receiver checks a page's chunks
// against the holds it took for the staging (no query), so it must not
// count chunks held for a staging begun before, nor chunks the store has
// without holding them (a file a process wrote in the mount).
func TestPagesCountOnlyThisStagingsHolds(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	b := beginSnapshot(t, ctx, -1)
	cont, sess, st, raw, n := b.cont, b.sess, b.st, b.raw, len(b.recs)
	// Another snapshot begins over the staging whose chunks were sent.
	other := b.tree.Root
	other[0] ^= 1
	_, err := snapBegin(ctx, sess, st, other, b.tree.Rev, n)
	must(t, err)
	queries := countIn(&heldQueries, func() {
		_, _, _, err = snapPage(ctx, sess, st, 0, n, raw)
	})
	if !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Fatalf("page naming the chunks of the staging before: err = %v, want EUNKNOWN_HASH", err)
	}
	if queries != 0 {
		t.Errorf("%d queries of the store's holds; the receiver began this staging and knows them", queries)
	}
	// The container writes one of the files itself: its chunk is in the
	// store, unheld, and a page naming it is still refused.
	var file snapRecord
	for _, rec := range b.recs {
		if rec.Entry.Kind == vfs.EntryFile && len(rec.Entry.Chunks) > 0 {
			file = rec
			break
		}
	}
	if file.Entry.Path == "" {
		t.Fatal("the tree has no file with bytes of their own")
	}
	data, err := b.server.ReadFile(ctx, file.Entry.Path)
	must(t, err)
	_, err = cont.WriteFile(ctx, "own", data, 0o644)
	must(t, err)
	assertReadable(t, cont, []chunkstore.Hash{file.Entry.Chunks[0].Hash}, "the container's own copy")
	one, err := appendRecord(nil, file)
	must(t, err)
	if _, _, _, err := snapPage(ctx, sess, st, 0, 1, one); !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Fatalf("page naming a chunk the store has but does not hold: err = %v, want EUNKNOWN_HASH", err)
	}
}

// An objects call holds what it wrote on a goroutine of its own, every
// holdEvery bytes, while its writer writes on. A hold that fails (here: the
// staging was begun again) fails the call, and every stage written behind
// it is released: no chunk of the call stays pinned (Has reports a pinned
// chunk) or held.
func TestSnapshotObjectsReleaseEveryStageAfterAFailedHold(t *testing.T) {
	defer func(n int) { holdEvery = n }(holdEvery)
	holdEvery = 1 // a hold after every message
	ctx := testutil.Context(t, 30*time.Second)
	b := beginSnapshot(t, ctx, 10)
	cont, sess, st := b.cont, b.sess, b.st
	var objs []syncwire.Object
	var hs []chunkstore.Hash
	for i := range 8 {
		data := fmt.Appendf(nil, "chunk %d of an objects call whose holds fail", i)
		objs = append(objs, syncwire.Object{Hash: chunkstore.Sum(data), Data: data})
		hs = append(hs, objs[i].Hash)
	}
	o, err := sess.Open(ctx, MethodSnapObjects, nil, true)
	must(t, err)
	defer o.Close()
	// The call has begun (its first chunk is held for the staging) before
	// the staging begins again.
	must(t, o.Send(ctx, syncwire.AppendObjects(nil, objs[:1])))
	testutil.WaitFor(t, "the first chunk held", 10*time.Second, func() bool {
		held, err := cont.HeldChunks(ctx, hs[:1])
		must(t, err)
		return held[0]
	})
	_, err = snapBegin(ctx, sess, st, Hash{9}, 1, 3)
	must(t, err)
	// The callee fails the call once a hold fails: a send after that may
	// already see it.
	for _, obj := range objs[1:] {
		if err = o.Send(ctx, syncwire.AppendObjects(nil, []syncwire.Object{obj})); err != nil {
			break
		}
	}
	if err == nil {
		err = o.CloseSend()
	}
	if err == nil {
		_, err = o.Reply(ctx)
	}
	if !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("objects call across a new begin: %v, want EINVAL", err)
	}
	assertHeld(t, cont, hs, false, "after the refused call")
	// The first chunk was held, then released by the new begin: its row
	// stays until a collection. The rest were never held.
	has, err := cont.Has(ctx, hs[1:])
	must(t, err)
	if len(has) != 0 {
		t.Fatalf("%d of %d chunks written behind the failed hold still pinned", len(has), len(hs)-1)
	}
}
