package sharedchunks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/objstore"
)

// DefaultGrace is how old an unreferenced object must be before the
// collector sets it aside, and how long it stays in the trash.
const DefaultGrace = time.Hour

// clockKey is the object whose modification time is a run's clock.
const clockKey = "chunks-gc/clock"

// Marks is the set of chunks some workspace references.
type Marks map[chunkstore.Hash]struct{}

// CollectOptions configures one collection.
type CollectOptions struct {
	// Grace: see DefaultGrace. Writers rely on it too (the replication
	// gate verifies chunks again after half of it).
	Grace time.Duration
	// Marks returns every chunk the workspaces on the bucket reference,
	// as the bucket's replicas hold them. It is called after the run read
	// the bucket's clock.
	Marks func(ctx context.Context) (Marks, error)
	// Fence is called before every write; an error (the collector's lease
	// is lost) stops the run.
	Fence func() error
}

// Report is what one collection did.
type Report struct {
	Clock    time.Time // the bucket's clock at the start (M)
	Marked   int       // chunks some workspace references
	Live     int       // chunks/ objects kept
	Trashed  int       // chunks/ objects set aside
	Restored int       // trash objects put back
	Purged   int       // trash objects deleted
}

// Collect runs one mark, grace and sweep over the bucket (package doc).
// It stops at the first error, leaving the bucket in a state the next run
// picks up from: every step is safe to repeat.
func (s *Store) Collect(ctx context.Context, o CollectOptions) (rep Report, err error) {
	defer func() {
		metricCollected.WithLabelValues("trashed").Add(float64(rep.Trashed))
		metricCollected.WithLabelValues("restored").Add(float64(rep.Restored))
		metricCollected.WithLabelValues("purged").Add(float64(rep.Purged))
		if err != nil {
			metricCollections.WithLabelValues("error").Inc()
		} else {
			metricCollections.WithLabelValues("ok").Inc()
		}
	}()
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	fence := o.Fence
	if fence == nil {
		fence = func() error { return nil }
	}
	if o.Marks == nil {
		return rep, fmt.Errorf("collect shared chunks: %w: no marks", objstore.ErrInvalid)
	}
	m, err := s.clock(ctx, fence)
	if err != nil {
		return rep, err
	}
	rep.Clock = m
	marks, err := o.Marks(ctx)
	if err != nil {
		return rep, fmt.Errorf("collect shared chunks: marks: %w", err)
	}
	rep.Marked = len(marks)
	cut := m.Add(-o.Grace)

	// 1. Unreferenced and older than the grace: set aside.
	for obj, err := range s.st.List(ctx, ChunksPrefix) {
		if err != nil {
			return rep, fmt.Errorf("collect shared chunks: %w", err)
		}
		h, ok := parseKey(ChunksPrefix, obj.Key)
		if !ok {
			continue // not ours
		}
		if _, live := marks[h]; live || !obj.Modified.Before(cut) {
			rep.Live++
			continue
		}
		if err := s.move(ctx, fence, Key(h), TrashKey(h)); err != nil {
			return rep, fmt.Errorf("collect shared chunks: set aside %s: %w", h, err)
		}
		rep.Trashed++
	}
	// 2 and 3. The trash: put back what is referenced, delete what stayed
	// unreferenced for the grace.
	for obj, err := range s.st.List(ctx, TrashPrefix) {
		if err != nil {
			return rep, fmt.Errorf("collect shared chunks: %w", err)
		}
		h, ok := parseKey(TrashPrefix, obj.Key)
		if !ok {
			continue
		}
		if _, live := marks[h]; live {
			if err := s.putBack(ctx, fence, h); err != nil {
				return rep, fmt.Errorf("collect shared chunks: put back %s: %w", h, err)
			}
			rep.Restored++
			continue
		}
		if !obj.Modified.Before(cut) {
			continue
		}
		if err := fence(); err != nil {
			return rep, fmt.Errorf("collect shared chunks: %w", err)
		}
		if err := s.st.Delete(ctx, TrashKey(h)); err != nil {
			return rep, fmt.Errorf("collect shared chunks: purge %s: %w", h, err)
		}
		rep.Purged++
	}
	return rep, nil
}

// clock writes the clock object and returns its modification time: the
// bucket's own clock, which every age the collector compares is read by.
func (s *Store) clock(ctx context.Context, fence func() error) (time.Time, error) {
	if err := fence(); err != nil {
		return time.Time{}, fmt.Errorf("collect shared chunks: %w", err)
	}
	if _, err := s.st.Put(ctx, clockKey, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return time.Time{}, fmt.Errorf("collect shared chunks: clock: %w", err)
	}
	obj, err := s.st.Head(ctx, clockKey)
	if err != nil {
		return time.Time{}, fmt.Errorf("collect shared chunks: clock: %w", err)
	}
	if obj.Modified.IsZero() {
		return time.Time{}, fmt.Errorf("collect shared chunks: clock: the object store gave no modification time")
	}
	return obj.Modified, nil
}

// move copies an object to another key, then deletes the original.
func (s *Store) move(ctx context.Context, fence func() error, from, to string) error {
	data, _, err := s.st.GetMax(ctx, from, chunkstore.ChunkSize)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil // gone meanwhile
	}
	if err != nil {
		return err
	}
	if err := fence(); err != nil {
		return err
	}
	if _, err := s.st.Put(ctx, to, data); err != nil {
		return err
	}
	if err := fence(); err != nil {
		return err
	}
	return s.st.Delete(ctx, from)
}

// putBack restores a trash object under chunks/ (unless an upload already
// did) and deletes the trash copy.
func (s *Store) putBack(ctx context.Context, fence func() error, h chunkstore.Hash) error {
	ok, err := s.Has(ctx, h)
	if err != nil {
		return err
	}
	if !ok {
		data, _, err := s.st.GetMax(ctx, TrashKey(h), chunkstore.ChunkSize)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fence(); err != nil {
			return err
		}
		if _, err := s.st.Put(ctx, Key(h), data); err != nil {
			return err
		}
	}
	if err := fence(); err != nil {
		return err
	}
	return s.st.Delete(ctx, TrashKey(h))
}
