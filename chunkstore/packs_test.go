package chunkstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wsync/wsync/internal/sqlitemigrate"
)

// Tests of the pack layout; the behaviour every layout shares is in the
// conformance suite, which runs against packs too (conformance_test.go).

// packStore is a split store whose packs roll at limit bytes.
func packStore(t testing.TB, limit int64) (*Store, *sql.DB) {
	s, db := splitStore(t, 1024, true)
	s.packs.limit = limit
	return s, db
}

func packFiles(t testing.TB, s *Store) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(s.dir, packDirName, "*"+packSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestPacksRollAtTheirLimit(t *testing.T) {
	s, db := packStore(t, 64<<10)
	sizes := slices.Repeat([]int{10 << 10}, 20)
	m := commitFile(t, s, db, 300, sizes...)
	// Six 10 KiB records (plus headers) fit under 64 KiB.
	if got, want := len(packFiles(t, s)), 4; got != want {
		t.Fatalf("packs = %d, want %d", got, want)
	}
	checkContent(t, s, db, m, 300)
}

func TestGCDeletesEmptyPacksAndCompactsMostlyDeadOnes(t *testing.T) {
	s, db := packStore(t, 64<<10)
	sizes := slices.Repeat([]int{10 << 10}, 24)
	// Four full packs of six chunks, then a fifth, current pack.
	keep := commitFile(t, s, db, 400, sizes...)
	commitFile(t, s, db, 500, 2000) // moves appends to a new pack
	// Drop the first pack entirely, four of six of the second, one of the
	// third.
	var drop Manifest
	drop = append(drop, keep[0:6]...)
	drop = append(drop, keep[6:10]...)
	drop = append(drop, keep[12:13]...)
	dropRefs(t, s, db, drop)
	gc := collect(t, s, db)
	if got, want := gc.Packs, int64(2); got != want {
		t.Fatalf("GC deleted %d packs, want %d (the empty one and the compacted one): %+v", got, want, gc)
	}
	live := append(append(Manifest{}, keep[10:12]...), keep[13:]...)
	for i, r := range live {
		got, err := s.Get(context.Background(), db, r.Hash)
		if err != nil {
			t.Fatalf("live chunk %d after compaction: %v", i, err)
		}
		if Sum(got) != r.Hash {
			t.Fatalf("live chunk %d after compaction: wrong bytes", i)
		}
	}
	if got := has(t, s, db, hashes(live)...); len(got) != len(live) {
		t.Fatalf("Has after compaction = %d chunks, want %d", len(got), len(live))
	}
	// A reopened store (no location cache) reads the moved rows.
	s2 := newTestStore(t, Options{Dir: s.dir, InlineMax: 1024, NoSync: true})
	for i, r := range live {
		if got, err := s2.Get(context.Background(), db, r.Hash); err != nil || Sum(got) != r.Hash {
			t.Fatalf("live chunk %d after reopening: %v", i, err)
		}
	}
}

func TestCompactionKeepsConcurrentReadsCorrect(t *testing.T) {
	s, db := packStore(t, 128<<10)
	ctx := context.Background()
	sizes := slices.Repeat([]int{9 << 10}, 60)
	m := commitFile(t, s, db, 700, sizes...)
	// Keep every third chunk; the rest goes, so every sealed pack is
	// mostly dead and gets compacted while readers read the survivors.
	var live, dead Manifest
	var liveSeeds []uint64
	for i, r := range m {
		if i%3 == 0 {
			live = append(live, r)
			liveSeeds = append(liveSeeds, 700+uint64(i))
		} else {
			dead = append(dead, r)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 9<<10)
			for i := w; !stop.Load(); i++ {
				k := i % len(live)
				n, err := s.ReadAt(ctx, db, live[k], p, 0)
				if err != nil || n != len(p) || !bytes.Equal(p, chunkBytes(liveSeeds[k], len(p))) {
					errs <- errors.Join(errors.New("a read during compaction returned wrong bytes"), err)
					return
				}
				if i%7 == 0 {
					s.mu.Lock()
					clear(s.locs) // make some reads go through the rows
					s.mu.Unlock()
				}
			}
		}()
	}
	dropRefs(t, s, db, dead)
	commitFile(t, s, db, 800, 3000) // seals the pack the last chunks went to
	var packs int64
	for range 3 {
		packs += collect(t, s, db).Packs
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if packs == 0 {
		t.Fatalf("no pack was compacted")
	}
	checkContent(t, s, db, live[:1], liveSeeds[0])
	for i, r := range live {
		got, err := s.Get(ctx, db, r.Hash)
		if err != nil || !bytes.Equal(got, chunkBytes(liveSeeds[i], int(r.Size))) {
			t.Fatalf("chunk %d after compaction: %v", i, err)
		}
	}
}

func TestGCKeepsAPackWithStagedRecords(t *testing.T) {
	s, db := packStore(t, 32<<10)
	st := s.NewStage()
	defer st.Release()
	r := put(t, st, chunkBytes(900, 20<<10))
	commitFile(t, s, db, 901, 20<<10) // rolls: r's pack is sealed, holding only a staged record
	if got := collect(t, s, db).Packs; got != 0 {
		t.Fatalf("GC deleted %d packs while a stage held a record", got)
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, []Ref{r}) })
	st.Release()
	collect(t, s, db)
	checkContent(t, s, db, Manifest{r}, 900)
}

func TestTruncatedPackReportsItsCutChunksAbsent(t *testing.T) {
	s, db := packStore(t, 1<<20)
	m := commitFile(t, s, db, 950, 5000, 5000, 5000)
	var off int64
	var pack int64
	if err := db.QueryRow("SELECT pack, pack_off FROM chunks WHERE hash = ?", m[1].Hash[:]).Scan(&pack, &off); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(s.packs.path(pack), off+100); err != nil {
		t.Fatal(err)
	}
	// A fresh store: nothing remembered from the writes.
	s2 := newTestStore(t, Options{Dir: s.dir, InlineMax: 1024, NoSync: true})
	if got, want := has(t, s2, db, hashes(m)...), []Hash{m[0].Hash}; !slices.Equal(got, want) {
		t.Fatalf("Has after truncating the pack inside chunk 1 = %v, want only chunk 0", got)
	}
	if _, err := s2.Get(context.Background(), db, m[2].Hash); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a chunk past the cut: %v, want ErrCorrupt", err)
	}
	checkContent(t, s2, db, m[:1], 950)
}

func TestSchemaMigratesTheOldChunksLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "state.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The table as the first release created it, unversioned (user_version
	// 0), with its rows as that release wrote them: no pack columns, an
	// inline chunk's bytes in its row, a larger chunk in a file of its own.
	for _, stmt := range []string{
		`CREATE TABLE chunks(id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, size INTEGER NOT NULL, refs INTEGER NOT NULL, data BLOB)`,
		`CREATE INDEX chunks_unreferenced ON chunks(id) WHERE refs <= 0`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	old := newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), InlineMax: 1024, NoSync: true})
	old.packMax = 0 // a file of its own for every chunk above InlineMax
	st := old.NewStage()
	small, large := chunkBytes(960, 100), chunkBytes(961, 5000)
	a := Manifest{put(t, st, small), put(t, st, large)}
	for _, row := range []struct {
		r    Ref
		data []byte
	}{{a[0], small}, {a[1], nil}} {
		if _, err := db.Exec(`INSERT INTO chunks(hash, size, refs, data) VALUES (?, ?, 1, ?)`, row.r.Hash[:], row.r.Size, row.data); err != nil {
			t.Fatal(err)
		}
	}
	st.Release()
	old.Close()

	for range 2 { // a migrated database is left alone
		if err := Schema(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if got, want := v, len(Migrations); got != want {
		t.Fatalf("user_version after Schema = %d, want %d", got, want)
	}
	var packCols int
	if err := db.QueryRow(`SELECT count(*) FROM pragma_table_info('chunks') WHERE name IN ('pack', 'pack_off')`).Scan(&packCols); err != nil {
		t.Fatal(err)
	}
	if packCols != 2 {
		t.Fatalf("pack columns after Schema = %d, want 2", packCols)
	}

	s := newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), InlineMax: 1024, NoSync: true})
	checkContent(t, s, db, a, 960)
	b := commitFile(t, s, db, 970, 5000)
	checkContent(t, s, db, b, 970)
	if got := has(t, s, db, append(hashes(a), hashes(b)...)...); len(got) != 3 {
		t.Fatalf("Has of old chunks and a new pack chunk = %d, want 3", len(got))
	}
	dropRefs(t, s, db, append(append(Manifest{}, a...), b...))
	collect(t, s, db)
	if got := countChunkFiles(t, s); got != 0 {
		t.Fatalf("chunk files after dropping everything = %d, want 0", got)
	}
}

func TestSchemaRefusesANewerVersion(t *testing.T) {
	db := openFileDB(t, filepath.Join(t.TempDir(), "state.db"))
	if _, err := db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, len(Migrations)+1)); err != nil {
		t.Fatal(err)
	}
	if err := Schema(context.Background(), db); !errors.Is(err, sqlitemigrate.ErrTooNew) {
		t.Fatalf("Schema of a newer database: %v, want ErrTooNew", err)
	}
}

func TestPackRecordHeaderRoundTrip(t *testing.T) {
	h := Sum([]byte("record"))
	b := appendRecordHeader(nil, h, 12345)
	got, n, err := decodeRecordHeader(b)
	if err != nil || got != h || n != 12345 {
		t.Fatalf("decode = %s, %d, %v; want %s, 12345", got, n, err, h)
	}
	for _, bad := range [][]byte{b[:39], append([]byte("XXXX"), b[4:]...), appendRecordHeader(nil, h, 0), appendRecordHeader(nil, h, ChunkSize+1)} {
		if _, _, err := decodeRecordHeader(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode of a bad header: %v, want ErrCorrupt", err)
		}
	}
}

func FuzzDecodeRecordHeader(f *testing.F) {
	f.Add(appendRecordHeader(nil, Sum([]byte("a")), 1))
	f.Add(appendRecordHeader(nil, Sum([]byte("b")), ChunkSize))
	f.Add([]byte("wsck"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := decodeRecordHeader(b)
		if err != nil {
			return
		}
		if n <= 0 || n > ChunkSize {
			t.Fatalf("decoded length %d", n)
		}
		if got := appendRecordHeader(nil, h, n); !bytes.Equal(got, b[:recordHeaderLen]) {
			t.Fatalf("re-encoding differs")
		}
	})
}
