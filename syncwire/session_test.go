package syncwire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

const (
	methodEcho   rpc.Method = 300
	methodStream rpc.Method = 301
	methodFail   rpc.Method = 302
	methodBlock  rpc.Method = 303
)

// testServer registers a few extension methods on a fake backend.
func testServer(t *testing.T, b Backend, opts rpc.ServerOptions) *Server {
	if opts.Config.PingInterval == 0 {
		opts.Config = testConfig()
	}
	srv := NewServer(b, opts)
	srv.Handle(methodEcho, func(ctx context.Context, c *rpc.Incoming) error { return c.Reply(c.Body) })
	srv.Handle(methodFail, func(ctx context.Context, c *rpc.Incoming) error {
		return fmt.Errorf("stat %s: %w", c.Body, vfs.ErrNotExist)
	})
	srv.Handle(methodBlock, func(ctx context.Context, c *rpc.Incoming) error {
		<-ctx.Done()
		return ctx.Err()
	})
	return srv
}

func TestErrorTableRoundTrips(t *testing.T) {
	// The sync codes keep the numbers and names they had before rpc was
	// split out (docs/PROTOCOL.md).
	for _, row := range []struct {
		sentinel error
		code     rpc.Code
		name     string
	}{
		{vfs.ErrNotExist, 1, "ENOENT"},
		{vfs.ErrExist, 2, "EEXIST"},
		{vfs.ErrNotDir, 3, "ENOTDIR"},
		{vfs.ErrIsDir, 4, "EISDIR"},
		{vfs.ErrNotEmpty, 5, "ENOTEMPTY"},
		{vfs.ErrInvalid, 6, "EINVAL"},
		{vfs.ErrPerm, 7, "EPERM"},
		{vfs.ErrNameTooLong, 8, "ENAMETOOLONG"},
		{vfs.ErrNoSpace, 9, "ENOSPC"},
		{vfs.ErrFileTooBig, 10, "EFBIG"},
		{chunkstore.ErrUnknownHash, 20, "EUNKNOWN_HASH"},
		{chunkstore.ErrHashMismatch, 21, "EHASH_MISMATCH"},
		{watermark.ErrInvariant, 22, "EINVARIANT"},
	} {
		err := fmt.Errorf("ctx: %w", row.sentinel)
		code := rpc.CodeOf(err)
		if code != row.code || code.String() != row.name {
			t.Errorf("CodeOf(%v) = %d %v, want %d %s", row.sentinel, code, code, row.code, row.name)
		}
		back := &rpc.RemoteError{Code: code, Msg: "m"}
		if !errors.Is(back, row.sentinel) {
			t.Errorf("%v does not unwrap to %v", back, row.sentinel)
		}
	}
	// Aliases travel under their row's code.
	for _, alias := range []struct {
		err  error
		code rpc.Code
	}{
		{vfs.ErrClosed, rpc.CodeShutdown},
		{chunkstore.ErrBadManifest, CodeInvalid},
		{chunkstore.ErrBadHash, CodeInvalid},
		{chunkstore.ErrChunkTooLarge, CodeInvalid},
		{watermark.ErrBadCursor, CodeInvalid},
	} {
		if got := rpc.CodeOf(fmt.Errorf("ctx: %w", alias.err)); got != alias.code {
			t.Errorf("CodeOf(%v) = %v, want %v", alias.err, got, alias.code)
		}
	}
	// Wire-level codes go first: a protocol error about a bad path is
	// EPROTOCOL, not EINVAL.
	if got := rpc.CodeOf(fmt.Errorf("%w: path: %w", rpc.ErrProtocol, vfs.ErrInvalid)); got != rpc.CodeProtocol {
		t.Errorf("a protocol error wrapping vfs.ErrInvalid is %v, want EPROTOCOL", got)
	}
	if !errors.Is(&rpc.RemoteError{Code: 999}, rpc.ErrUnknown) {
		t.Error("an unknown code is not rpc.ErrUnknown")
	}
	if rpc.CodeOf(&vfs.EntryError{Err: chunkstore.ErrUnknownHash}) != CodeUnknownHash {
		t.Error("an EntryError does not carry its cause's code")
	}
	// A full disk on the callee reaches the caller as ENOSPC, whichever
	// layer saw it: a chunk file's write or fsync, or a quota.
	for _, cause := range []error{syscall.ENOSPC, syscall.EDQUOT, &os.PathError{Op: "write", Path: "chunk", Err: syscall.ENOSPC}} {
		err := &vfs.EntryError{Err: fmt.Errorf("store chunk: %w", cause)}
		if got := rpc.CodeOf(err); got != CodeNoSpace {
			t.Errorf("CodeOf(%v) = %v, want ENOSPC", err, got)
		}
		if !errors.Is(&rpc.RemoteError{Code: rpc.CodeOf(err)}, vfs.ErrNoSpace) {
			t.Errorf("a remote ENOSPC is not vfs.ErrNoSpace")
		}
	}
}

func TestSyncMethodsAgainstAFake(t *testing.T) {
	fb := newFake("server-store")
	e1 := fb.addFile("a.txt", []byte("hello"))
	fb.addFile("node_modules/x.js", []byte("ignored"))
	e3 := fb.addFile("big.bin", bytes.Repeat([]byte("z"), chunkstore.ChunkSize+10))
	fb.marks["client-store"] = watermark.Set{AppliedPush: watermark.At(7)}
	srv := testServer(t, fb, rpc.ServerOptions{})
	url := testutil.WSServer(t, srv, "/sync")
	c := wsClient(t, url, "")
	s := session(t, c)
	ctx := testutil.Context(t, 20*time.Second)

	ps, err := NewPeer(s).Watermarks(ctx)
	if err != nil || ps.StoreID != "server-store" || ps.CurrentRev != 3 || ps.Set.AppliedPush != watermark.At(7) {
		t.Fatalf("watermarks = %+v, %v", ps, err)
	}
	if s.Peer().ID != "server-store" {
		t.Errorf("peer store id %q", s.Peer().ID)
	}

	cs, err := NewPeer(s).FetchChanges(ctx, FetchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.Next(ctx, 256)
	cs.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Path != "a.txt" || got[1].Path != "big.bin" || cs.Current != watermark.At(3) || cs.AppliedPush != watermark.At(7) {
		t.Errorf("fetch = %v (head %+v)", got, cs.FetchResponse)
	}
	if fb.flushes != 1 {
		t.Errorf("FlushAll called %d times before the feed, want 1", fb.flushes)
	}

	unknown := chunkstore.Sum([]byte("nope"))
	hs := []chunkstore.Hash{unknown, e3.Chunks[1].Hash, e1.Chunks[0].Hash}
	have, err := NewPeer(s).HasObjects(ctx, hs)
	if err != nil || len(have) != 2 || have[0] != e3.Chunks[1].Hash || have[1] != e1.Chunks[0].Hash {
		t.Errorf("has = %v, %v", have, err)
	}

	var n int
	var w rpc.WireCounter
	err = NewPeer(s).FetchObjects(rpc.WithWireCounter(ctx, &w), []chunkstore.Hash{e3.Chunks[0].Hash, e1.Chunks[0].Hash}, func(o Object) error {
		if chunkstore.Sum(o.Data) != o.Hash {
			t.Errorf("object %s: wrong bytes", o.Hash)
		}
		n++
		return nil
	})
	if err != nil || n != 2 {
		t.Errorf("fetch objects: %d, %v", n, err)
	}
	// 512 KiB of "z" compresses: far fewer bytes cross the wire.
	if w.In.Load() > 64<<10 {
		t.Errorf("compressible chunk took %d wire bytes", w.In.Load())
	}
	err = NewPeer(s).FetchObjects(ctx, []chunkstore.Hash{unknown}, func(Object) error { return nil })
	if !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Errorf("unknown object: err = %v", err)
	}
}

func TestRawChunksTravelUncompressed(t *testing.T) {
	fb := newFake("s")
	rnd := make([]byte, chunkstore.ChunkSize)
	rand.NewChaCha8([32]byte{1}).Read(rnd)
	h := chunkstore.Sum(rnd)
	if z := compress(rnd); z != nil {
		t.Fatalf("compress(%d random bytes) = %d bytes, want nil: incompressible chunks travel raw", len(rnd), len(z))
	}
	fb.chunks[h] = rnd
	srv := testServer(t, fb, rpc.ServerOptions{})
	t.Cleanup(func() { srv.Close() })
	c := newClient(t, rpc.ClientOptions{Dial: func(context.Context) (rpc.Conn, error) {
		a, _ := srv.Pipe()
		return a, nil
	}})
	var w rpc.WireCounter
	err := NewPeer(session(t, c)).FetchObjects(rpc.WithWireCounter(testutil.Context(t, 10*time.Second), &w), []chunkstore.Hash{h}, func(o Object) error {
		if !bytes.Equal(o.Data, rnd) {
			t.Error("bytes differ")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if in := w.In.Load(); in < chunkstore.ChunkSize || in > chunkstore.ChunkSize+256 {
		t.Errorf("raw chunk took %d wire bytes, want about %d (no base64, no inflation)", in, chunkstore.ChunkSize)
	}
}

// TestSlowPullerBoundsTheChunkProducer runs a 1 GiB FetchObjects against a
// consumer that takes each chunk only once the producer is blocked on
// credit: the chunks read from the backend but not yet consumed stay within
// one window.
func TestSlowPullerBoundsTheChunkProducer(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB transfer")
	}
	fb := newFake("s")
	chunk := make([]byte, chunkstore.ChunkSize)
	rand.NewChaCha8([32]byte{3}).Read(chunk)
	fb.chunkFn = func(chunkstore.Hash) ([]byte, error) { return chunk, nil }
	var producer atomic.Pointer[rpc.Session]
	srv := testServer(t, fb, rpc.ServerOptions{})
	srv.Handle(305, func(ctx context.Context, c *rpc.Incoming) error {
		producer.Store(c.Session())
		return c.Reply(nil)
	})
	url := testutil.WSServer(t, srv, "/sync")
	c := wsClient(t, url, "")
	s := session(t, c)
	ctx := testutil.Context(t, 120*time.Second)
	if _, err := s.Call(ctx, 305, nil); err != nil {
		t.Fatal(err)
	}
	const n = 2048 // 1 GiB
	hs := make([]chunkstore.Hash, n)
	for i := range hs {
		hs[i][0], hs[i][1], hs[i][2] = byte(i), byte(i>>8), 1 // never the hole hash
	}
	var consumed, maxAhead int64
	err := NewPeer(s).FetchObjects(ctx, hs, func(o Object) error {
		consumed++
		testutil.WaitFor(t, "producer to block", 10*time.Second, func() bool {
			return fb.reads.Load() >= n || producer.Load().Stats().BlockedSenders > 0
		})
		maxAhead = max(maxAhead, fb.reads.Load()-consumed)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	window := int64(s.Local().Window) / chunkstore.ChunkSize
	t.Logf("1 GiB FetchObjects: at most %d chunks (%d MiB) read ahead of the consumer; window %d chunks",
		maxAhead, maxAhead/2, window)
	// In flight: one window of frames, a frame being packed (up to two
	// chunks), the chunk being read, and a decoded message on our side.
	if maxAhead > window+5 {
		t.Errorf("producer ran %d chunks ahead; window is %d", maxAhead, window)
	}
}
