package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wsync/wsync/vfs"
)

// Sync states of an exec bracket.
const (
	SyncComplete = "complete" // the post-command pull committed
	SyncPending  = "pending"  // it failed; the next sync or pull retries it
)

// TickReport is what a tick (pull, then push) moved.
type TickReport struct {
	Pulled SyncReport `json:"pulled"`
	Pushed SyncReport `json:"pushed"`
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
}

// Push runs a push through the FIFO. While a pull is pending (the
// container has changes the server has not pulled), the push first
// completes that pull in the same turn; if the pull fails again the push
// fails with ErrPendingPull and the container is not written, so a push
// never replaces what the container wrote and the server has not seen.
func (w *Workspace) Push(ctx context.Context) (SyncReport, error) {
	var rep SyncReport
	err := w.inTurn(ctx, "", func(r Remote) (err error) {
		rep, err = w.settledPush(ctx, r)
		return err
	})
	return rep, err
}

// Pull runs a pull through the FIFO with the workspace's ignore list. A
// successful pull from the runtime that ran a command with a pending pull
// clears it.
func (w *Workspace) Pull(ctx context.Context) (SyncReport, error) {
	var rep SyncReport
	err := w.inTurn(ctx, "", func(r Remote) (err error) {
		rep, err = w.pull(ctx, r, PendingPull{})
		return err
	})
	if err == nil {
		w.verifyAfterSync(ctx)
	}
	return rep, err
}

// Tick pulls, then pushes, in one FIFO turn: absorbing the container's
// writes first keeps a push from racing them. A failed pull skips the push.
func (w *Workspace) Tick(ctx context.Context) (TickReport, error) {
	var rep TickReport
	err := w.inTurn(ctx, "tick", func(r Remote) (err error) {
		if rep.Pulled, err = w.pull(ctx, r, PendingPull{}); err != nil {
			return err
		}
		rep.Pushed, err = w.push(ctx, r)
		return err
	})
	if err == nil {
		w.verifyAfterSync(ctx)
	}
	return rep, err
}

// inTurn runs fn with the workspace's remote in one FIFO turn. With a
// metric name the turn's outcome is counted under it (a workspace without
// a remote is not: it never queued).
func (w *Workspace) inTurn(ctx context.Context, metric string, fn func(r Remote) error) error {
	r, err := w.remoteFor()
	if err != nil {
		return err
	}
	err = w.q.Do(ctx, func() error { return fn(r) })
	if metric != "" {
		metricSyncs.WithLabelValues(metric, result(err)).Inc()
	}
	return err
}

// settledPush is a push that first completes a pending pull (settlePending):
// it never replaces what the container wrote and the server has not seen.
func (w *Workspace) settledPush(ctx context.Context, r Remote) (SyncReport, error) {
	if err := w.settlePending(ctx, r); err != nil {
		return SyncReport{}, err
	}
	return w.push(ctx, r)
}

// Verify asks the remote for a convergence verdict, through the FIFO so it
// never compares a tree halfway through a sync.
func (w *Workspace) Verify(ctx context.Context) (VerifyReport, error) {
	return w.verify(ctx, false)
}

// Repairer is a Remote that can also repair drift (verify --repair): walk
// both trees as Verify does, re-send the winning side's entries for every
// differing path, and report the verdict afterwards.
type Repairer interface {
	Repair(ctx context.Context) (VerifyReport, error)
}

// Repair is verify --repair, through the FIFO like every sync.
func (w *Workspace) Repair(ctx context.Context) (VerifyReport, error) {
	return w.verify(ctx, true)
}

// verifyAfterSync checks convergence after a sync when the server asks for
// it (Options.VerifyAfterSync). Drift is logged and reported by Status; it
// does not fail the sync.
func (w *Workspace) verifyAfterSync(ctx context.Context) {
	if !w.m.opts.VerifyAfterSync {
		return
	}
	rep, err := w.verify(ctx, false)
	switch {
	case errors.Is(err, ErrNotSupported):
	case err != nil:
		w.log.Warn("verify after sync", "err", err)
	case !rep.Converged:
		w.log.Warn("diverged after sync", "differences", rep.Differences)
	}
}

func (w *Workspace) verify(ctx context.Context, repair bool) (VerifyReport, error) {
	r, err := w.remoteFor()
	if err != nil {
		return VerifyReport{}, err
	}
	op := r.Verify
	if repair {
		rp, ok := r.(Repairer)
		if !ok {
			return VerifyReport{}, fmt.Errorf("repair: %w", ErrNotSupported)
		}
		op = rp.Repair
	}
	var rep VerifyReport
	err = w.q.Do(ctx, func() error {
		if repair {
			// A repair re-sends the server's side of differing paths: it
			// writes to the container like a push.
			if err := w.settlePending(ctx, r); err != nil {
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
	if err != nil {
		return rep, err
	}
	if !rep.Converged {
		metricDiverged.Inc()
	}
	w.stateMu.Lock()
	w.lastVerify = clonePtr(&rep)
	w.stateMu.Unlock()
	return rep, nil
}

// push and pull run inside a FIFO turn.

func (w *Workspace) push(ctx context.Context, r Remote) (SyncReport, error) {
	start := time.Now()
	rep, err := r.Push(ctx)
	w.record("push", start, rep, err)
	return rep, err
}

// pull runs a pull inside a FIFO turn. A failed pull leaves a pending
// record (owed, for the exec owed.ExecID ran on owed.RuntimeID when it
// follows a command) that fences pushes until a pull succeeds; a
// successful one settles the record.
func (w *Workspace) pull(ctx context.Context, r Remote, owed PendingPull) (SyncReport, error) {
	start := time.Now()
	rep, err := r.Pull(ctx, w.IgnoreList())
	w.record("pull", start, rep, err)
	if err != nil {
		if owed.RuntimeID == "" {
			owed.RuntimeID = rep.RuntimeID
		}
		owed.Error, owed.Since = err.Error(), time.Now().UTC()
		if serr := w.markPending(owed); serr != nil {
			err = errors.Join(err, serr)
		}
		return rep, err
	}
	w.stateMu.Lock()
	w.pulled = true
	w.stateMu.Unlock()
	w.resolvePending(rep.RuntimeID)
	return rep, nil
}

func (w *Workspace) record(op string, start time.Time, rep SyncReport, err error) {
	d := time.Since(start)
	metricSyncs.WithLabelValues(op, result(err)).Inc()
	metricSyncSeconds.WithLabelValues(op).Observe(d.Seconds())
	rec := &SyncRecord{At: start.UTC(), Report: rep}
	if err != nil {
		rec.Error = err.Error()
		w.log.Warn(op+" failed", "err", err, "duration", d)
	} else {
		metricEntries.WithLabelValues(op).Add(float64(rep.Entries))
		metricBytes.WithLabelValues(op).Add(float64(rep.Bytes))
		w.log.Debug(op, "entries", rep.Entries, "objects", rep.Objects, "bytes", rep.Bytes, "duration", d, "rebaselined", rep.Rebaselined)
	}
	w.stateMu.Lock()
	if op == "push" {
		w.lastPush = rec
	} else {
		w.lastPull = rec
	}
	w.stateMu.Unlock()
}

// settlePending runs inside a FIFO turn before anything that writes to
// the container: with a pull pending, or none yet since the workspace was
// opened (a server that stopped mid-command never recorded the pull it
// owed), it pulls first, and when that fails it refuses with
// ErrPendingPull (wrapping the pull's error).
func (w *Workspace) settlePending(ctx context.Context, r Remote) error {
	w.stateMu.Lock()
	owed := w.pending != nil || !w.pulled
	w.stateMu.Unlock()
	if !owed {
		return nil
	}
	if _, err := w.pull(ctx, r, PendingPull{}); err != nil {
		return fmt.Errorf("%w: %w", ErrPendingPull, err)
	}
	return nil
}

// markPending records (or updates) the pending pull and persists it in the
// registry, so the fence survives a restart. The first failure's time is
// kept; the exec and runtime are the latest known.
func (w *Workspace) markPending(p PendingPull) error {
	return w.updatePending(func(old *PendingPull) *PendingPull {
		if old != nil {
			p.Since = old.Since
			if p.ExecID == "" {
				p.ExecID, p.RuntimeID = old.ExecID, cmp.Or(old.RuntimeID, p.RuntimeID)
			}
		}
		return &p
	})
}

// resolvePending settles the pending pull after a successful pull from
// runtime. The same runtime (or an unknown one): the command's writes are
// in. Another runtime: the container restarted since the command ran; what
// it wrote is whatever the new runtime still holds (that pull fetched it),
// and the record is reported as abandoned rather than completed.
func (w *Workspace) resolvePending(runtime string) {
	var done *PendingPull
	err := w.updatePending(func(old *PendingPull) *PendingPull {
		done = old
		return nil
	})
	if done == nil {
		return
	}
	if err != nil {
		// The pull committed; a registry that still says pending costs one
		// extra pull after a restart, nothing more.
		w.log.Warn("pending pull completed but the registry still records it", "err", err)
	}
	if done.RuntimeID != "" && runtime != "" && done.RuntimeID != runtime {
		w.stateMu.Lock()
		w.abandoned = done
		w.stateMu.Unlock()
		w.log.Warn("pending pull abandoned: container runtime changed", "exec", done.ExecID, "ran_on", done.RuntimeID, "now", runtime)
		return
	}
	w.log.Info("pending pull completed", "exec", done.ExecID)
}

// updatePending replaces the pending record with f(old) and, when it
// changed, writes the registry. Lock order: m.mu, then stateMu.
func (w *Workspace) updatePending(f func(old *PendingPull) *PendingPull) error {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.stateMu.Lock()
	old := w.pending
	w.pending = f(old)
	now := w.pending
	w.stateMu.Unlock()
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

// Exec runs the seed's exec bracket: push (through the FIFO; a failure
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
func (w *Workspace) Exec(ctx context.Context, spec ExecSpec, out func(ExecEvent)) (ExecReport, error) {
	start := time.Now()
	var rep ExecReport
	if (len(spec.Argv) == 0) == (spec.Shell == "") {
		return rep, fmt.Errorf("exec: %w: give exactly one of argv and shell", vfs.ErrInvalid)
	}
	if _, err := vfs.CleanAPIPath(spec.Cwd); err != nil {
		return rep, fmt.Errorf("exec: cwd: %w", err)
	}
	if spec.Timeout < 0 {
		return rep, fmt.Errorf("exec: %w: negative timeout", vfs.ErrInvalid)
	}
	if err := checkExecSizes(spec); err != nil {
		return rep, err
	}
	for _, e := range spec.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return rep, fmt.Errorf("exec: %w: env entry %q is not K=V", vfs.ErrInvalid, e)
		}
	}
	r, err := w.remoteFor()
	if err != nil {
		return rep, err
	}
	err = w.q.Do(ctx, func() error {
		rep.Pushed, err = w.settledPush(ctx, r)
		return err
	})
	if err != nil {
		metricExecs.WithLabelValues("push_failed").Inc()
		return rep, fmt.Errorf("exec: %w: %w", ErrPushFailed, err)
	}

	if out == nil {
		out = w.collector(&rep)
	}
	res, execErr := r.Exec(ctx, spec, out)
	rep.ExecResult = res
	runtime := res.RuntimeID
	if runtime == "" {
		runtime = rep.Pushed.RuntimeID
	}

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.m.opts.PullTimeout)
	defer cancel()
	ran := false
	pullErr := w.q.Do(pctx, func() error {
		var err error
		ran = true
		rep.Pulled, err = w.pull(pctx, r, PendingPull{ExecID: res.ExecID, RuntimeID: runtime})
		return err
	})
	if pullErr != nil {
		rep.Sync, rep.SyncError = SyncPending, pullErr.Error()
		if !ran {
			// The FIFO turn never came (PullTimeout): pull recorded nothing.
			if err := w.markPending(PendingPull{ExecID: res.ExecID, RuntimeID: runtime, Error: pullErr.Error(), Since: time.Now().UTC()}); err != nil {
				rep.SyncError += "; " + err.Error()
			}
		}
	} else {
		rep.Sync = SyncComplete
		w.verifyAfterSync(pctx)
	}
	metricExecSeconds.Observe(time.Since(start).Seconds())
	if execErr != nil {
		metricExecs.WithLabelValues("error").Inc()
		return rep, fmt.Errorf("exec: %w", execErr)
	}
	metricExecs.WithLabelValues("ok").Inc()
	w.log.Info("exec", "exec", res.ExecID, "code", res.ExitCode, "signal", res.Signal,
		"pushed", rep.Pushed.Entries, "pulled", rep.Pulled.Entries, "sync", rep.Sync, "duration", time.Since(start))
	return rep, nil
}

// Exec request limits: what the container accepts in one exec request
// (execrpc's MaxStdin, MaxArgs, MaxStrLen), checked before the push, so a
// request the container would refuse neither syncs nor reaches the wire.
const (
	MaxExecStdin  = 512 << 10
	MaxExecArgs   = 4096 // argv entries, and env entries
	MaxExecStrLen = 128 << 10
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
