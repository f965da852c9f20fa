package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/workspacetest"
)

func waitExec(t *testing.T, w *workspace.Workspace, id string) workspace.ExecInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20e9)
	defer cancel()
	info, err := w.On("").WaitExec(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	return info
}

func startExec(t *testing.T, w *workspace.Workspace, spec workspace.ExecSpec) workspace.ExecStartReport {
	t.Helper()
	rep, err := w.StartExec(context.Background(), spec)
	if err != nil {
		t.Fatalf("start %+v: %v", spec, err)
	}
	return rep
}

// A detached exec answers with its id while the command runs; the
// workspace follows it: exec.started and exec.exited are published, the
// pull after it brings its files in, and wait answers once that is done.
func TestDetachedExecPullsAfterItEnds(t *testing.T) {
	h, w := pulledWith(t, func(*harness) {})
	sub := subscribe(t, w)
	rep := startExec(t, w, workspace.ExecSpec{Shell: "sleep 0.2 ; write /out/a.txt detached ; exit 3", Cwd: "/"})
	if err := workspace.ValidateExecID(rep.ExecID); err != nil || rep.State != workspace.ExecStateRunning || !rep.Detached || rep.SyncMode != workspace.SyncWait {
		t.Fatalf("start report %+v (%v): want a running detached exec in mode wait", rep, err)
	}
	if _, err := w.Stat(context.Background(), "/out/a.txt", false); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("a.txt before the command wrote it: %v", err)
	}
	info := waitExec(t, w, rep.ExecID)
	if info.State != workspace.ExecStateExited || info.Result == nil || info.Result.ExitCode != 3 || info.Sync != workspace.SyncComplete || info.Pulled == nil || info.Pulled.Entries < 2 {
		t.Fatalf("after wait: %+v (result %+v, pulled %+v); want exited 3, its pull complete", info, info.Result, info.Pulled)
	}
	if got := read(t, w, "/out/a.txt"); got != "detached" {
		t.Fatalf("a.txt = %q", got)
	}
	evs := published(t, sub)
	var started, exited bool
	for _, ev := range evs {
		switch ev.Type {
		case workspace.EventExecStarted:
			started = data[workspace.ExecStarted](t, ev).ExecID == rep.ExecID
		case workspace.EventExecExited:
			x := data[workspace.ExecExited](t, ev)
			exited = started && x.ExecID == rep.ExecID && x.ExitCode == 3
		}
	}
	if !started || !exited {
		t.Errorf("events %v: want exec.started then exec.exited of %s", types(evs), rep.ExecID)
	}
	if calls := h.remotes.Fake("default").Calls(); !slices.Contains(calls, "start") {
		t.Errorf("fake calls %v: no start", calls)
	}
}

// A detached exec in mode defer answers wait once the pull after it is
// owed to the background puller, which brings the files in.
func TestDetachedExecDeferred(t *testing.T) {
	_, w := pulledWith(t, func(h *harness) { h.backoff = 5e6 })
	rep := startExec(t, w, workspace.ExecSpec{Shell: "write /d.txt later", Sync: workspace.SyncDefer})
	info := waitExec(t, w, rep.ExecID)
	if info.Sync != workspace.SyncDeferred && info.Sync != workspace.SyncComplete {
		t.Fatalf("sync %q, want deferred (or complete: nothing to pull by then)", info.Sync)
	}
	eventually(t, "the deferred pull", func() bool { return pendingOf(t, w) == nil })
	if got := read(t, w, "/d.txt"); got != "later" {
		t.Fatalf("d.txt = %q", got)
	}
}

// A server that stops while a detached command runs re-attaches to it by
// id when it starts again: the exec ends, its pull is made, its files
// arrive. The registry holds the row in between.
func TestDetachedExecSurvivesRestart(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.backoff = 5e6 })
	rep := startExec(t, w, workspace.ExecSpec{Shell: "sleep 0.3 ; write /late.txt after-restart"})
	must(t, h.m.Close())
	b, err := os.ReadFile(filepath.Join(h.data, "workspaces.json"))
	must(t, err)
	if !strings.Contains(string(b), rep.ExecID) {
		t.Fatalf("registry does not hold exec %s:\n%s", rep.ExecID, b)
	}
	h.m = h.open(t)
	w = h.ws(t, "default")
	info := waitExec(t, w, rep.ExecID)
	if info.State != workspace.ExecStateExited || info.Sync != workspace.SyncComplete {
		t.Fatalf("after the restart: %+v, want exited with its pull complete", info)
	}
	if got := read(t, w, "/late.txt"); got != "after-restart" {
		t.Fatalf("late.txt = %q", got)
	}
}

// A command that ended while the server was down (here: its pull held
// back, so the stop cuts the pull short) still gets its pull after the
// restart.
func TestDetachedExecEndedWhileDownIsPulled(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.backoff = 5e6 })
	release := h.remotes.Fake("default").HoldPulls()
	t.Cleanup(release)
	rep := startExec(t, w, workspace.ExecSpec{Shell: "write /early.txt before-restart"})
	eventually(t, "the exit to be recorded", func() bool {
		info, err := w.On("").ExecInfo(context.Background(), rep.ExecID)
		return err == nil && info.State == workspace.ExecStateExited
	})
	must(t, h.m.Close())
	release()
	h.m = h.open(t)
	w = h.ws(t, "default")
	if info := waitExec(t, w, rep.ExecID); info.Sync == "" || info.State != workspace.ExecStateExited {
		t.Fatalf("after the restart: %+v, want its pull made", info)
	}
	eventually(t, "the pull", func() bool { return pendingOf(t, w) == nil })
	if got := read(t, w, "/early.txt"); got != "before-restart" {
		t.Fatalf("early.txt = %q", got)
	}
}

// An exec of a container runtime that is gone (computerd restarted while
// the server was down) is reported lost, with EEXEC_LOST in its
// exec.exited, and wait answers.
func TestDetachedExecOfAReplacedContainerIsLost(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.backoff = 5e6 })
	rep := startExec(t, w, workspace.ExecSpec{Shell: "sleep 30"})
	must(t, h.m.Close())
	h.remotes.Runtime = "fake-runtime-2"
	h.m = h.open(t)
	w = h.ws(t, "default")
	sub, err := w.Events().Subscribe("0")
	must(t, err)
	info := waitExec(t, w, rep.ExecID)
	if info.State != workspace.ExecStateLost || info.Error == "" {
		t.Fatalf("exec of the replaced container: %+v, want lost with why", info)
	}
	var exited *workspace.ExecExited
	for _, ev := range published(t, sub) {
		if ev.Type == workspace.EventExecExited {
			x := data[workspace.ExecExited](t, ev)
			exited = &x
		}
	}
	if exited == nil || exited.Errno != "EEXEC_LOST" || exited.ExecID != rep.ExecID {
		t.Errorf("exec.exited %+v, want EEXEC_LOST for %s", exited, rep.ExecID)
	}
	if _, err := w.On("").AttachExec(context.Background(), rep.ExecID, 0, func(workspace.ExecEvent) {}); !errors.Is(err, workspace.ErrExecLost) {
		t.Errorf("attach to the lost exec: %v, want ErrExecLost", err)
	}
}

// At most Options.MaxExecs commands run at once, foreground and detached
// together; one more is refused with ErrTooManyExecs (an ErrExecBusy)
// before anything is pushed, and a slot frees when a command ends.
func TestExecLimit(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.maxExecs = 2 })
	ctx := context.Background()
	a := startExec(t, w, workspace.ExecSpec{Shell: "sleep 30"})
	startExec(t, w, workspace.ExecSpec{Shell: "sleep 30"})
	fake := h.remotes.Fake("default")
	calls := len(fake.Calls())
	if _, err := w.StartExec(ctx, workspace.ExecSpec{Shell: "echo third"}); !errors.Is(err, workspace.ErrTooManyExecs) || !errors.Is(err, workspace.ErrExecBusy) {
		t.Fatalf("third detached exec: %v, want ErrTooManyExecs", err)
	}
	if _, err := w.Exec(ctx, workspace.ExecSpec{Shell: "echo fg"}, nil); !errors.Is(err, workspace.ErrTooManyExecs) {
		t.Fatalf("foreground exec at the limit: %v, want ErrTooManyExecs", err)
	}
	if code, status := workspace.APIError(workspace.ErrTooManyExecs); code != "EEXEC_BUSY" || status != 429 {
		t.Errorf("API error %s %d, want EEXEC_BUSY 429", code, status)
	}
	if got := fake.Calls()[calls:]; len(got) != 0 {
		t.Errorf("calls for refused execs: %v", got)
	}
	must(t, w.On("").KillExec(ctx, a.ExecID, syscall.SIGTERM))
	if info := waitExec(t, w, a.ExecID); info.State != workspace.ExecStateKilled || info.Result.Signal != int(syscall.SIGTERM) {
		t.Fatalf("killed exec: %+v, want killed by SIGTERM", info)
	}
	if _, err := w.Exec(ctx, workspace.ExecSpec{Shell: "echo fg"}, nil); err != nil {
		t.Fatalf("exec once a slot freed: %v", err)
	}
}

// Execs lists foreground and detached commands, the detached ones with
// their sync; ids and offsets are checked before they go anywhere.
func TestExecListAndIDs(t *testing.T) {
	_, w := pulledWith(t, func(*harness) {})
	ctx := context.Background()
	fg, err := w.Exec(ctx, workspace.ExecSpec{Argv: []string{"echo", "fg"}}, nil)
	must(t, err)
	var ids []string
	for i := range 3 {
		rep := startExec(t, w, workspace.ExecSpec{Shell: fmt.Sprintf("echo detached %d", i), Cwd: "/"})
		waitExec(t, w, rep.ExecID)
		ids = append(ids, rep.ExecID)
	}
	list, err := w.Execs(ctx)
	must(t, err)
	byID := make(map[string]workspace.ExecInfo)
	for _, e := range list.Execs {
		byID[e.ExecID] = e
	}
	if e := byID[fg.ExecID]; e.Detached || e.State != workspace.ExecStateExited || strings.Join(e.Argv, " ") != "echo fg" || e.OutputBytes != 3 || e.Runtime != "default" {
		t.Errorf("foreground exec listed as %+v", e)
	}
	for _, id := range ids {
		if e := byID[id]; !e.Detached || e.Sync != workspace.SyncComplete || e.Result == nil {
			t.Errorf("detached exec %s listed as %+v", id, e)
		}
	}
	if len(list.Unreachable) != 0 || !slices.IsSortedFunc(list.Execs, func(a, b workspace.ExecInfo) int { return a.Started.Compare(b.Started) }) {
		t.Errorf("list %+v: want every runtime reached, oldest first", list)
	}

	for _, bad := range []string{"", "nocolon", "rt:", "rt:0", "rt:-1", ":5", "r t:1", strings.Repeat("x", 300) + ":1"} {
		if _, err := w.On("").ExecInfo(ctx, bad); !errors.Is(err, workspace.ErrBadExecID) || !errors.Is(err, vfs.ErrInvalid) {
			t.Errorf("exec id %q: %v, want ErrBadExecID", bad, err)
		}
	}
	if _, err := w.On("").ExecInfo(ctx, workspace.ExecRuntimeID(fg.ExecID)+":9999"); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("unknown id: %v, want ErrNotExist", err)
	}
	if _, err := w.On("").ExecInfo(ctx, "gone-runtime:1"); !errors.Is(err, workspace.ErrExecLost) {
		t.Errorf("id of another runtime: %v, want ErrExecLost", err)
	}
	if err := w.On("").KillExec(ctx, fg.ExecID, 0); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("signal 0: %v, want ErrInvalid", err)
	}
	if _, err := w.On("").AttachExec(ctx, fg.ExecID, -5, func(workspace.ExecEvent) {}); !errors.Is(err, vfs.ErrInvalid) {
		t.Errorf("offset -5: %v, want ErrInvalid", err)
	}
}

// The table keeps the newest Options.ExecHistory settled detached execs.
func TestExecHistoryIsBounded(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.execHistory = 2 })
	var ids []string
	for i := range 3 {
		rep := startExec(t, w, workspace.ExecSpec{Shell: fmt.Sprintf("echo %d", i)})
		waitExec(t, w, rep.ExecID)
		ids = append(ids, rep.ExecID)
	}
	b, err := os.ReadFile(filepath.Join(h.data, "workspaces.json"))
	must(t, err)
	if strings.Contains(string(b), `"`+ids[0]+`"`) || !strings.Contains(string(b), `"`+ids[2]+`"`) {
		t.Errorf("registry after 3 execs with a history of 2: want the oldest dropped, the newest kept:\n%s", b)
	}
}

func TestParseSignal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want syscall.Signal
		ok   bool
	}{
		{"TERM", syscall.SIGTERM, true}, {"sigkill", syscall.SIGKILL, true}, {"SIGINT", syscall.SIGINT, true},
		{"9", syscall.SIGKILL, true}, {"64", 64, true},
		{"0", 0, false}, {"65", 0, false}, {"-1", 0, false}, {"BOGUS", 0, false}, {"", 0, false}, {"09", 0, false},
	} {
		got, err := workspace.ParseSignal(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

// onRuntimeB is a workspace with a second runtime, b, attached and pulled
// from, and b's fake.
func onRuntimeB(t *testing.T) (*workspace.Workspace, *workspacetest.Fake) {
	t.Helper()
	h, _ := pulledWith(t, func(*harness) {})
	w := h.attach(t, "b")
	if _, err := w.On("b").Pull(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w, h.remotes.FakeOf(workspace.DefaultName, "b")
}

// Detaching the runtime a detached command runs on stops its follower:
// the exec is reported lost, and wait answers.
func TestDetachedExecOfADetachedRuntimeIsLost(t *testing.T) {
	w, _ := onRuntimeB(t)
	ctx := context.Background()
	rep, err := w.On("b").StartExec(ctx, workspace.ExecSpec{Shell: "sleep 30"})
	must(t, err)
	if rep.Runtime != "b" {
		t.Fatalf("started on %q, want b", rep.Runtime)
	}
	must(t, w.Detach(ctx, "b"))
	info := waitExec(t, w, rep.ExecID)
	if info.State != workspace.ExecStateLost || !strings.Contains(info.Error, "detached") {
		t.Fatalf("exec of the detached runtime: %+v, want lost", info)
	}
}

// A follower whose attach failed waits to retry (an hour here); the
// runtime's detach ends that wait and the exec is lost at once. The
// detach comes while the follower is between tries, the order that raced
// before (TestDetachedExecOfADetachedRuntimeIsLost hit it now and then).
func TestDetachWakesAFollowerWaitingToRetry(t *testing.T) {
	w, fake := onRuntimeB(t)
	ctx := context.Background()
	failed := fake.FailAttach(errors.New("injected: connection reset"))
	rep, err := w.On("b").StartExec(ctx, workspace.ExecSpec{Shell: "sleep 30"})
	must(t, err)
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower never attached")
	}
	must(t, w.Detach(ctx, "b"))
	info := waitExec(t, w, rep.ExecID)
	if info.State != workspace.ExecStateLost || !strings.Contains(info.Error, "detached") {
		t.Fatalf("exec of the detached runtime: %+v, want lost", info)
	}
}
