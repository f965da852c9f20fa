package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/lease"
	"github.com/wsync/wsync/replica"
	"github.com/wsync/wsync/sharedchunks"
)

// collectorLeaseKey is the lease a collecting server holds, so that one
// server at a time collects the bucket's chunks.
const collectorLeaseKey = "chunks-gc/lease"

// releaseTimeout bounds handing the collector's lease back (a bucket that
// hangs must not hold a closing server).
const releaseTimeout = 5 * time.Second

// collector runs CollectChunks every ChunkGCEvery until the cluster
// closes.
func (c *Cluster) collector(ctx context.Context) {
	t := time.NewTicker(c.opts.ChunkGCEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep, err := c.CollectChunks(ctx)
		var held *lease.HeldError
		switch {
		case errors.As(err, &held):
			c.log.Debug("chunk collection left to another server", "owner", held.Record.Owner)
		case err != nil && ctx.Err() == nil:
			c.log.Warn("chunk collection", "err", err)
		case err == nil:
			c.log.Info("chunks collected", "marked", rep.Marked, "live", rep.Live, "trashed", rep.Trashed, "restored", rep.Restored, "purged", rep.Purged)
		}
	}
}

// CollectChunks runs one collection of the bucket's chunks under the
// collector's lease (a *lease.HeldError when another server holds it).
// The marks are read from the newest replica of every workspace
// registered in the bucket.
func (c *Cluster) CollectChunks(ctx context.Context) (sharedchunks.Report, error) {
	l, err := lease.Acquire(ctx, c.opts.Store, collectorLeaseKey, c.opts.ServerID, c.opts.Address, c.opts.LeaseTTL)
	if err != nil {
		return sharedchunks.Report{}, err
	}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Keep(kctx, func(error) { stop() })
	}()
	defer func() {
		stop()
		<-done
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = l.Release(rctx)
		cancel()
	}()
	return c.chunks.Collect(kctx, sharedchunks.CollectOptions{
		Grace: c.opts.ChunkGCGrace,
		Marks: func(ctx context.Context) (sharedchunks.Marks, error) { return c.marks(ctx, l.Valid) },
		Fence: l.Valid,
	})
}

// marks reads every registered workspace's newest replica into a scratch
// database and collects the chunks it references. A workspace with no
// replica yet has no commit in the bucket: what it uploaded is younger
// than the grace, or verified again before it ships (startReplica).
// Generations older than the one read are deleted on the way (no claim
// restores them any more).
func (c *Cluster) marks(ctx context.Context, fence func() error) (sharedchunks.Marks, error) {
	names, err := c.Names(ctx)
	if err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp("", "wsync-marks-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	marks := sharedchunks.Marks{}
	for i, name := range names {
		path := filepath.Join(scratch, fmt.Sprintf("%d.db", i))
		gen, err := restore(ctx, c.opts.Store, replicaPrefix(name), math.MaxInt64, path)
		if errors.Is(err, errNoReplica) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("marks of workspace %q: %w", name, err)
		}
		if n, err := replica.Prune(ctx, c.opts.Store, replicaPrefix(name), gen, fence); err != nil {
			return nil, fmt.Errorf("marks of workspace %q: %w", name, err)
		} else if n > 0 {
			c.log.Info("old replica generations deleted", "workspace", name, "kept", gen, "objects", n)
		}
		if err := referenced(ctx, path, marks); err != nil {
			return nil, fmt.Errorf("marks of workspace %q: %w", name, err)
		}
		_ = os.Remove(path)
	}
	return marks, nil
}

// referenced adds the chunks a restored store database references.
func referenced(ctx context.Context, path string, marks sharedchunks.Marks) error {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	return chunkstore.Referenced(ctx, db, func(h chunkstore.Hash) error {
		marks[h] = struct{}{}
		return nil
	})
}
