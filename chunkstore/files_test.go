package chunkstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Tests of the split layout's files; the behaviour every layout shares is
// in the conformance suite.

func TestSplitLayoutKeepsFullChunksInFilesSmallerInPacksSmallInRows(t *testing.T) {
	s, db := splitStore(t, 0, true)
	m := commitFile(t, s, db, 1, ChunkSize, s.inlineMax+1, s.inlineMax, 10)
	for i, r := range m {
		var outside, inPack bool
		if err := db.QueryRow("SELECT data IS NULL, pack IS NOT NULL FROM chunks WHERE hash = ?", r.Hash[:]).Scan(&outside, &inPack); err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(s.filePath(r.Hash))
		if got, want := outside, i < 2; got != want {
			t.Errorf("chunk %d (%d bytes): row without data = %v, want %v", i, r.Size, got, want)
		}
		if got, want := inPack, i == 1 || i == 0 && s.packMax >= ChunkSize; got != want {
			t.Errorf("chunk %d (%d bytes): in a pack = %v, want %v", i, r.Size, got, want)
		}
		if got, want := statErr == nil, i < 2 && !inPack; got != want {
			t.Errorf("chunk %d (%d bytes): file exists = %v, want %v", i, r.Size, got, want)
		}
	}
}

func TestDefaultInlineMaxFollowsNoSync(t *testing.T) {
	// Distinct defaults: the real ones are both 4 KiB.
	const def, noSyncDef = 1000, 2000
	for _, c := range []struct {
		opts Options
		want int
	}{
		{Options{}, def},
		{Options{NoSync: true}, noSyncDef},
		{Options{InlineMax: 100}, 100},
		{Options{NoSync: true, InlineMax: 100}, 100},
	} {
		if got := pickInlineMax(c.opts, def, noSyncDef); got != c.want {
			t.Errorf("pickInlineMax(%+v) = %d, want %d", c.opts, got, c.want)
		}
	}
	for _, c := range []struct {
		opts Options
		want int
	}{
		{Options{Dir: t.TempDir()}, DefaultInlineMax},
		{Options{Dir: t.TempDir(), NoSync: true}, DefaultInlineMaxNoSync},
		{Options{Dir: t.TempDir(), NoSync: true, InlineMax: 100}, 100},
	} {
		if got := newTestStore(t, c.opts).inlineMax; got != c.want {
			t.Errorf("New(%+v): InlineMax %d, want %d", c.opts, got, c.want)
		}
	}
	if _, err := New(Options{InlineMax: -1}); err == nil {
		t.Errorf("New with a negative InlineMax succeeded")
	}
}

func TestPutOfAnExistingFileChunkDoesNotRewriteIt(t *testing.T) {
	s, db := splitStore(t, 0, true)
	m := commitFile(t, s, db, 2, ChunkSize)
	before, err := os.Stat(s.filePath(m[0].Hash))
	if err != nil {
		t.Fatal(err)
	}
	st := s.NewStage()
	defer st.Release()
	put(t, st, chunkBytes(2, ChunkSize))
	put(t, st, chunkBytes(2, ChunkSize))
	after, err := os.Stat(s.filePath(m[0].Hash))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the chunk file was rewritten by a Put of the same bytes")
	}
	if got := st.Len(); got != 1 {
		t.Fatalf("stage holds %d chunks after two Puts of one, want 1", got)
	}
}

// droppedFileSweep commits a file of one chunk (of seed) to a split
// store, drops its refs and runs a GC whose sweep it returns unfinished.
func droppedFileSweep(t *testing.T, seed uint64) (*Store, *sql.DB, Manifest, *Sweep) {
	t.Helper()
	s, db := splitStore(t, 0, true)
	m := commitFile(t, s, db, seed, ChunkSize)
	dropRefs(t, s, db, m)
	return s, db, m, startGC(t, s, db)
}

func TestFinishKeepsAFileStagedAfterGC(t *testing.T) {
	s, db, m, sw := droppedFileSweep(t, 3)
	// The row is gone; before Finish a push stages the same bytes.
	st := s.NewStage()
	defer st.Release()
	put(t, st, chunkBytes(3, ChunkSize))
	gc, err := sw.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := gc, (GCStats{Rows: 1}); got != want {
		t.Fatalf("Finish = %+v, want %+v (the pinned file kept)", got, want)
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, m) })
	checkContent(t, s, db, m, 3)
}

func TestNewerGCSupersedesAnUnfinishedSweep(t *testing.T) {
	s, db := splitStore(t, 0, true)
	m := commitFile(t, s, db, 4, ChunkSize, ChunkSize)
	// Past the first sweep's scan of the whole Dir, and past the sweep that
	// looks at the released stage's files.
	collect(t, s, db)
	dropRefs(t, s, db, m)
	first := startGC(t, s, db)
	// The caller crashed its goroutine before Finish; a later GC runs.
	second := collect(t, s, db)
	if got, want := second, (GCStats{Files: 2, Bytes: 2 * ChunkSize}); got != want {
		t.Fatalf("the newer GC = %+v, want %+v (the first sweep's files)", got, want)
	}
	if got, err := first.Finish(); err != nil || got != (GCStats{Rows: 2}) {
		t.Fatalf("the superseded Finish = %+v, %v; want its rows and no files", got, err)
	}
	if got := countChunkFiles(t, s); got != 0 {
		t.Fatalf("chunk files = %d, want 0", got)
	}
}

func TestFinishTwiceIsANoOp(t *testing.T) {
	_, _, _, sw := droppedFileSweep(t, 5)
	if got, err := sw.Finish(); err != nil || got.Files != 1 {
		t.Fatalf("Finish = %+v, %v; want one file", got, err)
	}
	if got, err := sw.Finish(); err != nil || got != (GCStats{}) {
		t.Fatalf("second Finish = %+v, %v; want nothing", got, err)
	}
}

func TestReadAfterGCDoesNotServeAnUnlinkedCachedFile(t *testing.T) {
	s, db := splitStore(t, 0, true)
	m := commitFile(t, s, db, 6, ChunkSize)
	checkContent(t, s, db, m, 6) // opens and caches the file
	dropRefs(t, s, db, m)
	collect(t, s, db)
	_, err := s.ReadAt(context.Background(), db, m[0], make([]byte, 10), 0)
	if !errors.Is(err, ErrUnknownHash) {
		t.Fatalf("ReadAt of a collected chunk: %v, want ErrUnknownHash", err)
	}
}

func TestChangingInlineMaxKeepsOldChunksReadable(t *testing.T) {
	dir := t.TempDir()
	db := openFileDB(t, filepath.Join(dir, "state.db"))
	chunks := filepath.Join(dir, "chunks")
	sizes := []int{ChunkSize, 100 << 10, 20 << 10, 2000}

	s := newTestStore(t, Options{Dir: chunks, InlineMax: 1024, NoSync: true})
	a := commitFile(t, s, db, 7, sizes...)
	s.Close()

	s = newTestStore(t, Options{Dir: chunks, InlineMax: 200 << 10, NoSync: true})
	checkContent(t, s, db, a, 7)
	if got := has(t, s, db, hashes(a)...); len(got) != len(a) {
		t.Fatalf("Has under the new threshold = %d chunks, want %d", len(got), len(a))
	}
	b := commitFile(t, s, db, 17, sizes...)
	s.Close()

	s = newTestStore(t, Options{Dir: chunks, InlineMax: 1024, NoSync: true})
	checkContent(t, s, db, a, 7)
	checkContent(t, s, db, b, 17)
	dropRefs(t, s, db, append(append(Manifest{}, a...), b...))
	collect(t, s, db)
	if got := countChunkFiles(t, s); got != 0 {
		t.Fatalf("chunk files after dropping everything = %d, want 0", got)
	}
}

func TestClosedStoreRefusesWork(t *testing.T) {
	s, db := splitStore(t, 0, true)
	st := s.NewStage()
	r := put(t, st, chunkBytes(8, 100))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st.Release() // after Close: no panic
	if _, err := s.NewStage().PutHashed(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("PutHashed after Close: %v, want ErrClosed", err)
	}
	if err := s.AddRefs(context.Background(), db, []Ref{r}); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddRefs after Close: %v, want ErrClosed", err)
	}
	if _, err := s.GC(context.Background(), db); !errors.Is(err, ErrClosed) {
		t.Fatalf("GC after Close: %v, want ErrClosed", err)
	}
}

func TestFDCacheEvictsBeyondItsSize(t *testing.T) {
	s, db := splitStore(t, 0, true)
	s.fds = newFDCache(2)
	m := commitFile(t, s, db, 9, ChunkSize, ChunkSize, ChunkSize, ChunkSize)
	checkContent(t, s, db, m, 9)
	checkContent(t, s, db, m, 9)
	s.fds.mu.Lock()
	open := len(s.fds.m)
	s.fds.mu.Unlock()
	if open != 2 {
		t.Fatalf("cached files = %d, want 2", open)
	}
}

func TestConcurrentGCNeverTakesStagedOrCommittedBytes(t *testing.T) {
	dir := t.TempDir()
	// Immediate transactions: two writers queue on the busy timeout instead
	// of failing a read-to-write upgrade.
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "state.db"))+"&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := Schema(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), NoSync: true})
	ctx := context.Background()

	// The collector runs whenever kicked, concurrently with the loop below.
	kick := make(chan struct{}, 1)
	gcDone := make(chan error, 1)
	go func() {
		for range kick {
			tx, err := db.Begin()
			if err != nil {
				gcDone <- err
				return
			}
			sw, err := s.GC(ctx, tx)
			if err == nil {
				err = tx.Commit()
			} else {
				tx.Rollback()
			}
			if err == nil {
				_, err = sw.Finish()
			}
			if err != nil {
				gcDone <- err
				return
			}
		}
		gcDone <- nil
	}()
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}

	// A few chunks go round and round: staged, committed, dropped, re-staged.
	sizes := []int{ChunkSize, 100 << 10, 1000}
	for i := range 60 {
		seed := uint64(900 + i%3)
		size := sizes[i%3]
		st := s.NewStage()
		poke()
		r := put(t, st, chunkBytes(seed, size))
		poke()
		if got := has(t, s, db, r.Hash); len(got) != 1 {
			t.Fatalf("round %d: a staged chunk is absent", i)
		}
		inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(ctx, tx, []Ref{r}) })
		poke()
		st.Release()
		checkContent(t, s, db, Manifest{r}, seed)
		dropRefs(t, s, db, []Ref{r})
		poke()
	}
	close(kick)
	if err := <-gcDone; err != nil {
		t.Fatal(err)
	}
}

func TestAddRefsSyncsTheDirectoriesOfNewChunkFiles(t *testing.T) {
	s, db := splitStore(t, 0, false)
	st := s.NewStage()
	defer st.Release()
	m := Manifest{put(t, st, chunkBytes(11, ChunkSize)), put(t, st, chunkBytes(12, ChunkSize))}
	dirty := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.dirtyDirs)
	}
	if got := dirty(); got == 0 {
		t.Fatalf("no directory awaits a sync after two chunk files were written")
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, m) })
	if got := dirty(); got != 0 {
		t.Fatalf("%d directories still unsynced after AddRefs named their files", got)
	}
}

// Span gives the chunk file of a full chunk and nothing else (not a chunk
// in a pack or a row, not a hole, not bytes past the chunk's end), and
// the span reads the chunk's bytes for as long as it is held, even after
// the chunk is collected and its file unlinked.
func TestSpanOfAChunkFileOutlivesItsUnlink(t *testing.T) {
	s, db := splitStore(t, 0, true)
	m := commitFile(t, s, db, 11, ChunkSize, 100<<10, 100)
	data := chunkBytes(11, ChunkSize)
	sp, ok := s.Span(m[0], 4096, 128<<10)
	if !ok {
		t.Fatal("no span of a full chunk's file")
	}
	for _, c := range []struct {
		what   string
		r      Ref
		off, n int
	}{
		{"a chunk in a pack", m[1], 0, 64 << 10},
		{"a chunk in a row", m[2], 0, 100},
		{"a hole", Ref{Hash: HoleHash, Size: ChunkSize}, 0, 64 << 10},
		{"past the chunk's end", m[0], ChunkSize - 100, 200},
		{"a negative offset", m[0], -1, 10},
	} {
		if other, ok := s.Span(c.r, int64(c.off), c.n); ok {
			other.Release()
			t.Errorf("a span of %s", c.what)
		}
	}
	dropRefs(t, s, db, m)
	collect(t, s, db)
	if _, err := os.Stat(s.filePath(m[0].Hash)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the collected chunk's file: %v", err)
	}
	got := make([]byte, sp.N)
	if _, err := sp.File.ReadAt(got, sp.Off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[4096:4096+128<<10]) {
		t.Fatal("the span reads other bytes")
	}
	sp.Release()
	sp.Release() // twice: harmless
}
