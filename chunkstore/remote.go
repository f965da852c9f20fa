package chunkstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Remote is a second home for chunk bytes, shared by many stores: an
// object store's content-addressed keys (package sharedchunks). The local
// store stays in front of it as the cache of everything the hot path
// reads; the remote is where bytes go to outlive the machine and where a
// store restored elsewhere finds them.
type Remote interface {
	// Has reports whether the remote holds h's bytes.
	Has(ctx context.Context, h Hash) (bool, error)
	// Put stores data under h; the caller has checked the hash.
	Put(ctx context.Context, h Hash, data []byte) error
	// Get returns h's bytes, which the store checks against h and size.
	Get(ctx context.Context, h Hash, size int) ([]byte, error)
}

// A row's remote column says where its bytes are besides the local store.
const (
	remoteNone   = 0 // no remote: inline, or a store without one
	remoteOwed   = 1 // local bytes the remote does not have yet
	remoteDone   = 2 // the remote has the bytes (the local copy may be absent)
	remoteVerify = 3 // the remote had the bytes; owed a check that it still does
)

// ErrRemoteMissing: a chunk the store recorded as uploaded is absent from
// the remote, and the local bytes are gone too.
var ErrRemoteMissing = errors.New("chunk missing from the remote")

// ErrRemoteUnavailable: the remote could not be asked for bytes the local
// store lacks (it is down or unreachable); a later read may succeed.
var ErrRemoteUnavailable = errors.New("chunk remote unavailable")

// addRemoteColumn adds chunks.remote (remoteNone, remoteOwed, remoteDone,
// remoteVerify) and an index over the owed rows (owed or to verify), so that the upload queue is a range
// read and a store without owed chunks pays nothing.
func addRemoteColumn(ctx context.Context, tx *sql.Tx) error {
	for _, stmt := range []string{
		`ALTER TABLE chunks ADD COLUMN remote INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX chunks_owed ON chunks(id) WHERE remote IN (1, 3)`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("add remote column: %w", err)
		}
	}
	return nil
}

// HasRemote reports whether the store has a Remote.
func (s *Store) HasRemote() bool { return s.remote != nil }

// OwedChunk is a chunk whose bytes the remote does not have yet, or may
// no longer have.
type OwedChunk struct {
	ID  int64 // the row's id, the queue's order
	Ref Ref
	// Verify: the remote had the bytes (the chunk was uploaded, then
	// referenced again, or the store restarted); Upload asks before it
	// sends, whatever the size.
	Verify bool
}

// Owed returns up to limit chunks the remote is owed, after the row id
// after, in id order. Every non-inline chunk a store with a Remote commits
// is owed from its first reference until MarkUploaded.
func (s *Store) Owed(ctx context.Context, q Querier, after int64, limit int) ([]OwedChunk, error) {
	rows, err := q.QueryContext(ctx, "SELECT id, hash, size, remote = 3 FROM chunks WHERE remote IN (1, 3) AND id > ? ORDER BY id LIMIT ?", after, limit)
	if err != nil {
		return nil, fmt.Errorf("owed chunks: %w", err)
	}
	defer rows.Close()
	var out []OwedChunk
	for rows.Next() {
		var c OwedChunk
		var hb []byte
		if err := rows.Scan(&c.ID, &hb, &c.Ref.Size, &c.Verify); err != nil {
			return nil, fmt.Errorf("owed chunks: %w", err)
		}
		if c.Ref.Hash, err = blobHash(hb); err != nil {
			return nil, fmt.Errorf("owed chunks: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("owed chunks: %w", err)
	}
	return out, nil
}

// OwedCount counts the chunks the remote is owed.
func (s *Store) OwedCount(ctx context.Context, q Querier) (int64, error) {
	var n int64
	if err := q.QueryRowContext(ctx, "SELECT count(*) FROM chunks WHERE remote IN (1, 3)").Scan(&n); err != nil {
		return 0, fmt.Errorf("owed chunks: %w", err)
	}
	return n, nil
}

// askFirstMin is the smallest chunk Upload asks the remote about before
// sending: below it, a second request costs more than sending the bytes
// again (a PUT of content-addressed bytes is idempotent).
const askFirstMin = 64 << 10

// Upload makes sure the remote has r's bytes. A chunk of askFirstMin
// bytes or more, or any chunk when verify says the remote had it, is not
// sent when the remote has it (another store wrote the same content, or
// this one did before); a smaller new one is sent without asking, one
// request instead of two. The bytes come from the local store, read
// through q.
func (s *Store) Upload(ctx context.Context, q Querier, r Ref, verify bool) error {
	if s.remote == nil {
		return fmt.Errorf("upload chunk %s: no remote", r.Hash)
	}
	if verify || r.Size >= askFirstMin {
		ok, err := s.remote.Has(ctx, r.Hash)
		if err != nil {
			return fmt.Errorf("upload chunk %s: %w", r.Hash, err)
		}
		if ok {
			return nil
		}
	}
	data, err := s.getLocal(ctx, q, r.Hash)
	if err != nil {
		return fmt.Errorf("upload chunk %s: %w", r.Hash, err)
	}
	if len(data) != int(r.Size) || Sum(data) != r.Hash {
		return fmt.Errorf("upload chunk %s: %w: local bytes do not match", r.Hash, ErrCorrupt)
	}
	if err := s.remote.Put(ctx, r.Hash, data); err != nil {
		return fmt.Errorf("upload chunk %s: %w", r.Hash, err)
	}
	return nil
}

// MarkUploaded records, inside the caller's write transaction, that the
// remote has these chunks.
func (s *Store) MarkUploaded(ctx context.Context, q Querier, hs []Hash) error {
	for batch := range slices.Chunk(hs, batchSize) {
		args := make([]any, len(batch))
		for i := range batch {
			args[i] = batch[i][:]
		}
		if _, err := q.ExecContext(ctx, "UPDATE chunks SET remote = 2 WHERE remote IN (1, 3) AND hash IN ("+Placeholders(len(batch))+")", args...); err != nil {
			return fmt.Errorf("mark chunks uploaded: %w", err)
		}
	}
	return nil
}

// Detach forgets, inside the caller's write transaction, where every
// non-inline chunk's bytes were kept locally and records them as the
// remote's: what a store restored from a replica on another machine runs
// before its first use, since the packs and files its rows name stayed
// behind. Reads then fetch each chunk from the remote once.
func (s *Store) Detach(ctx context.Context, q Querier) (int64, error) {
	res, err := q.ExecContext(ctx, "UPDATE chunks SET pack = NULL, pack_off = NULL, remote = 2 WHERE data IS NULL")
	if err != nil {
		return 0, fmt.Errorf("detach chunks: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Reowe records, inside the caller's write transaction, every referenced
// chunk the remote is recorded as holding as owed a check (the next
// upload asks the remote and sends only what it lost). It returns how
// many.
func (s *Store) Reowe(ctx context.Context, q Querier) (int64, error) {
	res, err := q.ExecContext(ctx, "UPDATE chunks SET remote = 3 WHERE remote = 2 AND refs > 0")
	if err != nil {
		return 0, fmt.Errorf("reowe chunks: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Referenced calls fn with every referenced chunk whose bytes live
// outside the database (the ones a Remote holds), in hash order: the
// marks a collector of the remote takes from one store's database.
func Referenced(ctx context.Context, q Querier, fn func(Hash) error) error {
	rows, err := q.QueryContext(ctx, "SELECT hash FROM chunks WHERE refs > 0 AND data IS NULL ORDER BY hash")
	if err != nil {
		return fmt.Errorf("referenced chunks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var hb []byte
		if err := rows.Scan(&hb); err != nil {
			return fmt.Errorf("referenced chunks: %w", err)
		}
		h, err := blobHash(hb)
		if err != nil {
			return fmt.Errorf("referenced chunks: %w", err)
		}
		if err := fn(h); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("referenced chunks: %w", err)
	}
	return nil
}

// remoteMiss reports whether a local read failure is one the remote can
// answer: bytes missing, short or never stored here.
func remoteMiss(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnknownHash)
}

// fetch copies h's bytes from the remote into the local store as a chunk
// file (where reads of a row without a pack look), checked against h and
// size. Concurrent fetches of one hash share one request.
func (s *Store) fetch(ctx context.Context, h Hash, size int) ([]byte, error) {
	if s.remote == nil || s.dir == "" {
		return nil, fmt.Errorf("fetch chunk %s: no remote", h)
	}
	if size <= 0 || size > ChunkSize {
		return nil, fmt.Errorf("fetch chunk %s: %w: size %d", h, ErrSizeMismatch, size)
	}
	// The fetch is shared, so it is not any one reader's to cancel: it
	// runs detached, bounded by fetchTimeout, and a reader that gives up
	// leaves it to the others.
	ch := s.fetches.DoChan(h.String(), func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		data, err := s.remote.Get(fctx, h, size)
		if err != nil && !errors.Is(err, ErrRemoteMissing) && !errors.Is(err, ErrCorrupt) {
			return nil, fmt.Errorf("%w: %w", ErrRemoteUnavailable, err)
		}
		if err != nil {
			return nil, err
		}
		if len(data) != size {
			return nil, fmt.Errorf("%w: the remote has %d bytes, want %d", ErrCorrupt, len(data), size)
		}
		if got := Sum(data); got != h {
			return nil, fmt.Errorf("%w: the remote's bytes hash to %s", ErrCorrupt, got)
		}
		// The local copy is a cache: a read does not fail for want of
		// room to keep one (a full disk), it fetches again next time.
		if err := s.writeFile(h, data); err != nil {
			s.log.Warn("chunk fetched from the remote not kept locally", "hash", h, "err", err)
			return data, nil
		}
		s.fds.forget(fdKey{hash: h})
		s.forgetLoc(h, s.knownLoc(h))
		return data, nil
	})
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("fetch chunk %s from the remote: %w", h, ctx.Err())
	case r := <-ch:
		if r.Err != nil {
			return nil, fmt.Errorf("fetch chunk %s from the remote: %w", h, r.Err)
		}
		return r.Val.([]byte), nil
	}
}

// fetchTimeout bounds one fetch of a chunk from the remote.
const fetchTimeout = 30 * time.Second
