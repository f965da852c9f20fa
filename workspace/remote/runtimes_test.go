package remote_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/remote"
)

// Two real computerds, each with its FUSE mount, are two runtimes of one
// workspace: what one container writes reaches the other through the
// server, a tick carries disjoint writes of both to both, and a detached
// runtime syncs no more.
func TestTwoRuntimesOneWorkspace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, a, b := twoRuntimes(ctx, t)

	// A's write, pulled from A, reaches B's mount with a push to B.
	writeMount(t, a, "from-a.txt", "written in a")
	if _, err := w.Pull(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.On("b").Push(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readMount(t, b, "from-a.txt"); got != "written in a" {
		t.Fatalf("b's mount holds %q", got)
	}

	// Disjoint subtrees written in both end up on both after one tick.
	writeMount(t, a, "left/x.txt", "a's")
	writeMount(t, b, "right/y.txt", "b's")
	if _, err := w.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*computer.Daemon{a, b} {
		if got := readMount(t, d, "left/x.txt") + "|" + readMount(t, d, "right/y.txt"); got != "a's|b's" {
			t.Fatalf("%s after one tick: %q", d.MountDir(), got)
		}
	}
	for _, name := range []string{"default", "b"} {
		rep, err := w.On(name).Verify(ctx)
		if err != nil || !rep.Converged {
			t.Fatalf("verify %s: %+v %v", name, rep, err)
		}
	}

	// A detached runtime syncs no more.
	if err := w.Detach(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	writeMount(t, a, "after.txt", "late")
	if _, err := w.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.MountDir(), "after.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a detached runtime got a write: %v", err)
	}
	if _, err := w.On("b").Push(ctx); !errors.Is(err, workspace.ErrNoRuntime) {
		t.Fatalf("push to a detached runtime: %v", err)
	}
}

// twoRuntimes is the default workspace of a Manager whose remotes are
// the real ones (Factory), with two real computerds: a as its default
// runtime and b attached as "b".
func twoRuntimes(ctx context.Context, t *testing.T) (w *workspace.Workspace, a, b *computer.Daemon) {
	t.Helper()
	a = computertest.Start(t, computer.Config{Token: "token-a"})
	b = computertest.Start(t, computer.Config{Token: "token-b"})
	w = openDefault(ctx, t, a, "token-a", remote.Factory(slog.New(slog.DiscardHandler)))
	if _, err := w.Attach(ctx, workspace.AttachOptions{Name: "b", Endpoint: b.SyncURL(), ComputerdToken: "token-b"}); err != nil {
		t.Fatal(err)
	}
	return w, a, b
}

// openDefault is the default workspace of a Manager (closed at cleanup)
// whose remotes come from factory, with d as its default runtime.
func openDefault(ctx context.Context, t *testing.T, d *computer.Daemon, token string, factory workspace.RemoteFactory) *workspace.Workspace {
	t.Helper()
	m, err := workspace.Open(ctx, workspace.Options{
		DataDir: t.TempDir(), NoSync: true,
		DefaultEndpoint: d.SyncURL(), DefaultToken: token,
		AllowEndpoints: []string{"127.0.0.1:*"},
		Remote:         factory,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	w, err := m.Workspace(workspace.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func writeMount(t *testing.T, d *computer.Daemon, rel, data string) {
	t.Helper()
	p := filepath.Join(d.MountDir(), rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readMount(t *testing.T, d *computer.Daemon, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.MountDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
