package remote_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/remote"
	"github.com/wsync/wsync/workspace/remotetest"
)

// The real remote keeps the contract of workspace.Remote (the one the
// fake of package workspacetest keeps too), against a real computerd: its
// store behind a FUSE mount, served over the sync wire on a loopback
// WebSocket.
func TestRemoteKeepsTheContract(t *testing.T) {
	remotetest.Suite(t, func(t *testing.T) remotetest.Harness {
		const token = "suite-token"
		d := computertest.Start(t, computer.Config{Token: token})
		server, err := vfs.Open(context.Background(), filepath.Join(t.TempDir(), "server.db"), vfs.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		r := remote.New(server, remote.Options{Runtime: workspace.Runtime{Endpoint: d.SyncURL()}, Token: token, Logger: slog.New(slog.DiscardHandler)})
		t.Cleanup(func() {
			r.Close()
			server.Close()
		})
		attach := func(t *testing.T, rt workspace.Runtime) (workspace.Remote, *vfs.Store) {
			d := computertest.Start(t, computer.Config{Token: token})
			rt.Endpoint = d.SyncURL()
			r := remote.New(server, remote.Options{Runtime: rt, Token: token, Logger: slog.New(slog.DiscardHandler)})
			t.Cleanup(func() { r.Close() })
			return r, d.Store()
		}
		return remotetest.Harness{Remote: r, Server: server, Container: d.Store(), Attach: attach}
	})
}
