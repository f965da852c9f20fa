package workspace_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// The exec bracket skips its pull only when the container's head after the
// command is one the server has fetched through and no pull is owed:
// whatever changed the container before the command ended (the command, or
// anyone else) is pulled, and a command that only read makes no pull.
func TestExecPullsOnlyWhatTheContainerChanged(t *testing.T) {
	ctx := context.Background()
	var w *workspace.Workspace
	var h *harness
	// "pull fails meanwhile" plays a sync of the runtime that fails while
	// the command runs (the command itself changes nothing): a pull is
	// owed when the command ends.
	h = newHarness(t, func(ctx context.Context, c *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
		if spec.Shell != "pull fails meanwhile" {
			return workspacetest.Commands(ctx, c, spec, out)
		}
		h.remotes.Fake("default").FailPull(errors.New("connection reset"))
		if _, err := w.Pull(ctx); err == nil {
			return workspace.ExecResult{}, errors.New("the pull meant to fail succeeded")
		}
		return workspace.ExecResult{}, nil
	})
	w = h.ws(t, "default")
	_, err := w.Pull(ctx) // builds the fake; the first push after a start pulls first
	must(t, err)
	fake := h.remotes.Fake("default")

	// bracket runs shell and returns the remote calls it made.
	bracket := func(t *testing.T, shell string) []string {
		t.Helper()
		before := len(fake.Calls())
		rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: shell}, nil)
		must(t, err)
		if rep.Sync != workspace.SyncComplete {
			t.Fatalf("%q: sync %q (%s)", shell, rep.Sync, rep.SyncError)
		}
		return fake.Calls()[before:]
	}
	withPull, withoutPull := []string{"push", "exec", "pull"}, []string{"push", "exec"}

	if got := bracket(t, "write /a.txt one"); !slices.Equal(got, withPull) {
		t.Errorf("a command that writes: calls %v, want %v", got, withPull)
	}
	if got := read(t, w, "/a.txt"); got != "one" {
		t.Errorf("server /a.txt = %q, want the command's write", got)
	}

	if got := bracket(t, "cat /a.txt"); !slices.Equal(got, withoutPull) {
		t.Errorf("a command that only reads: calls %v, want %v (no pull)", got, withoutPull)
	}

	if got := bracket(t, "rm /a.txt"); !slices.Equal(got, withPull) {
		t.Errorf("a command that deletes: calls %v, want %v", got, withPull)
	}
	if _, err := w.Stat(ctx, "/a.txt", false); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("server /a.txt after the command removed it: %v", err)
	}

	// A write into the container that no command made, before the command
	// ends, is pulled too: the head covers it.
	if _, err := fake.Container.WriteFile(ctx, "outside.txt", []byte("by someone else"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := bracket(t, "echo hi"); !slices.Equal(got, withPull) {
		t.Errorf("a container changed outside the command: calls %v, want %v", got, withPull)
	}
	if got := read(t, w, "/outside.txt"); got != "by someone else" {
		t.Errorf("server /outside.txt = %q", got)
	}

	// A pull owed when the command ends is made, whatever the head.
	want := []string{"push", "exec", "pull", "pull"}
	if got := bracket(t, "pull fails meanwhile"); !slices.Equal(got, want) {
		t.Errorf("a pull owed at the end of the command: calls %v, want %v", got, want)
	}
	settled(t, w)

	if got := bracket(t, "echo idle"); !slices.Equal(got, withoutPull) {
		t.Errorf("an idle command after all that: calls %v, want %v", got, withoutPull)
	}
}
