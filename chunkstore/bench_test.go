package chunkstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// The benchmarks behind DefaultInlineMax and the figures in
// docs/PERFORMANCE.md ("chunkstore"). Each runs on disk (b.TempDir, under
// $TMPDIR) and on tmpfs (/dev/shm), store and baseline on the same medium.

type medium struct {
	name string
	dir  func(b *testing.B) string
}

const tmpfsMagic = 0x01021994

func media() []medium {
	return []medium{
		{"disk", func(b *testing.B) string { return b.TempDir() }},
		{"tmpfs", func(b *testing.B) string {
			var st syscall.Statfs_t
			if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != tmpfsMagic {
				b.Skip("no tmpfs at /dev/shm")
			}
			dir, err := os.MkdirTemp("/dev/shm", "chunkstore-bench-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}},
	}
}

// uniqueChunk overwrites the front of buf with i, so every chunk of a run
// has its own hash.
func uniqueChunk(buf []byte, i uint64) []byte {
	binary.LittleEndian.PutUint64(buf, i)
	return buf
}

// BenchmarkStoreChunks stores chunks of one size as rows or as files,
// committing their refs 256 to a transaction, as an apply does.
func BenchmarkStoreChunks(b *testing.B) {
	layouts := []struct {
		name      string
		inlineMax int
		noSync    bool
		packMax   int
	}{
		{"rows", ChunkSize, false, 0},
		{"files-fsync", 1, false, 0},
		{"files-nosync", 1, true, 0},
		{"packs-fsync", 1, false, ChunkSize},
		{"packs-nosync", 1, true, ChunkSize},
	}
	for _, m := range media() {
		for _, size := range []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10} {
			for _, l := range layouts {
				b.Run(fmt.Sprintf("%s/%dK/%s", m.name, size>>10, l.name), func(b *testing.B) {
					dir := m.dir(b)
					db := openFileDB(b, filepath.Join(dir, "state.db"))
					s := newTestStore(b, Options{Dir: filepath.Join(dir, "chunks"), InlineMax: l.inlineMax, NoSync: l.noSync})
					s.packMax = l.packMax
					benchStore(b, s, db, size)
				})
			}
		}
	}
}

func benchStore(b *testing.B, s *Store, db *sql.DB, size int) {
	ctx := context.Background()
	buf := chunkBytes(1, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	st := s.NewStage()
	refs := make([]Ref, 0, 256)
	for i := range b.N {
		r, err := st.PutHashed(ctx, uniqueChunk(buf, uint64(i)))
		if err != nil {
			b.Fatal(err)
		}
		refs = append(refs, r)
		if len(refs) == cap(refs) || i == b.N-1 {
			tx, err := db.Begin()
			if err != nil {
				b.Fatal(err)
			}
			if err := s.AddRefs(ctx, tx, refs); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			st.Release()
			st = s.NewStage()
			refs = refs[:0]
		}
	}
	st.Release()
}

const bench64MiB = 64 << 20

// BenchmarkPutHashed64MiB stages 64 MiB as 128 full chunks (hash + file
// write each), by one goroutine or split between two, and commits their
// refs in one transaction (where the chunk directories are fsynced). The
// chunks are dropped and collected between iterations, off the clock.
func BenchmarkPutHashed64MiB(b *testing.B) {
	for _, m := range media() {
		for _, fsync := range []bool{true, false} {
			for _, workers := range []int{1, 2} {
				for _, layout := range []string{"files", "packs"} {
					name := fmt.Sprintf("%s/fsync=%v/goroutines=%d/%s", m.name, fsync, workers, layout)
					b.Run(name, func(b *testing.B) {
						dir := m.dir(b)
						db := openFileDB(b, filepath.Join(dir, "state.db"))
						s := newTestStore(b, Options{Dir: filepath.Join(dir, "chunks"), NoSync: !fsync})
						s.packMax = ChunkSize - 1
						if layout == "packs" {
							s.packMax = ChunkSize
						}
						benchPut64MiB(b, s, db, workers)
					})
				}
			}
		}
	}
}

func benchPut64MiB(b *testing.B, s *Store, db *sql.DB, workers int) {
	ctx := context.Background()
	data := chunkBytes(2, bench64MiB)
	const n = bench64MiB / ChunkSize
	b.SetBytes(bench64MiB)
	b.ResetTimer()
	for i := range b.N {
		st := s.NewStage()
		refs := make([]Ref, n)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := w; c < n; c += workers {
					chunk := data[c*ChunkSize : (c+1)*ChunkSize]
					r, err := st.PutHashed(ctx, uniqueChunk(chunk, uint64(i)))
					if err != nil {
						b.Error(err)
						return
					}
					refs[c] = r
				}
			}()
		}
		wg.Wait()
		inTx(b, db, func(tx *sql.Tx) error { return s.AddRefs(ctx, tx, refs) })
		st.Release()
		b.StopTimer()
		dropRefs(b, s, db, refs)
		collect(b, s, db)
		b.StartTimer()
	}
}

// BenchmarkSHA256_64MiB is the hashing floor of BenchmarkPutHashed64MiB.
func BenchmarkSHA256_64MiB(b *testing.B) {
	data := chunkBytes(3, bench64MiB)
	b.SetBytes(bench64MiB)
	for b.Loop() {
		for c := 0; c < len(data); c += ChunkSize {
			sha256.Sum256(data[c : c+ChunkSize])
		}
	}
}

// BenchmarkWriteFile64MiB is the plain-file floor: the same bytes as one
// file, with and without an fsync.
func BenchmarkWriteFile64MiB(b *testing.B) {
	for _, m := range media() {
		for _, fsync := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/fsync=%v", m.name, fsync), func(b *testing.B) {
				path := filepath.Join(m.dir(b), "file")
				data := chunkBytes(4, bench64MiB)
				b.SetBytes(bench64MiB)
				for b.Loop() {
					f, err := os.Create(path)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := f.Write(data); err != nil {
						b.Fatal(err)
					}
					if fsync {
						if err := f.Sync(); err != nil {
							b.Fatal(err)
						}
					}
					f.Close()
					b.StopTimer()
					os.Remove(path)
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkReadAt reads whole small chunks as rows and as files (a FUSE
// read of a small file), and 128 KiB pieces of full chunks with and
// without the fd cache, on tmpfs. The reads run unprepared statements on
// a *sql.DB; vfs passes a Querier that prepares them (vfs/stmts.go), about
// a quarter off a 4 KiB row read.
func BenchmarkReadAt(b *testing.B) {
	type readCase struct {
		name      string
		size      int
		inlineMax int
		fdCache   int
	}
	var cases []readCase
	for _, size := range []int{4 << 10, 16 << 10, 64 << 10} {
		k := fmt.Sprintf("%dK", size>>10)
		cases = append(cases,
			readCase{k + "/rows", size, ChunkSize, defaultFDCacheSize},
			readCase{k + "/files", size, 1, defaultFDCacheSize},
			readCase{k + "/packs", size, -1, defaultFDCacheSize})
	}
	cases = append(cases,
		readCase{"512K-by-128K/files", ChunkSize, 1, defaultFDCacheSize},
		readCase{"512K-by-128K/files-nocache", ChunkSize, 1, 0},
		readCase{"512K-by-128K/packs", ChunkSize, -1, defaultFDCacheSize})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dir := media()[1].dir(b)
			db := openFileDB(b, filepath.Join(dir, "state.db"))
			s := newTestStore(b, Options{Dir: filepath.Join(dir, "chunks"), InlineMax: max(c.inlineMax, 1), NoSync: true})
			s.fds = newFDCache(c.fdCache)
			s.packMax = 0 // inlineMax -1: packs
			if c.inlineMax < 0 {
				s.packMax = ChunkSize
			}
			// 32 chunks read round-robin: within the cache's size.
			st := s.NewStage()
			var refs []Ref
			for i := range 32 {
				refs = append(refs, put(b, st, chunkBytes(uint64(10+i), c.size)))
			}
			inTx(b, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, refs) })
			st.Release()
			p := make([]byte, min(128<<10, c.size))
			b.SetBytes(int64(len(p)))
			i := 0
			for b.Loop() {
				r := refs[i%len(refs)]
				off := int64((i / len(refs) * len(p)) % c.size)
				if _, err := s.ReadAt(context.Background(), db, r, p, off); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkRefs256 is the SQL cost of a batch: AddRefs and DropRefs of 256
// stored chunks in one transaction, and Has of 256 hashes.
func BenchmarkRefs256(b *testing.B) {
	m := media()[1]
	dir := m.dir(b)
	db := openFileDB(b, filepath.Join(dir, "state.db"))
	s := newTestStore(b, Options{Dir: filepath.Join(dir, "chunks"), NoSync: true})
	st := s.NewStage()
	var refs []Ref
	for i := range 256 {
		refs = append(refs, put(b, st, chunkBytes(uint64(100+i), 1000)))
	}
	inTx(b, db, func(tx *sql.Tx) error { return s.AddRefs(context.Background(), tx, refs) })
	st.Release()
	ctx := context.Background()
	b.Run("add+drop", func(b *testing.B) {
		for b.Loop() {
			inTx(b, db, func(tx *sql.Tx) error {
				if err := s.AddRefs(ctx, tx, refs); err != nil {
					return err
				}
				return s.DropRefs(ctx, tx, refs)
			})
		}
	})
	b.Run("empty-tx", func(b *testing.B) {
		for b.Loop() {
			inTx(b, db, func(tx *sql.Tx) error {
				_, err := tx.Exec("UPDATE chunks SET refs = refs WHERE id = 0")
				return err
			})
		}
	})
	b.Run("has", func(b *testing.B) {
		hs := hashes(refs)
		for b.Loop() {
			if _, err := s.Has(ctx, db, hs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
