package converge

import (
	"context"
	"testing"

	"github.com/wsync/wsync/chunkstore"
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
	rr, err := Repair(ctx, server, sess, RepairOptions{Peer: peerName})
	must(t, err)
	if rr.LocalWins != 1 || rr.PeerWins != 1 || !rr.After.Converged {
		t.Fatalf("repair: local wins %d, peer wins %d, after %+v", rr.LocalWins, rr.PeerWins, rr.After.Differences)
	}
	if rr.Chunks != 2 || rr.ChunkBytes != int64(len("server tail")+len("container tail")) {
		t.Errorf("repair moved %d chunks of %d bytes, want the 2 data chunks", rr.Chunks, rr.ChunkBytes)
	}
	if a, b := root(t, server, []string{}), root(t, cont, []string{}); a != b {
		t.Fatalf("roots after repair: %s / %s", a, b)
	}
}
