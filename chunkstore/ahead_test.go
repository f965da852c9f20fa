package chunkstore

import (
	"bytes"
	"context"
	"testing"
)

// TestPrefetchSparesTheReadsTheirRows: after Prefetch of inline and pack
// chunks (one query for all of them), reading each runs no query and
// returns its bytes; a chunk file needs no row and is not read ahead, a
// hole is skipped, and a chunk prefetched twice is read once.
func TestPrefetchSparesTheReadsTheirRows(t *testing.T) {
	ctx := context.Background()
	s, db := splitStore(t, 4<<10, true)
	want := make(map[Hash][]byte)
	var refs []Ref
	commit := func(seed uint64, sizes ...int) {
		for i, r := range commitFile(t, s, db, seed, sizes...) {
			want[r.Hash] = chunkBytes(seed+uint64(i), int(r.Size))
			refs = append(refs, r)
		}
	}
	commit(100, 10, 100, 1000, 4<<10)        // inline rows
	commit(200, 8<<10, 100<<10, ChunkSize-1) // pack records
	commit(300, ChunkSize)                   // a chunk file
	s.mu.Lock()
	clear(s.locs) // no read has seen the packs yet
	s.mu.Unlock()

	q := &countingQuerier{Querier: db}
	asked := append(append([]Ref(nil), refs...), refs[0], Ref{Hash: HoleHash, Size: 4096})
	n, err := s.Prefetch(ctx, q, asked)
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 || q.queries != 1 || q.rows != 0 {
		t.Fatalf("Prefetch read %d rows in %d queries (%d row queries), want 7 in 1", n, q.queries, q.rows)
	}
	*q = countingQuerier{Querier: db}
	for _, r := range refs {
		p := make([]byte, r.Size)
		k, err := s.ReadAt(ctx, q, r, p, 0)
		if err != nil || k != int(r.Size) || !bytes.Equal(p, want[r.Hash]) {
			t.Fatalf("read of %d bytes: %d, %v, equal %v", r.Size, k, err, bytes.Equal(p, want[r.Hash]))
		}
	}
	if q.queries != 0 || q.rows != 0 {
		t.Errorf("reads after the prefetch ran %d queries and %d row queries, want none", q.queries, q.rows)
	}
	// A read leaves the chunk kept: a second read of it (another file of
	// the same bytes) runs no query either, and a read-ahead of it again
	// reads no row.
	p := make([]byte, 100)
	if _, err := s.ReadAt(ctx, q, refs[1], p, 0); err != nil || !bytes.Equal(p, want[refs[1].Hash]) {
		t.Fatalf("read again: %v", err)
	}
	if n, err := s.Prefetch(ctx, q, refs[:4]); err != nil || n != 0 {
		t.Errorf("a read-ahead of kept chunks read %d rows (%v), want none", n, err)
	}
	if q.queries != 0 || q.rows != 0 {
		t.Errorf("a second read and read-ahead of kept chunks ran %d queries and %d row queries, want none", q.queries, q.rows)
	}
}

// TestPrefetchServesReadsInParts: a kept chunk read in parts, at any
// offset, runs no query.
func TestPrefetchServesReadsInParts(t *testing.T) {
	ctx := context.Background()
	s, db := splitStore(t, 4<<10, true)
	m := commitFile(t, s, db, 7, 4000)
	want := chunkBytes(7, 4000)
	if _, err := s.Prefetch(ctx, db, m); err != nil {
		t.Fatal(err)
	}
	q := &countingQuerier{Querier: db}
	got := make([]byte, 0, 4000)
	for off := 0; off < 4000; off += 1000 {
		p := make([]byte, 1000)
		if _, err := s.ReadAt(ctx, q, m[0], p, int64(off)); err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, want) || q.rows != 0 {
		t.Errorf("four partial reads: equal %v, %d row queries (want none)", bytes.Equal(got, want), q.rows)
	}
}

// TestPrefetchHoldsAtMostAheadMax: a read-ahead of more inline bytes than
// aheadMax keeps the newest within the bound.
func TestPrefetchHoldsAtMostAheadMax(t *testing.T) {
	ctx := context.Background()
	s, db := splitStore(t, 4<<10, true)
	sizes := make([]int, 2*aheadMax/(4<<10)+10)
	for i := range sizes {
		sizes[i] = 4 << 10
	}
	m := commitFile(t, s, db, 1, sizes...)
	n, err := s.Prefetch(ctx, db, m)
	if err != nil || n != len(m) {
		t.Fatalf("Prefetch: %d rows, %v; want %d", n, err, len(m))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for _, b := range s.ahead.data {
		total += len(b)
	}
	if total != s.ahead.bytes || total > aheadMax || total < aheadMax-(4<<10) {
		t.Errorf("kept %d bytes (counted %d), want at most %d and nearly that", total, s.ahead.bytes, aheadMax)
	}
	if len(s.ahead.order) != len(s.ahead.data) {
		t.Errorf("order of %d for %d chunks kept", len(s.ahead.order), len(s.ahead.data))
	}
	// The newest are kept: the last chunk's, not the first's.
	if _, ok := s.ahead.data[m[len(m)-1].Hash]; !ok {
		t.Errorf("the newest chunk was dropped")
	}
	if _, ok := s.ahead.data[m[0].Hash]; ok {
		t.Errorf("the oldest chunk is still kept")
	}
}
