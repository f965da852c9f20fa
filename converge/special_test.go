package converge

import (
	"context"
	"testing"

	"github.com/wsync/wsync/vfs"
)

// TestSpecialFilesLeftOutOfConvergence: FIFOs, sockets and device nodes
// are container-local: they are not part of the Merkle root, so verify
// finds two trees that differ only by them converged, repair moves
// nothing, and a bootstrap into a store that holds only them installs
// around them.
func TestSpecialFilesLeftOutOfConvergence(t *testing.T) {
	ctx := context.Background()
	mknod := func(s *vfs.Store, dir, name string, kind vfs.Kind) {
		t.Helper()
		parent := vfs.RootIno
		if dir != "" {
			parent = inoOf(t, s, dir)
		}
		_, err := s.Mknod(ctx, parent, name, kind, 0x0103, vfs.NewAttr{Mode: 0o644})
		must(t, err)
	}
	server, cont := syncedPair(t, smallTree())
	mknod(cont, "", "fifo", vfs.KindFifo)
	mknod(cont, "z/y", "sock", vfs.KindSocket)
	mknod(cont, "d000", "null", vfs.KindCharDev)
	r := newRig(t, server, cont)
	sess := r.session(t)
	rep, err := Verify(ctx, server, sess, nil)
	must(t, err)
	if !rep.Converged {
		t.Fatalf("special files made a difference: %q", diffPaths(rep.Differences))
	}
	rr, err := r.repair(ctx, t, server, RepairOptions{})
	must(t, err)
	if rr.Pushed+rr.Pulled != 0 {
		t.Errorf("repair moved %d entries", rr.Pushed+rr.Pulled)
	}

	// Bootstrap into a store that holds only a FIFO.
	fresh := newStore(t, "fresh")
	mknod(fresh, "", "pipe", vfs.KindFifo)
	r2 := newRig(t, server, fresh)
	_, err = Bootstrap(ctx, server, r2.session(t), BootstrapOptions{Peer: peerName})
	must(t, err)
	if a, b := root(t, server, []string{}), root(t, fresh, []string{}); a != b {
		t.Fatalf("roots after bootstrap: %s / %s", a, b)
	}
	if _, err := fresh.ResolvePath(ctx, "pipe"); err != nil {
		t.Errorf("the container's FIFO after bootstrap: %v", err)
	}
}
