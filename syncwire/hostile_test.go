package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// The hostile-peer suite (issue 9): for each decoder and each call, the
// memory a peer can make us hold is bounded by a fixed multiple of the
// bytes it sent plus a constant, measured on the live heap after GC; and
// garbage gets a typed error while the session stays usable.

// heldBytes is the live heap after a full collection.
func heldBytes() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// holdBound is the bound the suite asserts: held <= k*sent + c.
const (
	holdK = 32
	holdC = 16 << 20
)

func checkHeld(t *testing.T, what string, held, sent int64) {
	t.Helper()
	t.Logf("%s: held %d KiB for %d KiB sent (bound %d KiB)", what, held>>10, sent>>10, (holdK*sent+holdC)>>10)
	if held > holdK*sent+holdC {
		t.Errorf("%s: held %d bytes for %d bytes sent; bound is %d*sent + %d", what, held, sent, holdK, holdC)
	}
}

// sessionStillWorks checks the session is the one we started with and that
// the sync methods still work on it.
func sessionStillWorks(t *testing.T, c *rpc.Client, s *rpc.Session) {
	t.Helper()
	ctx := testutil.Context(t, 20*time.Second)
	if got, err := s.Call(ctx, methodEcho, []byte("after")); err != nil || string(got) != "after" {
		t.Fatalf("echo after the load: %q, %v (session err %v)", got, err, s.Err())
	}
	p := NewPeer(s)
	if _, err := p.Watermarks(ctx); err != nil {
		t.Fatalf("watermarks after the load: %v", err)
	}
	cs, err := p.FetchChanges(ctx, FetchRequest{})
	if err != nil {
		t.Fatalf("fetch changes after the load: %v", err)
	}
	if _, err := cs.Next(ctx, 10); err != nil && !errors.Is(err, io.EOF) {
		cs.Close()
		t.Fatalf("fetch changes after the load: %v", err)
	}
	cs.Close()
	if _, err := p.Push(ctx, PushRequest{SenderRev: 1}, nil); err != nil {
		t.Fatalf("push after the load: %v", err)
	}
	now, _, err := c.Session(ctx)
	if err != nil || now != s {
		t.Fatalf("the session was replaced (%v): the load ended it (err %v)", err, s.Err())
	}
}

// hostilePeer serves a session whose methods are the given handlers (a
// peer that sends what it likes) on a real loopback WebSocket, and returns
// a client session to it plus the peer's session once it is up.
func hostilePeer(t *testing.T, handlers map[rpc.Method]rpc.Handler) (*rpc.Client, *rpc.Session, func() *rpc.Session) {
	t.Helper()
	if handlers[methodEcho] == nil {
		handlers[methodEcho] = func(ctx context.Context, c *rpc.Incoming) error { return c.Reply(c.Body) }
	}
	peers := make(chan *rpc.Session, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		s := rpc.NewSession(rpc.WebSocket(ws), false, testConfig(), func(m rpc.Method) rpc.Handler { return handlers[m] })
		if s.Handshake(r.Context()) != nil {
			return
		}
		peers <- s
		s.Serve(r.Context())
	}))
	t.Cleanup(hs.Close)
	c := wsClient(t, "ws"+strings.TrimPrefix(hs.URL, "http")+"/sync", "")
	s := session(t, c)
	var peer *rpc.Session
	return c, s, func() *rpc.Session {
		if peer == nil {
			peer = <-peers
		}
		return peer
	}
}

// bombHashes are n distinct hashes a hostile peer claims to hold.
func bombHashes(n int) []chunkstore.Hash {
	hs := make([]chunkstore.Hash, n)
	for i := range hs {
		hs[i][0], hs[i][1], hs[i][2] = byte(i), byte(i>>8), 1
	}
	return hs
}

// zeroObjects is one object-stream message of the given hashes, each a
// zstd-compressed 512 KiB chunk of zeros (about 1 MiB for 7,683 of them).
func zeroObjects(hs []chunkstore.Hash) []byte {
	z := compress(make([]byte, chunkstore.ChunkSize))
	defer putCompressBuf(z)
	var e enc
	e.PutUvarint(uint64(len(hs)))
	for _, h := range hs {
		e.hash(h)
		e.PutByte(objZstd)
		e.PutUvarint(chunkstore.ChunkSize)
		e.PutBytes(z)
	}
	return e.Bytes()
}

// bombCount is how many compressed zero chunks the bomb tests send in one
// message. WSYNC_LONG=1: as many as fit one frame, the issue's
// reproduction (7,683 chunks, 3.8 GiB decoded, in about 1 MiB; ~45 s on
// two cores). By default an eighth of that (480 MiB decoded), where the
// old whole-message decode already held 30 times the bound.
func bombCount() int {
	z := compress(make([]byte, chunkstore.ChunkSize))
	defer putCompressBuf(z)
	n := (rpc.MaxPayload - 16) / (32 + 1 + 3 + 1 + len(z))
	if os.Getenv("WSYNC_LONG") == "" {
		n /= 8
	}
	return n
}

// A FetchObjects answer of ~1 MiB holding thousands of compressed zero
// chunks, every one asked for: decoded one at a time, so the live heap
// stays within a multiple of the bytes sent (it used to decode the whole
// message, 3.8 GiB, before handing on the first object).
func TestHostileFetchObjectsAnswerIsDecodedOneAtATime(t *testing.T) {
	n := bombCount()
	_, s, peer := hostilePeer(t, map[rpc.Method]rpc.Handler{
		MethodFetchObjects: func(ctx context.Context, c *rpc.Incoming) error {
			hs, err := DecodeHashes(c.Body)
			if err != nil {
				return err
			}
			if err := c.ReplyStream(nil); err != nil {
				return err
			}
			return c.Send(ctx, zeroObjects(hs))
		},
	})
	hs := bombHashes(n)
	ctx := testutil.Context(t, 50*time.Second)
	base := heldBytes()
	var maxHeld int64
	got := 0
	err := NewPeer(s).FetchObjects(ctx, hs, func(o Object) error {
		got++
		if got == 1 || got == n/2 || got == n {
			maxHeld = max(maxHeld, heldBytes()-base)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("%d objects, want %d", got, n)
	}
	sent := peer().Stats().BytesOut
	t.Logf("%d compressed zero chunks (%d MiB decoded) in %d KiB", n, int64(n)*chunkstore.ChunkSize>>20, sent>>10)
	checkHeld(t, "fetch objects answer", maxHeld, sent)
}

// Objects nobody asked for are refused before they are decompressed; the
// session stays up.
func TestHostileUnrequestedObjectsAreRefusedBeforeDecoding(t *testing.T) {
	n := bombCount()
	_, s, peer := hostilePeer(t, map[rpc.Method]rpc.Handler{
		MethodFetchObjects: func(ctx context.Context, c *rpc.Incoming) error {
			if err := c.ReplyStream(nil); err != nil {
				return err
			}
			return c.Send(ctx, zeroObjects(bombHashes(n)[1:])) // not what was asked
		},
	})
	ctx := testutil.Context(t, 30*time.Second)
	before := decompressed.Load()
	err := NewPeer(s).FetchObjects(ctx, bombHashes(1), func(Object) error { return nil })
	if !errors.Is(err, rpc.ErrProtocol) {
		t.Fatalf("err = %v, want rpc.ErrProtocol", err)
	}
	if d := decompressed.Load() - before; d != 0 {
		t.Errorf("%d bytes decompressed for objects nobody asked for", d)
	}
	if got, err := s.Call(ctx, methodEcho, []byte("up")); err != nil || string(got) != "up" {
		t.Fatalf("session after the refusal: %q, %v", got, err)
	}
	_ = peer
}

// victim is a client and its session on a sync server of a real store:
// the target of the hostile streams below.
func victim(t *testing.T) (*rpc.Client, *rpc.Session) {
	t.Helper()
	srv := testServer(t, openStore(t, "victim"), rpc.ServerOptions{})
	c := wsClient(t, testutil.WSServer(t, srv, "/sync"), "")
	return c, session(t, c)
}

// A PushObjects stream of thousands of compressed zero chunks (every one
// announced, every one hashing right) into a real store: staged one at a
// time, the server's live heap stays within a multiple of the bytes sent.
// Objects not announced are refused with EPROTOCOL, the session stays up.
func TestHostilePushObjectsIsBounded(t *testing.T) {
	c, s := victim(t)
	ctx := testutil.Context(t, 50*time.Second)
	n := bombCount()
	zero := chunkstore.Sum(make([]byte, chunkstore.ChunkSize))
	hs := make([]chunkstore.Hash, n)
	for i := range hs {
		hs[i] = zero
	}
	msg := zeroObjects(hs)
	base := heldBytes()
	out0 := s.Stats().BytesOut
	o, err := s.Open(ctx, MethodPushObjects, PushObjectsRequest{Stage: 1, Hashes: hs}.appendTo(nil), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	o.CloseSend()
	b, err := o.Reply(ctx)
	o.Close()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := DecodePushObjectsResponse(b)
	if err != nil || resp.Chunks != int64(n) {
		t.Fatalf("staged %+v, %v; want %d chunks", resp, err, n)
	}
	checkHeld(t, "push objects (stage held open)", heldBytes()-base, s.Stats().BytesOut-out0)

	// Unannounced objects: refused before decoding.
	before := decompressed.Load()
	o, err = s.Open(ctx, MethodPushObjects, PushObjectsRequest{Stage: 2, Hashes: hs[:1]}.appendTo(nil), true)
	if err != nil {
		t.Fatal(err)
	}
	o.Send(ctx, zeroObjects(bombHashes(100)))
	o.CloseSend()
	_, err = o.Reply(ctx)
	o.Close()
	if rpc.CodeOf(err) != rpc.CodeProtocol {
		t.Fatalf("unannounced objects: %v, want EPROTOCOL", err)
	}
	if d := decompressed.Load() - before; d != 0 {
		t.Errorf("%d bytes decompressed for objects never announced", d)
	}
	sessionStillWorks(t, c, s)
}

// A Push whose entry stream is a long entry's parts that never end: the
// server holds refs in proportion to what arrived, then refuses the cut
// stream with EPROTOCOL; and a FetchChanges answer claiming a 4 TiB dense
// manifest but sending a few parts costs its receiver what was sent.
func TestHostileEntryPartsAreBoundedBySent(t *testing.T) {
	c, s := victim(t)
	ctx := testutil.Context(t, 50*time.Second)

	// Parts of an entry claiming MaxManifestChunks refs; 16 parts sent.
	parts := hugeEntryParts(16)
	base := heldBytes()
	out0 := s.Stats().BytesOut
	buffered0 := rpc.BufferedBytes() // what earlier tests' streams left unconsumed
	o, err := s.Open(ctx, MethodPush, mustAppend(PushRequest{SenderRev: 1}.appendTo(nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if err := o.Send(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// Let the server decode them all, then measure what it holds.
	testutil.WaitFor(t, "the server to take the parts", 20*time.Second, func() bool { return rpc.BufferedBytes() == buffered0 })
	checkHeld(t, "push entry parts (call open)", heldBytes()-base, s.Stats().BytesOut-out0)
	o.CloseSend()
	_, err = o.Reply(ctx)
	o.Close()
	if rpc.CodeOf(err) != rpc.CodeProtocol {
		t.Fatalf("cut entry stream: %v, want EPROTOCOL", err)
	}
	sessionStillWorks(t, c, s)

	// The same parts as a FetchChanges answer to us.
	_, hs, peer := hostilePeer(t, map[rpc.Method]rpc.Handler{
		MethodFetchChanges: func(ctx context.Context, c *rpc.Incoming) error {
			if err := c.ReplyStream(mustAppend(FetchResponse{}.appendTo(nil))); err != nil {
				return err
			}
			for _, p := range parts {
				if err := c.Send(ctx, p); err != nil {
					return err
				}
			}
			return nil
		},
	})
	base = heldBytes()
	cs, err := NewPeer(hs).FetchChanges(ctx, FetchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.Next(ctx, 10)
	held := heldBytes() - base
	cs.Close()
	if !errors.Is(err, rpc.ErrProtocol) {
		t.Fatalf("fetch changes cut inside an entry: %v, want rpc.ErrProtocol", err)
	}
	checkHeld(t, "fetch changes entry parts", held, peer().Stats().BytesOut)
}

// hugeEntryParts returns the first k parts of a file entry claiming the
// largest manifest (4 TiB of distinct data chunks).
func hugeEntryParts(k int) [][]byte {
	var out [][]byte
	for i := range k {
		var e enc
		e.PutUvarint(entryPartMarker)
		e.PutUvarint(chunkstore.MaxManifestChunks)
		e.PutUvarint(uint64(i * partRefs))
		m := make(chunkstore.Manifest, partRefs)
		for j := range m {
			n := i*partRefs + j
			m[j] = chunkstore.Ref{Hash: chunkstore.Hash{byte(n), byte(n >> 8), byte(n >> 16), 1}, Size: chunkstore.ChunkSize}
		}
		if i == 0 {
			appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: 1, Path: "huge", Mode: 0o644, Chunks: m}, "")
		} else {
			e.manifest(m)
		}
		out = append(out, e.Bytes())
	}
	return out
}

// Garbage in every request body and stream gets a typed error from every
// sync method, and the session survives all of it.
func TestHostileGarbageGetsTypedErrors(t *testing.T) {
	c, s := victim(t)
	ctx := testutil.Context(t, 30*time.Second)
	garbage := [][]byte{
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		[]byte("not a message at all"),
		{0x80},
		{entryPartMarker&0x7f | 0x80, 0x80, 0x80, 0x08, 0xff, 0xff, 0xff, 0x03, 0},
	}
	for _, m := range []rpc.Method{MethodWatermarks, MethodPush, MethodFetchChanges, MethodHasObjects, MethodFetchObjects, MethodPushObjects} {
		for i, g := range garbage {
			name := fmt.Sprintf("method %d garbage %d", m, i)
			// As the request body.
			err := callBody(ctx, s, m, g, nil)
			if code := rpc.CodeOf(err); code != rpc.CodeProtocol && code != CodeInvalid {
				t.Errorf("%s as body: %v, want EPROTOCOL or EINVAL", name, err)
			}
			// As a stream message after a valid body.
			switch m {
			case MethodPush:
				err = callBody(ctx, s, m, mustAppend(PushRequest{SenderRev: 1}.appendTo(nil)), g)
			case MethodPushObjects:
				err = callBody(ctx, s, m, PushObjectsRequest{Stage: 9, Hashes: bombHashes(1)}.appendTo(nil), g)
			default:
				continue
			}
			if code := rpc.CodeOf(err); code != rpc.CodeProtocol && code != CodeInvalid {
				t.Errorf("%s as stream: %v, want EPROTOCOL or EINVAL", name, err)
			}
		}
	}
	sessionStillWorks(t, c, s)
}

// callBody makes a call with body and, when stream is non-nil, one request
// stream message, and returns its error.
func callBody(ctx context.Context, s *rpc.Session, m rpc.Method, body, stream []byte) error {
	o, err := s.Open(ctx, m, body, stream != nil || m == MethodPush || m == MethodPushObjects)
	if err != nil {
		return err
	}
	defer o.Close()
	if stream != nil {
		o.Send(ctx, stream)
	}
	o.CloseSend()
	for {
		if _, err := o.Recv(ctx); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
