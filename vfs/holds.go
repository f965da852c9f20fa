package vfs

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
)

// Held chunks.
//
// A snapshot being staged (converge) keeps the chunks it received in the
// store itself, written once into the store's packs, before any file
// names them. Each such chunk is held: a row of chunk_holds, and one
// reference counted in its chunk row, so collection spares it however
// long the snapshot takes and across a restart of the process. The
// install's batches take the holds over (ApplyOptions.Held, takeHolds):
// in the transaction that writes the files naming a held chunk, its hold
// row goes and the reference it counted becomes the files' first, so the
// chunk row is not written for the hold's release. What no file names is
// released with the snapshot's staging, or when it is abandoned
// (ReleaseHeldChunks); a chunk held and never referenced then loses its
// last reference and is collected like any other.
//
// The holds are one set per store: one snapshot stages into a store at a
// time, and a new one releases what an abandoned one held.

// holdBatch is how many hashes one statement of the holds names.
const holdBatch = 256

// HoldChunks makes the store keep the chunks refs name, which st (a stage
// of this store's chunks) holds or the store already has, until
// ReleaseHeldChunks: one write transaction, whose commit releases st (on
// an error the caller still holds it). A chunk held already is held once.
// A chunk neither st nor the store has is chunkstore.ErrUnknownHash, and
// nothing is held.
func (s *Store) HoldChunks(ctx context.Context, st *chunkstore.Stage, refs []chunkstore.Ref) error {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b chunkstore.Ref) int { return bytes.Compare(a.Hash[:], b.Hash[:]) })
	refs = slices.CompactFunc(refs, func(a, b chunkstore.Ref) bool { return a.Hash == b.Hash })
	refs = slices.DeleteFunc(refs, func(r chunkstore.Ref) bool { return r.Hash == chunkstore.HoleHash })
	err := s.update(ctx, func(t *wtx) error {
		if st != nil {
			t.hold(st)
		}
		for part := range slices.Chunk(refs, holdBatch) {
			fresh, err := t.addHolds(part)
			if err != nil {
				return err
			}
			if len(fresh) == 0 {
				continue
			}
			if err := s.chunks.AddRefs(ctx, t.tx, fresh); err != nil {
				return err
			}
		}
		// The stage's records are in the packs and synced, the holds
		// written, not committed: a crash leaves records no row names.
		crashpoint.Hit("vfs.holds.commit")
		return nil
	})
	if err != nil {
		return fmt.Errorf("hold chunks: %w", err)
	}
	// Held, the caller not yet answered.
	crashpoint.Hit("vfs.holds.committed")
	return nil
}

// addHolds inserts the holds of refs (distinct, at most holdBatch) not
// held yet and returns those refs: one statement, which skips a hash held
// already. (OR IGNORE aborts nothing, so SQLite keeps no statement journal
// for it; see chunkstore's AddRefs.)
func (t *wtx) addHolds(refs []chunkstore.Ref) ([]chunkstore.Ref, error) {
	args := make([]any, len(refs))
	byHash := make(map[chunkstore.Hash]chunkstore.Ref, len(refs))
	for i, r := range refs {
		args[i] = r.Hash[:]
		byHash[r.Hash] = r
	}
	rows, err := t.tx.QueryContext(t.ctx, `INSERT OR IGNORE INTO chunk_holds(hash) VALUES `+rowsOf("(?)", len(refs))+` RETURNING hash`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	fresh := make([]chunkstore.Ref, 0, len(refs))
	for rows.Next() {
		var hb []byte
		if err := rows.Scan(&hb); err != nil {
			return nil, err
		}
		if len(hb) != len(chunkstore.Hash{}) {
			return nil, fmt.Errorf("hold chunks: a hold of %d bytes", len(hb))
		}
		r, ok := byHash[chunkstore.Hash(hb)]
		if !ok {
			return nil, fmt.Errorf("hold chunks: a hold of %x not asked for", hb)
		}
		fresh = append(fresh, r)
	}
	return fresh, rows.Err()
}

// HeldChunks reports, in input order, which of hs the store holds.
func (s *Store) HeldChunks(ctx context.Context, hs []chunkstore.Hash) ([]bool, error) {
	out := make([]bool, 0, len(hs))
	for part := range slices.Chunk(hs, holdBatch) {
		held, err := heldAmong(ctx, s.committed(), part)
		if err != nil {
			return nil, fmt.Errorf("held chunks: %w", err)
		}
		out = append(out, held...)
	}
	return out, nil
}

// ReleaseHeldChunks gives back every hold: each held chunk loses the
// reference its hold counted. It is idempotent, and cheap when nothing is
// held.
func (s *Store) ReleaseHeldChunks(ctx context.Context) error {
	for {
		var one int
		err := s.committed().QueryRowContext(ctx, `SELECT 1 FROM chunk_holds LIMIT 1`).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("release held chunks: %w", err)
		}
		if err := s.update(ctx, s.releaseHolds); err != nil {
			return fmt.Errorf("release held chunks: %w", err)
		}
	}
}

// releaseHolds releases up to releaseBatch holds in t, set-based: a
// release after an install gives back one reference of every chunk of
// the tree, and no row of those reaches zero.
func (s *Store) releaseHolds(t *wtx) error {
	const some = `SELECT hash FROM chunk_holds ORDER BY hash LIMIT ?`
	if _, err := t.exec(`UPDATE chunks SET refs = max(refs - 1, 0) WHERE hash IN (`+some+`)`, releaseBatch); err != nil {
		return err
	}
	_, err := t.exec(`DELETE FROM chunk_holds WHERE hash IN (`+some+`)`, releaseBatch)
	return err
}

// releaseBatch is how many holds one transaction of ReleaseHeldChunks
// gives back.
const releaseBatch = 4096

// takeHolds removes the holds of the chunks refs name, in t, and keeps
// what they were (t.taken) for flushRefs, which counts each hold's
// reference as the first the transaction adds to its chunk. It returns
// the refs of chunks not held, whose presence the caller still probes.
// An install's batch takes the holds of its chunks this way instead of
// adding a reference to each and releasing the hold afterwards: each
// chunk row is written once less, or not at all (ApplyOptions.Held).
func (t *wtx) takeHolds(refs []chunkstore.Ref) ([]chunkstore.Ref, error) {
	byHash := make(map[chunkstore.Hash]chunkstore.Ref, len(refs))
	for _, r := range refs {
		byHash[r.Hash] = r
	}
	hs := slices.Collect(maps.Keys(byHash))
	if t.taken == nil {
		t.taken = make(map[chunkstore.Hash]chunkstore.Ref, len(hs))
	}
	for part := range slices.Chunk(hs, holdBatch) {
		args := make([]any, len(part), chunkstore.PadIn(len(part)))
		for i := range part {
			args[i] = part[i][:]
		}
		// Padded with its last hash: a few statements, kept by the cache.
		for len(args) < cap(args) {
			args = append(args, args[len(args)-1])
		}
		rows, err := t.tx.QueryContext(t.ctx, `DELETE FROM chunk_holds WHERE hash IN (`+chunkstore.Placeholders(len(args))+`) RETURNING hash`, args...)
		if err != nil {
			return nil, fmt.Errorf("take holds: %w", err)
		}
		for rows.Next() {
			var hb []byte
			if err := rows.Scan(&hb); err != nil {
				rows.Close()
				return nil, fmt.Errorf("take holds: %w", err)
			}
			if len(hb) != len(chunkstore.Hash{}) {
				rows.Close()
				return nil, fmt.Errorf("take holds: a hold of %d bytes", len(hb))
			}
			h := chunkstore.Hash(hb)
			t.taken[h] = byHash[h]
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("take holds: %w", err)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("take holds: %w", err)
		}
	}
	rest := refs[:0:0]
	for _, r := range refs {
		if _, ok := t.taken[r.Hash]; !ok {
			rest = append(rest, r)
		}
	}
	return rest, nil
}

// heldAmong reports which of hs (at most holdBatch) have a hold.
func heldAmong(ctx context.Context, q chunkstore.Querier, hs []chunkstore.Hash) ([]bool, error) {
	args := make([]any, len(hs))
	for i := range hs {
		args[i] = hs[i][:]
	}
	rows, err := q.QueryContext(ctx, `SELECT hash FROM chunk_holds WHERE hash IN (`+chunkstore.Placeholders(len(hs))+`)`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := make(map[chunkstore.Hash]bool, len(hs))
	for rows.Next() {
		var hb []byte
		if err := rows.Scan(&hb); err != nil {
			return nil, err
		}
		var h chunkstore.Hash
		copy(h[:], hb)
		held[h] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]bool, len(hs))
	for i, h := range hs {
		out[i] = held[h]
	}
	return out, nil
}

func refHashes(refs []chunkstore.Ref) []chunkstore.Hash {
	out := make([]chunkstore.Hash, len(refs))
	for i, r := range refs {
		out[i] = r.Hash
	}
	return out
}
