package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wsync/wsync/vfs"
)

// Detached execs. StartExec runs the first half of the exec bracket (the
// push), starts the command and answers with its id at once; a follower
// goroutine of the workspace then waits for the command's exit and runs
// the second half (the pull after it, in slices or deferred, as the spec's
// Sync says), so what the command wrote comes back whether or not anyone
// waits. The workspace's table of detached execs is persisted in the
// registry: a server that restarts re-attaches to each one that had not
// finished by its id, and still makes the pull after a command that ended
// while it was down. An exec whose container runtime is gone (computerd
// restarted) is ExecStateLost.

// States of an exec (ExecInfo.State): the runner's, and ExecStateLost.
const (
	ExecStateRunning  = "running"
	ExecStateExited   = "exited"
	ExecStateKilled   = "killed"    // a kill (or computerd's shutdown) ended it
	ExecStateTimedOut = "timed_out" // its timeout expired
	// ExecStateLost: computerd no longer knows the exec: its runtime was
	// replaced (a restart), it dropped the finished exec from its
	// retention, or the workspace's runtime was detached.
	ExecStateLost = "lost"
)

// Defaults of the exec limits (Options.MaxExecs, Options.ExecHistory).
const (
	DefaultMaxExecs    = 16
	DefaultExecHistory = 64
)

// ExecInfo describes one command of a workspace's container: one the
// container's runner reports (running or recent) or a detached one the
// workspace keeps in its table (and the registry).
type ExecInfo struct {
	ExecID    string `json:"exec_id"`
	RuntimeID string `json:"runtime_id,omitempty"`
	// Runtime is the workspace's runtime the command runs on.
	Runtime string `json:"runtime,omitempty"`
	// Argv, Shell and Cwd (a workspace path) are the command line, cut to
	// a few hundred bytes (ArgvTruncated). Never the environment or stdin.
	Argv          []string  `json:"argv,omitempty"`
	Shell         string    `json:"shell,omitempty"`
	ArgvTruncated bool      `json:"argv_truncated,omitempty"`
	Cwd           string    `json:"cwd,omitempty"`
	Started       time.Time `json:"started"`
	Ended         time.Time `json:"ended,omitzero"`
	// State is ExecStateRunning, ExecStateExited, ExecStateKilled, ExecStateTimedOut or
	// ExecStateLost; Error says why a lost exec was lost.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Result is how it ended; nil while it runs (and when it was lost).
	Result *ExecResult `json:"result,omitempty"`
	// OutputBytes counts the bytes it wrote; LogStart is the first offset
	// its bounded log still holds, LogCap the log's bound. Known while the
	// container's runner holds the exec.
	OutputBytes int64 `json:"output_bytes"`
	LogStart    int64 `json:"log_start"`
	LogCap      int64 `json:"log_cap,omitempty"`
	// Detached: started by StartExec; the workspace follows it. SyncMode
	// is its post-command sync mode; Sync, SyncError and Pulled are the
	// pull after it once it is done (Sync empty until then): SyncComplete,
	// SyncPending or SyncDeferred as an exec's report says.
	Detached  bool        `json:"detached,omitempty"`
	SyncMode  string      `json:"sync_mode,omitempty"`
	Sync      string      `json:"sync,omitempty"`
	SyncError string      `json:"sync_error,omitempty"`
	Pulled    *SyncReport `json:"pulled,omitempty"`
}

// settled reports whether the workspace is done with a detached exec: the
// pull after it was made or handed to the background puller, or it was
// lost.
func (e *ExecInfo) settled() bool { return e.Sync != "" || e.State == ExecStateLost }

// ExecList is what Execs answers: the commands of every runtime, oldest
// first, and the runtimes that could not be asked (their detached execs
// are listed as last recorded).
type ExecList struct {
	Execs       []ExecInfo     `json:"execs"`
	Unreachable []RuntimeError `json:"unreachable,omitempty"`
}

// RuntimeError is a runtime a call could not reach, and why.
type RuntimeError struct {
	Runtime string `json:"runtime"`
	Error   string `json:"error"`
	Errno   string `json:"errno,omitempty"`
}

// ExecStartReport is what StartExec answers: the exec as the workspace
// now records it, and the push before it.
type ExecStartReport struct {
	ExecInfo
	Pushed SyncReport `json:"pushed"`
	// Warning: the command started but the registry could not record it
	// (a server restart forgets it). Set by the API, which answers the
	// exec's id even then.
	Warning string `json:"warning,omitempty"`
}

// validExecID reports whether id is an exec id, a container runtime id and
// a sequence number: [A-Za-z0-9._-]{1,128}:[1-9][0-9]{0,19}. A loop, not a
// regexp, for the reason validName gives.
func validExecID(id string) bool {
	rt, n, ok := strings.Cut(id, ":")
	if !ok || len(rt) == 0 || len(rt) > 128 || len(n) == 0 || len(n) > 20 || n[0] == '0' {
		return false
	}
	for i := 0; i < len(rt); i++ {
		switch c := rt[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ValidateExecID checks an exec id's form, "<runtime id>:<n>"
// (ErrBadExecID), before it goes anywhere.
func ValidateExecID(id string) error {
	if !validExecID(id) {
		return fmt.Errorf("%w: %.200q (want RUNTIME:N)", ErrBadExecID, id)
	}
	return nil
}

// ExecRuntimeID is the container runtime id an exec id names.
func ExecRuntimeID(id string) string {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		return id[:i]
	}
	return ""
}

// ExecStateOf is the state of a command that ended with res.
func ExecStateOf(res ExecResult) string {
	switch {
	case res.TimedOut:
		return ExecStateTimedOut
	case res.Killed:
		return ExecStateKilled
	}
	return ExecStateExited
}

// ParseSignal reads a signal by name ("TERM", "SIGTERM", "term") or
// number (1 to 64).
func ParseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: no signal", vfs.ErrInvalid)
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("%w: signal %d (want 1 to 64)", vfs.ErrInvalid, n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if sig, ok := signals[name]; ok {
		return sig, nil
	}
	return 0, fmt.Errorf("%w: unknown signal %.32q", vfs.ErrInvalid, s)
}

var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT,
	"STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP, "ALRM": syscall.SIGALRM, "WINCH": syscall.SIGWINCH,
}

// detachedExec is one row of the workspace's table of detached execs.
// info is guarded by the workspace's execMu.
type detachedExec struct {
	rs   *runtimeState
	info ExecInfo
	// done is closed once the workspace is done with the exec (settled).
	done chan struct{}
}

// acquireExec takes one of the workspace's command slots (Options.MaxExecs),
// or refuses with ErrTooManyExecs.
func (w *Workspace) acquireExec() error {
	w.execMu.Lock()
	defer w.execMu.Unlock()
	if w.running >= w.m.opts.MaxExecs {
		metricExecBusy.Inc()
		return fmt.Errorf("exec: %d commands running: %w", w.running, ErrTooManyExecs)
	}
	w.running++
	return nil
}

// releaseExec gives a slot back: the command ended (or never started).
func (w *Workspace) releaseExec() {
	w.execMu.Lock()
	w.running--
	w.execMu.Unlock()
}

// StartExec is On(DefaultRuntime).StartExec.
func (w *Workspace) StartExec(ctx context.Context, spec ExecSpec) (ExecStartReport, error) {
	return w.On(DefaultRuntime).StartExec(ctx, spec)
}

// startTimeout bounds the start of a detached command once its push is
// done, whatever becomes of the caller: a command that started is
// recorded.
const startTimeout = 30 * time.Second

// StartExec runs a command detached: the push before it (as Exec's; a
// failed push starts nothing), then the command, and answers with its id
// as soon as it runs. The workspace follows it from then on: it records
// the exec in the registry, publishes exec.started and, at its end,
// exec.exited, and makes the pull after it in the mode spec.Sync names
// (SyncWait: in slices until done; SyncDefer: by the background puller).
// The command outlives the caller, and the server: a restarted server
// re-attaches by id. It counts against Options.MaxExecs until it ends.
func (t Target) StartExec(ctx context.Context, spec ExecSpec) (ExecStartReport, error) {
	w := t.w
	var rep ExecStartReport
	if err := checkExecSpec(spec); err != nil {
		return rep, err
	}
	if err := w.acquireExec(); err != nil {
		return rep, err
	}
	started := false
	defer func() {
		if !started {
			w.releaseExec()
		}
	}()
	rs, r, pushed, err := t.beforeCommand(ctx, spec)
	rep.Pushed = pushed
	if err != nil {
		return rep, err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	id, err := r.StartExec(sctx, spec)
	if err != nil {
		metricExecs.WithLabelValues("error").Inc()
		return rep, fmt.Errorf("exec: %w", err)
	}
	started = true
	metricDetached.WithLabelValues("started").Inc()
	d := &detachedExec{rs: rs, done: make(chan struct{}), info: summary(spec)}
	d.info.ExecID, d.info.RuntimeID, d.info.Runtime = id, ExecRuntimeID(id), rs.rt.Name
	d.info.Started, d.info.State, d.info.Detached = time.Now().UTC(), ExecStateRunning, true
	d.info.SyncMode, d.info.LogCap = cmp.Or(spec.Sync, SyncWait), spec.LogCap
	w.publishExecStarted(rs, id, spec)
	rs.log.Info("exec detached", "exec", id, "pushed", pushed.Entries)
	serr := w.recordExec(d)
	w.follow(d)
	rep.ExecInfo = w.execInfo(d)
	if serr != nil {
		return rep, fmt.Errorf("exec %s started, but the registry does not record it (a server restart forgets it): %w", id, serr)
	}
	return rep, nil
}

// summary is what the table keeps of a spec: its command line cut as
// exec.started cuts it, and its working directory.
func summary(spec ExecSpec) ExecInfo {
	ev := execStartedOf("", spec)
	cwd, _ := vfs.CleanAPIPath(spec.Cwd)
	return ExecInfo{Argv: ev.Argv, Shell: ev.Shell, ArgvTruncated: ev.ArgvTruncated, Cwd: "/" + cwd}
}

// recordExec adds d to the table and persists it.
func (w *Workspace) recordExec(d *detachedExec) error {
	return w.updateExec(d, func(*ExecInfo) {})
}

// updateExec changes d's row with f and persists the table, dropping the
// oldest settled rows beyond Options.ExecHistory. Lock order: m.mu, then
// execMu.
func (w *Workspace) updateExec(d *detachedExec, f func(*ExecInfo)) error {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.execMu.Lock()
	f(&d.info)
	if w.execs[d.info.ExecID] == nil {
		w.execs[d.info.ExecID] = d
	}
	w.pruneExecsLocked()
	w.execMu.Unlock()
	if w.m.closed {
		return ErrClosed
	}
	if err := w.m.saveLocked(); err != nil {
		return fmt.Errorf("exec %s: %w", d.info.ExecID, err)
	}
	return nil
}

// pruneExecsLocked keeps the newest Options.ExecHistory settled rows (and
// every row not settled). execMu is held.
func (w *Workspace) pruneExecsLocked() {
	var settled []*detachedExec
	for _, d := range w.execs {
		if d.info.settled() {
			settled = append(settled, d)
		}
	}
	if len(settled) <= w.m.opts.ExecHistory {
		return
	}
	slices.SortFunc(settled, func(a, b *detachedExec) int { return a.info.Started.Compare(b.info.Started) })
	for _, d := range settled[:len(settled)-w.m.opts.ExecHistory] {
		delete(w.execs, d.info.ExecID)
	}
}

// execRecords is the table as the registry keeps it, oldest first.
func (w *Workspace) execRecords() []ExecInfo {
	w.execMu.Lock()
	defer w.execMu.Unlock()
	out := make([]ExecInfo, 0, len(w.execs))
	for _, d := range w.execs {
		out = append(out, d.info)
	}
	sortExecs(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

func sortExecs(es []ExecInfo) {
	slices.SortStableFunc(es, func(a, b ExecInfo) int {
		return cmp.Or(a.Started.Compare(b.Started), strings.Compare(a.ExecID, b.ExecID))
	})
}

// loadExecs builds the table from the registry's rows (Open). A row whose
// runtime the workspace no longer has is lost; one still running holds a
// command slot until its follower sees the end.
func (w *Workspace) loadExecs(rows []ExecInfo) {
	for _, info := range rows {
		if ValidateExecID(info.ExecID) != nil {
			continue
		}
		info.Detached = true
		d := &detachedExec{info: info, done: make(chan struct{})}
		d.rs = w.runtimes[cmp.Or(info.Runtime, DefaultRuntime)]
		if d.rs == nil && !info.settled() {
			d.info.State, d.info.Error = ExecStateLost, "the runtime it ran on is no longer attached"
		}
		if d.info.settled() {
			close(d.done)
		} else if d.info.State == ExecStateRunning {
			w.running++
		}
		w.execs[info.ExecID] = d
	}
}

// resumeExecs starts the follower of every detached exec the workspace is
// not done with (Open calls it once the registry is loaded).
func (w *Workspace) resumeExecs() {
	w.execMu.Lock()
	var open []*detachedExec
	for _, d := range w.execs {
		if !d.info.settled() {
			open = append(open, d)
		}
	}
	w.execMu.Unlock()
	for _, d := range open {
		d.rs.log.Info("re-attaching a detached exec", "exec", d.info.ExecID, "state", d.info.State)
		w.follow(d)
	}
}

// follow starts d's follower under the workspace's background context,
// which Close cancels (and waits for).
func (w *Workspace) follow(d *detachedExec) {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	if w.bgCtx.Err() != nil {
		return // closing: the row stays unsettled, and the next start follows it
	}
	w.bg.Go(func() { w.follower(w.bgCtx, d) })
}

// follower waits for a detached command's end, then makes the pull after
// it. While computerd cannot be reached it retries with the background
// puller's backoff; an exec computerd does not know (any more) is lost. A
// follower cut short by Close leaves its row unsettled: the next start
// takes it up again.
func (w *Workspace) follower(ctx context.Context, d *detachedExec) {
	rs := d.rs
	w.execMu.Lock()
	info := d.info
	w.execMu.Unlock()
	id := info.ExecID
	res := ExecResult{ExecID: id, RuntimeID: info.RuntimeID}
	if info.Result != nil {
		res = *info.Result
	}
	var lost error
	if info.State == ExecStateRunning {
		var err error
		res, lost, err = w.awaitExit(ctx, rs, id)
		if err != nil {
			return // closing
		}
		w.releaseExec()
		if lost == nil {
			res.ExecID, res.RuntimeID = id, cmp.Or(res.RuntimeID, info.RuntimeID)
			if err := w.updateExec(d, func(e *ExecInfo) {
				e.State, e.Result, e.Ended = ExecStateOf(res), clonePtr(&res), time.Now().UTC()
				e.OutputBytes = max(e.OutputBytes, res.OutputBytes)
			}); err != nil && !errors.Is(err, ErrClosed) {
				rs.log.Warn("detached exec ended; the registry does not record it yet", "exec", id, "err", err)
			}
			w.publishExecExited(rs, res, nil)
			rs.log.Info("detached exec ended", "exec", id, "code", res.ExitCode, "signal", res.Signal)
		} else {
			w.publishExecExited(rs, ExecResult{ExecID: id, RuntimeID: info.RuntimeID}, lost)
			rs.log.Warn("detached exec lost", "exec", id, "err", lost)
		}
	} else if info.State == ExecStateLost {
		lost = errors.New(info.Error)
	}

	var pulled SyncReport
	state, syncErr := "", ""
	if lost == nil || w.attached(rs) {
		// A lost exec still owes its runtime a pull: what it wrote may be
		// in the container that replaced it (with a state on disk). The
		// background puller makes it, and reports the pull abandoned
		// when the runtime changed.
		mode := cmp.Or(info.SyncMode, SyncWait)
		if lost != nil {
			mode = SyncDefer
		}
		pulled, state, syncErr = w.pullAfterDetached(ctx, rs, res, info.RuntimeID, mode)
		if ctx.Err() != nil {
			return
		}
	}
	if err := w.updateExec(d, func(e *ExecInfo) {
		if lost != nil {
			e.State, e.Error, e.Ended = ExecStateLost, lost.Error(), time.Now().UTC()
		}
		if state != "" { // "": lost with its runtime, nothing to pull from
			e.Sync, e.SyncError, e.Pulled = state, syncErr, clonePtr(&pulled)
		}
	}); err != nil && !errors.Is(err, ErrClosed) {
		rs.log.Warn("detached exec settled; the registry does not record it yet", "exec", id, "err", err)
	}
	metricDetached.WithLabelValues(outcome(lost, state)).Inc()
	close(d.done)
}

func outcome(lost error, sync string) string {
	if lost != nil {
		return "lost"
	}
	return sync
}

// attached reports whether rs is still one of the workspace's runtimes.
func (w *Workspace) attached(rs *runtimeState) bool {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	return rs != nil && w.runtimes[rs.rt.Name] == rs
}

// awaitExit attaches to exec id (from the end: the follower wants only the
// exit) until it ends. lost is why the exec is gone; err is non-nil only
// when ctx ended.
func (w *Workspace) awaitExit(ctx context.Context, rs *runtimeState, id string) (res ExecResult, lost, err error) {
	backoff := w.m.opts.RetryBackoff
	for {
		if !w.attached(rs) {
			return res, errors.New("the runtime it ran on was detached"), nil
		}
		r, err := w.remoteFor(rs)
		if err == nil {
			res, err = r.AttachExec(ctx, id, ExecFromEnd, func(ExecEvent) {})
		}
		switch {
		case err == nil:
			return res, nil, nil
		case ctx.Err() != nil:
			return res, nil, ctx.Err()
		case errors.Is(err, ErrExecLost), errors.Is(err, ErrNoRemote):
			return res, err, nil
		case errors.Is(err, vfs.ErrNotExist):
			return res, fmt.Errorf("computerd no longer retains it: %w", err), nil
		}
		rs.log.Info("detached exec: cannot follow it; retrying", "exec", id, "err", err, "in", backoff)
		// A detach ends the wait: the runtime's session was closed under
		// the attach above, and the check at the loop's top finds it gone
		// (it raced that check before).
		if !w.sleep(ctx, jitter(backoff), rs.detached) {
			return res, nil, ctx.Err()
		}
		backoff = min(2*backoff, maxBackoffFactor*w.m.opts.RetryBackoff)
	}
}

// pullAfterDetached is the pull a detached command owes its runtime, in
// mode (the exec bracket's afterCommand), bounded by Options.PullTimeout;
// what it leaves undone, the background puller finishes.
func (w *Workspace) pullAfterDetached(ctx context.Context, rs *runtimeState, res ExecResult, runtime, mode string) (SyncReport, string, string) {
	r, err := w.remoteFor(rs)
	if err != nil {
		if oerr := w.owe(rs, PendingPull{ExecID: res.ExecID, RuntimeID: runtime}); oerr != nil {
			err = errors.Join(err, oerr)
		}
		return SyncReport{RuntimeID: runtime}, SyncPending, err.Error()
	}
	pctx, cancel := context.WithTimeout(ctx, w.m.opts.PullTimeout)
	defer cancel()
	return w.afterCommand(pctx, rs, r, res, runtime, mode)
}

// lookupExec is the detached exec id, if the workspace has it.
func (w *Workspace) lookupExec(id string) *detachedExec {
	w.execMu.Lock()
	defer w.execMu.Unlock()
	return w.execs[id]
}

// execInfo is d's row now.
func (w *Workspace) execInfo(d *detachedExec) ExecInfo {
	w.execMu.Lock()
	defer w.execMu.Unlock()
	info := d.info
	info.Argv = slices.Clone(info.Argv)
	return info
}

// merge overlays what the container's runner says of an exec (live) on a
// detached exec's row: the row's own fields, and its state when lost.
func merge(row ExecInfo, live ExecInfo) ExecInfo {
	out := live
	out.Runtime = row.Runtime
	out.Detached, out.SyncMode, out.Sync, out.SyncError, out.Pulled = true, row.SyncMode, row.Sync, row.SyncError, row.Pulled
	if out.LogCap == 0 {
		out.LogCap = row.LogCap
	}
	if row.State == ExecStateLost {
		out.State, out.Error = row.State, row.Error
	}
	return out
}

// Execs lists the commands of every runtime of the workspace that has an
// endpoint, as their containers' runners report them (running and recent,
// foreground ones too), with the workspace's detached execs merged in and
// listed as recorded when their runtime cannot be asked. Each runtime is
// asked at once, bounded by statusTimeout.
func (w *Workspace) Execs(ctx context.Context) (ExecList, error) {
	w.stateMu.Lock()
	rss := w.sortedLocked()
	w.stateMu.Unlock()
	lists := make([][]ExecInfo, len(rss))
	errs := make([]error, len(rss))
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, rs := range rss {
		if rs.rt.Endpoint == "" {
			continue
		}
		wg.Go(func() {
			r, err := w.remoteFor(rs)
			if err == nil {
				_, lists[i], err = r.ListExecs(rctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	var out ExecList
	seen := make(map[string]bool)
	for i, rs := range rss {
		if errs[i] != nil {
			out.Unreachable = append(out.Unreachable, RuntimeError{Runtime: rs.rt.Name, Error: errs[i].Error(), Errno: ErrnoName(errs[i])})
		}
		for _, e := range lists[i] {
			e.Runtime = rs.rt.Name
			if d := w.lookupExec(e.ExecID); d != nil && d.rs == rs {
				e = merge(w.execInfo(d), e)
			}
			seen[e.ExecID] = true
			out.Execs = append(out.Execs, e)
		}
	}
	for _, row := range w.execRecords() {
		if !seen[row.ExecID] {
			out.Execs = append(out.Execs, row)
		}
	}
	sortExecs(out.Execs)
	if out.Execs == nil {
		out.Execs = []ExecInfo{}
	}
	return out, nil
}

// execTarget finds the runtime of exec id: a detached exec's own, else
// the runtime the Target names.
func (t Target) execTarget(id string) (*runtimeState, *detachedExec, error) {
	if err := ValidateExecID(id); err != nil {
		return nil, nil, err
	}
	if d := t.w.lookupExec(id); d != nil {
		if !t.w.attached(d.rs) {
			return nil, d, fmt.Errorf("exec %s: %w: the runtime it ran on is no longer attached", id, ErrExecLost)
		}
		return d.rs, d, nil
	}
	rs, err := t.w.state(t.name)
	return rs, nil, err
}

// ExecInfo describes exec id: a detached exec of the workspace (with
// what its runtime's runner says now, when it can be asked), or a command
// the target runtime's runner reports. An id of the runtime's runner that
// it does not know is vfs.ErrNotExist; one of another container runtime,
// ErrExecLost.
func (t Target) ExecInfo(ctx context.Context, id string) (ExecInfo, error) {
	rs, d, err := t.execTarget(id)
	if d != nil && rs == nil {
		return t.w.execInfo(d), nil
	}
	if err != nil {
		return ExecInfo{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var current string
	var list []ExecInfo
	r, err := t.w.remoteFor(rs)
	if err == nil {
		current, list, err = r.ListExecs(rctx)
	}
	if d != nil {
		row := t.w.execInfo(d)
		for _, e := range list {
			if e.ExecID == id {
				e.Runtime = rs.rt.Name
				return merge(row, e), nil
			}
		}
		return row, nil // as recorded: computerd cannot be asked, or no longer holds it
	}
	if err != nil {
		return ExecInfo{}, err
	}
	for _, e := range list {
		if e.ExecID == id {
			e.Runtime = rs.rt.Name
			return e, nil
		}
	}
	return ExecInfo{}, noExec(id, current)
}

// noExec is the error for an id the runner of container runtime current
// does not list.
func noExec(id, current string) error {
	if current != "" && ExecRuntimeID(id) != current {
		return fmt.Errorf("exec %s: the container runtime is now %s: %w", id, current, ErrExecLost)
	}
	return fmt.Errorf("exec %s: %w", id, vfs.ErrNotExist)
}

// AttachExec passes exec id's output to out from offset from (ExecFromEnd:
// only what comes next), follows it, and returns how it ended (see
// Remote.AttachExec). Cancelling ctx stops following; the command runs on.
func (t Target) AttachExec(ctx context.Context, id string, from int64, out func(ExecEvent)) (ExecResult, error) {
	if from < 0 && from != ExecFromEnd {
		return ExecResult{}, fmt.Errorf("exec %s: %w: offset %d", id, vfs.ErrInvalid, from)
	}
	rs, _, err := t.execTarget(id)
	if err != nil {
		return ExecResult{}, err
	}
	r, err := t.w.remoteFor(rs)
	if err != nil {
		return ExecResult{}, err
	}
	res, err := r.AttachExec(ctx, id, from, out)
	if err != nil {
		return res, fmt.Errorf("exec %s: %w", id, err)
	}
	return res, nil
}

// KillExec sends sig to exec id's process group. A detached exec's end is
// seen by its follower, which makes the pull after it as usual.
func (t Target) KillExec(ctx context.Context, id string, sig syscall.Signal) error {
	if sig < 1 || sig > 64 {
		return fmt.Errorf("exec %s: %w: signal %d", id, vfs.ErrInvalid, int(sig))
	}
	rs, _, err := t.execTarget(id)
	if err != nil {
		return err
	}
	r, err := t.w.remoteFor(rs)
	if err != nil {
		return err
	}
	if err := r.KillExec(ctx, id, sig); err != nil {
		return fmt.Errorf("exec %s: kill: %w", id, err)
	}
	rs.log.Info("exec signalled", "exec", id, "signal", int(sig))
	return nil
}

// WaitExec blocks until exec id has ended and returns it as ExecInfo
// describes it: for a detached exec, once the workspace is done with it
// (the pull after it made or handed to the background puller: Sync; or
// lost); for any other, once the runner reports its exit.
func (t Target) WaitExec(ctx context.Context, id string) (ExecInfo, error) {
	rs, d, err := t.execTarget(id)
	if d != nil {
		select {
		case <-d.done:
		case <-ctx.Done():
			return ExecInfo{}, ctx.Err()
		case <-t.w.bgCtx.Done():
			return ExecInfo{}, ErrClosed
		}
		return t.ExecInfo(ctx, id)
	}
	if err != nil {
		return ExecInfo{}, err
	}
	r, err := t.w.remoteFor(rs)
	if err != nil {
		return ExecInfo{}, err
	}
	res, err := r.AttachExec(ctx, id, ExecFromEnd, func(ExecEvent) {})
	if err != nil {
		return ExecInfo{}, fmt.Errorf("exec %s: %w", id, err)
	}
	info, err := t.ExecInfo(ctx, id)
	if err != nil { // evicted between the exit and the list: the exit is known
		info = ExecInfo{ExecID: id, RuntimeID: ExecRuntimeID(id), Runtime: rs.rt.Name}
	}
	info.State, info.Result = ExecStateOf(res), &res
	return info, nil
}

// MaxExecOffset bounds an output offset a caller gives: what the wire
// carries.
const MaxExecOffset = 1 << 62

// ParseExecFrom reads an output offset as callers write it: a byte offset
// from 0 to MaxExecOffset, "end" (ExecFromEnd), or "" (0).
func ParseExecFrom(v string) (int64, error) {
	switch v {
	case "":
		return 0, nil
	case "end":
		return ExecFromEnd, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > MaxExecOffset {
		return 0, fmt.Errorf("from %.32q: %w: want a byte offset from 0 to %d, or end", v, vfs.ErrInvalid, int64(MaxExecOffset))
	}
	return n, nil
}
