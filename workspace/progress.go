package workspace

import "context"

type progressKey struct{}

// WithProgress returns a context whose sync calls tell fn how far they
// have gone, after every committed batch: a push or pull made with it, and
// the pull after a command (Exec) made with it. fn is called from the
// goroutine running the sync and must not block for long.
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// ProgressOf is the observer WithProgress put in ctx, or nil: for a
// client of the API that asks for progress only when its caller wants it.
func ProgressOf(ctx context.Context) func(Progress) {
	fn, _ := ctx.Value(progressKey{}).(func(Progress))
	return fn
}

// progress is the SyncOptions.Progress of one sync call with rs: the one
// place a sync's progress goes, to the workspace's events (sync.progress,
// numbered by the call's span, beginSync) and to the caller's observer
// (WithProgress).
func (w *Workspace) progress(ctx context.Context, rs *runtimeState) func(Progress) {
	obs := ProgressOf(ctx)
	sync := syncOf(ctx)
	return func(p Progress) {
		w.publish(rs, EventSyncProgress, SyncProgress{Sync: sync, Progress: p})
		if obs != nil {
			obs(p)
		}
	}
}
