package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Sync states of an exec bracket.
const (
	SyncComplete = "complete" // the post-command pull committed
	SyncPending  = "pending"  // it failed or ran out of time; the background puller goes on with it
	SyncDeferred = "deferred" // the caller asked not to wait (SyncDefer): it runs after the reply
)

// TickReport is what a tick (pull from every runtime, then push to every
// runtime) moved. Pulled and Pushed are the default runtime's, as before a
// workspace had several; Runtimes has each runtime the tick synced.
type TickReport struct {
	Pulled   SyncReport    `json:"pulled"`
	Pushed   SyncReport    `json:"pushed"`
	Runtimes []RuntimeTick `json:"runtimes,omitempty"`
}

// RuntimeTick is what a tick moved for one runtime; Error is why its pull
// or push failed.
type RuntimeTick struct {
	Runtime string     `json:"runtime"`
	Pulled  SyncReport `json:"pulled"`
	Pushed  SyncReport `json:"pushed"`
	Error   string     `json:"error,omitempty"`
}

// ExecReport is the outcome of an exec bracket: push, command, pull.
type ExecReport struct {
	ExecResult
	// Events is the command's output, when Exec was called without an out
	// callback; bounded by Options.MaxExecOutput.
	Events          []ExecEvent `json:"events,omitempty"`
	OutputTruncated bool        `json:"output_truncated,omitempty"`
	Pushed          SyncReport  `json:"pushed"`
	Pulled          SyncReport  `json:"pulled"`
	// Sync is SyncComplete or SyncPending; SyncError is the pull's error
	// when pending. Neither changes the command's own result.
	Sync      string `json:"sync"`
	SyncError string `json:"sync_error,omitempty"`
	// Conflicts is Pulled.Conflicts: the conflicts the pull after the
	// command recorded.
	Conflicts int `json:"conflicts,omitempty"`
}

// Target is one runtime of a workspace as the target of the calls that
// sync with one: push, pull, exec, verify, repair, status. The
// Workspace's own methods of those names are its default runtime's.
type Target struct {
	w    *Workspace
	name string
}

// On names the runtime the calls of the Target go to; "" is the default
// runtime. The name is resolved by each call: one the workspace does not
// have fails it with ErrNoRuntime.
func (w *Workspace) On(runtime string) Target {
	if runtime == "" {
		runtime = DefaultRuntime
	}
	return Target{w: w, name: runtime}
}

// Push is On(DefaultRuntime).Push.
func (w *Workspace) Push(ctx context.Context) (SyncReport, error) {
	return w.On(DefaultRuntime).Push(ctx)
}

// Pull is On(DefaultRuntime).Pull.
func (w *Workspace) Pull(ctx context.Context) (SyncReport, error) {
	return w.On(DefaultRuntime).Pull(ctx)
}

// Verify is On(DefaultRuntime).Verify.
func (w *Workspace) Verify(ctx context.Context) (VerifyReport, error) {
	return w.On(DefaultRuntime).Verify(ctx)
}

// Repair is On(DefaultRuntime).Repair.
func (w *Workspace) Repair(ctx context.Context) (VerifyReport, error) {
	return w.On(DefaultRuntime).Repair(ctx)
}

// Exec is On(DefaultRuntime).Exec.
func (w *Workspace) Exec(ctx context.Context, spec ExecSpec, out func(ExecEvent)) (ExecReport, error) {
	return w.On(DefaultRuntime).Exec(ctx, spec, out)
}

// Push runs a push to the runtime through the FIFO. While a pull from it
// is pending (its container has changes the server has not pulled), the
// push first completes that pull in the same turn; if the pull fails again
// the push fails with ErrPendingPull and the container is not written, so
// a push never replaces what the container wrote and the server has not
// seen.
func (t Target) Push(ctx context.Context) (SyncReport, error) {
	var rep SyncReport
	err := t.w.inTurn(ctx, "", t.name, func(rs *runtimeState, r Remote) (err error) {
		rep, err = t.w.settledPush(ctx, rs, r)
		return err
	})
	return rep, err
}

// Pull runs a pull from the runtime through the FIFO with the workspace's
// ignore list. A successful pull from the container runtime that ran a
// command with a pending pull clears it; one that recorded conflicts
// pushes in the same turn (pullSettling).
func (t Target) Pull(ctx context.Context) (SyncReport, error) {
	return t.PullWith(ctx, PullOptions{})
}

// PullWith is Pull with opts: a pull that may delete more than the
// server's deletion safety allows (the confirmation of a paused one), or
// with its own bounds.
func (t Target) PullWith(ctx context.Context, opts PullOptions) (SyncReport, error) {
	if err := opts.MassDelete.check(); err != nil {
		return SyncReport{}, fmt.Errorf("pull: %w", err)
	}
	var rep SyncReport
	var rs *runtimeState
	err := t.w.inTurn(ctx, "", t.name, func(s *runtimeState, r Remote) (err error) {
		rs = s
		rep, err = t.w.pullSettling(ctx, rs, r, PendingPull{}, opts)
		return err
	})
	if err == nil {
		t.w.verifyAfterSync(ctx, rs)
	}
	return rep, err
}

// Tick syncs every runtime that has an endpoint in one FIFO turn: it pulls
// from each (the default runtime first, then by name), then pushes to each,
// so what one container wrote reaches the others in the same turn and a
// push never races a container's writes. A runtime whose pull failed is
// not pushed to; the others are. The error joins the runtimes' failures.
func (w *Workspace) Tick(ctx context.Context) (TickReport, error) {
	var rep TickReport
	w.stateMu.Lock()
	all := w.sortedLocked()
	w.stateMu.Unlock()
	var rss []*runtimeState
	for _, rs := range all {
		if rs.rt.Endpoint != "" {
			rss = append(rss, rs)
		}
	}
	if len(rss) == 0 {
		rss = all[:1] // the default runtime: remoteFor says why there is no remote
	}
	// A runtime whose remote cannot be built (an unreadable token file,
	// say) fails alone: the others still sync.
	rems := make([]Remote, len(rss))
	built := make([]error, len(rss))
	for i, rs := range rss {
		rems[i], built[i] = w.remoteFor(rs)
	}
	if len(rss) == 1 && built[0] != nil {
		return rep, built[0]
	}
	var synced []*runtimeState
	err := w.q.Do(ctx, func() error {
		ctx, sp := w.beginSync(ctx, nil, "tick")
		rep.Runtimes = make([]RuntimeTick, len(rss))
		errs := make([]error, len(rss))
		for i, rs := range rss {
			rep.Runtimes[i].Runtime = rs.rt.Name
			if errs[i] = built[i]; errs[i] == nil {
				rep.Runtimes[i].Pulled, errs[i] = w.pull(ctx, rs, rems[i], PendingPull{})
			}
		}
		for i, rs := range rss {
			if errs[i] == nil {
				rep.Runtimes[i].Pushed, errs[i] = w.push(ctx, rs, rems[i])
			}
			if errs[i] != nil {
				rep.Runtimes[i].Error = errs[i].Error()
				if !rs.rt.isDefault() {
					errs[i] = fmt.Errorf("runtime %q: %w", rs.rt.Name, errs[i])
				}
			} else {
				synced = append(synced, rs)
			}
			if rs.rt.isDefault() {
				rep.Pulled, rep.Pushed = rep.Runtimes[i].Pulled, rep.Runtimes[i].Pushed
			}
		}
		err := errors.Join(errs...)
		sp.finish(tickTotal(rep), err)
		return err
	})
	metricSyncs.WithLabelValues("tick", result(err)).Inc()
	for _, rs := range synced {
		w.verifyAfterSync(ctx, rs)
	}
	return rep, err
}

// inTurn runs fn with the runtime's remote in one FIFO turn. With a metric
// name the turn's outcome is counted under it (a runtime without a remote
// is not: it never queued).
func (w *Workspace) inTurn(ctx context.Context, metric, runtime string, fn func(rs *runtimeState, r Remote) error) error {
	rs, err := w.state(runtime)
	if err != nil {
		return err
	}
	r, err := w.remoteFor(rs)
	if err != nil {
		return err
	}
	err = w.q.Do(ctx, func() error { return fn(rs, r) })
	if metric != "" {
		metricSyncs.WithLabelValues(metric, result(err)).Inc()
	}
	return err
}

// settledPush is a push that first completes a pending pull (settlePending):
// it never replaces what the container wrote and the server has not seen.
func (w *Workspace) settledPush(ctx context.Context, rs *runtimeState, r Remote) (SyncReport, error) {
	if err := w.settlePending(ctx, rs, r); err != nil {
		return SyncReport{}, err
	}
	return w.push(ctx, rs, r)
}

// Verify asks the runtime's remote for a convergence verdict, through the
// FIFO so it never compares a tree halfway through a sync.
func (t Target) Verify(ctx context.Context) (VerifyReport, error) {
	rs, err := t.w.state(t.name)
	if err != nil {
		return VerifyReport{}, err
	}
	return t.w.verify(ctx, rs, false)
}

// Repairer is a Remote that can also repair drift (verify --repair): walk
// both trees as Verify does, re-send the winning side's entries for every
// differing path, and report the verdict afterwards. opts.Progress, when
// set, is told after each batch the repair moves; the rest of opts is
// unused.
type Repairer interface {
	Repair(ctx context.Context, opts SyncOptions) (VerifyReport, error)
}

// Repair is verify --repair against the runtime, through the FIFO like
// every sync.
func (t Target) Repair(ctx context.Context) (VerifyReport, error) {
	rs, err := t.w.state(t.name)
	if err != nil {
		return VerifyReport{}, err
	}
	return t.w.verify(ctx, rs, true)
}

// verifyAfterSync checks the runtime's convergence after a sync when the
// server asks for it (Options.VerifyAfterSync). Drift is logged and
// reported by Status; it does not fail the sync.
func (w *Workspace) verifyAfterSync(ctx context.Context, rs *runtimeState) {
	if !w.m.opts.VerifyAfterSync {
		return
	}
	rep, err := w.verify(ctx, rs, false)
	switch {
	case errors.Is(err, ErrNotSupported):
	case err != nil:
		rs.log.Warn("verify after sync", "err", err)
	case !rep.Converged:
		rs.log.Warn("diverged after sync", "differences", rep.Differences)
	}
}

func (w *Workspace) verify(ctx context.Context, rs *runtimeState, repair bool) (VerifyReport, error) {
	r, err := w.remoteFor(rs)
	if err != nil {
		return VerifyReport{}, err
	}
	op := r.Verify
	if repair {
		rp, ok := r.(Repairer)
		if !ok {
			return VerifyReport{}, fmt.Errorf("repair: %w", ErrNotSupported)
		}
		op = func(ctx context.Context) (VerifyReport, error) {
			return rp.Repair(ctx, SyncOptions{Progress: w.progress(ctx, rs)})
		}
	}
	var rep VerifyReport
	err = w.q.Do(ctx, func() error {
		if repair {
			// A repair re-sends the server's side of differing paths: it
			// writes to the container like a push.
			if err := w.m.fence(w.cfg.Name); err != nil {
				return err
			}
			if err := w.settlePending(ctx, rs, r); err != nil {
				return err
			}
		}
		rep, err = op(ctx)
		return err
	})
	name := "verify"
	if repair {
		name = "repair"
	}
	metricSyncs.WithLabelValues(name, result(err)).Inc()
	w.publishVerify(rs, repair, rep, err)
	if err != nil {
		return rep, err
	}
	if !rep.Converged {
		metricDiverged.Inc()
	}
	w.stateMu.Lock()
	rs.lastVerify = clonePtr(&rep)
	w.stateMu.Unlock()
	return rep, nil
}

// push and pull run inside a FIFO turn.

func (w *Workspace) push(ctx context.Context, rs *runtimeState, r Remote) (SyncReport, error) {
	if err := w.m.fence(w.cfg.Name); err != nil {
		return SyncReport{}, err
	}
	ctx, sp := w.beginSync(ctx, rs, "push")
	ignore, err := w.Patterns(ctx)
	if err != nil {
		sp.finish(SyncReport{}, err)
		return SyncReport{}, err
	}
	rep, err := r.Push(ctx, SyncOptions{Ignore: ignore, Progress: w.progress(ctx, rs)})
	w.record(rs, "push", sp.start, rep, err)
	sp.finish(rep, err)
	return rep, err
}

// pull runs a pull inside a FIFO turn. A failed pull leaves a pending
// record (owed, for the exec owed.ExecID ran on owed.RuntimeID when it
// follows a command) that fences pushes to the runtime until a pull from
// it succeeds; a successful one settles the record.
func (w *Workspace) pull(ctx context.Context, rs *runtimeState, r Remote, owed PendingPull) (SyncReport, error) {
	return w.pullBudget(ctx, rs, r, owed, Budget{}, PullOptions{})
}

// pullBudget is pull bounded by budget: one that stops on it with more to
// fetch keeps the runtime owing a pull (a pending record in the running
// state, which fences pushes like a failed one) instead of settling it.
//
// Unless po allows it, the pull carries the deletion guard (massdelete.go):
// one that would delete too much stops before its first deletion, and its
// pending record is paused (PendingPaused) until a pull that allows it.
func (w *Workspace) pullBudget(ctx context.Context, rs *runtimeState, r Remote, owed PendingPull, budget Budget, po PullOptions) (SyncReport, error) {
	ctx, sp := w.beginSync(ctx, rs, "pull")
	ignore, err := w.Patterns(ctx)
	if err != nil {
		sp.finish(SyncReport{}, err)
		return SyncReport{}, err
	}
	opts := SyncOptions{Ignore: ignore, Budget: budget, Progress: w.progress(ctx, rs)}
	if !po.AllowMassDelete {
		md := po.MassDelete
		if md == (MassDeleteOptions{}) {
			// A pull paused under a call's own bounds stays paused under
			// them, whoever pulls next (a push settling it, the next exec).
			w.stateMu.Lock()
			if p := rs.pending; p != nil && p.State == PendingPaused && p.MassDelete != nil {
				md = *p.MassDelete
			}
			w.stateMu.Unlock()
		}
		g, err := w.deleteGuard(ctx, md)
		if err != nil {
			sp.finish(SyncReport{}, err)
			return SyncReport{}, err
		}
		opts.Guard = g
	}
	rep, err := r.Pull(ctx, opts)
	w.record(rs, "pull", sp.start, rep, err)
	sp.finish(rep, err)
	if owed.RuntimeID == "" {
		owed.RuntimeID = rep.RuntimeID
	}
	owed.Pulled, owed.Since = rep.Entries, time.Now().UTC()
	if err != nil {
		// Cut short by its caller or a shutdown, nothing failed: the
		// background puller resumes it without waiting.
		owed.State = PendingRunning
		var md *MassDeleteError
		switch {
		case errors.Is(err, vfs.ErrQuota):
			owed.State, owed.Error = PendingQuota, err.Error()
		case errors.As(err, &md):
			// Paused until confirmed: not retried in the background.
			owed.State, owed.Error, owed.Deletes = PendingPaused, err.Error(), md.Deletes
			owed.MassDelete = &MassDeleteOptions{Share: md.Share, Min: md.Min}
		case ctx.Err() == nil:
			owed.State, owed.Error = PendingFailed, err.Error()
		}
		if serr := w.markPending(rs, owed); serr != nil {
			err = errors.Join(err, serr)
		}
		w.kick(rs)
		return rep, err
	}
	w.stateMu.Lock()
	rs.pulled = true
	w.stateMu.Unlock()
	if rep.More {
		owed.State = PendingRunning
		if serr := w.markPending(rs, owed); serr != nil {
			rs.log.Warn("pull in slices: the registry does not record the rest as owed", "err", serr)
		}
		return rep, nil
	}
	w.resolvePending(rs, rep.RuntimeID)
	return rep, nil
}

// pullSettling is a pull (inside a FIFO turn) that, when it recorded
// conflicts, pushes to the runtime in the same turn: its container gets
// the server's version and the conflict copy at once, not at the next
// sync. That push failing does not fail the pull: it is recorded (and
// logged) as the runtime's last push, and the next push sends the same.
// A tick needs none of it: its pushes follow its pulls.
func (w *Workspace) pullSettling(ctx context.Context, rs *runtimeState, r Remote, owed PendingPull, po PullOptions) (SyncReport, error) {
	rep, err := w.pullBudget(ctx, rs, r, owed, Budget{}, po)
	if err == nil && rep.Conflicts > 0 {
		w.push(ctx, rs, r)
	}
	return rep, err
}

func (w *Workspace) record(rs *runtimeState, op string, start time.Time, rep SyncReport, err error) {
	d := time.Since(start)
	metricSyncs.WithLabelValues(op, result(err)).Inc()
	metricSyncSeconds.WithLabelValues(op).Observe(d.Seconds())
	rec := &SyncRecord{At: start.UTC(), Report: rep}
	if err != nil {
		rec.Error = err.Error()
		rs.log.Warn(op+" failed", "err", err, "duration", d)
	} else {
		metricEntries.WithLabelValues(op).Add(float64(rep.Entries))
		metricBytes.WithLabelValues(op).Add(float64(rep.Bytes))
		rs.log.Debug(op, "entries", rep.Entries, "objects", rep.Objects, "bytes", rep.Bytes, "duration", d, "rebaselined", rep.Rebaselined)
	}
	w.stateMu.Lock()
	if op == "push" {
		rs.lastPush = rec
	} else {
		rs.lastPull = rec
	}
	w.stateMu.Unlock()
}

// settlePending runs inside a FIFO turn before anything that writes to
// the runtime's container: with a pull from it pending, or none yet since
// the workspace was opened (a server that stopped mid-command never
// recorded the pull it owed), it pulls first, and when that fails it
// refuses with ErrPendingPull (wrapping the pull's error).
func (w *Workspace) settlePending(ctx context.Context, rs *runtimeState, r Remote) error {
	w.stateMu.Lock()
	owed := rs.pending != nil || !rs.pulled
	w.stateMu.Unlock()
	if !owed {
		return nil
	}
	if _, err := w.pull(ctx, rs, r, PendingPull{}); err != nil {
		return fmt.Errorf("%w: %w", ErrPendingPull, err)
	}
	return nil
}

// markPending records (or updates) the runtime's pending pull and
// persists it in the registry, so the fence survives a restart. The first
// time is kept, and the entries pulled so far and the failed attempts add
// up; the exec and runtime are the latest known.
func (w *Workspace) markPending(rs *runtimeState, p PendingPull) error {
	return w.updatePending(rs, func(old *PendingPull) *PendingPull {
		if p.State == PendingFailed {
			p.Attempts = 1
		}
		if old != nil {
			p.Since = old.Since
			p.Pulled += old.Pulled
			p.Attempts += old.Attempts
			if p.ExecID == "" {
				p.ExecID, p.RuntimeID = old.ExecID, cmp.Or(old.RuntimeID, p.RuntimeID)
			}
		}
		return &p
	})
}

// resolvePending settles the runtime's pending pull after a successful
// pull from its container runtime runtimeID. The same container runtime
// (or an unknown one): the command's writes are in. Another: the container
// restarted since the command ran; what it wrote is whatever the new
// container runtime still holds (that pull fetched it), and the record is
// reported as abandoned rather than completed.
func (w *Workspace) resolvePending(rs *runtimeState, runtimeID string) {
	var done *PendingPull
	err := w.updatePending(rs, func(old *PendingPull) *PendingPull {
		done = old
		return nil
	})
	if done == nil {
		return
	}
	if err != nil {
		// The pull committed; a registry that still says pending costs one
		// extra pull after a restart, nothing more.
		rs.log.Warn("pending pull completed but the registry still records it", "err", err)
	}
	if done.RuntimeID != "" && runtimeID != "" && done.RuntimeID != runtimeID {
		w.stateMu.Lock()
		rs.abandoned = done
		w.stateMu.Unlock()
		rs.log.Warn("pending pull abandoned: container runtime changed", "exec", done.ExecID, "ran_on", done.RuntimeID, "now", runtimeID)
		w.publish(rs, EventPendingCleared, PendingEvent{PendingPull: *done, Outcome: "abandoned"})
		return
	}
	rs.log.Info("pending pull completed", "exec", done.ExecID)
	w.publish(rs, EventPendingCleared, PendingEvent{PendingPull: *done, Outcome: "completed"})
}

// updatePending replaces the runtime's pending record with f(old) and,
// when it changed, writes the registry. Lock order: m.mu, then stateMu.
func (w *Workspace) updatePending(rs *runtimeState, f func(old *PendingPull) *PendingPull) error {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.stateMu.Lock()
	if w.runtimes[rs.rt.Name] != rs {
		// Detached (a pull that was under way ends after it): the
		// registry has forgotten the runtime, and so does its record.
		w.stateMu.Unlock()
		return nil
	}
	old := rs.pending
	rs.pending = f(old)
	now := rs.pending
	w.stateMu.Unlock()
	if now != nil && (old == nil || old.State != now.State || old.Attempts != now.Attempts) {
		w.publish(rs, EventPending, PendingEvent{PendingPull: *now}) // not every slice of a pull in slices
	}
	switch {
	case old == nil && now == nil:
		return nil
	case old == nil:
		metricPending.Inc()
	case now == nil:
		metricPending.Dec()
	}
	if w.m.closed {
		return ErrClosed
	}
	if err := w.m.saveLocked(); err != nil {
		return fmt.Errorf("pending pull: %w", err)
	}
	return nil
}

// Exec runs the seed's exec bracket on the runtime: push (through the FIFO; a failure
// fails the exec and nothing is spawned), the command (outside the FIFO,
// output passed to out as the container produces it), then a pull through
// the FIFO. The pull runs even if ctx ends while the command runs, bounded
// by Options.PullTimeout, so what the command wrote comes back. A failed
// pull leaves the command's result as it is and marks the report (and the
// workspace) pending; the next sync or an explicit Pull retries it.
//
// With a nil out the output is collected in the report instead.
//
// The error is non-nil when the push failed (wrapping ErrPushFailed) or the
// remote could not run the command or report its end; in the second case
// the pull still ran and the report says how it went.
func (t Target) Exec(ctx context.Context, spec ExecSpec, out func(ExecEvent)) (ExecReport, error) {
	w := t.w
	start := time.Now()
	var rep ExecReport
	if err := checkExecSpec(spec); err != nil {
		return rep, err
	}
	if err := w.acquireExec(); err != nil {
		return rep, err
	}
	rs, r, pushed, err := t.beforeCommand(ctx, spec)
	rep.Pushed = pushed
	if err != nil {
		w.releaseExec()
		return rep, err
	}

	if out == nil {
		out = w.collector(&rep)
	}
	w.publishExecStarted(rs, "", spec)
	res, execErr := r.Exec(ctx, spec, out)
	w.releaseExec()
	w.publishExecExited(rs, res, execErr)
	rep.ExecResult = res
	runtime := res.RuntimeID
	if runtime == "" {
		runtime = rep.Pushed.RuntimeID
	}

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.m.opts.PullTimeout)
	defer cancel()
	rep.Pulled, rep.Sync, rep.SyncError = w.afterCommand(pctx, rs, r, res, runtime, spec.Sync)
	rep.Conflicts = rep.Pulled.Conflicts
	metricExecSeconds.Observe(time.Since(start).Seconds())
	if execErr != nil {
		metricExecs.WithLabelValues("error").Inc()
		return rep, fmt.Errorf("exec: %w", execErr)
	}
	metricExecs.WithLabelValues("ok").Inc()
	rs.log.Info("exec", "exec", res.ExecID, "code", res.ExitCode, "signal", res.Signal,
		"pushed", rep.Pushed.Entries, "pulled", rep.Pulled.Entries, "sync", rep.Sync, "duration", time.Since(start))
	return rep, nil
}

// beforeCommand is the first half of the bracket: it checks spec, finds
// the runtime and its remote and pushes through the FIFO (settling a
// pending pull first). A failed push fails with ErrPushFailed: nothing may
// be spawned.
func (t Target) beforeCommand(ctx context.Context, spec ExecSpec) (*runtimeState, Remote, SyncReport, error) {
	if err := checkExecSpec(spec); err != nil {
		return nil, nil, SyncReport{}, err
	}
	rs, err := t.w.state(t.name)
	if err != nil {
		return nil, nil, SyncReport{}, err
	}
	r, err := t.w.remoteFor(rs)
	if err != nil {
		return nil, nil, SyncReport{}, err
	}
	var pushed SyncReport
	err = t.w.q.Do(ctx, func() error {
		pushed, err = t.w.settledPush(ctx, rs, r)
		return err
	})
	if err != nil {
		metricExecs.WithLabelValues("push_failed").Inc()
		return nil, nil, pushed, fmt.Errorf("exec: %w: %w", ErrPushFailed, err)
	}
	return rs, r, pushed, nil
}

// checkExecSpec refuses a spec the container would refuse, before anything
// is synced for it.
func checkExecSpec(spec ExecSpec) error {
	if (len(spec.Argv) == 0) == (spec.Shell == "") {
		return fmt.Errorf("exec: %w: give exactly one of argv and shell", vfs.ErrInvalid)
	}
	if _, err := vfs.CleanAPIPath(spec.Cwd); err != nil {
		return fmt.Errorf("exec: cwd: %w", err)
	}
	if spec.Timeout < 0 {
		return fmt.Errorf("exec: %w: negative timeout", vfs.ErrInvalid)
	}
	if spec.LogCap < 0 || spec.LogCap > MaxExecLogCap {
		return fmt.Errorf("exec: %w: log cap %d (0 to %d)", vfs.ErrInvalid, spec.LogCap, int64(MaxExecLogCap))
	}
	if spec.Sync != "" && spec.Sync != SyncWait && spec.Sync != SyncDefer {
		return fmt.Errorf("exec: %w: sync %q is neither %q nor %q", vfs.ErrInvalid, spec.Sync, SyncWait, SyncDefer)
	}
	if err := checkExecSizes(spec); err != nil {
		return err
	}
	for _, e := range spec.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("exec: %w: env entry %q is not K=V", vfs.ErrInvalid, e)
		}
	}
	return nil
}

// afterCommand is the second half of the bracket: the pull a command owes
// its runtime (res.ExecID ran on runtime). It is skipped when the command
// changed nothing (fetchedThrough). With mode SyncDefer it is recorded as
// owed (persisted) and left to the background puller, and afterCommand
// returns at once with SyncDeferred. Otherwise it runs in slices
// (slicedPull) until done or ctx ends; what is left, or a slice that
// failed, stays owed and the background puller goes on with it
// (SyncPending, with the error).
func (w *Workspace) afterCommand(ctx context.Context, rs *runtimeState, r Remote, res ExecResult, runtime, mode string) (pulled SyncReport, state, syncErr string) {
	owed := PendingPull{ExecID: res.ExecID, RuntimeID: runtime}
	if mode == SyncDefer {
		pulled = SyncReport{RuntimeID: runtime}
		if w.fetchedThrough(ctx, rs, res) {
			metricPullsSkipped.Inc()
			return pulled, SyncComplete, ""
		}
		if err := w.owe(rs, owed); err != nil {
			return pulled, SyncPending, err.Error()
		}
		return pulled, SyncDeferred, ""
	}
	pulled, done, err := w.slicedPull(ctx, rs, r, owed, &res)
	if done {
		w.verifyAfterSync(ctx, rs)
		return pulled, SyncComplete, ""
	}
	return pulled, SyncPending, err.Error()
}

// fetchedThrough reports, inside the FIFO turn after a command, whether
// the pull it owes would fetch nothing: the remote reported the
// container's feed head after the command, no pull from the runtime is
// pending (nor owed since the workspace was opened), and the server's
// fetch cursor for the runtime covers that head. Everything the command
// wrote has a rev at or below the head, so it is already here; a write it
// made past the head (a process it left behind) waits for the next sync,
// as it would after a pull. A cursor that cannot be read is no proof: the
// bracket pulls.
func (w *Workspace) fetchedThrough(ctx context.Context, rs *runtimeState, res ExecResult) bool {
	if !res.HasHead {
		return false
	}
	w.stateMu.Lock()
	owed := rs.pending != nil || !rs.pulled
	w.stateMu.Unlock()
	if owed {
		return false
	}
	s, err := w.Store(ctx)
	if err != nil {
		return false
	}
	ws, err := s.Watermarks(ctx, rs.rt.Peer())
	if err != nil {
		return false
	}
	return ws.Fetch.Covers(watermark.At(res.Head))
}

// Exec request limits: what the container accepts in one exec request
// (execrpc's MaxStdin, MaxArgs, MaxStrLen), checked before the push, so a
// request the container would refuse neither syncs nor reaches the wire.
const (
	MaxExecStdin  = 512 << 10
	MaxExecArgs   = 4096 // argv entries, and env entries
	MaxExecStrLen = 128 << 10
	// MaxExecLogCap bounds ExecSpec.LogCap; computerd refuses more than
	// its own cap (8 MiB by default) anyway.
	MaxExecLogCap = 1 << 40
)

func checkExecSizes(spec ExecSpec) error {
	if len(spec.Stdin) > MaxExecStdin {
		return fmt.Errorf("exec: %w: stdin of %d bytes (at most %d)", vfs.ErrInvalid, len(spec.Stdin), MaxExecStdin)
	}
	if len(spec.Argv) > MaxExecArgs || len(spec.Env) > MaxExecArgs {
		return fmt.Errorf("exec: %w: %d argv and %d env entries (at most %d each)", vfs.ErrInvalid, len(spec.Argv), len(spec.Env), MaxExecArgs)
	}
	for _, list := range [][]string{spec.Argv, spec.Env, {spec.Shell, spec.Cwd}} {
		for _, a := range list {
			if len(a) > MaxExecStrLen {
				return fmt.Errorf("exec: %w: an argument of %d bytes (at most %d)", vfs.ErrInvalid, len(a), MaxExecStrLen)
			}
		}
	}
	return nil
}

// collector keeps output in the report up to the manager's bound.
func (w *Workspace) collector(rep *ExecReport) func(ExecEvent) {
	left := w.m.opts.MaxExecOutput
	return func(ev ExecEvent) {
		if len(ev.Data) > left {
			ev.Data = ev.Data[:left]
			rep.OutputTruncated = true
		}
		if len(ev.Data) == 0 {
			return
		}
		left -= len(ev.Data)
		rep.Events = append(rep.Events, ExecEvent{Stream: ev.Stream, Data: append([]byte(nil), ev.Data...)})
	}
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}
