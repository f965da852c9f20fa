package vfs

import (
	"context"
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
// asked about and holds is not sent again (chunkstore.Store.Upload). It
// returns the chunks it verified, in the order they were owed.
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
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(uploadParallel)
		for _, c := range owed {
			g.Go(func() error { return s.upload(gctx, c.Ref, c.Verify) })
		}
		if err := g.Wait(); err != nil {
			return done, fmt.Errorf("upload owed chunks: %w", err)
		}
		hashes := make([]chunkstore.Hash, len(owed))
		for i, c := range owed {
			hashes[i] = c.Ref.Hash
			done = append(done, c.Ref)
		}
		if err := s.update(ctx, func(t *wtx) error {
			return s.chunks.MarkUploaded(ctx, t.tx, hashes)
		}); err != nil {
			return done, fmt.Errorf("upload owed chunks: %w", err)
		}
	}
}

// upload makes sure the remote holds one chunk (chunkstore.Store.Upload).
// A chunk collected locally since it was owed (no row) is owed nothing;
// one whose bytes neither side has is logged and owed nothing either:
// owing it would stop replication for good and bring nothing back.
func (s *Store) upload(ctx context.Context, r chunkstore.Ref, verify bool) error {
	err := s.chunks.Upload(ctx, s.rq, r, verify)
	switch {
	case errors.Is(err, chunkstore.ErrUnknownHash):
		return nil
	case errors.Is(err, chunkstore.ErrCorrupt):
		s.log.Error("chunk lost: neither the local store nor the remote has its bytes", "hash", r.Hash, "err", err)
		return nil
	}
	return err
}

// VerifyRemote makes sure the ChunkRemote holds each chunk, sending from
// the local store those it lacks (Upload): the replication gate calls it
// for chunks verified too long before the commits naming them reached
// the object store (the collector's grace, docs/ARCHITECTURE).
func (s *Store) VerifyRemote(ctx context.Context, refs []chunkstore.Ref) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(uploadParallel)
	for _, r := range refs {
		g.Go(func() error { return s.upload(gctx, r, true) })
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
