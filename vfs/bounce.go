package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// BounceRun is the bounce suppression record a store keeps for one peer:
// its revs in (From, To] were all stamped by applies of that peer's own
// entries (the latest contiguous run of them). Those entries must not travel
// back to the peer: whoever sends this store's feed to the peer from a
// cursor that covers From starts it at To instead (Skip).
//
// The run is written in the transaction of the apply that stamps it
// (ApplyOptions.Bounce), so a crash after the apply cannot lose it, and it
// needs no reply from anyone: the feed's sender (this store) consults it.
type BounceRun struct {
	From, To int64
}

// Extend returns the run after an apply that stamped revs (before, last]:
// the run grows when the apply follows it directly (no other rev between),
// otherwise the apply starts a new run. An apply that stamped nothing
// (last == 0) leaves it as is.
func (r BounceRun) Extend(before, last int64) BounceRun {
	if last <= before {
		return r
	}
	if r.To != before {
		r.From = before
	}
	r.To = last
	return r
}

// Skip is the bounce suppression rule, the one place it is written: a
// feed position c that covers the run's start (the peer holds every rev
// up to it) moves to the run's end, since the revs in between hold the
// peer's own entries. Any other position is returned as is.
func (r BounceRun) Skip(c watermark.Cursor) watermark.Cursor {
	if r.To > r.From && c.Covers(watermark.At(r.From)) && !c.Covers(watermark.At(r.To)) {
		return watermark.At(r.To)
	}
	return c
}

// Bounce returns the bounce run kept for peer (zero if none).
func (s *Store) Bounce(ctx context.Context, peer string) (BounceRun, error) {
	return bounceRun(ctx, s.committed(), peer)
}

// bounceRun reads peer's bounce run through q (zero if none).
func bounceRun(ctx context.Context, q chunkstore.Querier, peer string) (BounceRun, error) {
	var r BounceRun
	err := q.QueryRowContext(ctx, `SELECT bounce_from, bounce_to FROM watermarks WHERE peer = ?`, peer).Scan(&r.From, &r.To)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("bounce %q: %w", peer, err)
	}
	return r, nil
}

// extendBounce records, in the apply's transaction (which wrote peer's
// watermarks first), that revs (before, last] hold peer's entries.
func (t *wtx) extendBounce(peer string, before, last int64) error {
	r, err := bounceRun(t.ctx, t.tx, peer)
	if err != nil {
		return err
	}
	r = r.Extend(before, last)
	if _, err := t.exec(`UPDATE watermarks SET bounce_from = ?, bounce_to = ? WHERE peer = ?`, r.From, r.To, peer); err != nil {
		return fmt.Errorf("bounce %q: %w", peer, err)
	}
	return nil
}
