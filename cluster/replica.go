package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/objstore"
	"github.com/wsync/wsync/replica"
	"github.com/wsync/wsync/vfs"
)

// replicator is what the cluster needs of a running replication.
type replicator interface {
	Status() replica.Status
	Close(ctx context.Context) error
}

type replicaOptions struct {
	store  *objstore.Store
	prefix string
	gen    int64
	every  time.Duration
	vfs    *vfs.Store
	fence  func() error
	// grace is the chunk collector's (sharedchunks): a chunk verified in
	// the bucket must reach it in a shipped commit within grace/2, or be
	// verified again.
	grace time.Duration
	log   *slog.Logger
}

var errNoReplica = replica.ErrNoReplica

func restore(ctx context.Context, st *objstore.Store, prefix string, upTo int64, dbPath string) (int64, error) {
	return replica.Restore(ctx, st, prefix, upTo, dbPath)
}

// gateDrainTimeout bounds the uploads a ship makes while it holds the
// store's writer.
const gateDrainTimeout = 3 * time.Second

// verified is the chunks one gate found in (or sent to) the bucket, not
// yet named by a commit the bucket holds.
type verified struct {
	at   time.Time // monotonic
	txid uint64    // the local LTX the gate made; shipped once the bucket's TXID reaches it
	refs []chunkstore.Ref
}

// startReplica streams an owned store to its generation's prefix. Each
// ship first drains the chunk uploads the store owes, then, holding the
// store's writer, drains what came meanwhile and turns the WAL into what
// is shipped: the bucket's replica never names a chunk the bucket lacks.
//
// Chunks verified more than grace/2 before the commit naming them
// reached the bucket (a long outage) are verified again before the next
// ship: the collector may have set them aside meanwhile, since no replica
// named them (docs/ARCHITECTURE.md, "Scaling out").
func startReplica(ctx context.Context, o replicaOptions) (replicator, error) {
	s := o.vfs
	var (
		mu      sync.Mutex
		pending []verified
		rep     *replica.Replicator
	)
	// settle drops what the bucket now names and verifies again what
	// waited too long.
	settle := func(ctx context.Context) error {
		mu.Lock()
		var shipped uint64
		if rep != nil {
			shipped = rep.Status().TXID
		}
		keep := pending[:0]
		var stale []chunkstore.Ref
		for _, v := range pending {
			switch {
			case v.txid != 0 && v.txid <= shipped:
			case time.Since(v.at) > o.grace/2:
				stale = append(stale, v.refs...)
			default:
				keep = append(keep, v)
			}
		}
		pending = keep
		mu.Unlock()
		if len(stale) == 0 {
			return nil
		}
		at := time.Now()
		metricReverified.Add(float64(len(stale)))
		if err := s.VerifyRemote(ctx, stale); err != nil {
			mu.Lock()
			pending = append(pending, verified{at: time.Time{}, refs: stale}) // stale until verified
			mu.Unlock()
			return err
		}
		mu.Lock()
		pending = append(pending, verified{at: at, refs: stale})
		mu.Unlock()
		return nil
	}
	drain := func(ctx context.Context) error {
		refs, err := s.UploadOwed(ctx)
		if len(refs) > 0 {
			mu.Lock()
			pending = append(pending, verified{at: time.Now(), refs: refs})
			mu.Unlock()
		}
		return err
	}
	gate := func(ctx context.Context, ship func(context.Context) error) error {
		if err := settle(ctx); err != nil {
			return err
		}
		if err := drain(ctx); err != nil {
			return err
		}
		return s.Exclusive(ctx, func(ctx context.Context) error {
			// What came since the first drain, with every writer waiting:
			// bounded, so a bucket that hangs now costs writers at most
			// gateDrainTimeout (the ship fails and the next one retries).
			dctx, cancel := context.WithTimeout(ctx, gateDrainTimeout)
			start := time.Now()
			err := drain(dctx)
			metricGateDrainSeconds.Observe(time.Since(start).Seconds())
			cancel()
			if err != nil {
				return err
			}
			if err := ship(ctx); err != nil {
				return err
			}
			// What the gate shipped is named once the bucket holds this
			// LTX.
			mu.Lock()
			if rep != nil {
				txid := rep.Status().LocalTXID
				for i := range pending {
					if pending[i].txid == 0 && !pending[i].at.IsZero() {
						pending[i].txid = txid
					}
				}
			}
			mu.Unlock()
			return nil
		})
	}
	r, err := replica.Start(ctx, replica.Options{
		DBPath: s.Path(), Store: o.store, Prefix: o.prefix, Generation: o.gen, Interval: o.every,
		Gate: gate, Fence: o.fence, Logger: o.log,
	})
	if err != nil {
		return nil, err
	}
	mu.Lock()
	rep = r
	mu.Unlock()
	return r, nil
}
