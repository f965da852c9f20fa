package converge

import (
	"context"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// sparseFile writes a file of 1 TiB's chunks: a hole of all but the last
// chunk, then data in the last one.
func sparseFile(t testing.TB, s *vfs.Store, path string, data []byte) vfs.ChangeEntry {
	t.Helper()
	ctx := context.Background()
	m := chunkstore.Manifest{}.AppendHole(tib - chunkstore.ChunkSize).Append(chunkstore.Ref{Hash: chunkstore.Sum(data), Size: uint32(len(data))})
	e := vfs.ChangeEntry{Kind: vfs.EntryFile, Path: path, Mode: 0o644, Mtime: 1_700_000_000_000_000_000, Chunks: m, Size: m.Size()}
	st := s.Chunks().NewStage()
	defer st.Release()
	must(t, st.Put(ctx, chunkstore.Sum(data), data))
	_, err := s.Apply(ctx, []vfs.ChangeEntry{e}, vfs.ApplyOptions{Source: vfs.Local, Stage: st})
	must(t, err)
	return e
}

// TestSparseTerabyteFile: 1 TiB sparse files (a hole run and one data
// chunk) go through snapshot bootstrap and repair between two real stores:
// only their data chunks cross (holes are never probed, fetched or sent),
// the Merkle hash covers the manifest with its holes, and verify reports
// equal roots.
const tib = int64(1) << 40

func TestSparseTerabyteFile(t *testing.T) {
	ctx := context.Background()
	server := newStore(t, "server")
	applyAll(t, server, smallTree())
	tail := []byte("the last bytes of a terabyte")
	e := sparseFile(t, server, "z/sparse", tail)
	if got := len(e.Chunks); got > 300 {
		t.Fatalf("a 1 TiB sparse file takes %d refs", got)
	}
	cont := newStore(t, "container")
	r := newRig(t, server, cont)
	sess := r.session(t)
	rep, err := Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName})
	must(t, err)
	// The generated tree's four shared chunks, and the sparse file's one.
	if rep.Chunks != len(contents)+1 {
		t.Errorf("bootstrap sent %d chunks (%d bytes), want %d", rep.Chunks, rep.ChunkBytes, len(contents)+1)
	}
	got, err := cont.EntriesAt(ctx, []string{"z/sparse"})
	must(t, err)
	if got[0].Size != e.Size || len(got[0].Chunks) != len(e.Chunks) {
		t.Fatalf("installed %d bytes in %d refs, want %d in %d", got[0].Size, len(got[0].Chunks), e.Size, len(e.Chunks))
	}
	vr, err := Verify(ctx, server, sess, nil)
	must(t, err)
	if !vr.Converged {
		t.Fatalf("verify after bootstrap: %q", diffPaths(vr.Differences))
	}

	// Drift both ways: a sparse file only the server has (pushed), and one
	// the container wrote after the last pull (fetched).
	markSynced(t, server, cont)
	sparseFile(t, server, "z/server-only", []byte("server tail"))
	sparseFile(t, cont, "z/container-only", []byte("container tail"))
	rr, err := r.repair(ctx, t, server, RepairOptions{})
	must(t, err)
	if rr.LocalWins != 1 || rr.PeerWins != 1 || !rr.After.Converged {
		t.Fatalf("repair: local wins %d, peer wins %d, after %+v", rr.LocalWins, rr.PeerWins, rr.After.Differences)
	}
	if rr.Chunks != 2 || rr.ChunkBytes != int64(len("server tail")+len("container tail")) {
		t.Errorf("repair moved %d chunks of %d bytes, want the 2 data chunks", rr.Chunks, rr.ChunkBytes)
	}
	assertSameRoot(t, server, cont, "roots after repair")
}

// longFile writes a file whose manifest takes more than one wire frame:
// n refs alternating one data chunk and a one-chunk hole.
func longFile(t testing.TB, s *vfs.Store, path string, fill byte, n int) vfs.ChangeEntry {
	t.Helper()
	ctx := context.Background()
	data := make([]byte, chunkstore.ChunkSize)
	data[0] = fill
	h := chunkstore.Sum(data)
	var m chunkstore.Manifest
	for len(m) < n {
		m = append(m, chunkstore.Ref{Hash: h, Size: chunkstore.ChunkSize}, chunkstore.Ref{Hash: chunkstore.HoleHash, Size: chunkstore.ChunkSize})
	}
	e := vfs.ChangeEntry{Kind: vfs.EntryFile, Path: path, Mode: 0o644, Mtime: 1_700_000_000_000_000_000, Chunks: m, Size: m.Size()}
	st := s.Chunks().NewStage()
	defer st.Release()
	must(t, st.Put(ctx, h, data))
	_, err := s.Apply(ctx, []vfs.ChangeEntry{e}, vfs.ApplyOptions{Source: vfs.Local, Stage: st})
	must(t, err)
	return e
}

// TestRepairMovesManifestsLongerThanAFrame: repair fetches the peer's
// winners through entry pages and pushes its own through the driver; both
// carry a manifest of 40,000 refs (about 1.3 MiB encoded, more than one
// frame) as entry parts.
func TestRepairMovesManifestsLongerThanAFrame(t *testing.T) {
	ctx := context.Background()
	server, cont, r := snapRig(t, smallTree())
	sess := r.session(t)
	_, err := Bootstrap(ctx, server, sess, BootstrapOptions{Peer: peerName})
	must(t, err)
	markSynced(t, server, cont)
	se := longFile(t, server, "z/server-long", 's', 40000)
	ce := longFile(t, cont, "z/container-long", 'c', 40000)
	if n := len(chunkstore.AppendManifest(nil, se.Chunks)); n <= rpc.MaxFrameSize {
		t.Fatalf("manifest of %d bytes fits one frame", n)
	}
	rr, err := r.repair(ctx, t, server, RepairOptions{})
	must(t, err)
	if rr.LocalWins != 1 || rr.PeerWins != 1 || !rr.After.Converged {
		t.Fatalf("repair: local wins %d, peer wins %d, after %+v", rr.LocalWins, rr.PeerWins, rr.After.Differences)
	}
	for _, want := range []vfs.ChangeEntry{se, ce} {
		for _, s := range []*vfs.Store{server, cont} {
			got, err := s.EntriesAt(ctx, []string{want.Path})
			must(t, err)
			if len(got) != 1 || len(got[0].Chunks) != len(want.Chunks) || got[0].Size != want.Size {
				t.Fatalf("%s after repair: %+v", want.Path, got)
			}
		}
	}
}
