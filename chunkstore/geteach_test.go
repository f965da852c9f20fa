package chunkstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
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

// TestGetEachReadsRecordsIntoOneBuffer: the bytes GetEach hands out for
// pack records are read into one buffer it reuses, whether it learned a
// record's place from its row (one read for header and bytes) or from an
// earlier read (two), so reading 4 MiB of records allocates far less than
// 4 MiB; every chunk still comes back whole, and a record whose header
// no longer matches is ErrCorrupt.
func TestGetEachReadsRecordsIntoOneBuffer(t *testing.T) {
	ctx := context.Background()
	s, db := packStore(t, 64<<20)
	sizes := make([]int, 64)
	for i := range sizes {
		sizes[i] = 64<<10 - i
	}
	m := commitFile(t, s, db, 4000, sizes...)
	hs := hashes(m)
	want := make([][]byte, len(sizes))
	for i, n := range sizes {
		want[i] = chunkBytes(4000+uint64(i), n)
	}
	read := func(what string, forget bool) {
		t.Helper()
		// The fewest bytes of three tries: TotalAlloc counts every
		// goroutine of the test binary.
		least := uint64(math.MaxUint64)
		for range 3 {
			if forget {
				s.mu.Lock()
				clear(s.locs)
				s.mu.Unlock()
			}
			var before, after runtime.MemStats
			i := 0
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := s.GetEach(ctx, db, hs, func(h Hash, data []byte) error {
				if h != hs[i] || !bytes.Equal(data, want[i]) {
					t.Fatalf("%s: chunk %d: wrong bytes", what, i)
				}
				i++
				return nil
			})
			runtime.ReadMemStats(&after)
			if err != nil || i != len(hs) {
				t.Fatalf("%s: GetEach: %d of %d chunks, %v", what, i, len(hs), err)
			}
			least = min(least, after.TotalAlloc-before.TotalAlloc)
		}
		if least > 1<<20 {
			t.Errorf("%s: reading %d records of 64 KiB allocated %d bytes, want under 1 MiB", what, len(hs), least)
		}
	}
	read("places from the rows", true)
	read("places remembered", false)

	var pack, off int64
	if err := db.QueryRow("SELECT pack, pack_off FROM chunks WHERE hash = ?", m[5].Hash[:]).Scan(&pack, &off); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(s.packs.path(pack), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The record's hash in its header: its row still names it there.
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, off+8); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, remembered := range []bool{true, false} {
		if !remembered {
			s.mu.Lock()
			clear(s.locs)
			s.mu.Unlock()
		}
		err := s.GetEach(ctx, db, hs[4:7], func(Hash, []byte) error { return nil })
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("GetEach over a damaged record header (place remembered %v): %v, want ErrCorrupt", remembered, err)
		}
	}
}

// TestCheckThenPutChecked: Check refuses bytes of another hash, an empty
// chunk and one over ChunkSize; what it passes stages without a second
// hash and reads back; a Checked no Check made is refused.
func TestCheckThenPutChecked(t *testing.T) {
	ctx := context.Background()
	s, db := packStore(t, 64<<20)
	data := chunkBytes(77, 10<<10)
	h := Sum(data)
	for _, bad := range []struct {
		name string
		h    Hash
		data []byte
		want error
	}{
		{"bytes of another hash", Sum([]byte("x")), data, ErrHashMismatch},
		{"empty", Sum(nil), nil, ErrEmptyChunk},
		{"too large", Sum(make([]byte, ChunkSize+1)), make([]byte, ChunkSize+1), ErrChunkTooLarge},
	} {
		if _, err := Check(bad.h, bad.data); !errors.Is(err, bad.want) {
			t.Errorf("Check of %s: %v, want %v", bad.name, err, bad.want)
		}
	}
	c, err := Check(h, data)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Ref(); r.Hash != h || r.Size != uint32(len(data)) {
		t.Fatalf("Ref = %v", r)
	}
	st := s.NewStage()
	defer st.Release()
	if err := st.PutChecked(ctx, Checked{}); err == nil {
		t.Fatal("PutChecked of a Checked no Check made succeeded")
	}
	if err := st.PutChecked(ctx, c); err != nil {
		t.Fatal(err)
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(ctx, tx, []Ref{c.Ref()}) })
	got, err := s.Get(ctx, db, h)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after PutChecked: %d bytes, %v", len(got), err)
	}
}
