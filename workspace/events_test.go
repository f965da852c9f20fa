package workspace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/events"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// observed is a Fake whose pulls report progress through the workspace's
// hook (SyncOptions.Progress: half the report, then all of it) and which
// reports session changes when the test says so (SessionNotifier).
type observed struct {
	*workspacetest.Fake
	mu     sync.Mutex
	notify func(workspace.SessionChange)
}

func (o *observed) NotifySession(fn func(workspace.SessionChange)) {
	o.mu.Lock()
	o.notify = fn
	o.mu.Unlock()
}

func (o *observed) session(c workspace.SessionChange) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.notify(c)
}

var _ workspace.SessionNotifier = (*observed)(nil)

// newObserved is a harness whose remotes are observed fakes, and its
// default workspace, settled (pulled once) so an exec's push pulls
// nothing first.
func newObserved(t *testing.T) (*harness, *workspace.Workspace, func(name string) *observed) {
	t.Helper()
	h := &harness{remotes: &workspacetest.Remotes{Dir: t.TempDir()}, data: t.TempDir()}
	t.Cleanup(func() { h.remotes.Close() })
	var mu sync.Mutex
	built := map[string]*observed{}
	m, err := workspace.Open(context.Background(), workspace.Options{
		DataDir: h.data, DefaultEndpoint: "ws://127.0.0.1:45678/sync", NoSync: true,
		Remote: func(ws *workspace.Workspace, rt workspace.Runtime) (workspace.Remote, error) {
			r, err := h.remotes.Factory(ws, rt)
			if err != nil {
				return nil, err
			}
			o := &observed{Fake: r.(*workspacetest.Fake)}
			mu.Lock()
			built[rt.Name] = o
			mu.Unlock()
			return o, nil
		},
	})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	h.m = m
	w := h.ws(t, "default")
	_, err = w.Pull(context.Background())
	must(t, err)
	return h, w, func(name string) *observed {
		mu.Lock()
		defer mu.Unlock()
		return built[name]
	}
}

// published is what a subscription from now has to read once the calls
// it follows have returned: every event they published.
func published(t *testing.T, s *events.Subscription) []events.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out []events.Event
	for {
		ev, err := s.Next(ctx)
		if errors.Is(err, context.Canceled) {
			return out
		}
		must(t, err)
		out = append(out, ev)
	}
}

func subscribe(t *testing.T, w *workspace.Workspace) *events.Subscription {
	t.Helper()
	s, err := w.Events().Subscribe("")
	must(t, err)
	return s
}

// types lists the events' types, a run of sync.progress as one (a sync
// reports once per batch: how many depends on the batch bounds).
func types(evs []events.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == workspace.EventSyncProgress && len(out) > 0 && out[len(out)-1] == ev.Type {
			continue
		}
		out = append(out, ev.Type)
	}
	return out
}

func data[T any](t *testing.T, ev events.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		t.Fatalf("%s data %s: %v", ev.Type, ev.Data, err)
	}
	return v
}

// A pull is started, progressed and finished, in that order, under one
// call number, and its last progress and its finished event carry the
// counts of the report the caller got.
func TestPullEventsAddUpToItsReport(t *testing.T) {
	h, w, _ := newObserved(t)
	fake := h.remotes.Fake("default")
	for i := range 3 {
		writeStore(t, fake.Container, fmt.Sprintf("f%d.txt", i), strings.Repeat("x", 1000*(i+1)))
	}
	sub := subscribe(t, w)
	rep, err := w.Pull(context.Background())
	must(t, err)
	evs := published(t, sub)
	if got, want := types(evs), []string{workspace.EventSyncStarted, workspace.EventSyncProgress, workspace.EventSyncFinished}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	started := data[workspace.SyncStarted](t, evs[0])
	last := data[workspace.SyncProgress](t, evs[len(evs)-2])
	done := data[workspace.SyncFinished](t, evs[len(evs)-1])
	if started.Op != "pull" || started.Sync == 0 || last.Sync != started.Sync || done.Sync != started.Sync || done.Op != "pull" {
		t.Fatalf("started %+v, last progress %+v, finished %+v: want one pull's number", started, last, done)
	}
	if last.Entries != rep.Entries || last.Objects != rep.Objects || last.Bytes != rep.Bytes || rep.Entries != 3 {
		t.Errorf("last progress %+v, report %+v", last.Progress, rep)
	}
	if done.Entries != rep.Entries || done.Objects != rep.Objects || done.Bytes != rep.Bytes || done.RuntimeID != rep.RuntimeID || done.Error != "" {
		t.Errorf("finished %+v, report %+v", done, rep)
	}
	for _, ev := range evs {
		if ev.Runtime != workspace.DefaultRuntime {
			t.Errorf("%s about runtime %q", ev.Type, ev.Runtime)
		}
	}

	// A failed pull finishes with its error and leaves a pending pull.
	fake.FailPull(errors.New("connection reset"))
	_, err = w.Pull(context.Background())
	if err == nil {
		t.Fatal("the pull did not fail")
	}
	evs = published(t, sub)
	if got, want := types(evs), []string{workspace.EventSyncStarted, workspace.EventSyncFinished, workspace.EventPending}; !slices.Equal(got, want) {
		t.Fatalf("events of a failed pull %q, want %q", got, want)
	}
	if done := data[workspace.SyncFinished](t, evs[1]); !strings.Contains(done.Error, "connection reset") || done.Errno == "" {
		t.Errorf("finished %+v, want the pull's error", done)
	}
}

// An exec tells its push, its command's start and exit, and the pull
// after it, in that order.
func TestExecEvents(t *testing.T) {
	_, w, _ := newObserved(t)
	sub := subscribe(t, w)
	rep, err := w.Exec(context.Background(), workspace.ExecSpec{Shell: "write /a.txt hi ; exit 3", Env: []string{"SECRET=s3cr3t"}}, nil)
	must(t, err)
	evs := published(t, sub)
	want := []string{workspace.EventSyncStarted, workspace.EventSyncFinished, workspace.EventExecStarted, workspace.EventExecExited,
		workspace.EventSyncStarted, workspace.EventSyncProgress, workspace.EventSyncFinished}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if op := data[workspace.SyncStarted](t, evs[0]).Op; op != "push" {
		t.Errorf("first sync %q, want the push", op)
	}
	if st := data[workspace.ExecStarted](t, evs[2]); st.Shell != "write /a.txt hi ; exit 3" || strings.Contains(string(evs[2].Data), "s3cr3t") {
		t.Errorf("exec.started %s", evs[2].Data)
	}
	if ex := data[workspace.ExecExited](t, evs[3]); ex.ExecID != rep.ExecID || ex.ExitCode != 3 || ex.RuntimeID != rep.RuntimeID {
		t.Errorf("exec.exited %+v, report %+v", ex, rep.ExecResult)
	}
	if done := data[workspace.SyncFinished](t, evs[len(evs)-1]); done.Op != "pull" || done.Entries != rep.Pulled.Entries || done.Entries != 1 {
		t.Errorf("the pull after the command finished %+v, report %+v", done, rep.Pulled)
	}

	// A long command line is cut, and says so.
	argv := []string{"echo", strings.Repeat("a", 10_000)}
	for i := range 100 {
		argv = append(argv, fmt.Sprint(i))
	}
	_, err = w.Exec(context.Background(), workspace.ExecSpec{Argv: argv}, nil)
	must(t, err)
	for _, ev := range published(t, sub) {
		if ev.Type == workspace.EventExecStarted {
			st := data[workspace.ExecStarted](t, ev)
			if !st.ArgvTruncated || len(ev.JSON()) > 16<<10 {
				t.Errorf("exec.started of a long command: %d bytes, truncated %v", len(ev.JSON()), st.ArgvTruncated)
			}
		}
	}
}

// A pending pull is told when it is recorded and when it is settled:
// completed by a pull from the runtime that ran the command, abandoned
// when the container's runtime changed.
func TestPendingEvents(t *testing.T) {
	for _, tc := range []struct {
		name, runtime, outcome string
	}{
		{"completed", "", "completed"},
		{"abandoned", "fake-runtime-2", "abandoned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, w, _ := newObserved(t)
			fake := h.remotes.Fake("default")
			sub := subscribe(t, w)
			fake.FailPull(errors.New("connection reset"))
			rep, err := w.Exec(context.Background(), workspace.ExecSpec{Shell: "write /a x"}, nil)
			must(t, err)
			evs := published(t, sub)
			pend := evs[len(evs)-1]
			if p := data[workspace.PendingEvent](t, pend); pend.Type != workspace.EventPending || p.ExecID != rep.ExecID || !strings.Contains(p.Error, "connection reset") {
				t.Fatalf("last event %s %s, want the pending pull of exec %s", pend.Type, pend.Data, rep.ExecID)
			}
			if tc.runtime != "" {
				fake.SetRuntime(tc.runtime)
			}
			_, err = w.Pull(context.Background())
			must(t, err)
			evs = published(t, sub)
			cleared := evs[len(evs)-1] // after the pull's sync.finished
			if p := data[workspace.PendingEvent](t, cleared); cleared.Type != workspace.EventPendingCleared || p.Outcome != tc.outcome || p.ExecID != rep.ExecID {
				t.Fatalf("events %q: %s %s, want the pending pull %s", types(evs), cleared.Type, cleared.Data, tc.outcome)
			}
		})
	}
}

// A pull that records conflicts publishes one conflict event naming the
// paths, under the pull's number.
func TestConflictEvent(t *testing.T) {
	h, w, _ := newObserved(t)
	pushed(t, w, "/PLAN.md", "v0")
	sub := subscribe(t, w)
	fake := h.remotes.Fake("default")
	writeStore(t, fake.Container, "PLAN.md", "container v1")
	write(t, w, "/PLAN.md", "server v1")
	_, err := w.Pull(context.Background())
	must(t, err)
	evs := published(t, sub)
	var conflicts []workspace.ConflictEvent
	var pull uint64
	for _, ev := range evs {
		switch ev.Type {
		case workspace.EventConflict:
			conflicts = append(conflicts, data[workspace.ConflictEvent](t, ev))
		case workspace.EventSyncStarted:
			if st := data[workspace.SyncStarted](t, ev); st.Op == "pull" {
				pull = st.Sync
			}
		}
	}
	if len(conflicts) != 1 || conflicts[0].Sync != pull || conflicts[0].Conflicts != 1 || !slices.Equal(conflicts[0].Paths, []string{"/PLAN.md"}) {
		t.Fatalf("conflict events %+v (pull #%d) in %q", conflicts, pull, types(evs))
	}
	// The push of the same turn follows.
	if got := types(evs[len(evs)-3:]); !slices.Equal(got, []string{workspace.EventSyncStarted, workspace.EventSyncProgress, workspace.EventSyncFinished}) {
		t.Errorf("after the conflict %q, want the push", got)
	}
}

func TestVerifyEvents(t *testing.T) {
	h, w, _ := newObserved(t)
	sub := subscribe(t, w)
	rep, err := w.Verify(context.Background())
	must(t, err)
	evs := published(t, sub)
	if len(evs) != 1 || evs[0].Type != workspace.EventVerify {
		t.Fatalf("events %q, want one verify", types(evs))
	}
	if v := data[workspace.VerifyEvent](t, evs[0]); !v.Converged || v.ServerRoot != rep.ServerRoot || v.Repair || v.Error != "" {
		t.Errorf("verify %+v, report %+v", v, rep)
	}
	// Drift names the first differing paths, at most MaxConflictPaths.
	fake := h.remotes.Fake("default")
	for i := range 40 {
		writeStore(t, fake.Container, fmt.Sprintf("drift/%02d", i), "x")
	}
	_, err = w.Verify(context.Background())
	must(t, err)
	evs = published(t, sub)
	if v := data[workspace.VerifyEvent](t, evs[0]); v.Converged || len(v.Differences) == 0 || len(v.Differences) > workspace.MaxConflictPaths {
		t.Errorf("verify of a drifted tree %+v", v)
	}
	fake.FailVerify(errors.New("walk failed"))
	_, err = w.Verify(context.Background())
	if err == nil {
		t.Fatal("verify did not fail")
	}
	if v := data[workspace.VerifyEvent](t, published(t, sub)[0]); !strings.Contains(v.Error, "walk failed") {
		t.Errorf("failed verify %+v", v)
	}
}

// A tick is one sync whose pulls and pushes name it as their parent, and
// its finished event sums them.
func TestTickEvents(t *testing.T) {
	h, w, _ := newObserved(t)
	writeStore(t, h.remotes.Fake("default").Container, "from-container", "c")
	write(t, w, "/from-server", "s")
	sub := subscribe(t, w)
	rep, err := w.Tick(context.Background())
	must(t, err)
	evs := published(t, sub)
	tick := data[workspace.SyncStarted](t, evs[0])
	last := data[workspace.SyncFinished](t, evs[len(evs)-1])
	if tick.Op != "tick" || last.Op != "tick" || last.Sync != tick.Sync || evs[0].Runtime != "" {
		t.Fatalf("tick events %q: first %+v, last %+v", types(evs), tick, last)
	}
	if want := rep.Pulled.Entries + rep.Pushed.Entries; last.Entries != want || want != 2 {
		t.Errorf("tick finished with %d entries, its report moved %d", last.Entries, want)
	}
	var ops []string
	for _, ev := range evs[1 : len(evs)-1] {
		if ev.Type == workspace.EventSyncStarted {
			st := data[workspace.SyncStarted](t, ev)
			ops = append(ops, st.Op)
			if st.Parent != tick.Sync {
				t.Errorf("%s #%d has parent %d, want the tick's %d", st.Op, st.Sync, st.Parent, tick.Sync)
			}
		}
	}
	if !slices.Equal(ops, []string{"pull", "push"}) {
		t.Errorf("the tick made %q", ops)
	}
}

// A remote that reports its sessions has them published as
// runtime.connected and runtime.lost, about the runtime it serves.
func TestRuntimeSessionEvents(t *testing.T) {
	ctx := context.Background()
	_, w, remote := newObserved(t)
	_, err := w.Attach(ctx, workspace.AttachOptions{Name: "gpu", Endpoint: "ws://127.0.0.1:9/sync"})
	must(t, err)
	_, err = w.On("gpu").Pull(ctx) // builds its remote
	must(t, err)
	sub := subscribe(t, w)
	remote("gpu").session(workspace.SessionChange{Connected: true, RuntimeID: "rt-1"})
	remote("gpu").session(workspace.SessionChange{RuntimeID: "rt-1", Err: errors.New("connection reset by peer")})
	remote("default").session(workspace.SessionChange{Connected: true, RuntimeID: "rt-0"})
	evs := published(t, sub)
	var got []string
	for _, ev := range evs {
		d := data[workspace.RuntimeEvent](t, ev)
		got = append(got, fmt.Sprintf("%s %s %s %s", ev.Type, ev.Runtime, d.RuntimeID, d.Error))
	}
	want := []string{"runtime.connected gpu rt-1 ", "runtime.lost gpu rt-1 connection reset by peer", "runtime.connected default rt-0 "}
	if !slices.Equal(got, want) {
		t.Errorf("events\n%q, want\n%q", got, want)
	}
}

// Every type the workspace publishes is in EventTypes, so a filter can
// name it, and every name there is a type or the log's gap.
func TestEventTypesAreListed(t *testing.T) {
	for _, typ := range []string{workspace.EventSyncStarted, workspace.EventSyncProgress, workspace.EventSyncFinished,
		workspace.EventExecStarted, workspace.EventExecExited, workspace.EventPending, workspace.EventPendingCleared,
		workspace.EventConflict, workspace.EventVerify, workspace.EventConnected, workspace.EventLost, events.TypeGap} {
		if !slices.Contains(workspace.EventTypes, typ) {
			t.Errorf("%s is not in EventTypes", typ)
		}
	}
	if _, err := events.ParseFilter("sync,exec.exited,runtime,gap", workspace.EventTypes); err != nil {
		t.Error(err)
	}
	if _, err := events.ParseFilter("sync.finish", workspace.EventTypes); !errors.Is(err, events.ErrBadFilter) {
		t.Errorf("a misspelt type: %v", err)
	}
}

// The log is in memory: a server that opens the registry again starts a
// log of another epoch, and an id from the last one replays what the new
// one holds after a gap that says the server restarted.
func TestEventIDsAreNotConfusedAcrossARestart(t *testing.T) {
	h, w := newDefault(t)
	_, err := w.Pull(context.Background())
	must(t, err)
	sub, err := w.Events().Subscribe("0")
	must(t, err)
	evs := published(t, sub)
	last := evs[len(evs)-1].ID
	h.m.Close()
	h.m = h.open(t)
	w = h.ws(t, "default")
	_, err = w.Pull(context.Background())
	must(t, err)
	sub, err = w.Events().Subscribe(last)
	must(t, err)
	evs = published(t, sub)
	if len(evs) != 3 || evs[0].Type != events.TypeGap || evs[1].ID != w.Events().Epoch()+"-1" {
		t.Fatalf("after the restart, from %s: %q", last, types(evs))
	}
	if g := data[events.Gap](t, evs[0]); g.Reason != events.GapRestart || g.After != last {
		t.Errorf("gap %+v", g)
	}
}

// A deferred pull is told as pending (deferred) when the command's reply
// goes, and as cleared once the background puller made it.
func TestDeferredPullEvents(t *testing.T) {
	_, w, _ := newObserved(t)
	sub := subscribe(t, w)
	rep, err := w.Exec(context.Background(), workspace.ExecSpec{Shell: "write /a x", Sync: workspace.SyncDefer}, nil)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for !slices.Contains(got, workspace.EventPendingCleared) {
		ev, err := sub.Next(ctx)
		must(t, err)
		got = append(got, ev.Type)
		switch ev.Type {
		case workspace.EventPending:
			if p := data[workspace.PendingEvent](t, ev); p.State != workspace.PendingDeferred || p.ExecID != rep.ExecID {
				t.Errorf("pending %+v, want exec %s deferred", p, rep.ExecID)
			}
		case workspace.EventPendingCleared:
			if p := data[workspace.PendingEvent](t, ev); p.Outcome != "completed" || p.ExecID != rep.ExecID {
				t.Errorf("cleared %+v", p)
			}
		}
	}
	i := slices.Index(got, workspace.EventExecExited)
	if want := []string{workspace.EventPending, workspace.EventSyncStarted}; i < 0 || len(got) < i+3 || !slices.Equal(got[i+1:i+3], want) {
		t.Errorf("events %q, want the pending pull after the exit, then the background pull", got)
	}
}
