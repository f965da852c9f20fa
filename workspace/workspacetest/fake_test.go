package workspacetest_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/remotetest"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// The fake keeps the contract of workspace.Remote that the real remote
// keeps (package remote runs the same suite against a computerd).
func TestFakeKeepsTheRemoteContract(t *testing.T) {
	remotetest.Suite(t, func(t *testing.T) remotetest.Harness {
		server, container := openStore(t, "server.db"), openStore(t, "container.db")
		attach := func(t *testing.T, rt workspace.Runtime) (workspace.Remote, *vfs.Store) {
			c := openStore(t, rt.Name+".db")
			return workspacetest.NewFakeOf(server, c, rt, nil), c
		}
		return remotetest.Harness{Remote: workspacetest.NewFake(server, container, nil), Server: server, Container: container, Attach: attach}
	})
}

func openStore(t *testing.T, name string) *vfs.Store {
	t.Helper()
	s, err := vfs.Open(context.Background(), filepath.Join(t.TempDir(), name), vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The fake verifies under the workspace's ignore list, as the real remote
// does, not under the default one.
func TestFakeVerifiesUnderTheWorkspacesIgnoreList(t *testing.T) {
	ctx := context.Background()
	server, container := openStore(t, "server.db"), openStore(t, "container.db")
	f := workspacetest.NewFake(server, container, nil)
	f.Ignore = []string{"build"}
	if err := container.MkdirPath(ctx, "build", 0o755, false); err != nil {
		t.Fatal(err)
	}
	rep, err := f.Verify(ctx)
	if err != nil || !rep.Converged {
		t.Errorf("verify with only an ignored path apart: %+v, %v; want converged", rep, err)
	}
	if err := container.MkdirPath(ctx, "node_modules", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if rep, err = f.Verify(ctx); err != nil || rep.Converged {
		t.Errorf("verify with node_modules apart, not ignored by this workspace: %+v, %v; want drift", rep, err)
	}
}
