package cluster

import (
	"context"
	"log/slog"
	"time"

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
	log    *slog.Logger
}

var errNoReplica = replica.ErrNoReplica

func restore(ctx context.Context, st *objstore.Store, prefix string, upTo int64, dbPath string) (int64, error) {
	return replica.Restore(ctx, st, prefix, upTo, dbPath)
}

// startReplica streams an owned store to its generation's prefix. Each
// ship first drains the chunk uploads the store owes, then, holding the
// store's writer, drains what came meanwhile and turns the WAL into what
// is shipped: the bucket's replica never names a chunk the bucket lacks.
func startReplica(ctx context.Context, o replicaOptions) (replicator, error) {
	s := o.vfs
	drain := func(ctx context.Context) error {
		u, ok := any(s).(interface {
			UploadOwed(context.Context) (int, error)
		})
		if !ok {
			return nil // TODO(h2): chunk uploads
		}
		_, err := u.UploadOwed(ctx)
		return err
	}
	gate := func(ctx context.Context, ship func(context.Context) error) error {
		if err := drain(ctx); err != nil {
			return err
		}
		return s.Exclusive(ctx, func(ctx context.Context) error {
			if err := drain(ctx); err != nil {
				return err
			}
			return ship(ctx)
		})
	}
	return replica.Start(ctx, replica.Options{
		DBPath: s.Path(), Store: o.store, Prefix: o.prefix, Generation: o.gen, Interval: o.every,
		Gate: gate, Fence: o.fence, Logger: o.log,
	})
}
