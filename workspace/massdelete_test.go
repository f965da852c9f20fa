package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/workspace"
)

func countCalls(calls []string, name string) int {
	n := 0
	for _, c := range calls {
		if c == name {
			n++
		}
	}
	return n
}

// A command that deletes most of the workspace leaves the pull after it
// paused before any deletion; the record is not retried in the
// background, holds pushes back, survives a restart, and a pull that
// allows it applies the deletions (into the trash).
func TestMassDeletePausesThePullAfterACommand(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) {
		h.massDelete = workspace.MassDeleteOptions{Min: 5}
		h.backoff = time.Millisecond // a paused record retried in the background would show
	})
	ctx := context.Background()
	var script []string
	for i := range 8 {
		script = append(script, fmt.Sprintf("write /gen/f%d %d", i, i))
	}
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: strings.Join(script, " ; ") + " ; write /keep x"}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncComplete {
		t.Fatalf("first exec: sync %q %q", rep.Sync, rep.SyncError)
	}

	rep, err = w.Exec(ctx, workspace.ExecSpec{Shell: "rm /gen ; write /fresh new"}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncPending || !strings.Contains(rep.SyncError, "allow-mass-delete") {
		t.Fatalf("exec of the mass delete: sync %q, error %q; want pending, naming --allow-mass-delete", rep.Sync, rep.SyncError)
	}
	p := pendingOf(t, w)
	if p == nil || p.State != workspace.PendingPaused || p.Deletes < 5 || p.MassDelete == nil || p.MassDelete.Min != 5 {
		t.Fatalf("pending = %+v, want paused with its bounds", p)
	}
	if _, err := w.Stat(ctx, "/gen/f3", false); err != nil {
		t.Fatalf("/gen/f3 after the paused pull: %v", err)
	}
	fake := h.remotes.Fake("default")
	pulls := countCalls(fake.Calls(), "pull")

	// A push settles the pending pull first: paused again, refused.
	_, err = w.Push(ctx)
	if !errors.Is(err, workspace.ErrPendingPull) || !errors.Is(err, workspace.ErrMassDelete) {
		t.Fatalf("push while paused = %v, want ErrPendingPull wrapping ErrMassDelete", err)
	}
	if got := countCalls(fake.Calls(), "pull"); got != pulls+1 {
		t.Errorf("%d pulls after the push, want %d: the push's own (nothing in the background)", got, pulls+1)
	}
	if slices.Contains(fake.Calls()[len(fake.Calls())-1:], "push") {
		t.Error("the push reached the container")
	}

	// A restart keeps the record paused.
	must(t, h.m.Close())
	h.m = h.open(t)
	w = h.ws(t, "default")
	if p := pendingOf(t, w); p == nil || p.State != workspace.PendingPaused {
		t.Fatalf("pending after a restart = %+v, want paused", p)
	}

	if _, err := w.On("").PullWith(ctx, workspace.PullOptions{AllowMassDelete: true}); err != nil {
		t.Fatal(err)
	}
	if p := pendingOf(t, w); p != nil {
		t.Fatalf("pending after the confirmed pull = %+v", p)
	}
	if _, err := w.Stat(ctx, "/gen", false); err == nil {
		t.Error("/gen is still on the server after the confirmed pull")
	}
	if got := read(t, w, "/fresh"); got != "new" {
		t.Errorf("/fresh = %q", got)
	}
	trash, err := w.TrashList(ctx, "/gen", 0)
	must(t, err)
	if len(trash) != 9 {
		t.Errorf("the trash holds %d entries under /gen, want 9", len(trash))
	}
	rr, err := w.TrashRestore(ctx, workspace.RestoreRequest{Path: "/gen"})
	must(t, err)
	if rr.Restored != 9 {
		t.Errorf("restored %d, want 9", rr.Restored)
	}
	if _, err := w.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := fake.Container.ReadFile(ctx, "gen/f3"); err != nil || string(b) != "3" {
		t.Errorf("container gen/f3 after restore and push = %q, %v", b, err)
	}
}
