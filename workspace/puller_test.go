package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// eventually waits for cond: states of the server's store and registry,
// which have nothing to wait on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, 20*time.Second, cond)
}

// pulledWith is a harness whose options set changes, with its default
// workspace pulled once (the first push after a start pulls first).
func pulledWith(t *testing.T, set func(h *harness)) (*harness, *workspace.Workspace) {
	t.Helper()
	h := newHarness(t, nil)
	must(t, h.m.Close())
	set(h)
	h.m = h.open(t)
	w := h.ws(t, "default")
	_, err := w.Pull(context.Background())
	must(t, err)
	return h, w
}

func pendingOf(t *testing.T, w *workspace.Workspace) *workspace.PendingPull {
	t.Helper()
	st, err := w.Status(context.Background())
	must(t, err)
	return st.Pending
}

// --sync defer: the exec answers before the pull after it has run (the
// pull is held back here), the pull is recorded as owed and fences the
// next push, and the background puller brings the files in once it can.
func TestExecDeferAnswersBeforeThePull(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	_, err := w.Pull(ctx)
	must(t, err)
	fake := h.remotes.Fake("default")
	release := fake.HoldPulls()
	t.Cleanup(release)

	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: "write /a.txt hello ; write /src/b.go package b", Sync: workspace.SyncDefer}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncDeferred || rep.SyncError != "" {
		t.Fatalf("sync %q %q, want deferred", rep.Sync, rep.SyncError)
	}
	p := pendingOf(t, w)
	if p == nil || p.ExecID != rep.ExecID || p.RuntimeID != rep.RuntimeID {
		t.Fatalf("pending %+v, want the deferred pull of exec %s", p, rep.ExecID)
	}
	if _, err := w.Stat(ctx, "/a.txt", false); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("a.txt before the deferred pull ran: %v", err)
	}
	release()
	eventually(t, "the deferred pull", func() bool { return pendingOf(t, w) == nil })
	if got := read(t, w, "/a.txt"); got != "hello" {
		t.Fatalf("a.txt = %q", got)
	}
	if got := read(t, w, "/src/b.go"); got != "package b" {
		t.Fatalf("b.go = %q", got)
	}
}

// A bad mode is refused before anything syncs.
func TestExecSyncModeIsChecked(t *testing.T) {
	h, w := newDefault(t)
	_, err := w.Exec(context.Background(), workspace.ExecSpec{Shell: "echo hi", Sync: "later"}, nil)
	if !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("sync later: %v, want ErrInvalid", err)
	}
	if calls := h.remotes.Fake("default"); calls != nil && len(calls.Calls()) > 0 {
		t.Fatalf("calls made for a refused exec: %v", calls.Calls())
	}
}

// A server stopped while a deferred pull is owed (here: held back, so the
// stop cuts it short) resumes it when it starts again, with nothing lost.
func TestDeferredPullResumesAfterRestart(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.backoff = 5 * time.Millisecond })
	ctx := context.Background()
	release := h.remotes.Fake("default").HoldPulls()
	t.Cleanup(release)
	var script []string
	for i := range 20 {
		script = append(script, fmt.Sprintf("write /out/f%02d data-%d", i, i))
	}
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: strings.Join(script, " ; "), Sync: workspace.SyncDefer}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncDeferred {
		t.Fatalf("sync %q, want deferred", rep.Sync)
	}
	must(t, h.m.Close()) // the background puller stops; the record stays
	release()

	h.m = h.open(t)
	w = h.ws(t, "default")
	eventually(t, "the resumed pull", func() bool { return pendingOf(t, w) == nil })
	for i := range 20 {
		if got, want := read(t, w, fmt.Sprintf("/out/f%02d", i)), fmt.Sprintf("data-%d", i); got != want {
			t.Fatalf("f%02d = %q, want %q", i, got, want)
		}
	}
}

// A post-command pull that fails is retried in the background with
// backoff until it succeeds; the attempts show while it is owed.
func TestFailedPullIsRetriedInTheBackground(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.backoff = 5 * time.Millisecond })
	ctx := context.Background()
	fake := h.remotes.Fake("default")
	fake.FailPull(errors.New("reset 1"), errors.New("reset 2"), errors.New("reset 3"))
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: "write /a.txt hello"}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncPending || !strings.Contains(rep.SyncError, "reset 1") {
		t.Fatalf("sync %q %q, want pending with the first failure", rep.Sync, rep.SyncError)
	}
	eventually(t, "the retried pull", func() bool { return pendingOf(t, w) == nil })
	if got := read(t, w, "/a.txt"); got != "hello" {
		t.Fatalf("a.txt = %q", got)
	}
	pulls := 0
	for _, c := range fake.Calls() {
		if c == "pull" {
			pulls++
		}
	}
	if pulls < 5 { // the first, three failures, the success
		t.Fatalf("%d pulls, want at least 5: %v", pulls, fake.Calls())
	}
}

// While a deferred pull is owed, a push waits for it: the push's turn
// first completes the pull (the fence), so what the command wrote is on
// the server before anything of the server's goes to the container.
func TestPushWaitsForTheDeferredPull(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	pushed(t, w, "/f", "base")
	fake := h.remotes.Fake("default")
	release := fake.HoldPulls()
	t.Cleanup(release)
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: "write /f container-new ; write /g new", Sync: workspace.SyncDefer}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncDeferred {
		t.Fatalf("sync %q, want deferred", rep.Sync)
	}
	pushDone := make(chan error, 1)
	go func() {
		_, err := w.Push(ctx)
		pushDone <- err
	}()
	release()
	must(t, <-pushDone)
	calls := fake.Calls()
	if i, j := slices.Index(calls, "exec"), slices.Index(calls[slices.Index(calls, "exec"):], "push"); i < 0 || j < 0 || !slices.Contains(calls[i:i+j], "pull") {
		t.Fatalf("calls %v: want a pull between the exec and the push", calls)
	}
	if got := read(t, w, "/f"); got != "container-new" {
		t.Fatalf("f on the server = %q, want the command's write", got)
	}
	if got := containerFile(t, fake, "f"); got != "container-new" {
		t.Fatalf("f in the container = %q: the push replaced the command's write", got)
	}
	if got := read(t, w, "/g"); got != "new" {
		t.Fatalf("g = %q", got)
	}
	settled(t, w)
}

// Detaching a runtime whose pull is owed stops its background puller, and
// Close does not wait out a backoff.
func TestDetachAndCloseStopTheBackgroundPuller(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	rt, err := w.Attach(ctx, workspace.AttachOptions{Name: "b", Endpoint: "ws://127.0.0.1:45679/sync"})
	must(t, err)
	_, err = w.On(rt.Name).Pull(ctx)
	must(t, err)
	h.remotes.FakeOf("default", "b").FailPull(errors.New("down"))
	rep, err := w.On("b").Exec(ctx, workspace.ExecSpec{Shell: "write /x 1"}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncPending {
		t.Fatalf("sync %q", rep.Sync)
	}
	must(t, w.Detach(ctx, "b"))
	closed := make(chan error, 1)
	go func() { closed <- h.m.Close() }()
	select {
	case err := <-closed:
		must(t, err)
	case <-time.After(10 * time.Second): // the harness's backoff is an hour
		t.Fatal("Close waited for the background puller's backoff")
	}
}
