package syncwire

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// putManifest writes a file entry with manifest m (its data chunks staged
// from data) straight into s, as a local change.
func putManifest(t *testing.T, s *vfs.Store, p string, m chunkstore.Manifest, data ...[]byte) {
	t.Helper()
	ctx := t.Context()
	st := s.Chunks().NewStage()
	defer st.Release()
	for _, d := range data {
		if _, err := st.PutHashed(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	en := vfs.ChangeEntry{Kind: vfs.EntryFile, Path: p, Mode: 0o644, Mtime: time.Now().UnixNano(), Chunks: m, Size: m.Size()}
	if _, err := s.Apply(ctx, []vfs.ChangeEntry{en}, vfs.ApplyOptions{Source: vfs.Local, Stage: st}); err != nil {
		t.Fatalf("apply %s: %v", p, err)
	}
}

// manifestOf finds p's current manifest in s's feed.
func manifestOf(t *testing.T, s *vfs.Store, p string) (chunkstore.Manifest, bool) {
	t.Helper()
	var m chunkstore.Manifest
	found := false
	for en, err := range s.Changes(t.Context(), watermark.Cursor{}, watermark.At(s.CurrentRev()), vfs.Ignore{}) {
		if err != nil {
			t.Fatal(err)
		}
		if en.Path == p {
			m, found = en.Chunks, en.Kind == vfs.EntryFile
		}
	}
	return m, found
}

func chunkOf(b byte) []byte {
	return bytes.Repeat([]byte{b, 1, 2, 3}, chunkstore.ChunkSize/4)
}

// A file whose manifest takes more than one frame (here 40,000 refs: a
// 20 GiB file alternating a chunk of data and a one-chunk hole) syncs both
// ways through the real driver, as entry parts.
func TestManifestLongerThanAFrameSyncsBothWays(t *testing.T) {
	p := newPair(t, DriverOptions{})
	a, b := chunkOf('a'), chunkOf('b')
	long := func(data []byte, n int) chunkstore.Manifest {
		h := chunkstore.Sum(data)
		var m chunkstore.Manifest
		for range n / 2 {
			m = append(m, chunkstore.Ref{Hash: h, Size: chunkstore.ChunkSize}, chunkstore.Ref{Hash: chunkstore.HoleHash, Size: chunkstore.ChunkSize})
		}
		return append(m, chunkstore.Ref{Hash: h, Size: 100})[:n]
	}
	ma := long(a, 40000)
	if n := len(chunkstore.AppendManifest(nil, ma)); n <= rpc.MaxFrameSize {
		t.Fatalf("manifest of %d bytes fits a frame", n)
	}
	// The data ref at the end is a 100-byte chunk of its own.
	tail := a[:100]
	ma[len(ma)-1] = chunkstore.Ref{Hash: chunkstore.Sum(tail), Size: 100}
	putManifest(t, p.server, "big-a", ma, a, tail)
	mb := long(b, 41000)
	mb[len(mb)-1] = chunkstore.Ref{Hash: chunkstore.HoleHash, Size: 100}
	putManifest(t, p.cont, "big-b", mb, b)

	tr := p.tick() // pull big-b, push big-a
	if got, ok := manifestOf(t, p.cont, "big-a"); !ok || !slices.Equal(got, ma) {
		t.Fatalf("pushed manifest differs (%d refs, want %d)", len(got), len(ma))
	}
	if got, ok := manifestOf(t, p.server, "big-b"); !ok || !slices.Equal(got, mb) {
		t.Fatalf("pulled manifest differs (%d refs, want %d)", len(got), len(mb))
	}
	// Each distinct data chunk crossed once; holes never did.
	if tr.Push.Chunks != 2 || tr.Pull.Chunks != 1 {
		t.Errorf("chunks moved: push %d, pull %d; want 2 and 1", tr.Push.Chunks, tr.Pull.Chunks)
	}
	t.Logf("pull %+v", tr.Pull)
	t.Logf("push %+v", tr.Push)
}

// A 1 TiB sparse file (a hole run, then one chunk of data at the end)
// syncs both ways through the real driver moving one chunk and a few KiB
// of manifest.
func TestTerabyteSparseFileSyncsBothWays(t *testing.T) {
	p := newPair(t, DriverOptions{})
	sparse := func(data []byte) chunkstore.Manifest {
		var m chunkstore.Manifest
		const size = 1 << 40
		m = m.AppendHole(size - int64(len(data)))
		return append(m, chunkstore.Ref{Hash: chunkstore.Sum(data), Size: uint32(len(data))})
	}
	a, b := chunkOf('x'), chunkOf('y')
	ma, mb := sparse(a), sparse(b)
	if ma.Size() != 1<<40 {
		t.Fatalf("manifest covers %d bytes", ma.Size())
	}
	putManifest(t, p.server, "tera-a", ma, a)
	putManifest(t, p.cont, "tera-b", mb, b)
	tr := p.tick()
	if got, ok := manifestOf(t, p.cont, "tera-a"); !ok || !slices.Equal(got, ma) {
		t.Fatalf("pushed sparse manifest differs: %d refs, want %d", len(got), len(ma))
	}
	if got, ok := manifestOf(t, p.server, "tera-b"); !ok || !slices.Equal(got, mb) {
		t.Fatalf("pulled sparse manifest differs: %d refs, want %d", len(got), len(mb))
	}
	if tr.Push.Chunks != 1 || tr.Pull.Chunks != 1 || tr.Push.ChunkBytes != chunkstore.ChunkSize {
		t.Errorf("moved push %d chunks (%d bytes), pull %d; want one chunk each way", tr.Push.Chunks, tr.Push.ChunkBytes, tr.Pull.Chunks)
	}
	if tr.Push.WireBytes > 2<<20 || tr.Pull.WireBytes > 2<<20 {
		t.Errorf("wire bytes push %d, pull %d: a sparse TiB costs more than its data", tr.Push.WireBytes, tr.Pull.WireBytes)
	}
	// The last chunk reads back on the other side.
	got, err := p.cont.ReadChunk(t.Context(), chunkstore.Sum(a))
	if err != nil || !bytes.Equal(got, a) {
		t.Errorf("the data chunk on the container: %v", err)
	}
	t.Logf("pull %+v", tr.Pull)
	t.Logf("push %+v", tr.Push)
}

// A peer naming the hole hash as an object gets a typed error, and the
// session stays up.
func TestHoleHashIsNeverAnObject(t *testing.T) {
	srv := testServer(t, newFake("s"), rpc.ServerOptions{})
	c := wsClient(t, testutil.WSServer(t, srv, "/sync"), "")
	s := session(t, c)
	ctx := testutil.Context(t, 10*time.Second)
	hole := []chunkstore.Hash{chunkstore.HoleHash}
	// reply opens a call of m with body (a request stream ends with it) and
	// waits for the reply.
	reply := func(m rpc.Method, body []byte, stream bool) error {
		o, err := s.Open(ctx, m, body, stream)
		if err != nil {
			return err
		}
		defer o.Close()
		if stream {
			o.CloseSend()
		}
		_, err = o.Reply(ctx)
		return err
	}
	for name, call := range map[string]func() error{
		"has":   func() error { return reply(MethodHasObjects, AppendHashes(nil, hole), false) },
		"fetch": func() error { return reply(MethodFetchObjects, AppendHashes(nil, hole), false) },
		"push": func() error {
			return reply(MethodPushObjects, PushObjectsRequest{Stage: 1, Hashes: hole}.appendTo(nil), true)
		},
		"local fetch": func() error { return NewPeer(s).FetchObjects(ctx, hole, func(Object) error { return nil }) },
		"local push": func() error {
			_, err := NewPeer(s).PushObjects(ctx, 2, hole, eachChunk(func(chunkstore.Hash) ([]byte, error) { return []byte("x"), nil }))
			return err
		},
	} {
		if err := call(); rpc.CodeOf(err) != rpc.CodeProtocol {
			t.Errorf("%s: err = %v, want EPROTOCOL", name, err)
		}
	}
	sessionStillWorks(t, c, s)
}
