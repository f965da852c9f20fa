package workspace

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Post-command pulls run in slices (Options.PullSlice), each one FIFO turn,
// so a command that wrote a huge tree holds the FIFO for one slice at a
// time, not for the whole pull: explicit syncs and other commands' pushes
// take their turns in between. While a slice leaves more to fetch, the
// runtime owes a pull: its pending record (persisted in the registry) says
// so and fences every push to the container, as a failed pull does. What
// the caller does not wait for (a --sync defer exec, the rest of a slice
// loop that ran out of PullTimeout, a failed slice) is finished by the
// runtime's background puller, which retries failed slices with backoff
// and is restarted for every recorded pull when the server starts.

// Default slice and retry bounds (Options.PullSlice, Options.RetryBackoff).
var (
	DefaultPullSlice    = Budget{Entries: 4096, Bytes: 64 << 20, Wall: 2 * time.Second}
	DefaultRetryBackoff = time.Second
)

// maxBackoffFactor caps the background puller's backoff at this multiple
// of Options.RetryBackoff (one minute with the default).
const maxBackoffFactor = 60

// States of a pending pull (PendingPull.State).
const (
	PendingDeferred = "deferred" // an exec's pull that runs after its reply
	PendingRunning  = "running"  // a pull in slices that has more to fetch
	PendingFailed   = "failed"   // its last attempt failed; retried with backoff
	// PendingQuota: the last attempt stopped before a batch the
	// workspace's quota has no room for (quota.go). It is not retried on
	// a timer: SetQuota restarts it, and so does the next sync or exec.
	PendingQuota  = "quota"
	PendingPaused = "paused" // a mass delete held back until confirmed (massdelete.go); not retried
)

// waitsForCaller reports whether the pull waits for someone to act (a
// quota raised, a mass delete confirmed) rather than for a retry: the
// background puller leaves it alone.
func (p *PendingPull) waitsForCaller() bool {
	return p.State == PendingQuota || p.State == PendingPaused
}

// slicedPull pulls from rs in slices, each in a FIFO turn of its own, until
// the container's feed is drained, a slice fails, or ctx ends between two
// slices. owed names the exec the pull follows. The first slice is skipped
// when the command changed nothing (res, fetchedThrough). It returns the
// slices' reports added up; done is false when the pull is still owed (the
// pending record says so and the background puller goes on with it).
func (w *Workspace) slicedPull(ctx context.Context, rs *runtimeState, r Remote, owed PendingPull, res *ExecResult) (sum SyncReport, done bool, err error) {
	sum.RuntimeID = owed.RuntimeID
	start := time.Now()
	defer func() { sum.Duration = time.Since(start) }()
	for first := true; ; first = false {
		var rep SyncReport
		ran := false
		err = w.q.Do(ctx, func() error {
			ran = true
			if first && res != nil && w.fetchedThrough(ctx, rs, *res) {
				metricPullsSkipped.Inc()
				return nil
			}
			var err error
			rep, err = w.pullSliceSettling(ctx, rs, r, owed)
			return err
		})
		sum.add(rep)
		if err != nil {
			if !ran {
				// The turn never came (ctx ended first): the pull recorded
				// nothing, and the background puller takes it from here.
				owed.State, owed.Since = PendingRunning, time.Now().UTC()
				err = errors.Join(err, w.markPending(rs, owed))
				w.kick(rs)
			}
			return sum, false, err
		}
		if !rep.More {
			return sum, true, nil
		}
		if err := ctx.Err(); err != nil {
			w.kick(rs)
			return sum, false, err
		}
	}
}

// pullSliceSettling is one slice of a post-command pull inside a FIFO
// turn: a pull bounded by Options.PullSlice that, when it leaves more to
// fetch, keeps (or makes) the runtime's pending record in the running
// state, so the fence holds and a restart resumes it. A slice that
// recorded conflicts pushes in the same turn (pullSettling).
func (w *Workspace) pullSliceSettling(ctx context.Context, rs *runtimeState, r Remote, owed PendingPull) (SyncReport, error) {
	rep, err := w.pullBudget(ctx, rs, r, owed, w.m.opts.PullSlice, PullOptions{})
	if err == nil && rep.Conflicts > 0 {
		w.push(ctx, rs, r)
	}
	return rep, err
}

// owe records that rs owes the pull after the exec owed names, to be made
// by the background puller (a --sync defer exec), and starts the puller.
// The record is in the registry before owe returns, so a server that dies
// before the pull resumes it when it starts again.
func (w *Workspace) owe(rs *runtimeState, owed PendingPull) error {
	owed.State, owed.Since = PendingDeferred, time.Now().UTC()
	if err := w.markPending(rs, owed); err != nil {
		return err
	}
	w.kick(rs)
	return nil
}

// kick starts rs's background puller unless it runs already. The puller
// runs while the runtime owes a pull, under the workspace's background
// context, which Close cancels (and waits for).
func (w *Workspace) kick(rs *runtimeState) {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	if rs.pulling || rs.pending == nil || rs.pending.State == PendingPaused || w.bgCtx.Err() != nil {
		return
	}
	rs.pulling = true
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		w.backgroundPull(w.bgCtx, rs)
	}()
}

// backgroundPull is the runtime's background puller: slice after slice
// while a pull is owed; after a failed slice it waits (doubling from
// Options.RetryBackoff up to maxBackoffFactor times it, with jitter) and
// tries again. A record that has already failed (one loaded from the
// registry, say) waits one backoff first. It stops when nothing is owed,
// when the runtime is detached, or when the workspace closes.
func (w *Workspace) backgroundPull(ctx context.Context, rs *runtimeState) {
	defer func() {
		w.stateMu.Lock()
		rs.pulling = false
		again := rs.pending != nil && !rs.pending.waitsForCaller() && ctx.Err() == nil && w.runtimes[rs.rt.Name] == rs
		w.stateMu.Unlock()
		if again { // owed again after the loop saw it settled
			w.kick(rs)
		}
	}()
	backoff := w.m.opts.RetryBackoff
	for {
		w.stateMu.Lock()
		owed, attached := clonePtr(rs.pending), w.runtimes[rs.rt.Name] == rs
		w.stateMu.Unlock()
		if owed == nil || !attached || owed.waitsForCaller() {
			return
		}
		if owed.State == PendingFailed || owed.State == "" {
			if !w.sleep(ctx, jitter(backoff), nil) {
				return
			}
			backoff = min(2*backoff, maxBackoffFactor*w.m.opts.RetryBackoff)
		}
		r, err := w.remoteFor(rs)
		if err != nil {
			rs.log.Warn("background pull: no remote", "err", err)
			if errors.Is(err, ErrNoRemote) || errors.Is(err, ErrClosed) {
				return
			}
			_ = w.updatePending(rs, func(old *PendingPull) *PendingPull { return failedAttempt(old, err) })
			continue
		}
		_, done, err := w.slicedPull(ctx, rs, r, PendingPull{ExecID: owed.ExecID, RuntimeID: owed.RuntimeID}, nil)
		switch {
		case done:
			metricBackgroundPulls.WithLabelValues("done").Inc()
			backoff = w.m.opts.RetryBackoff
		case ctx.Err() != nil:
			return
		case err != nil:
			metricBackgroundPulls.WithLabelValues("error").Inc()
			rs.log.Info("background pull failed; retrying", "exec", owed.ExecID, "err", err, "in", backoff)
		}
	}
}

// failedAttempt is old after an attempt that failed with err.
func failedAttempt(old *PendingPull, err error) *PendingPull {
	if old == nil {
		return nil
	}
	p := *old
	p.State, p.Error = PendingFailed, err.Error()
	p.Attempts++
	return &p
}

// sleep waits d, or until wake is closed (nil: never), or until ctx ends
// (false).
func (w *Workspace) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
		return true
	case <-t.C:
		return true
	}
}

// jitter spreads retries of many runtimes: d plus or minus a fifth.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + time.Duration(rand.Int64N(int64(d)*2/5+1)) - d/5
}

// resumePulls starts the background puller of every runtime whose pull
// the registry says is owed (Open calls it once the registry is loaded).
func (w *Workspace) resumePulls() {
	w.stateMu.Lock()
	rss := w.sortedLocked()
	w.stateMu.Unlock()
	for _, rs := range rss {
		w.kick(rs)
	}
}

// catchUp owes a pull of every runtime with an endpoint that owes none
// yet, made by the background puller at once: what a claim of a shared
// workspace runs. The store it claimed may be the object store's copy,
// which ends up to a replication lag before the old owner's last pull;
// the container still holds what that pull brought, and this pull brings
// it back without waiting for the next command.
func (w *Workspace) catchUp() {
	w.stateMu.Lock()
	rss := w.sortedLocked()
	w.stateMu.Unlock()
	for _, rs := range rss {
		w.stateMu.Lock()
		owes := rs.pending != nil || rs.pulled || rs.rt.Endpoint == ""
		w.stateMu.Unlock()
		if owes {
			continue
		}
		if err := w.owe(rs, PendingPull{}); err != nil {
			rs.log.Warn("catch-up pull after a claim", "err", err)
		}
	}
}

// add adds o's counts to r (the slices of one pull).
func (r *SyncReport) add(o SyncReport) {
	r.Entries += o.Entries
	r.Skipped += o.Skipped
	r.Objects += o.Objects
	r.Bytes += o.Bytes
	r.Batches += o.Batches
	r.Rebaselined = r.Rebaselined || o.Rebaselined
	if o.RuntimeID != "" {
		r.RuntimeID = o.RuntimeID
	}
	r.Conflicts += o.Conflicts
	r.ConflictPaths = append(r.ConflictPaths, o.ConflictPaths...)[:min(len(r.ConflictPaths)+len(o.ConflictPaths), MaxConflictPaths)]
	r.Deferred += o.Deferred
	r.More = o.More
}
