package vfs

import (
	"context"
	"fmt"
)

// Exclusive runs fn while holding the store's writer: the open group of
// local mutations is committed first, and no write transaction (a
// mutation, an apply, a GC step) can begin until fn returns, so fn sees
// the database as of a commit boundary and nothing is committed while it
// runs. Package replica's gate uses it to turn the WAL into what it ships
// (litestream's DB.Sync) with no commit landing meanwhile.
//
// fn may write through the store only with the context it is given (its
// writes run under the writer it holds; another context would deadlock);
// reads on the readers' connections are fine. fn should be short: every
// writer waits for it. A failure of the group commit is the group's (it
// is logged and returned by the next Sync); fn runs anyway, on what is
// committed.
func (s *Store) Exclusive(ctx context.Context, fn func(context.Context) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("exclusive: %w", err)
	}
	s.lockWrite()
	defer s.unlockWrite(nil, nil)
	if s.closed.Load() {
		return ErrClosed
	}
	s.commitGroup()
	return fn(context.WithValue(ctx, exclusiveKey{}, s))
}

// exclusiveKey marks a context Exclusive handed its fn: update runs under
// the writer Exclusive holds instead of waiting for it.
type exclusiveKey struct{}

// holdsWriter reports whether ctx is an Exclusive fn's, of this store.
func (s *Store) holdsWriter(ctx context.Context) bool {
	held, _ := ctx.Value(exclusiveKey{}).(*Store)
	return held == s
}
