package remote_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/remote"
)

// newRemote is a real remote from a server store to a computerd, with no
// token; t's cleanup closes all three.
func newRemote(ctx context.Context, t *testing.T) (*computer.Daemon, *vfs.Store, *remote.Remote) {
	t.Helper()
	d := computertest.Start(t, computer.Config{})
	server, err := vfs.Open(ctx, filepath.Join(t.TempDir(), "server.db"), vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	r := remote.New(server, remote.Options{Runtime: workspace.Runtime{Endpoint: d.SyncURL()}, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { r.Close() })
	return d, server, r
}

// TestIdlePushIsSilent: a push with nothing to send, the one before every
// exec, makes no call to the container once the session has been seen
// not to need a bootstrap: the exec of a command with nothing to sync
// pays for no round trip before it starts.
func TestIdlePushIsSilent(t *testing.T) {
	ctx := context.Background()
	_, server, r := newRemote(ctx, t)

	if _, err := server.WriteFile(ctx, "f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := r.Push(ctx, workspace.SyncOptions{})
	if err != nil || rep.Entries == 0 {
		t.Fatalf("first push: %+v, %v", rep, err)
	}
	for i := range 3 {
		var wc rpc.WireCounter
		rep, err := r.Push(rpc.WithWireCounter(ctx, &wc), workspace.SyncOptions{})
		if err != nil || rep.Entries != 0 {
			t.Fatalf("idle push %d: %+v, %v", i, rep, err)
		}
		if in, out := wc.In.Load(), wc.Out.Load(); in+out != 0 {
			t.Errorf("idle push %d moved %d bytes in, %d out; want no call", i, in, out)
		}
	}
}
