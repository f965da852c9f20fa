package vfs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
)

// GCOptions configure the live chunk collection of a store (Options.GC).
// A store always collects once when it opens; with an Interval it also
// collects while it runs, in steps of SliceChunks chunks, each its own
// write transaction, so a writer waits at most one step.
type GCOptions struct {
	// Interval runs a pass at least this often. 0 runs no background
	// collection: only Open and explicit GC and RunGC calls collect.
	Interval time.Duration
	// Threshold runs a pass early once this many chunk bytes have lost
	// their last reference since the last pass (0: DefaultGCThreshold),
	// as soon as their Grace is over.
	Threshold int64
	// SliceChunks bounds one step: the unreferenced rows it deletes, the
	// released files it checks and the pack records it moves, each at most
	// SliceChunks (0: DefaultGCSliceChunks). In memory, a vacuum step
	// hands back gcVacuumPages free pages.
	SliceChunks int
	// Grace spares chunks that lost their last reference, or that a probe
	// (Has) reported present while unreferenced, less than Grace ago: a
	// reader between a manifest and its chunks, or a sync peer between
	// its probe and its apply, still finds them (0: DefaultGCGrace;
	// negative: no grace).
	Grace time.Duration
}

// gcVacuumPages is how many free pages one vacuum step of an in-memory
// store hands back. SQLite's incremental vacuum costs more than linearly
// in its step (it moves live pages down into the free ones): freeing 40
// MiB took 4.8 s in steps of 128 pages (255 ms the longest) and 2.0 s in
// steps of 32 (113 ms the longest, 2 cores under load).
const gcVacuumPages = 32

// Defaults of GCOptions.
const (
	DefaultGCThreshold   = 32 << 20
	DefaultGCSliceChunks = 256
	DefaultGCGrace       = 30 * time.Second
)

// DefaultGC is what the daemons run: a pass every 10 minutes, or as soon
// as DefaultGCThreshold bytes were dropped.
var DefaultGC = GCOptions{Interval: 10 * time.Minute}

func (o GCOptions) withDefaults() GCOptions {
	if o.Threshold <= 0 {
		o.Threshold = DefaultGCThreshold
	}
	if o.SliceChunks <= 0 {
		o.SliceChunks = DefaultGCSliceChunks
	}
	switch {
	case o.Grace == 0:
		o.Grace = DefaultGCGrace
	case o.Grace < 0:
		o.Grace = 0
	}
	return o
}

// GCReport is what one pass of RunGC did.
type GCReport struct {
	chunkstore.GCStats
	Steps int // write transactions of collection (vacuum steps apart)
	// MaxStepChunks is the most chunks one step deleted or moved (at most
	// SliceChunks each); MaxPause the longest a step held the writer.
	MaxStepChunks int64
	MaxPause      time.Duration
	// VacuumPages are free database pages handed back (in-memory stores).
	VacuumPages int64
}

// gcLoop is the store's background collector; its goroutine is owned by the
// store, which stops and waits for it in Close.
type gcLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// errGCBusy: a step found an open file's state locked.
var errGCBusy = errors.New("gc: an open file is busy")

// startGC starts the background collector when Options.GC asks for one.
func (s *Store) startGC() {
	if s.opts.GC.Interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &gcLoop{cancel: cancel, done: make(chan struct{})}
	s.gcl = l
	go func() {
		defer close(l.done)
		s.runGCLoop(ctx)
	}()
}

// stopGC stops the background collector and waits for it: a step in
// progress rolls back or commits and finishes first.
func (s *Store) stopGC() {
	if l := s.gcl; l != nil {
		l.cancel()
		<-l.done
	}
}

func (s *Store) runGCLoop(ctx context.Context) {
	o := s.opts.GC.withDefaults()
	dropped := s.chunks.Dropped()
	mark := s.chunks.DroppedBytes()
	timer := time.NewTimer(o.Interval)
	defer timer.Stop()
	// A threshold crossed starts a pass once the grace of the bytes that
	// crossed it is over: a pass sooner could collect none of them, and
	// would spend its CPU and the writer in the middle of the burst of
	// deletes (an rm -rf) that dropped them.
	var ripe <-chan time.Time
	for {
		trigger := "interval"
		select {
		case <-ctx.Done():
			return
		case <-dropped:
			if ripe != nil || s.chunks.DroppedBytes()-mark < o.Threshold {
				continue
			}
			if o.Grace > 0 {
				ripe = time.After(o.Grace)
				continue
			}
			trigger = "threshold"
		case <-ripe:
			trigger = "threshold"
		case <-timer.C:
		}
		ripe = nil
		mark = s.chunks.DroppedBytes()
		rep, err := s.runGC(ctx, trigger)
		next := o.Interval
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrClosed):
			return
		case err != nil:
			s.log.Warn("live chunk collection failed; retrying later", "err", err)
		case rep.Young > 0 && o.Grace < next:
			// Chunks spared for their grace: come back when it is over.
			next = o.Grace + o.Grace/8
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// RunGC runs one pass of live collection now, in bounded steps (see
// GCOptions; Options.GC supplies them, defaults otherwise), and waits for
// it. Writers run between the steps.
func (s *Store) RunGC(ctx context.Context) (GCReport, error) {
	return s.runGC(ctx, "call")
}

func (s *Store) runGC(ctx context.Context, trigger string) (rep GCReport, err error) {
	if s.closed.Load() {
		return rep, ErrClosed
	}
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	start := time.Now()
	defer func() { observeGC(trigger, rep, time.Since(start), err) }()
	// Expired trash rows give their chunk references back first, so the
	// pass collects what only they held.
	if _, err := s.ExpireTrash(ctx, time.Now()); err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	o := s.opts.GC.withDefaults()
	c := s.chunks.NewCollection(chunkstore.GCOptions{MaxChunks: o.SliceChunks, Grace: o.Grace})
	if !s.memory {
		// Counting packs' live bytes reads every pack row: a reader does
		// it, outside the writer.
		if err := c.Plan(ctx, s.r); err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
	}
	busy := 0
	for more := true; more; {
		var sweep *chunkstore.Sweep
		var t0 time.Time
		err := s.update(ctx, func(t *wtx) error {
			t0 = time.Now()
			keep, ok := s.openManifests()
			if !ok {
				return errGCBusy
			}
			c.SetKeep(func(h chunkstore.Hash) bool { _, k := keep[h]; return k })
			var err error
			sweep, more, err = c.Step(ctx, t.tx)
			return err
		})
		pause := time.Since(t0)
		if errors.Is(err, errGCBusy) {
			// An open file is committing: let it, then try again.
			if busy++; busy > 100 {
				return rep, err
			}
			if err := sleepCtx(ctx, time.Millisecond); err != nil {
				return rep, err
			}
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
		// The same durability boundary as Store.GC's: rows gone, files
		// not yet unlinked (the crash matrix kills here).
		crashpoint.Hit("vfs.gc.committed")
		st, ferr := sweep.Finish()
		rep.add(st)
		rep.Steps++
		rep.MaxStepChunks = max(rep.MaxStepChunks, st.Rows, st.Moved)
		rep.MaxPause = max(rep.MaxPause, pause)
		metricGCPause.Observe(pause.Seconds())
		if ferr != nil {
			return rep, fmt.Errorf("gc: %w", ferr)
		}
	}
	if s.memory {
		n, err := s.vacuum(ctx, gcVacuumPages, &rep.MaxPause)
		rep.VacuumPages = n
		if err != nil {
			return rep, err
		}
	}
	if rep.Rows+rep.Files+rep.Packs > 0 {
		s.log.Debug("live chunk collection", "rows", rep.Rows, "files", rep.Files, "packs", rep.Packs,
			"moved", rep.Moved, "bytes", rep.Bytes, "young", rep.Young, "steps", rep.Steps, "max_pause", rep.MaxPause)
	}
	return rep, nil
}

func (r *GCReport) add(st chunkstore.GCStats) {
	r.Rows += st.Rows
	r.Files += st.Files
	r.Packs += st.Packs
	r.Bytes += st.Bytes
	r.Moved += st.Moved
	r.Young += st.Young
}

// openManifests returns the hashes of the committed manifests that open
// files read through (an Apply may have replaced a dirty file's content,
// dropping the chunks its handles still read and will commit again). It
// runs inside the GC step's transaction, holding the writer: a file whose
// state is locked (it is loading or committing, and may be waiting for the
// writer) makes it report false, and the step is retried.
func (s *Store) openManifests() (map[chunkstore.Hash]struct{}, bool) {
	s.openMu.Lock()
	fs := make([]*openFile, 0, len(s.open))
	for _, f := range s.open {
		fs = append(fs, f)
	}
	s.openMu.Unlock()
	keep := make(map[chunkstore.Hash]struct{})
	for _, f := range fs {
		if !f.mu.TryLock() {
			return nil, false
		}
		for _, r := range f.base {
			keep[r.Hash] = struct{}{}
		}
		f.mu.Unlock()
	}
	return keep, true
}

// vacuum hands an in-memory database's free pages back, at most step
// pages per write transaction, then asks SQLite to release its caches, so
// that the memory of deleted chunks returns to the process (and, through
// the allocator, to the system). It returns the pages freed.
func (s *Store) vacuum(ctx context.Context, step int64, maxPause *time.Duration) (int64, error) {
	var freed int64
	for {
		var free int64
		if err := s.w.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
			return freed, fmt.Errorf("gc vacuum: %w", err)
		}
		if free == 0 {
			break
		}
		var t0 time.Time
		err := s.update(ctx, func(t *wtx) error {
			t0 = time.Now()
			_, err := t.exec(fmt.Sprintf(`PRAGMA incremental_vacuum(%d)`, min(free, step)))
			return err
		})
		pause := time.Since(t0)
		*maxPause = max(*maxPause, pause)
		metricGCPause.Observe(pause.Seconds())
		if err != nil {
			return freed, fmt.Errorf("gc vacuum: %w", err)
		}
		var after int64
		if err := s.w.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&after); err != nil {
			return freed, fmt.Errorf("gc vacuum: %w", err)
		}
		if after >= free {
			// auto_vacuum is off (a database made before it was set).
			break
		}
		freed += free - after
	}
	if freed > 0 {
		if _, err := s.w.ExecContext(ctx, `PRAGMA shrink_memory`); err != nil {
			return freed, fmt.Errorf("gc vacuum: %w", err)
		}
	}
	return freed, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// gcState is the store's collection state.
type gcState struct {
	gcMu sync.Mutex // one pass at a time
	gcl  *gcLoop    // the background loop, if any
}
