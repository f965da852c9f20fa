package chunkstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"testing"
)

// countingQuerier counts the queries that reach the database.
type countingQuerier struct {
	Querier
	queries, rows int
}

func (c *countingQuerier) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	c.queries++
	return c.Querier.QueryContext(ctx, q, args...)
}

func (c *countingQuerier) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	c.rows++
	return c.Querier.QueryRowContext(ctx, q, args...)
}

// TestGetEachReadsRowsInBatches: GetEach returns every chunk as Get does,
// in the order asked (duplicates too), with one query per 256 hashes for
// inline and pack chunks whose location no read has cached; a file chunk
// and an inline row larger than batchInlineMax go through Get, one row
// query each. An unknown hash fails the call after the chunks before it,
// and an error from fn stops it.
func TestGetEachReadsRowsInBatches(t *testing.T) {
	ctx := context.Background()
	s, db := splitStore(t, 4<<10, true)
	want := make(map[Hash][]byte)
	var hs []Hash
	commit := func(seed uint64, sizes ...int) {
		m := commitFile(t, s, db, seed, sizes...)
		for i, r := range m {
			want[r.Hash] = chunkBytes(seed+uint64(i), int(r.Size))
			hs = append(hs, r.Hash)
		}
	}
	small := make([]int, 600)
	for i := range small {
		small[i] = 1 + i*7%(4<<10)
	}
	commit(1000, small...)                                   // inline rows
	commit(5000, 8<<10, 9<<10, 10<<10, 100<<10, ChunkSize-1) // pack records
	commit(6000, ChunkSize, ChunkSize)                       // chunk files
	s.inlineMax = 200 << 10                                  // a row stored under an older threshold
	commit(7000, 150<<10)
	s.inlineMax = 4 << 10
	s.mu.Lock()
	clear(s.locs) // no read has seen the packs yet
	s.mu.Unlock()

	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
	hs = append(hs, hs[3], hs[500]) // asked twice
	q := &countingQuerier{Querier: db}
	i := 0
	err := s.GetEach(ctx, q, hs, func(h Hash, data []byte) error {
		if h != hs[i] {
			t.Fatalf("chunk %d: got %s, want %s", i, h, hs[i])
		}
		if !bytes.Equal(data, want[h]) {
			t.Fatalf("chunk %d (%d bytes): wrong bytes", i, len(want[h]))
		}
		i++
		return nil
	})
	if err != nil || i != len(hs) {
		t.Fatalf("GetEach: %d of %d chunks, %v", i, len(hs), err)
	}
	batches := (len(hs) + getBatch - 1) / getBatch
	if q.queries != batches || q.rows != 3 {
		t.Errorf("%d hashes took %d batch queries and %d row queries, want %d and 3 (two files, one large row)", len(hs), q.queries, q.rows, batches)
	}

	unknown := Sum([]byte("never stored"))
	calls := 0
	err = s.GetEach(ctx, db, []Hash{hs[0], hs[1], unknown, hs[2]}, func(Hash, []byte) error { calls++; return nil })
	if !errors.Is(err, ErrUnknownHash) || calls != 2 {
		t.Errorf("with an unknown third hash: %d calls, %v; want 2 and ErrUnknownHash", calls, err)
	}
	stop := errors.New("stop")
	calls = 0
	err = s.GetEach(ctx, db, hs, func(Hash, []byte) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn failing: %d calls, %v; want 1 and its error", calls, err)
	}
}

func TestPadIn(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 129: 256, 256: 256} {
		if got := PadIn(n); got != want {
			t.Errorf("PadIn(%d) = %d, want %d", n, got, want)
		}
	}
}
