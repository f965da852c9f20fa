package workspace

import (
	"context"
	"time"

	"github.com/wsync/wsync/workspace/events"
)

// The types of the events a workspace publishes into its log (Events),
// with their data below. docs/API.md, "Events", describes each.
const (
	EventSyncStarted    = "sync.started"         // SyncStarted
	EventSyncProgress   = "sync.progress"        // SyncProgress
	EventSyncFinished   = "sync.finished"        // SyncFinished
	EventExecStarted    = "exec.started"         // ExecStarted
	EventExecExited     = "exec.exited"          // ExecExited
	EventPending        = "sync.pending"         // PendingEvent
	EventPendingCleared = "sync.pending_cleared" // PendingEvent
	EventConflict       = "conflict"             // ConflictEvent
	EventVerify         = "verify"               // VerifyEvent
	EventConnected      = "runtime.connected"    // RuntimeEvent
	EventLost           = "runtime.lost"         // RuntimeEvent
)

// EventTypes lists every type a workspace's log carries, the log's own gap
// included: what a filter may name (events.ParseFilter).
var EventTypes = []string{
	EventSyncStarted, EventSyncProgress, EventSyncFinished, EventExecStarted, EventExecExited,
	EventPending, EventPendingCleared, EventConflict, EventVerify, EventConnected, EventLost, events.TypeGap,
}

// Events is the workspace's event log: what its syncs, commands and
// runtimes do, as it happens. It lives in memory, from the workspace's
// first use in this process (see package events for retention and ids).
func (w *Workspace) Events() *events.Log { return w.events }

// SyncStarted is the data of sync.started: a push or pull with the
// event's runtime, or a tick of every runtime, has its FIFO turn.
type SyncStarted struct {
	// Sync numbers the call among the workspace's syncs; its progress and
	// finished events carry the same number.
	Sync uint64 `json:"sync"`
	// Parent is the tick's Sync for the pulls and pushes a tick makes.
	Parent uint64 `json:"parent,omitempty"`
	Op     string `json:"op"` // "push", "pull" or "tick"
}

// SyncProgress is the data of sync.progress: the call's totals after a
// committed batch. Its Op is the Progress's: "bootstrap" for the
// snapshot a push sends to an empty container.
type SyncProgress struct {
	Sync uint64 `json:"sync"`
	Progress
}

// SyncFinished is the data of sync.finished: the call's report (a tick's
// sums its pulls and pushes) and, when it failed, its error.
type SyncFinished struct {
	Sync   uint64 `json:"sync"`
	Parent uint64 `json:"parent,omitempty"`
	Op     string `json:"op"`
	SyncReport
	Error string `json:"error,omitempty"`
	Errno string `json:"errno,omitempty"`
}

// ConflictEvent is the data of conflict: a pull recorded conflicts.
type ConflictEvent struct {
	Sync      uint64   `json:"sync"`
	Conflicts int      `json:"conflicts"`
	Paths     []string `json:"paths"` // the first MaxConflictPaths
}

// ExecStarted is the data of exec.started. Argv and Shell are cut to a
// few hundred bytes (ArgvTruncated); the environment and stdin are never
// published.
type ExecStarted struct {
	ExecID        string   `json:"exec_id,omitempty"`
	Argv          []string `json:"argv,omitempty"`
	Shell         string   `json:"shell,omitempty"`
	Cwd           string   `json:"cwd,omitempty"`
	ArgvTruncated bool     `json:"argv_truncated,omitempty"`
}

// ExecExited is the data of exec.exited: how the command ended, or the
// error that left its fate unknown.
type ExecExited struct {
	ExecResult
	Error string `json:"error,omitempty"`
	Errno string `json:"errno,omitempty"`
}

// PendingEvent is the data of sync.pending (a pull the runtime owes was
// recorded, or failed again) and sync.pending_cleared (a pull settled it;
// Outcome "completed", or "abandoned" when the container's runtime had
// changed since the command ran).
type PendingEvent struct {
	PendingPull
	Outcome string `json:"outcome,omitempty"`
}

// VerifyEvent is the data of verify: a verdict, or why there is none.
// Differences holds the first MaxConflictPaths differing paths.
type VerifyEvent struct {
	Repair bool `json:"repair,omitempty"`
	VerifyReport
	Error string `json:"error,omitempty"`
	Errno string `json:"errno,omitempty"`
}

// RuntimeEvent is the data of runtime.connected (a session with the
// runtime's computerd came up) and runtime.lost (it ended; Error says
// why).
type RuntimeEvent struct {
	RuntimeID string `json:"runtime_id,omitempty"`
	Error     string `json:"error,omitempty"`
}

// SessionNotifier is a Remote that tells when its session with the
// container comes up and when it is lost. The workspace subscribes when it
// builds the remote and publishes runtime.connected and runtime.lost.
type SessionNotifier interface {
	// NotifySession makes the remote call fn on every change, in order,
	// from its own goroutines; fn does not block.
	NotifySession(fn func(SessionChange))
}

// SessionChange is a session of a remote coming up (Connected, with the
// container's runtime id) or ending (with the reason, Err).
type SessionChange struct {
	Connected bool
	RuntimeID string
	Err       error
}

// publish publishes an event about the runtime rs (nil: the workspace).
func (w *Workspace) publish(rs *runtimeState, typ string, data any) {
	name := ""
	if rs != nil {
		name = rs.rt.Name
	}
	w.events.Publish(typ, name, data)
}

// watchSession publishes the session changes of r, the remote just built
// for rs, when it reports them.
func (w *Workspace) watchSession(rs *runtimeState, r Remote) {
	n, ok := r.(SessionNotifier)
	if !ok {
		return
	}
	n.NotifySession(func(c SessionChange) {
		if c.Connected {
			w.publish(rs, EventConnected, RuntimeEvent{RuntimeID: c.RuntimeID})
			return
		}
		ev := RuntimeEvent{RuntimeID: c.RuntimeID}
		if c.Err != nil {
			ev.Error = c.Err.Error()
		}
		w.publish(rs, EventLost, ev)
	})
}

type syncKey struct{}

// syncSpan is one sync call as the events tell it: started, progress
// (through the progress hook, which finds the span in the call's
// context), finished.
type syncSpan struct {
	w          *Workspace
	rs         *runtimeState // nil for a tick
	id, parent uint64
	op         string
	start      time.Time
}

// beginSync publishes sync.started for a call of op with rs (nil: a tick)
// and returns ctx carrying its span, for the progress hook and, in a tick,
// the pulls and pushes it makes.
func (w *Workspace) beginSync(ctx context.Context, rs *runtimeState, op string) (context.Context, *syncSpan) {
	sp := &syncSpan{w: w, rs: rs, id: w.syncs.Add(1), op: op, start: time.Now()}
	if parent, ok := ctx.Value(syncKey{}).(*syncSpan); ok {
		sp.parent = parent.id
	}
	w.publish(rs, EventSyncStarted, SyncStarted{Sync: sp.id, Parent: sp.parent, Op: op})
	return context.WithValue(ctx, syncKey{}, sp), sp
}

// syncOf is the number of the sync call ctx belongs to (0: none).
func syncOf(ctx context.Context) uint64 {
	if sp, ok := ctx.Value(syncKey{}).(*syncSpan); ok {
		return sp.id
	}
	return 0
}

// finish publishes sync.finished and, for a pull that recorded conflicts,
// conflict.
func (sp *syncSpan) finish(rep SyncReport, err error) {
	rep.Duration = time.Since(sp.start)
	ev := SyncFinished{Sync: sp.id, Parent: sp.parent, Op: sp.op, SyncReport: rep}
	if err != nil {
		ev.Error, ev.Errno = err.Error(), ErrnoName(err)
	}
	sp.w.publish(sp.rs, EventSyncFinished, ev)
	if rep.Conflicts > 0 && sp.op == "pull" {
		sp.w.publish(sp.rs, EventConflict, ConflictEvent{Sync: sp.id, Conflicts: rep.Conflicts, Paths: rep.ConflictPaths})
	}
}

// tickTotal sums a tick's pulls and pushes for its sync.finished.
func tickTotal(rep TickReport) SyncReport {
	var t SyncReport
	for _, rt := range rep.Runtimes {
		t.add(rt.Pulled)
		t.add(rt.Pushed)
	}
	t.RuntimeID, t.More = "", false // of every runtime: neither says anything
	return t
}

// Bounds of the command line an exec.started carries.
const (
	maxEventArgs   = 32
	maxEventArgLen = 256
)

// publishExecStarted publishes exec.started for a command on rs's runtime:
// id is its exec id when known when it starts ("" otherwise: its
// exec.exited names it). The exec bracket calls it once the push before
// the command succeeded; a detached start calls it with the id the
// container gave.
func (w *Workspace) publishExecStarted(rs *runtimeState, id string, spec ExecSpec) {
	w.publish(rs, EventExecStarted, execStartedOf(id, spec))
}

// execStartedOf is the data of exec.started for spec: its command line cut
// to the bounds above.
func execStartedOf(id string, spec ExecSpec) ExecStarted {
	ev := ExecStarted{ExecID: id, Cwd: spec.Cwd}
	ev.Shell, ev.ArgvTruncated = cut(spec.Shell, 4*maxEventArgLen)
	for i, a := range spec.Argv {
		if i == maxEventArgs {
			ev.ArgvTruncated = true
			break
		}
		a, cutOff := cut(a, maxEventArgLen)
		ev.Argv = append(ev.Argv, a)
		ev.ArgvTruncated = ev.ArgvTruncated || cutOff
	}
	return ev
}

// publishExecExited publishes exec.exited for a command on rs's runtime:
// its result, or err when the remote could not report its end. The exec
// bracket calls it when the command's call returns, before the pull after
// it; a detached command's watcher calls it when it learns the exit.
func (w *Workspace) publishExecExited(rs *runtimeState, res ExecResult, err error) {
	ev := ExecExited{ExecResult: res}
	if err != nil {
		ev.Error, ev.Errno = err.Error(), ErrnoName(err)
	}
	w.publish(rs, EventExecExited, ev)
}

func cut(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	return s[:n], true
}

// publishVerify publishes a verify (or repair) verdict, or its error.
func (w *Workspace) publishVerify(rs *runtimeState, repair bool, rep VerifyReport, err error) {
	ev := VerifyEvent{Repair: repair, VerifyReport: rep}
	ev.Differences = ev.Differences[:min(len(ev.Differences), MaxConflictPaths)]
	if err != nil {
		ev.Error, ev.Errno = err.Error(), ErrnoName(err)
	}
	w.publish(rs, EventVerify, ev)
}
