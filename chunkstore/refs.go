package chunkstore

import (
	"context"
	"fmt"
	"strings"
)

// batchSize bounds the hashes of one SQL statement: IN lists and multi-row
// INSERTs stay well under SQLite's variable limit, and a typical call (256
// refs of a push batch) is one statement per kind.
const batchSize = 256

// refCount is one distinct hash of a refs argument and how often it occurs.
type refCount struct {
	Ref
	n int
}

// countRefs groups refs by hash, in order of first appearance, and checks
// that each is a possible chunk and that repeated hashes agree on the size.
func countRefs(op string, refs []Ref) ([]refCount, error) {
	out := make([]refCount, 0, len(refs))
	idx := make(map[Hash]int, len(refs))
	for _, r := range refs {
		if r.Size == 0 || r.Size > ChunkSize {
			return nil, fmt.Errorf("%s %s: %w: size %d", op, r.Hash, ErrSizeMismatch, r.Size)
		}
		if i, ok := idx[r.Hash]; ok {
			if out[i].Size != r.Size {
				return nil, fmt.Errorf("%s %s: %w: refs give sizes %d and %d", op, r.Hash, ErrSizeMismatch, out[i].Size, r.Size)
			}
			out[i].n++
			continue
		}
		idx[r.Hash] = len(out)
		out = append(out, refCount{Ref: r, n: 1})
	}
	return out, nil
}

// byCount splits counts into groups sharing a multiplicity, so each group
// is one "refs = refs ± n WHERE hash IN (...)" statement. Nearly always
// there is one group, n = 1.
func byCount(counts []refCount) map[int][]refCount {
	m := make(map[int][]refCount, 1)
	for _, c := range counts {
		m[c.n] = append(m[c.n], c)
	}
	return m
}

// updateRefs runs set (an expression of refs and the bound delta) on the
// rows of counts and returns the size of every row it touched.
func updateRefs(ctx context.Context, q Querier, set string, delta int, counts []refCount) (map[Hash]int64, error) {
	args := make([]any, 0, len(counts)+1)
	args = append(args, delta)
	for i := range counts {
		args = append(args, counts[i].Hash[:])
	}
	rows, err := q.QueryContext(ctx, "UPDATE chunks SET refs = "+set+" WHERE hash IN ("+placeholders(len(counts))+") RETURNING hash, size", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[Hash]int64, len(counts))
	for rows.Next() {
		var hb []byte
		var size int64
		if err := rows.Scan(&hb, &size); err != nil {
			return nil, err
		}
		h, err := blobHash(hb)
		if err != nil {
			return nil, err
		}
		found[h] = size
	}
	return found, rows.Err()
}

// AddRefs counts one more reference for each ref, inside the caller's
// transaction; a hash appearing twice counts twice. A hash without a row
// gets one, its bytes taken from a stage (inline) or its file (which must
// exist with the ref's size); a hash with neither is ErrUnknownHash. On
// error the caller rolls back: earlier refs of the call may be counted.
func (s *Store) AddRefs(ctx context.Context, q Querier, refs []Ref) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	counts, err := countRefs("add ref", refs)
	if err != nil {
		return err
	}
	for start := 0; start < len(counts); start += batchSize {
		if err := s.addRefs(ctx, q, counts[start:min(start+batchSize, len(counts))]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) addRefs(ctx context.Context, q Querier, counts []refCount) error {
	found := make(map[Hash]int64, len(counts))
	for n, group := range byCount(counts) {
		got, err := updateRefs(ctx, q, "refs + ?", n, group)
		if err != nil {
			return fmt.Errorf("add refs: %w", err)
		}
		for h, size := range got {
			found[h] = size
		}
	}
	var missing []refCount
	for _, c := range counts {
		size, ok := found[c.Hash]
		switch {
		case !ok:
			missing = append(missing, c)
		case size != int64(c.Size):
			return fmt.Errorf("add ref %s: %w: stored %d bytes, ref says %d", c.Hash, ErrSizeMismatch, size, c.Size)
		}
	}
	if len(missing) == 0 {
		return nil
	}

	// New rows. Inline bytes come from the pins; file chunks are taken off
	// the pending sweep before their file is checked, so that a Finish
	// racing with this transaction cannot unlink a file it is about to
	// reference.
	data := make([][]byte, len(missing))
	var staged, onDisk []Hash // file chunks written by a stage, found on disk
	s.mu.Lock()
	for i, c := range missing {
		p := s.pins[c.Hash]
		if p != nil && p.data != nil {
			if len(p.data) != int(c.Size) {
				s.mu.Unlock()
				return fmt.Errorf("add ref %s: %w: staged %d bytes, ref says %d", c.Hash, ErrSizeMismatch, len(p.data), c.Size)
			}
			data[i] = p.data
			continue
		}
		if p != nil && p.onDisk {
			staged = append(staged, c.Hash)
		} else {
			onDisk = append(onDisk, c.Hash)
		}
		s.spareLocked(c.Hash)
	}
	s.mu.Unlock()
	for i, c := range missing {
		if data[i] == nil && (s.dir == "" || !s.statChunk(c.Hash, int64(c.Size))) {
			return fmt.Errorf("add ref %s: %w", c.Hash, ErrUnknownHash)
		}
	}
	if err := s.syncDirs(staged, onDisk); err != nil {
		return fmt.Errorf("add refs: %w", err)
	}

	args := make([]any, 0, 4*len(missing))
	var sql strings.Builder
	sql.WriteString("INSERT INTO chunks(hash, size, refs, data) VALUES ")
	for i, c := range missing {
		if i > 0 {
			sql.WriteByte(',')
		}
		sql.WriteString("(?,?,?,?)")
		var d any // NULL for a file chunk
		if data[i] != nil {
			d = data[i]
		}
		args = append(args, c.Hash[:], c.Size, c.n, d)
	}
	// The conflict clause only matters to a caller outside a transaction
	// racing another writer; inside one, the UPDATE above saw every row.
	sql.WriteString(" ON CONFLICT(hash) DO UPDATE SET refs = refs + excluded.refs")
	if _, err := q.ExecContext(ctx, sql.String(), args...); err != nil {
		return fmt.Errorf("add refs: %w", err)
	}
	return nil
}

// DropRefs counts one reference less for each ref (never below zero);
// a hash appearing twice counts twice. A hash without a row is
// ErrUnknownHash; on error the caller rolls back.
func (s *Store) DropRefs(ctx context.Context, q Querier, refs []Ref) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	counts, err := countRefs("drop ref", refs)
	if err != nil {
		return err
	}
	for start := 0; start < len(counts); start += batchSize {
		batch := counts[start:min(start+batchSize, len(counts))]
		found := make(map[Hash]int64, len(batch))
		for n, group := range byCount(batch) {
			got, err := updateRefs(ctx, q, "max(refs - ?, 0)", n, group)
			if err != nil {
				return fmt.Errorf("drop refs: %w", err)
			}
			for h, size := range got {
				found[h] = size
			}
		}
		for _, c := range batch {
			size, ok := found[c.Hash]
			switch {
			case !ok:
				return fmt.Errorf("drop ref %s: %w", c.Hash, ErrUnknownHash)
			case size != int64(c.Size):
				return fmt.Errorf("drop ref %s: %w: stored %d bytes, ref says %d", c.Hash, ErrSizeMismatch, size, c.Size)
			}
		}
	}
	return nil
}

// Has returns the hashes whose bytes are present, in input order with
// duplicates kept: a chunk a live stage holds, or a row whose bytes are
// intact (inline data of the row's size, or a file of that size). A row
// without its bytes counts as absent, so the sender ships it again.
//
// A present chunk no manifest references may still be collected by a GC
// before the caller references it; callers that probe and then apply do
// not collect in between.
func (s *Store) Has(ctx context.Context, q Querier, hashes []Hash) ([]Hash, error) {
	present := make(map[Hash]bool, len(hashes))
	ask := make([]Hash, 0, len(hashes))
	s.mu.Lock()
	for _, h := range hashes {
		if _, seen := present[h]; seen {
			continue
		}
		p := s.pins[h]
		held := p != nil && (p.data != nil || p.onDisk)
		present[h] = held
		if !held {
			ask = append(ask, h)
		}
	}
	s.mu.Unlock()

	for start := 0; start < len(ask); start += batchSize {
		batch := ask[start:min(start+batchSize, len(ask))]
		args := make([]any, len(batch))
		for i := range batch {
			args[i] = batch[i][:]
		}
		// length() of a blob reads the record header, not the bytes.
		rows, err := q.QueryContext(ctx, "SELECT hash, size, length(data) FROM chunks WHERE hash IN ("+placeholders(len(batch))+")", args...)
		if err != nil {
			return nil, fmt.Errorf("has chunks: %w", err)
		}
		var files []Ref
		for rows.Next() {
			var hb []byte
			var size int64
			var dataLen *int64
			if err := rows.Scan(&hb, &size, &dataLen); err != nil {
				rows.Close()
				return nil, fmt.Errorf("has chunks: %w", err)
			}
			h, err := blobHash(hb)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("has chunks: %w", err)
			}
			switch {
			case dataLen != nil:
				present[h] = *dataLen == size
			case s.dir != "":
				files = append(files, Ref{Hash: h, Size: uint32(size)})
			}
			if dataLen != nil && !present[h] || dataLen == nil && s.dir == "" {
				s.log.Warn("stored chunk has lost its bytes; reporting it absent", "hash", h)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("has chunks: %w", err)
		}
		for _, r := range files {
			if present[r.Hash] = s.statChunk(r.Hash, int64(r.Size)); !present[r.Hash] {
				s.log.Warn("chunk file missing or short; reporting the chunk absent", "hash", r.Hash)
			}
		}
	}

	out := make([]Hash, 0, len(hashes))
	for _, h := range hashes {
		if present[h] {
			out = append(out, h)
		}
	}
	return out, nil
}

// placeholders returns "?,?,...,?" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

// blobHash converts a hash column.
func blobHash(b []byte) (Hash, error) {
	if len(b) != len(Hash{}) {
		return Hash{}, fmt.Errorf("%w: a stored hash has %d bytes", ErrCorrupt, len(b))
	}
	return Hash(b), nil
}
