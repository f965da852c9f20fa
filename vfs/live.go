package vfs

import (
	"context"
	"fmt"

	"github.com/wsync/wsync/chunkstore"
)

// CountLive returns how many of paths (store form) name a live synced
// node: what delete entries for them would remove. A pull's deletion
// safety counts with it (syncwire.DeleteGuard).
func (s *Store) CountLive(ctx context.Context, paths []string) (int, error) {
	n := 0
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		es, err := newResolver(ctx, q).entries(paths, make([]int64, len(paths)))
		for _, e := range es {
			if e.Kind != EntryDelete {
				n++
			}
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("count live: %w", err)
	}
	return n, nil
}

// LiveNodes counts the store's synced nodes (files, directories and
// symlinks; the root and nodes kept only for open handles left out).
func (s *Store) LiveNodes(ctx context.Context) (int64, error) {
	var n int64
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		return q.QueryRowContext(ctx, `SELECT count(*) FROM nodes WHERE kind IN `+syncedKinds+` AND nlink > 0 AND ino != ?`, RootIno).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("live nodes: %w", err)
	}
	return n, nil
}
