package chunkstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// RunConformance checks the chunk store's contract against one layout.
// newStore returns an empty store and its database (schema created); both
// are closed by the test's cleanups. A subtest that needs a layout feature
// (chunk files) says so when it skips.
func RunConformance(t *testing.T, newStore func(t *testing.T) (*Store, *sql.DB)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *Store, db *sql.DB)
	}{
		{"DedupStoresSameBytesOnce", testDedup},
		{"OverwriteFreesOldChunksOnGC", testOverwriteGC},
		{"DeleteFreesEveryChunkOnGC", testDeleteGC},
		{"SharedChunkSurvivesUntilLastRefDropped", testSharedChunk},
		{"HasKeepsOrderAndDuplicatesAndSkipsAbsent", testHasOrder},
		{"HasTreatsMissingOrShortBytesAsAbsent", testHasDamaged},
		{"PutRefusesBytesThatDoNotMatchTheHash", testPutMismatch},
		{"PutRefusesOversizedAndEmptyChunks", testPutSize},
		{"PutCopiesTheCallersBuffer", testPutCopies},
		{"AddRefsOfUnknownHashFailsAndRollbackChangesNothing", testAddUnknown},
		{"AddRefsRefusesSizeDisagreement", testAddSizeMismatch},
		{"DropRefsOfUnknownHashFails", testDropUnknown},
		{"DropRefsNeverGoesBelowZero", testDropBelowZero},
		{"DuplicateRefsInOneCallCountTwice", testDuplicateRefs},
		{"StagedChunksSurviveGCUntilRelease", testStagedSurviveGC},
		{"StagePinsUnreferencedRowAgainstGC", testStagePinsRow},
		{"ReleasedUncommittedStageIsCollected", testReleasedOrphan},
		{"RolledBackGCRemovesNothing", testGCRollback},
		{"AddRefsAfterGCInSameTransactionKeepsBytes", testAddAfterGC},
		{"ReadAtOffsetsAndEOF", testReadAt},
		{"GetReturnsWholeChunk", testGet},
		{"ConcurrentPutsIntoOneStage", testConcurrentPut},
		{"StatsCountRowsBytesAndStaged", testStats},
		{"ManyRefsSpanSeveralBatches", testManyRefs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, db := newStore(t)
			tt.fn(t, s, db)
		})
	}
}

// Chunk sizes that land on both sides of every layout's threshold.
var suiteSizes = []int{1, 700, 5000, 100 << 10, ChunkSize}

// put stages data and returns its ref.
func put(t testing.TB, st *Stage, data []byte) Ref {
	t.Helper()
	r, err := st.PutHashed(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// commitFile stages chunks of the given sizes, references them in one
// transaction, releases the stage, and returns the manifest.
func commitFile(t testing.TB, s *Store, db *sql.DB, seed uint64, sizes ...int) Manifest {
	t.Helper()
	st := s.NewStage()
	defer st.Release()
	var m Manifest
	for i, size := range sizes {
		m = append(m, put(t, st, chunkBytes(seed+uint64(i), size)))
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, m) })
	return m
}

func dropRefs(t testing.TB, s *Store, db *sql.DB, refs []Ref) {
	t.Helper()
	inTx(t, db, func(tx *sql.Tx) error { return s.DropRefs(context.Background(), tx, refs) })
}

// collect runs GC in a transaction, commits, and finishes the sweep.
func collect(t testing.TB, s *Store, db *sql.DB) GCStats {
	t.Helper()
	st, err := startGC(t, s, db).Finish()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startGC runs GC in a transaction and commits: the sweep is not finished.
func startGC(t testing.TB, s *Store, db *sql.DB) *Sweep {
	t.Helper()
	var sw *Sweep
	inTx(t, db, func(tx *sql.Tx) (err error) {
		sw, err = s.GC(context.Background(), tx)
		return err
	})
	return sw
}

func stats(t testing.TB, s *Store, db *sql.DB) Stats {
	t.Helper()
	st, err := s.Stats(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func has(t testing.TB, s *Store, q Querier, hashes ...Hash) []Hash {
	t.Helper()
	got, err := s.Has(context.Background(), q, hashes)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func hashes(m []Ref) []Hash {
	out := make([]Hash, len(m))
	for i, r := range m {
		out[i] = r.Hash
	}
	return out
}

// checkContent reads every chunk of m back whole and in pieces.
func checkContent(t testing.TB, s *Store, q Querier, m Manifest, seed uint64) {
	t.Helper()
	for i, r := range m {
		want := chunkBytes(seed+uint64(i), int(r.Size))
		got, err := s.Get(context.Background(), q, r.Hash)
		if err != nil {
			t.Fatalf("chunk %d: Get: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("chunk %d: Get returned different bytes", i)
		}
		p := make([]byte, int(r.Size))
		n, err := s.ReadAt(context.Background(), q, r, p, 0)
		if err != nil && err != io.EOF || n != len(p) || !bytes.Equal(p, want) {
			t.Fatalf("chunk %d: ReadAt = %d, %v; want %d bytes equal", i, n, err, len(p))
		}
	}
	var hs []Hash
	for _, r := range m {
		hs = append(hs, r.Hash)
	}
	i := 0
	err := s.GetEach(context.Background(), q, hs, func(h Hash, got []byte) error {
		if h != hs[i] || !bytes.Equal(got, chunkBytes(seed+uint64(i), int(m[i].Size))) {
			t.Fatalf("chunk %d: GetEach returned different bytes", i)
		}
		i++
		return nil
	})
	if err != nil || i != len(hs) {
		t.Fatalf("GetEach: %d of %d chunks, %v", i, len(hs), err)
	}
}

// layoutBytes splits the sizes into the bytes s keeps in rows and outside
// them (chunk files and packs).
func layoutBytes(s *Store, sizes ...int) (inline, files int64) {
	for _, n := range sizes {
		if s.inline(n) {
			inline += int64(n)
		} else {
			files += int64(n)
		}
	}
	return inline, files
}

// fileBytes is the bytes of the sizes s keeps as chunk files of their own.
func fileBytes(s *Store, sizes ...int) int64 {
	var n int64
	for _, size := range sizes {
		if !s.inline(size) && !s.packed(size) {
			n += int64(size)
		}
	}
	return n
}

func testDedup(t *testing.T, s *Store, db *sql.DB) {
	a := commitFile(t, s, db, 1, suiteSizes...)
	b := commitFile(t, s, db, 1, suiteSizes...) // same bytes at a second path
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same bytes gave manifests %v and %v", a, b)
	}
	inline, files := layoutBytes(s, suiteSizes...)
	got := stats(t, s, db)
	want := Stats{Chunks: int64(len(suiteSizes)), InlineBytes: inline, FileBytes: files}
	if got != want {
		t.Fatalf("stats after two paths with the same bytes = %+v, want %+v", got, want)
	}
	if s.dir != "" {
		if got, want := countChunkFiles(t, s), int(countFileChunks(s, suiteSizes...)); got != want {
			t.Fatalf("chunk files = %d, want %d", got, want)
		}
	}
	// One path deleted: the other still reads.
	dropRefs(t, s, db, a)
	if st := collect(t, s, db); st.Rows != 0 {
		t.Fatalf("GC with one path left deleted %d rows, want 0", st.Rows)
	}
	checkContent(t, s, db, b, 1)
}

// countFileChunks counts the sizes s keeps as chunk files of their own.
func countFileChunks(s *Store, sizes ...int) int64 {
	var n int64
	for _, size := range sizes {
		if !s.inline(size) && !s.packed(size) {
			n++
		}
	}
	return n
}

// countChunkFiles counts the chunk files (not temp files) in s's Dir.
func countChunkFiles(t testing.TB, s *Store) int {
	t.Helper()
	files, err := s.scanDir()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if !f.temp {
			n++
		}
	}
	return n
}

func testOverwriteGC(t *testing.T, s *Store, db *sql.DB) {
	old := commitFile(t, s, db, 10, ChunkSize, ChunkSize, 3000)
	// Overwrite the middle chunk and the tail: one transaction adds the new
	// manifest's refs and drops the old one's.
	st := s.NewStage()
	neu := Manifest{old[0], put(t, st, chunkBytes(20, ChunkSize)), put(t, st, chunkBytes(21, 100))}
	inTx(t, db, func(tx *sql.Tx) error {
		if err := s.AddRefs(context.Background(), tx, neu); err != nil {
			return err
		}
		return s.DropRefs(context.Background(), tx, old)
	})
	st.Release()

	if got, want := stats(t, s, db).Unreferenced, int64(2); got != want {
		t.Fatalf("unreferenced rows after overwrite = %d, want %d", got, want)
	}
	gc := collect(t, s, db)
	inline, files := layoutBytes(s, ChunkSize, 3000)
	if got, want := gc, (GCStats{Rows: 2, Files: countFileChunks(s, ChunkSize, 3000), Bytes: inline + files}); got != want {
		t.Fatalf("GC after overwrite = %+v, want %+v", got, want)
	}
	if got, want := has(t, s, db, hashes(old)...), []Hash{old[0].Hash}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Has(old chunks) after GC = %v, want only the shared first chunk %v", got, want)
	}
	checkContent(t, s, db, neu[:1], 10)
	checkContent(t, s, db, neu[1:2], 20)
	checkContent(t, s, db, neu[2:], 21)
	if got := collect(t, s, db); got != (GCStats{}) {
		t.Fatalf("second GC = %+v, want nothing", got)
	}
}

func testDeleteGC(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 30, suiteSizes...)
	dropRefs(t, s, db, m)
	gc := collect(t, s, db)
	inline, files := layoutBytes(s, suiteSizes...)
	want := GCStats{Rows: int64(len(m)), Files: countFileChunks(s, suiteSizes...), Bytes: inline + files}
	if gc != want {
		t.Fatalf("GC after delete = %+v, want %+v", gc, want)
	}
	if got := stats(t, s, db); got != (Stats{}) {
		t.Fatalf("stats after delete and GC = %+v, want zero", got)
	}
	if got := has(t, s, db, hashes(m)...); len(got) != 0 {
		t.Fatalf("Has after delete and GC = %v, want none", got)
	}
	if s.dir != "" {
		if got := countChunkFiles(t, s); got != 0 {
			t.Fatalf("chunk files after delete and GC = %d, want 0", got)
		}
	}
	_, err := s.Get(context.Background(), db, m[0].Hash)
	if !errors.Is(err, ErrUnknownHash) {
		t.Fatalf("Get of a collected chunk: %v, want ErrUnknownHash", err)
	}
}

func testSharedChunk(t *testing.T, s *Store, db *sql.DB) {
	a := commitFile(t, s, db, 40, ChunkSize, 10)
	b := commitFile(t, s, db, 40, ChunkSize, 10)
	dropRefs(t, s, db, a)
	collect(t, s, db)
	checkContent(t, s, db, b, 40)
	dropRefs(t, s, db, b)
	if got := collect(t, s, db).Rows; got != 2 {
		t.Fatalf("GC after the last path went deleted %d rows, want 2", got)
	}
}

func testHasOrder(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 50, 10, ChunkSize, 2000)
	st := s.NewStage()
	defer st.Release()
	staged := put(t, st, chunkBytes(51, 300))
	absent1, absent2 := Sum([]byte("absent 1")), Sum([]byte("absent 2"))

	got := has(t, s, db, m[2].Hash, absent1, m[0].Hash, m[2].Hash, staged.Hash, absent2, m[1].Hash, absent1, staged.Hash)
	want := []Hash{m[2].Hash, m[0].Hash, m[2].Hash, staged.Hash, m[1].Hash, staged.Hash}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Has = %v\nwant %v", got, want)
	}
	if got := has(t, s, db); len(got) != 0 {
		t.Fatalf("Has() = %v, want empty", got)
	}
	// More hashes than one SQL batch, in order.
	var many, wantMany []Hash
	for i := range 3*batchSize + 7 {
		if i%3 == 0 {
			many = append(many, m[i%len(m)].Hash)
			wantMany = append(wantMany, m[i%len(m)].Hash)
		} else {
			many = append(many, Sum([]byte{byte(i), byte(i >> 8)}))
		}
	}
	if got := has(t, s, db, many...); !reflect.DeepEqual(got, wantMany) {
		t.Fatalf("Has of %d hashes returned %d, want %d in order", len(many), len(got), len(wantMany))
	}
}

// damage shortens a stored chunk's bytes behind the store's back: the file
// when there is one, else the row's data.
func damage(t *testing.T, s *Store, db *sql.DB, r Ref, remove bool) {
	t.Helper()
	var pack, off sql.NullInt64
	if err := db.QueryRow("SELECT pack, pack_off FROM chunks WHERE hash = ?", r.Hash[:]).Scan(&pack, &off); err != nil {
		t.Fatal(err)
	}
	if pack.Valid {
		// Cut the pack inside the record's bytes, or before its header.
		end := off.Int64
		if !remove {
			end += recordHeaderLen + int64(r.Size)/2
		}
		if err := os.Truncate(s.packs.path(pack.Int64), end); err != nil {
			t.Fatal(err)
		}
		return
	}
	if s.dir != "" {
		path := s.filePath(r.Hash)
		if _, err := os.Stat(path); err == nil {
			if remove {
				err = os.Remove(path)
			} else {
				err = os.Truncate(path, int64(r.Size)/2)
			}
			if err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	data := "substr(data, 1, length(data)/2)"
	if remove {
		data = "NULL"
	}
	if _, err := db.Exec("UPDATE chunks SET data = "+data+" WHERE hash = ?", r.Hash[:]); err != nil {
		t.Fatal(err)
	}
}

func testHasDamaged(t *testing.T, s *Store, db *sql.DB) {
	for _, remove := range []bool{false, true} {
		for _, size := range []int{10, 5000, ChunkSize} {
			m := commitFile(t, s, db, uint64(60+size), size)
			if got := has(t, s, db, m[0].Hash); len(got) != 1 {
				t.Fatalf("Has before damage = %v, want the chunk", got)
			}
			damage(t, s, db, m[0], remove)
			if got := has(t, s, db, m[0].Hash); len(got) != 0 {
				t.Fatalf("size %d, removed %v: Has = %v, want absent", size, remove, got)
			}
			p := make([]byte, 8)
			if _, err := s.ReadAt(context.Background(), db, m[0], p, 0); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("size %d, removed %v: ReadAt of damaged chunk: %v, want ErrCorrupt", size, remove, err)
			}
			if _, err := s.Get(context.Background(), db, m[0].Hash); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("size %d, removed %v: Get of damaged chunk: %v, want ErrCorrupt", size, remove, err)
			}
			// The sender ships the bytes again; a new stage repairs a file.
			if s.dir != "" && !s.inline(size) {
				st := s.NewStage()
				put(t, st, chunkBytes(uint64(60+size), size))
				st.Release()
				if got := has(t, s, db, m[0].Hash); len(got) != 1 {
					t.Fatalf("Has after re-staging a damaged file chunk = %v, want present", got)
				}
				checkContent(t, s, db, m, uint64(60+size))
			}
			dropRefs(t, s, db, m)
			collect(t, s, db)
		}
	}
}

func testPutMismatch(t *testing.T, s *Store, db *sql.DB) {
	for _, size := range suiteSizes {
		data := chunkBytes(70, size)
		h := Sum(chunkBytes(71, size))
		st := s.NewStage()
		err := st.Put(context.Background(), h, data)
		if !errors.Is(err, ErrHashMismatch) {
			t.Fatalf("Put of %d bytes under a wrong hash: %v, want ErrHashMismatch", size, err)
		}
		if !strings.Contains(err.Error(), h.String()) {
			t.Fatalf("error %q does not name the hash %s", err, h)
		}
		if got := has(t, s, db, h); len(got) != 0 {
			t.Fatalf("Has after a refused Put = %v, want absent", got)
		}
		if err := st.Put(context.Background(), Sum(data), data); err != nil {
			t.Fatalf("Put under the right hash: %v", err)
		}
		st.Release()
	}
	if s.dir != "" {
		collect(t, s, db)
		if got := countChunkFiles(t, s); got != 0 {
			t.Fatalf("chunk files after refused puts and GC = %d, want 0", got)
		}
	}
}

func testPutSize(t *testing.T, s *Store, db *sql.DB) {
	st := s.NewStage()
	defer st.Release()
	big := make([]byte, ChunkSize+1)
	if err := st.Put(context.Background(), Sum(big), big); !errors.Is(err, ErrChunkTooLarge) {
		t.Fatalf("Put of ChunkSize+1 bytes: %v, want ErrChunkTooLarge", err)
	}
	if _, err := st.PutHashed(context.Background(), big); !errors.Is(err, ErrChunkTooLarge) {
		t.Fatalf("PutHashed of ChunkSize+1 bytes: %v, want ErrChunkTooLarge", err)
	}
	if _, err := st.PutHashed(context.Background(), nil); !errors.Is(err, ErrEmptyChunk) {
		t.Fatalf("PutHashed of no bytes: %v, want ErrEmptyChunk", err)
	}
	if got := st.Len(); got != 0 {
		t.Fatalf("stage holds %d chunks after refused puts, want 0", got)
	}
}

func testPutCopies(t *testing.T, s *Store, db *sql.DB) {
	for _, size := range suiteSizes {
		buf := chunkBytes(75, size)
		st := s.NewStage()
		r := put(t, st, buf)
		for i := range buf {
			buf[i] = 0
		}
		checkContent(t, s, db, Manifest{r}, 75)
		inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, []Ref{r}) })
		st.Release()
		checkContent(t, s, db, Manifest{r}, 75)
		dropRefs(t, s, db, []Ref{r})
		collect(t, s, db)
	}
}

func testAddUnknown(t *testing.T, s *Store, db *sql.DB) {
	committed := commitFile(t, s, db, 80, ChunkSize, 20)
	before := stats(t, s, db)

	st := s.NewStage()
	defer st.Release()
	fresh := []Ref{put(t, st, chunkBytes(81, ChunkSize)), put(t, st, chunkBytes(82, 30))}
	unknown := Ref{Hash: Sum([]byte("never staged")), Size: 12}

	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	refs := append(append(append([]Ref{}, committed...), fresh...), unknown)
	err = s.AddRefs(context.Background(), tx, refs)
	if !errors.Is(err, ErrUnknownHash) {
		tx.Rollback()
		t.Fatalf("AddRefs with an unknown hash: %v, want ErrUnknownHash", err)
	}
	if !strings.Contains(err.Error(), unknown.Hash.String()) {
		t.Errorf("error %q does not name the hash %s", err, unknown.Hash)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	got := stats(t, s, db)
	got.StagedChunks = before.StagedChunks
	if got != before {
		t.Fatalf("stats after the rolled-back AddRefs = %+v, want %+v", got, before)
	}
	// The committed refcounts are untouched: one drop makes them collectable.
	dropRefs(t, s, db, committed)
	if got := collect(t, s, db).Rows; got != 2 {
		t.Fatalf("GC after dropping the committed refs once deleted %d rows, want 2", got)
	}
	// The staged chunks are still there for a retry.
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, fresh) })
	checkContent(t, s, db, fresh[:1], 81)
}

func testAddSizeMismatch(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 90, 100, ChunkSize)
	st := s.NewStage()
	defer st.Release()
	staged := put(t, st, chunkBytes(91, 200))
	for _, r := range []Ref{
		{Hash: m[0].Hash, Size: 99},             // stored row
		{Hash: staged.Hash, Size: 201},          // staged, no row yet
		{Hash: m[1].Hash, Size: ChunkSize - 1},  // stored file chunk
		{Hash: m[0].Hash, Size: ChunkSize + 10}, // impossible size
	} {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		err = s.AddRefs(context.Background(), tx, []Ref{r})
		tx.Rollback()
		if !errors.Is(err, ErrSizeMismatch) {
			t.Fatalf("AddRefs(%s, size %d): %v, want ErrSizeMismatch", r.Hash, r.Size, err)
		}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = s.AddRefs(context.Background(), tx, []Ref{staged, {Hash: staged.Hash, Size: 5}})
	if !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("AddRefs with one hash at two sizes: %v, want ErrSizeMismatch", err)
	}
}

func testDropUnknown(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 100, 10)
	unknown := Ref{Hash: Sum([]byte("unknown")), Size: 7}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	err = s.DropRefs(context.Background(), tx, []Ref{m[0], unknown})
	tx.Rollback()
	if !errors.Is(err, ErrUnknownHash) || !strings.Contains(err.Error(), unknown.Hash.String()) {
		t.Fatalf("DropRefs with an unknown hash: %v, want ErrUnknownHash naming %s", err, unknown.Hash)
	}
	if got := stats(t, s, db).Unreferenced; got != 0 {
		t.Fatalf("unreferenced rows after the rolled-back drop = %d, want 0", got)
	}
}

func testDropBelowZero(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 110, 10)
	dropRefs(t, s, db, []Ref{m[0], m[0], m[0]})
	// Counts clamp at zero: one add brings the chunk back to referenced.
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, m) })
	if got := collect(t, s, db).Rows; got != 0 {
		t.Fatalf("GC deleted %d rows of a chunk re-referenced after an over-drop, want 0", got)
	}
	checkContent(t, s, db, m, 110)
}

func testDuplicateRefs(t *testing.T, s *Store, db *sql.DB) {
	// A file of four identical full chunks (a run of zeros, say).
	st := s.NewStage()
	r := put(t, st, chunkBytes(120, ChunkSize))
	small := put(t, st, chunkBytes(121, 10))
	m := Manifest{r, r, r, small}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, m) })
	st.Release()
	dropRefs(t, s, db, []Ref{r, r})
	if got := collect(t, s, db).Rows; got != 0 {
		t.Fatalf("GC with one of three refs left deleted %d rows, want 0", got)
	}
	dropRefs(t, s, db, []Ref{r, small})
	if got := collect(t, s, db).Rows; got != 2 {
		t.Fatalf("GC after the last refs deleted %d rows, want 2", got)
	}
}

func testStagedSurviveGC(t *testing.T, s *Store, db *sql.DB) {
	st := s.NewStage()
	var m Manifest
	for i, size := range suiteSizes {
		m = append(m, put(t, st, chunkBytes(130+uint64(i), size)))
	}
	if got := collect(t, s, db); got != (GCStats{}) {
		t.Fatalf("GC with a live stage = %+v, want nothing removed", got)
	}
	if got := has(t, s, db, hashes(m)...); !reflect.DeepEqual(got, hashes(m)) {
		t.Fatalf("Has of staged chunks after GC = %v, want all", got)
	}
	checkContent(t, s, db, m, 130)
	if got, want := stats(t, s, db).StagedChunks, int64(len(m)); got != want {
		t.Fatalf("staged chunks = %d, want %d", got, want)
	}
	st.Release()
	st.Release() // idempotent
	collect(t, s, db)
	if got := has(t, s, db, hashes(m)...); len(got) != 0 {
		t.Fatalf("Has after Release and GC = %v, want none", got)
	}
	if got := stats(t, s, db).StagedChunks; got != 0 {
		t.Fatalf("staged chunks after Release = %d, want 0", got)
	}
	if err := st.Put(context.Background(), m[0].Hash, chunkBytes(130, suiteSizes[0])); !errors.Is(err, ErrReleased) {
		t.Fatalf("Put after Release: %v, want ErrReleased", err)
	}
}

func testStagePinsRow(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 140, ChunkSize, 40)
	dropRefs(t, s, db, m)
	// A push batch re-sends the same bytes while they are unreferenced.
	st := s.NewStage()
	put(t, st, chunkBytes(140, ChunkSize))
	put(t, st, chunkBytes(141, 40))
	if got := collect(t, s, db).Rows; got != 0 {
		t.Fatalf("GC deleted %d pinned rows, want 0", got)
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, m) })
	st.Release()
	collect(t, s, db)
	checkContent(t, s, db, m, 140)
}

func testReleasedOrphan(t *testing.T, s *Store, db *sql.DB) {
	st := s.NewStage()
	var m Manifest
	for i, size := range suiteSizes {
		m = append(m, put(t, st, chunkBytes(150+uint64(i), size)))
	}
	// The apply that would have referenced them fails and rolls back.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddRefs(context.Background(), tx, m); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	st.Release()

	// Orphan pack records are dead space in the current pack, not freed.
	if got, want := collect(t, s, db), (GCStats{Files: countFileChunks(s, suiteSizes...), Bytes: fileBytes(s, suiteSizes...)}); got != want {
		t.Fatalf("GC after a rolled-back apply = %+v, want %+v", got, want)
	}
	if got := has(t, s, db, hashes(m)...); len(got) != 0 {
		t.Fatalf("Has after GC = %v, want none", got)
	}
}

func testGCRollback(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 160, ChunkSize, 50)
	dropRefs(t, s, db, m)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	tx.Rollback() // and never Finish
	if got := has(t, s, db, hashes(m)...); !reflect.DeepEqual(got, hashes(m)) {
		t.Fatalf("Has after a rolled-back GC = %v, want all", got)
	}
	checkContent(t, s, db, m, 160)
	// The next GC supersedes the abandoned one and collects.
	if got := collect(t, s, db).Rows; got != 2 {
		t.Fatalf("GC after a rolled-back GC deleted %d rows, want 2", got)
	}
	if got := has(t, s, db, hashes(m)...); len(got) != 0 {
		t.Fatalf("Has after GC = %v, want none", got)
	}
}

func testAddAfterGC(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 170, ChunkSize)
	dropRefs(t, s, db, m)
	// GC deletes the row, then the same transaction references the chunk
	// again: its bytes are found (a file) or must be staged (a row).
	st := s.NewStage()
	defer st.Release()
	var sw *Sweep
	inTx(t, db, func(tx *sql.Tx) (err error) {
		if sw, err = s.GC(context.Background(), tx); err != nil {
			return err
		}
		if s.inline(ChunkSize) {
			put(t, st, chunkBytes(170, ChunkSize))
		}
		return s.AddRefs(context.Background(), tx, m)
	})
	gc, err := sw.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if gc.Files != 0 {
		t.Fatalf("Finish unlinked %d files re-referenced in the GC's transaction, want 0", gc.Files)
	}
	st.Release()
	checkContent(t, s, db, m, 170)
	if got := collect(t, s, db).Rows; got != 0 {
		t.Fatalf("GC deleted %d referenced rows", got)
	}
	checkContent(t, s, db, m, 170)
}

func testReadAt(t *testing.T, s *Store, db *sql.DB) {
	for _, size := range suiteSizes {
		seed := uint64(180 + size)
		want := chunkBytes(seed, size)
		st := s.NewStage()
		r := put(t, st, want)
		check := func(state string) {
			t.Helper()
			for _, c := range []struct {
				off   int64
				n     int
				wantN int
				eof   bool
			}{
				{0, size, size, false},
				{0, size + 5, size, true},
				{int64(size / 2), 3, min(3, size-size/2), size-size/2 < 3},
				{int64(size - 1), 1, 1, false},
				{int64(size - 1), 2, 1, true},
				{int64(size), 10, 0, true},
				{int64(size) + 100, 10, 0, true},
				{0, 0, 0, false},
			} {
				p := make([]byte, c.n)
				n, err := s.ReadAt(context.Background(), db, r, p, c.off)
				if n != c.wantN || (err == io.EOF) != c.eof || (err != nil && err != io.EOF) {
					t.Fatalf("%s, %d-byte chunk: ReadAt(len %d, off %d) = %d, %v; want %d, eof %v", state, size, c.n, c.off, n, err, c.wantN, c.eof)
				}
				if !bytes.Equal(p[:n], want[min(int(c.off), size):][:n]) {
					t.Fatalf("%s, %d-byte chunk: ReadAt(len %d, off %d) returned different bytes", state, size, c.n, c.off)
				}
			}
			if _, err := s.ReadAt(context.Background(), db, r, make([]byte, 1), -1); err == nil {
				t.Fatalf("%s: ReadAt at a negative offset succeeded", state)
			}
		}
		check("staged")
		inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, []Ref{r}) })
		st.Release()
		check("committed")
	}
	unknown := Ref{Hash: Sum([]byte("x")), Size: 1}
	if _, err := s.ReadAt(context.Background(), db, unknown, make([]byte, 1), 0); !errors.Is(err, ErrUnknownHash) {
		t.Fatalf("ReadAt of an unknown chunk: %v, want ErrUnknownHash", err)
	}
}

func testGet(t *testing.T, s *Store, db *sql.DB) {
	m := commitFile(t, s, db, 190, suiteSizes...)
	checkContent(t, s, db, m, 190)
	got, err := s.Get(context.Background(), db, m[0].Hash)
	if err != nil {
		t.Fatal(err)
	}
	got[0] ^= 0xff // the caller owns the copy
	checkContent(t, s, db, m, 190)
	if _, err := s.Get(context.Background(), db, Sum([]byte("nope"))); !errors.Is(err, ErrUnknownHash) {
		t.Fatalf("Get of an unknown chunk: %v, want ErrUnknownHash", err)
	}
}

func testConcurrentPut(t *testing.T, s *Store, db *sql.DB) {
	st := s.NewStage()
	defer st.Release()
	const workers, each = 4, 6
	refs := make([]Ref, workers*each)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Every worker also puts chunk 0, to race on one hash.
				seed := uint64(200 + w*each + i)
				if i == 0 {
					seed = 200
				}
				size := []int{700, 5000, 100 << 10, ChunkSize}[(w+i)%4]
				if i == 0 {
					size = ChunkSize
				}
				r, err := st.PutHashed(context.Background(), chunkBytes(seed, size))
				if err != nil {
					errs <- err
					return
				}
				refs[w*each+i] = r
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, want := st.Len(), workers*(each-1)+1; got != want {
		t.Fatalf("stage holds %d chunks, want %d", got, want)
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, refs) })
	if got, want := stats(t, s, db).Chunks, int64(workers*(each-1)+1); got != want {
		t.Fatalf("rows = %d, want %d", got, want)
	}
}

func testStats(t *testing.T, s *Store, db *sql.DB) {
	if got := stats(t, s, db); got != (Stats{}) {
		t.Fatalf("stats of an empty store = %+v, want zero", got)
	}
	commitFile(t, s, db, 210, ChunkSize, 1000)
	b := commitFile(t, s, db, 220, 70<<10)
	dropRefs(t, s, db, b)
	st := s.NewStage()
	defer st.Release()
	put(t, st, chunkBytes(230, 10))
	put(t, st, chunkBytes(210, ChunkSize)) // staged and stored
	inline, files := layoutBytes(s, ChunkSize, 1000, 70<<10)
	want := Stats{Chunks: 3, InlineBytes: inline, FileBytes: files, Unreferenced: 1, StagedChunks: 2}
	if got := stats(t, s, db); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

func testManyRefs(t *testing.T, s *Store, db *sql.DB) {
	// More distinct hashes than one statement holds, with repeats.
	st := s.NewStage()
	var m Manifest
	for i := range 2*batchSize + 3 {
		m = append(m, put(t, st, chunkBytes(uint64(1000+i), 33+i%50)))
	}
	m = append(m, m[:10]...)
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, m) })
	st.Release()
	if got, want := stats(t, s, db).Chunks, int64(2*batchSize+3); got != want {
		t.Fatalf("rows = %d, want %d", got, want)
	}
	dropRefs(t, s, db, m[:2*batchSize+3])
	if got, want := collect(t, s, db).Rows, int64(2*batchSize+3-10); got != want {
		t.Fatalf("GC deleted %d rows, want %d", got, want)
	}
	if got := has(t, s, db, hashes(m)...); len(got) != 20 {
		t.Fatalf("Has found %d of the twice-referenced chunks, want 20", len(got))
	}
}
