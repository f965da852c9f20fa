package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/wsync/wsync/chunkstore"
)

// uploadBatch is how many owed chunks one round of UploadOwed reads and
// records; uploadParallel how many it sends at once.
const (
	uploadBatch    = 256
	uploadParallel = 8
)

// UploadOwed sends the store's ChunkRemote every chunk it is owed (each
// non-inline chunk from its first reference) and checks those it is owed
// a check of (referenced again after it had none, or ReoweUploads),
// several at a time, and records them uploaded. A chunk the remote is
// asked about and holds is not sent again (chunkstore.Store.Upload). It returns the
// chunks it verified, in the order they were owed.
//
// It may run inside Exclusive (the replication gate): its one write then
// runs under the writer Exclusive holds. A chunk collected locally while
// it was being sent (no row any more) is skipped.
func (s *Store) UploadOwed(ctx context.Context) ([]chunkstore.Ref, error) {
	if !s.chunks.HasRemote() {
		return nil, nil
	}
	var done []chunkstore.Ref
	var after int64
	for {
		owed, err := s.chunks.Owed(ctx, s.rq, after, uploadBatch)
		if err != nil || len(owed) == 0 {
			return done, err
		}
		after = owed[len(owed)-1].ID
		sent := make([]bool, len(owed))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(uploadParallel)
		for i, c := range owed {
			g.Go(func() error {
				err := s.chunks.Upload(gctx, s.rq, c.Ref, c.Verify)
				switch {
				case err == nil:
					sent[i] = true
				case s.chunkGone(gctx, c.Ref.Hash):
					return nil // collected meanwhile: nothing is owed
				case lostBytes(err):
					// Neither side has the bytes: owing them would stop
					// replication for good and bring nothing back.
					s.log.Error("chunk lost: neither the local store nor the remote has its bytes", "hash", c.Ref.Hash, "err", err)
					sent[i] = true
				default:
					return err
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return done, fmt.Errorf("upload owed chunks: %w", err)
		}
		hashes := make([]chunkstore.Hash, 0, len(owed))
		for i, c := range owed {
			if sent[i] {
				hashes = append(hashes, c.Ref.Hash)
				done = append(done, c.Ref)
			}
		}
		if err := s.update(ctx, func(t *wtx) error {
			return s.chunks.MarkUploaded(ctx, t.tx, hashes)
		}); err != nil {
			return done, fmt.Errorf("upload owed chunks: %w", err)
		}
	}
}

// chunkGone reports whether the store no longer has a row for h.
func (s *Store) chunkGone(ctx context.Context, h chunkstore.Hash) bool {
	var one int
	err := s.rq.QueryRowContext(ctx, "SELECT 1 FROM chunks WHERE hash = ?", h[:]).Scan(&one)
	return errors.Is(err, sql.ErrNoRows)
}

// lostBytes is an Upload failure for want of local bytes.
func lostBytes(err error) bool {
	return errors.Is(err, chunkstore.ErrCorrupt) || errors.Is(err, chunkstore.ErrUnknownHash)
}

// VerifyRemote makes sure the ChunkRemote holds each chunk, sending from
// the local store those it lacks (Upload): the replication gate calls it
// for chunks verified too long before the commits naming them reached
// the object store (the collector's grace, docs/ARCHITECTURE).
func (s *Store) VerifyRemote(ctx context.Context, refs []chunkstore.Ref) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(uploadParallel)
	for _, r := range refs {
		g.Go(func() error {
			err := s.chunks.Upload(gctx, s.rq, r, true)
			if err != nil && (s.chunkGone(gctx, r.Hash) || lostBytes(err)) {
				return nil
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("verify remote chunks: %w", err)
	}
	return nil
}

// OwedUploads counts the chunks the store owes its ChunkRemote.
func (s *Store) OwedUploads(ctx context.Context) (int64, error) {
	if !s.chunks.HasRemote() {
		return 0, nil
	}
	return s.chunks.OwedCount(ctx, s.rq)
}

// ReoweUploads records every referenced chunk the store kept locally as
// owed to its ChunkRemote again, so that the next UploadOwed verifies
// the remote still holds them: what a store kept across a restart runs,
// since chunks it verified before may have been collected from the
// remote while no replicated commit named them.
func (s *Store) ReoweUploads(ctx context.Context) (int64, error) {
	if !s.chunks.HasRemote() {
		return 0, nil
	}
	var n int64
	err := s.update(ctx, func(t *wtx) error {
		var err error
		n, err = s.chunks.Reowe(ctx, t.tx)
		return err
	})
	return n, err
}
