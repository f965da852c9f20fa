package syncwire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

func openStore(t testing.TB, name string) *vfs.Store {
	t.Helper()
	s, err := vfs.Open(t.Context(), t.TempDir()+"/"+name+".db", vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pair is a sync pair: a server-side store driving, and a
// container-side store served over a real loopback WebSocket. The served
// store can be swapped (a container restart).
type pair struct {
	t      testing.TB
	server *vfs.Store // the driver's local store
	cont   *vfs.Store // the container's store
	srv    atomic.Pointer[Server]
	url    string
	client *rpc.Client
	drv    *Driver
}

func newPair(t testing.TB, opts DriverOptions) *pair {
	t.Helper()
	p := &pair{t: t, server: openStore(t, "server"), cont: openStore(t, "container")}
	p.serve(p.cont)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.srv.Load().ServeHTTP(w, r)
	}))
	p.url = "ws" + strings.TrimPrefix(hs.URL, "http") + "/sync"
	cfg := testConfig()
	cfg.ID = p.server.ID()
	p.client = rpc.NewClient(rpc.ClientOptions{Config: cfg, URL: p.url})
	p.drv = NewDriver(p.server, "container", p.client, opts)
	t.Cleanup(func() {
		p.client.Close()
		p.srv.Load().Close()
		hs.Close()
	})
	return p
}

// serve makes b the container's store, ending sessions with the old one.
func (p *pair) serve(b Backend) {
	old := p.srv.Swap(NewServer(b, rpc.ServerOptions{Config: testConfig()}))
	if old == nil {
		return
	}
	old.Close()
	// Let the client see the old session end, so the next call redials
	// instead of racing the close.
	if s := p.client.Current(); s != nil {
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			p.t.Fatal("client session outlived the server")
		}
	}
}

func (p *pair) tick() TickResult {
	p.t.Helper()
	tr, err := p.drv.Tick(testutil.Context(p.t, 60*time.Second))
	if err != nil {
		p.t.Fatalf("tick: %v", err)
	}
	return tr
}

func write(t testing.TB, s *vfs.Store, p string, data []byte) {
	t.Helper()
	ctx := t.Context()
	if dir := path.Dir(p); dir != "." {
		if err := s.MkdirPath(ctx, dir, 0o755, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.WriteFile(ctx, p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshot describes a store's live tree: path -> kind, mode and content.
func snapshot(t testing.TB, s *vfs.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := s.List(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := e.Name
			if dir != "" {
				p = dir + "/" + e.Name
			}
			switch e.Kind {
			case vfs.KindDir:
				out[p] = fmt.Sprintf("dir %o", e.Mode)
				walk(p)
			case vfs.KindSymlink:
				tg, err := s.ReadLinkPath(t.Context(), p)
				if err != nil {
					t.Fatal(err)
				}
				out[p] = "symlink " + tg
			default:
				m, err := s.Manifest(t.Context(), p)
				if err != nil {
					t.Fatal(err)
				}
				var hs []string
				for _, r := range m {
					hs = append(hs, r.Hash.String()[:12])
				}
				out[p] = fmt.Sprintf("file %o %s", e.Mode, strings.Join(hs, ","))
			}
		}
	}
	walk("")
	return out
}

func assertSameTree(t testing.TB, a, b *vfs.Store) {
	t.Helper()
	sa, sb := snapshot(t, a), snapshot(t, b)
	if !maps.Equal(sa, sb) {
		for _, k := range slices.Sorted(maps.Keys(sa)) {
			if sa[k] != sb[k] {
				t.Errorf("%s: %q vs %q", k, sa[k], sb[k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(sb)) {
			if _, ok := sa[k]; !ok {
				t.Errorf("%s: missing vs %q", k, sb[k])
			}
		}
		t.FailNow()
	}
}

func randBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

func TestPushThenPull(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 60*time.Second)
	write(t, p.server, "src/main.go", []byte("package main\n"))
	write(t, p.server, "README", randBytes(1, 700<<10))
	if err := p.server.SymlinkPath(ctx, "src/main.go", "link"); err != nil {
		t.Fatal(err)
	}
	res, err := p.drv.PushOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 4 || res.Chunks != 3 || res.ChunkBytes != 700<<10+13 {
		t.Errorf("push = %+v, want 4 entries, 3 chunks", res)
	}
	assertSameTree(t, p.server, p.cont)
	got, err := p.cont.ReadFile(ctx, "README")
	if err != nil || !bytes.Equal(got, randBytes(1, 700<<10)) {
		t.Errorf("container README: %d bytes, %v", len(got), err)
	}

	write(t, p.cont, "out/result.txt", []byte("42\n"))
	if err := p.cont.RemovePath(ctx, "link", false); err != nil {
		t.Fatal(err)
	}
	res, err = p.drv.PullOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 3 || res.Chunks != 1 {
		t.Errorf("pull = %+v, want 3 applied (dir, file, delete), 1 chunk", res)
	}
	assertSameTree(t, p.server, p.cont)
	// Watermarks: the server's fetch cursor is the container's rev.
	ws, _ := p.server.Watermarks(ctx, "container")
	if ws.Fetch != watermark.At(p.cont.CurrentRev()) {
		t.Errorf("fetch cursor %v, container rev %d", ws.Fetch, p.cont.CurrentRev())
	}
}

func TestUpstreamEntriesStopCirculatingWithinTwoTicks(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := t.Context()
	write(t, p.server, "a/from-server.txt", []byte("s1"))
	write(t, p.cont, "b/from-container.txt", []byte("c1"))
	t1 := p.tick()
	if t1.Pull.Applied != 2 || t1.Push.Applied != 2 {
		t.Errorf("tick 1 = %+v, want 2 pulled and 2 pushed", t1)
	}
	assertSameTree(t, p.server, p.cont)
	t2 := p.tick()
	if t2.Pull.Entries != 0 || t2.Push.Entries != 0 {
		t.Errorf("tick 2 moved entries (bounce): %+v", t2)
	}
	// Edits on both sides of an existing file, then quiet.
	write(t, p.server, "a/from-server.txt", []byte("s2"))
	write(t, p.cont, "b/from-container.txt", []byte("c2"))
	p.tick()
	if t4 := p.tick(); t4.Pull.Entries != 0 || t4.Push.Entries != 0 {
		t.Errorf("second round bounced: %+v", t4)
	}
	assertSameTree(t, p.server, p.cont)
	got, _ := p.server.ReadFile(ctx, "b/from-container.txt")
	if string(got) != "c2" {
		t.Errorf("server has %q", got)
	}
	// Quiet ticks cost one small round trip each way at most.
	if t5 := p.tick(); t5.Pull.WireBytes > 2<<10 || t5.Push.WireBytes != 0 {
		t.Errorf("idle tick wire bytes: pull %d, push %d", t5.Pull.WireBytes, t5.Push.WireBytes)
	}
}

func TestDedupSendsEachChunkOnce(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 60*time.Second)
	big := randBytes(2, 3*chunkstore.ChunkSize)
	write(t, p.server, "one/big.bin", big)
	write(t, p.server, "two/copy.bin", big)
	res, err := p.drv.PushOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks != 3 || res.ChunkBytes != int64(len(big)) || res.DedupBytes != int64(len(big)) {
		t.Errorf("push of two copies = %+v, want 3 chunks once and %d deduped", res, len(big))
	}
	if res.WireBytes > int64(len(big))+64<<10 {
		t.Errorf("wire bytes %d for %d bytes of content", res.WireBytes, len(big))
	}
	// Edit one chunk in the middle: only that chunk moves.
	edited := bytes.Clone(big)
	copy(edited[chunkstore.ChunkSize+100:], "an edit inside the second chunk")
	write(t, p.server, "one/big.bin", edited)
	res, err = p.drv.PushOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks != 1 || res.ChunkBytes != chunkstore.ChunkSize || res.DedupBytes != 2*chunkstore.ChunkSize {
		t.Errorf("one-chunk edit push = %+v, want 1 chunk", res)
	}
	if res.WireBytes > chunkstore.ChunkSize+16<<10 {
		t.Errorf("one-chunk edit cost %d wire bytes", res.WireBytes)
	}
	// The pull direction dedups against what the server holds.
	write(t, p.cont, "three/again.bin", edited)
	pr, err := p.drv.PullOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Chunks != 0 || pr.DedupBytes != int64(len(edited)) {
		t.Errorf("pull of known content = %+v, want 0 chunks", pr)
	}
	assertSameTree(t, p.server, p.cont)
}

// applyCutter wraps the driver's local store: on Apply number cut it
// kills the session instead of applying, as a connection lost mid-pull.
type applyCutter struct {
	*vfs.Store
	client  *rpc.Client
	calls   atomic.Int32
	cut     int32
	entries atomic.Int64 // entries handed to Apply, cut call included
}

func (a *applyCutter) Apply(ctx context.Context, es []vfs.ChangeEntry, opts vfs.ApplyOptions) (vfs.ApplyResult, error) {
	a.entries.Add(int64(len(es)))
	if a.calls.Add(1) == a.cut {
		s, _, _ := a.client.Session(ctx)
		s.Close()
		return vfs.ApplyResult{}, fmt.Errorf("cut: %w", rpc.ErrShutdown)
	}
	return a.Store.Apply(ctx, es, opts)
}

// populate writes n small files under dir in one Local apply (fast).
func populate(t testing.TB, s *vfs.Store, dir string, n int) {
	t.Helper()
	ctx := t.Context()
	data := []byte("same small content")
	h := chunkstore.Sum(data)
	st := s.Chunks().NewStage()
	defer st.Release()
	if err := st.Put(ctx, h, data); err != nil {
		t.Fatal(err)
	}
	es := []vfs.ChangeEntry{{Kind: vfs.EntryDir, Path: dir, Mode: 0o755}}
	for i := range n {
		es = append(es, vfs.ChangeEntry{Kind: vfs.EntryFile, Path: fmt.Sprintf("%s/f%05d", dir, i), Mode: 0o644, Mtime: 1,
			Size: int64(len(data)), Chunks: chunkstore.Manifest{{Hash: h, Size: uint32(len(data))}}})
	}
	if _, err := s.Apply(ctx, es, vfs.ApplyOptions{Source: vfs.Local, Stage: st}); err != nil {
		t.Fatal(err)
	}
}

func TestPullResumesAfterACutWithinOneBatch(t *testing.T) {
	p := newPair(t, DriverOptions{})
	cutter := &applyCutter{Store: p.server, client: p.client, cut: 4}
	p.drv.local = cutter
	ctx := testutil.Context(t, 120*time.Second)
	const n = 2000
	populate(t, p.cont, "tree", n)
	if _, err := p.drv.PullOnce(ctx); !errors.Is(err, rpc.ErrShutdown) {
		t.Fatalf("cut pull: err = %v, want rpc.ErrShutdown", err)
	}
	ws, _ := p.server.Watermarks(ctx, "container")
	if !ws.Fetch.Partial {
		t.Errorf("fetch cursor after 3 batches = %v, want a partial (rev, path) cursor", ws.Fetch)
	}
	res, err := p.drv.PullOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refetched := cutter.entries.Load() - (n + 1)
	t.Logf("cut after 3 batches of %d entries: re-fetched %d", n+1, refetched)
	if refetched > BatchEntries {
		t.Errorf("re-fetched %d entries, at most %d allowed", refetched, BatchEntries)
	}
	if res.Entries != n+1-3*BatchEntries {
		t.Errorf("resumed pull moved %d entries, want %d", res.Entries, n+1-3*BatchEntries)
	}
	assertSameTree(t, p.server, p.cont)
}

func TestRenameOfTenThousandResumesMidRev(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000-entry rename")
	}
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 300*time.Second)
	const n = 10000
	populate(t, p.cont, "big", n)
	if _, err := p.drv.PullOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.cont.RenamePath(ctx, "big", "moved"); err != nil {
		t.Fatal(err)
	}
	rev := p.cont.CurrentRev()
	cutter := &applyCutter{Store: p.server, client: p.client, cut: 11}
	p.drv.local = cutter
	if _, err := p.drv.PullOnce(ctx); !errors.Is(err, rpc.ErrShutdown) {
		t.Fatalf("cut pull: err = %v", err)
	}
	ws, _ := p.server.Watermarks(ctx, "container")
	if ws.Fetch.Rev != rev || !ws.Fetch.Partial {
		t.Fatalf("fetch cursor after the cut = %v, want a cursor inside rev %d", ws.Fetch, rev)
	}
	first := cutter.entries.Load()
	res, err := p.drv.PullOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 2*n + 2 // every new path and every old path's tombstone, dirs included
	refetched := first + int64(res.Entries) - int64(total)
	t.Logf("rename of %d (%d entries in rev %d): cut at %v, re-fetched %d", n, total, rev, ws.Fetch, refetched)
	if refetched > BatchEntries {
		t.Errorf("re-fetched %d entries after a mid-rev cut", refetched)
	}
	assertSameTree(t, p.server, p.cont)
}

func TestPushAppliesNothingWhenAChunkNeverArrives(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 30*time.Second)
	write(t, p.cont, "keep.txt", []byte("keep"))
	before, rev := snapshot(t, p.cont), p.cont.CurrentRev()
	s := session(t, p.client)
	data := []byte("never sent")
	h := chunkstore.Sum(data)
	batch := []vfs.ChangeEntry{
		{Kind: vfs.EntryDir, Rev: 1, Path: "d", Mode: 0o755},
		{Kind: vfs.EntryFile, Rev: 2, Path: "d/f", Mode: 0o644, Size: int64(len(data)), Chunks: chunkstore.Manifest{{Hash: h, Size: uint32(len(data))}}},
		{Kind: vfs.EntryDelete, Rev: 3, Path: "keep.txt"},
	}
	_, err := NewPeer(s).Push(ctx, PushRequest{SenderRev: 3, SenderCursor: watermark.At(3)}, batch)
	if !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Fatalf("err = %v, want ErrUnknownHash", err)
	}
	if after := snapshot(t, p.cont); !maps.Equal(before, after) || p.cont.CurrentRev() != rev {
		t.Errorf("receiver changed: %v -> %v (rev %d -> %d)", before, after, rev, p.cont.CurrentRev())
	}
	if ws, _ := p.cont.Watermarks(ctx, p.server.ID()); ws != (watermark.Set{}) {
		t.Errorf("receiver watermarks moved: %+v", ws)
	}
}

func TestReplacedContainerIsDetectedAndRebaselined(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts DriverOptions
	}{
		{"reconcile on connect", DriverOptions{}},
		{"invariant on pull", DriverOptions{noReconcile: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.opts)
			ctx := t.Context()
			for i := range 5 {
				write(t, p.server, fmt.Sprintf("src/f%d", i), fmt.Appendf(nil, "v%d", i))
			}
			write(t, p.cont, "built/out", []byte("artifact"))
			p.tick()
			p.tick()
			serverBefore := snapshot(t, p.server)

			// The container restarts with an ephemeral store.
			fresh := openStore(t, "fresh")
			p.serve(fresh)
			p.cont = fresh
			tr := p.tick()
			if tr.Pull.Resets+tr.Push.Resets == 0 {
				t.Errorf("tick after the restart did not reset a watermark: %+v", tr)
			}
			assertSameTree(t, p.server, p.cont)
			if got := snapshot(t, p.server); !maps.Equal(got, serverBefore) {
				t.Errorf("server lost state: %v -> %v", serverBefore, got)
			}
			if tr := p.tick(); tr.Pull.Entries+tr.Push.Entries != 0 || tr.Pull.Resets+tr.Push.Resets != 0 {
				t.Errorf("tick after re-baseline = %+v, want quiet", tr)
			}
			ws, _ := p.server.Watermarks(ctx, "container")
			if err := watermark.CheckInvariant("c", ws, mustPeer(t, p).Set.AppliedPush); err != nil {
				t.Error(err)
			}
		})
	}
}

func mustPeer(t testing.TB, p *pair) PeerState {
	t.Helper()
	ps, err := NewPeer(session(t, p.client)).Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestSenderRevZeroVersusPeer(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 30*time.Second)
	// An external writer (its own store id, senderRev 0) pushes a file.
	cfg := testConfig()
	cfg.ID = "external-writer"
	ext := rpc.NewClient(rpc.ClientOptions{Config: cfg, URL: p.url})
	defer ext.Close()
	xs := session(t, ext)
	dir := []vfs.ChangeEntry{{Kind: vfs.EntryDir, Rev: 1, Path: "ext", Mode: 0o755}}
	resp, err := NewPeer(xs).Push(ctx, PushRequest{SenderRev: 0, SenderCursor: watermark.At(0)}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Applied != 1 || resp.RevAfter <= resp.RevBefore {
		t.Errorf("external push = %+v, want the receiver's own rev bumped", resp)
	}
	ws, _ := p.cont.Watermarks(ctx, "external-writer")
	if ws.Push != (watermark.Cursor{}) || ws.Fetch != (watermark.Cursor{}) {
		t.Errorf("external push touched outbound watermarks: %+v", ws)
	}
	// The receiver ships the external write onward on its next sync.
	res, err := p.drv.PullOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 1 {
		t.Errorf("pull after an external write = %+v, want it shipped onward", res)
	}

	// A sync peer (senderRev > 0): the receiver records how far it has the
	// peer's feed, and the driver skips the revs the apply stamped.
	write(t, p.server, "peer.txt", []byte("p"))
	if _, err := p.drv.PushOnce(ctx); err != nil {
		t.Fatal(err)
	}
	cw, _ := p.cont.Watermarks(ctx, p.server.ID())
	if cw.Fetch != watermark.At(p.server.CurrentRev()) || cw.AppliedPush != cw.Fetch {
		t.Errorf("receiver watermarks after a peer push = %+v, want fetch = applied = %d", cw, p.server.CurrentRev())
	}
	if res, _ := p.drv.PullOnce(ctx); res.Entries != 0 {
		t.Errorf("peer push bounced back: %+v", res)
	}
}

// lyingBackend serves wrong bytes for every chunk.
type lyingBackend struct{ *vfs.Store }

func (l lyingBackend) ReadChunks(ctx context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error {
	return l.Store.ReadChunks(ctx, hs, func(h chunkstore.Hash, b []byte) error {
		b = bytes.Clone(b)
		b[0] ^= 1
		return each(h, b)
	})
}

func TestBadPeersGetTypedErrorsAndChangeNothing(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 60*time.Second)
	write(t, p.cont, "keep.txt", []byte("keep"))
	p.tick()
	contBefore, serverBefore := snapshot(t, p.cont), snapshot(t, p.server)
	unchanged := func(t *testing.T) {
		t.Helper()
		if got := snapshot(t, p.cont); !maps.Equal(got, contBefore) {
			t.Errorf("container changed: %v", got)
		}
		if got := snapshot(t, p.server); !maps.Equal(got, serverBefore) {
			t.Errorf("server changed: %v", got)
		}
	}
	data := []byte("payload")
	h := chunkstore.Sum(data)
	file := vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: 1, Path: "x", Mode: 0o644, Size: int64(len(data)), Chunks: chunkstore.Manifest{{Hash: h, Size: uint32(len(data))}}}

	t.Run("hash mismatch on push", func(t *testing.T) {
		s := session(t, p.client)
		_, err := NewPeer(s).PushObjects(ctx, 77, []chunkstore.Hash{h}, eachChunk(func(chunkstore.Hash) ([]byte, error) {
			return []byte("not the payload"), nil
		}))
		if !errors.Is(err, chunkstore.ErrHashMismatch) {
			t.Fatalf("err = %v, want ErrHashMismatch", err)
		}
		_, err = NewPeer(s).Push(ctx, PushRequest{SenderRev: 1, SenderCursor: watermark.At(1), Stage: 77}, []vfs.ChangeEntry{file})
		if !errors.Is(err, chunkstore.ErrUnknownHash) {
			t.Errorf("push after a failed stage: err = %v, want ErrUnknownHash", err)
		}
		unchanged(t)
	})
	t.Run("hash mismatch on pull", func(t *testing.T) {
		write(t, p.cont, "new.bin", randBytes(9, 1000))
		contBefore = snapshot(t, p.cont)
		p.serve(lyingBackend{p.cont})
		defer p.serve(p.cont)
		_, err := p.drv.PullOnce(ctx)
		if !errors.Is(err, chunkstore.ErrHashMismatch) {
			t.Fatalf("err = %v, want ErrHashMismatch", err)
		}
		unchanged(t)
	})
	t.Run("dot-dot path", func(t *testing.T) {
		bad := file
		bad.Path = "../escape"
		p, err := AppendEntries(nil, []vfs.ChangeEntry{bad})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeEntries(p); !errors.Is(err, vfs.ErrInvalid) {
			t.Errorf("decode: err = %v, want ErrInvalid", err)
		}
	})
	t.Run("dot-dot path over the wire", func(t *testing.T) {
		s := session(t, p.client)
		o, err := s.Open(ctx, MethodPush, mustAppend(PushRequest{SenderRev: 1, SenderCursor: watermark.At(1)}.appendTo(nil)), true)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		var e enc
		e.PutUvarint(1)
		appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: "a/../../etc", Mode: 0o755}, "")
		o.Send(ctx, e.Bytes())
		o.CloseSend()
		if _, err := o.Reply(ctx); !errors.Is(err, vfs.ErrInvalid) {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
		unchanged(t)
	})
	t.Run("truncated stream", func(t *testing.T) {
		// A push whose connection dies mid-stream applies nothing.
		c := rpc.NewClient(rpc.ClientOptions{Config: testConfig(), URL: p.url})
		defer c.Close()
		s := session(t, c)
		o, err := s.Open(ctx, MethodPush, mustAppend(PushRequest{SenderRev: 1, SenderCursor: watermark.At(1)}.appendTo(nil)), true)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := AppendEntries(nil, []vfs.ChangeEntry{{Kind: vfs.EntryDir, Rev: 1, Path: "half", Mode: 0o755}})
		o.Send(ctx, msg)
		o.Send(ctx, msg[:len(msg)/2]) // a truncated message
		if _, err := o.Reply(ctx); !errors.Is(err, rpc.ErrProtocol) {
			t.Errorf("truncated message: err = %v, want rpc.ErrProtocol", err)
		}
		o2, _ := s.Open(ctx, MethodPush, mustAppend(PushRequest{SenderRev: 1, SenderCursor: watermark.At(1)}.appendTo(nil)), true)
		o2.Send(ctx, msg)
		s.Close() // and a stream cut by the connection
		unchanged(t)
	})
	t.Run("server still serves", func(t *testing.T) {
		write(t, p.server, "after.txt", []byte("fine"))
		p.tick()
		assertSameTree(t, p.server, p.cont)
	})
}

func mustAppend(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestPushBatchesAreBounded(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 60*time.Second)
	populate(t, p.server, "many", 600)
	for i := range 3 {
		write(t, p.server, fmt.Sprintf("big/%d", i), randBytes(byte(10+i), 3<<20))
	}
	res, err := p.drv.PushOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 601 small entries fill two batches of 256; the rest shares the third
	// with the big/ dir and the first 3 MiB file; the other two files
	// cannot share a 4 MiB batch.
	if res.Batches != 5 || res.Entries != 605 {
		t.Errorf("push = %+v, want 5 batches of 605 entries", res)
	}
	assertSameTree(t, p.server, p.cont)
}

// TestDoSharesTheFIFO: an exchange run with Do (a repair, a bootstrap)
// holds the driver's turn: a push queued behind it waits until it ends,
// and sees what the exchange sent.
func TestDoSharesTheFIFO(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 30*time.Second)
	write(t, p.server, "a", []byte("one"))
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- p.drv.Do(ctx, func(ctx context.Context, x *Exchange) error {
			close(inside)
			<-release
			_, err := x.Push(ctx)
			return err
		})
	}()
	<-inside
	pushed := make(chan Result, 1)
	go func() {
		res, err := p.drv.PushOnce(ctx)
		if err != nil {
			t.Error(err)
		}
		pushed <- res
	}()
	testutil.WaitFor(t, "push queued behind the exchange", 5*time.Second, func() bool { return p.drv.q.Queued() == 1 })
	select {
	case <-pushed:
		t.Fatal("a push ran while an exchange held the driver")
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res := <-pushed; res.Entries != 0 {
		t.Errorf("push after the exchange sent %d entries, want 0 (the exchange pushed them)", res.Entries)
	}
	assertSameTree(t, p.server, p.cont)
}

// TestSendAndReceiveKeepTheFeedCursors: entries shipped by Send and
// Receive (a repair's) go through the shipping paths without moving the
// push or fetch cursor, and what they applied does not bounce back.
func TestSendAndReceiveKeepTheFeedCursors(t *testing.T) {
	p := newPair(t, DriverOptions{})
	ctx := testutil.Context(t, 30*time.Second)
	write(t, p.server, "s", []byte("server"))
	write(t, p.cont, "c", []byte("container"))
	if _, err := p.drv.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := p.server.Watermarks(ctx, "container")
	if err != nil {
		t.Fatal(err)
	}
	// Drift that the feeds do not carry: rows written behind the feed's
	// back stand for a repair's choice.
	es := []vfs.ChangeEntry{{Kind: vfs.EntryFile, Rev: 1, Path: "sent", Mode: 0o644}}
	err = p.drv.Do(ctx, func(ctx context.Context, x *Exchange) error {
		res, err := x.Send(ctx, es)
		if err != nil || res.Entries != 1 {
			return fmt.Errorf("send: %+v, %v", res, err)
		}
		got := []vfs.ChangeEntry{{Kind: vfs.EntryFile, Rev: 1, Path: "received", Mode: 0o600}}
		res, err = x.Receive(ctx, func(context.Context, int) ([]vfs.ChangeEntry, error) {
			if got == nil {
				return nil, io.EOF
			}
			b := got
			got = nil
			return b, nil
		})
		if err != nil || res.Applied != 1 {
			return fmt.Errorf("receive: %+v, %v", res, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.cont.ResolvePath(ctx, "sent"); err != nil {
		t.Errorf("sent entry missing in the container: %v", err)
	}
	after, err := p.server.Watermarks(ctx, "container")
	if err != nil {
		t.Fatal(err)
	}
	// The push cursor may only skip the received entry's own rev (bounce
	// suppression); the fetch cursor only the sent entry's rev at the peer.
	if after.Push.Rev > p.server.CurrentRev() || after.Push.Less(before.Push) || after.Fetch.Less(before.Fetch) {
		t.Errorf("watermarks %+v -> %+v", before, after)
	}
	tr, err := p.drv.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The received entry is not pushed back, the sent one not pulled back.
	if tr.Push.Entries != 0 || tr.Pull.Entries != 0 {
		t.Errorf("tick after send and receive moved %d up and %d down, want nothing (bounces)", tr.Push.Entries, tr.Pull.Entries)
	}
}
