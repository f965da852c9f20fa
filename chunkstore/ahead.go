package chunkstore

import (
	"context"
	"slices"
)

// Read-ahead of small chunks.
//
// A cold read of many small files (cat, grep -r, a compiler or a node
// process reading a package) costs one row lookup per file, about half of
// what the mount spends on such a file beyond the loopback's work. A
// reader that expects to read a set of chunks soon (vfs: the other small
// files of a directory whose files are being read one after another)
// hands them to Prefetch, which reads their rows in one query per
// getBatch (GetEach's batchRows): an inline chunk's bytes are kept in a
// small cache, a pack record's location joins the known locations
// (Store.locs). A read then finds them without SQL.
//
// The cache is content-addressed, so what it holds is never stale: a
// hash's bytes are the same whatever happened to its row since. It holds
// at most aheadMax bytes, the oldest going first. A read leaves what it
// found there: files of the same bytes (licences, stubs, a package's
// copies) read it again, and a chunk already kept is not read ahead twice.

// aheadMax bounds the bytes of inline chunks kept for reads to come.
const aheadMax = 4 << 20

// aheadCache is the read-ahead's inline chunks, oldest first.
type aheadCache struct {
	data  map[Hash][]byte
	order []Hash // the keys of data, oldest first
	bytes int
}

// Prefetch reads the rows of the chunks refs name that no read could find
// without SQL, keeping what lets a read skip its row lookup. It returns
// how many rows it read. A chunk not in the store is skipped: its read
// reports it.
func (s *Store) Prefetch(ctx context.Context, q Querier, refs []Ref) (int, error) {
	hs := make([]Hash, 0, len(refs))
	seen := make(map[Hash]struct{}, len(refs))
	s.mu.Lock()
	for _, r := range refs {
		if r.IsHole() || int64(r.Size) > batchInlineMax && !s.packed(int(r.Size)) {
			continue // a file chunk: its read needs no row
		}
		if _, ok := s.ahead.data[r.Hash]; ok {
			continue
		}
		if _, ok := seen[r.Hash]; !ok {
			seen[r.Hash] = struct{}{}
			hs = append(hs, r.Hash)
		}
	}
	s.mu.Unlock()
	read := 0
	for part := range slices.Chunk(hs, getBatch) {
		rows, err := s.batchRows(ctx, q, part)
		if err != nil {
			return read, err
		}
		read += len(rows)
		s.mu.Lock()
		for h, r := range rows {
			switch {
			case r.loc.valid():
				if s.dir != "" {
					s.rememberLocLocked(h, r.loc)
				}
			case r.inline != nil && int64(len(r.inline)) == r.size:
				s.ahead.put(h, r.inline)
			}
		}
		s.mu.Unlock()
	}
	return read, nil
}

// put keeps an inline chunk's bytes, dropping the oldest beyond aheadMax.
// Called with Store.mu held.
func (c *aheadCache) put(h Hash, b []byte) {
	if len(b) > aheadMax {
		return
	}
	if c.data == nil {
		c.data = make(map[Hash][]byte)
	}
	if _, ok := c.data[h]; ok {
		return
	}
	for c.bytes+len(b) > aheadMax && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.data[old])
		delete(c.data, old)
	}
	c.data[h] = b
	c.order = append(c.order, h)
	c.bytes += len(b)
}

// aheadData returns the bytes the read-ahead kept of h, if any.
func (s *Store) aheadData(h Hash) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ahead.data[h]
}
