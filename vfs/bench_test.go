package vfs

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/watermark"
)

// Benchmarks run on the medium named by WSYNC_BENCH_DIR (for example
// /dev/shm for tmpfs), else in the test's temp dir. Stores sync as in
// production (NoSync off) unless WSYNC_BENCH_NOSYNC=1.

func benchStore(b *testing.B) *Store { return benchStoreWith(b, Options{}) }

func benchStoreWith(b *testing.B, o Options) *Store {
	o.NoSync = os.Getenv("WSYNC_BENCH_NOSYNC") == "1"
	s, err := Open(ctx, filepath.Join(testutil.BenchDir(b, "vfsbench"), "s.db"), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkCreateSmallFile creates, writes and closes small files as the
// mount's CREATE, WRITE and FLUSH do: with the group commit (the default,
// where the write-behind answers them and runs their SQL on its goroutine)
// and with a commit per mutation, in the same run. cpu-us/file is the
// process's CPU time over the loop and a Sync that runs what is queued:
// the store's whole cost of a file, steadier than wall time on a loaded
// machine.
func BenchmarkCreateSmallFile(b *testing.B) {
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"group", 0}, {"each", -1}} {
		b.Run(c.name, func(b *testing.B) {
			s := benchStoreWith(b, Options{GroupWindow: c.window})
			data := pattern(100, 1)
			d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.GetAttr(ctx, d.Ino); err != nil { // the memo knows d
				b.Fatal(err)
			}
			b.ResetTimer()
			c0 := testutil.ProcessCPU(b)
			for i := range b.N {
				_, h, err := s.CreateOpen(ctx, d.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
				if err != nil {
					b.Fatal(err)
				}
				h.WriteAt(ctx, data, 0)
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64((testutil.ProcessCPU(b)-c0).Nanoseconds())/1e3/float64(b.N), "cpu-us/file")
		})
	}
}

// BenchmarkUnlinkSmallFile unlinks small files as the mount's UNLINK does,
// in groups; BenchmarkMkdir makes directories as MKDIR does. With the
// create above they are the store's share of the mount's metadata
// scenarios (create, rm, mkdir of 1,000 entries).
func BenchmarkUnlinkSmallFile(b *testing.B) {
	s := benchStore(b)
	data := pattern(100, 1)
	for i := range b.N {
		_, h, err := s.CreateOpen(ctx, RootIno, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
		if err != nil {
			b.Fatal(err)
		}
		h.WriteAt(ctx, data, 0)
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := s.Unlink(ctx, RootIno, fmt.Sprint("f", i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMkdir(b *testing.B) {
	s := benchStore(b)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Mkdir(ctx, RootIno, fmt.Sprint("d", i), NewAttr{Mode: 0o755}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRmdirInALargeStore removes an empty directory from a store of
// 50,000 empty files: the cost of an rmdir must not grow with the store.
func BenchmarkRmdirInALargeStore(b *testing.B) {
	s := benchStore(b)
	var es []ChangeEntry
	for i := range 50000 {
		es = append(es, ChangeEntry{Kind: EntryFile, Rev: int64(i + 1), Path: fmt.Sprintf("d%02d/f%05d", i%50, i), Mode: 0o644})
	}
	for k := 0; k < len(es); k += 4096 {
		if _, err := s.Apply(ctx, es[k:min(k+4096, len(es))], ApplyOptions{Source: Upstream}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprint("e", i)
		if _, err := s.Mkdir(ctx, RootIno, name, NewAttr{Mode: 0o755}); err != nil {
			b.Fatal(err)
		}
		if err := s.Rmdir(ctx, RootIno, name); err != nil {
			b.Fatal(err)
		}
	}
}

const write64 = 64 << 20

func BenchmarkWrite64MiBHandle(b *testing.B) {
	s := benchStore(b)
	data := pattern(write64, 3)
	b.SetBytes(write64)
	b.ResetTimer()
	for i := range b.N {
		// Fresh bytes each time so dedup does not flatter the figure.
		data[0], data[cs], data[2*cs] = byte(i), byte(i), byte(i)
		for k := 0; k < write64; k += cs {
			data[k] = byte(i + 1)
		}
		a, err := s.Create(ctx, RootIno, fmt.Sprint("big", i), NewAttr{Mode: 0o644})
		if err != nil {
			b.Fatal(err)
		}
		h, _ := s.OpenHandle(ctx, a.Ino)
		for off := 0; off < write64; off += 128 << 10 {
			if _, err := h.WriteAt(ctx, data[off:off+128<<10], int64(off)); err != nil {
				b.Fatal(err)
			}
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// The floor for the handle write: hashing alone, and a plain file write of
// the same bytes on the same medium.
func BenchmarkSha256Only64MiB(b *testing.B) {
	data := pattern(write64, 3)
	b.SetBytes(write64)
	for range b.N {
		for off := 0; off < write64; off += cs {
			sha256.Sum256(data[off : off+cs])
		}
	}
}

func BenchmarkPlainFileWrite64MiB(b *testing.B) {
	dir := testutil.BenchDir(b, "vfsbench")
	data := pattern(write64, 3)
	b.SetBytes(write64)
	for i := range b.N {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint("plain", i)))
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < write64; off += 128 << 10 {
			f.Write(data[off : off+128<<10])
		}
		f.Close()
	}
}

func fillStore(b *testing.B, s *Store, n, size int) {
	must(b, s.MkdirPath(ctx, "d", 0o755, false))
	for i := range n {
		if _, err := s.WriteFile(ctx, fmt.Sprintf("d/f%05d", i), pattern(size, byte(i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFeed10000(b *testing.B) {
	s := benchStore(b)
	fillStore(b, s, 10000, 100)
	b.ResetTimer()
	for range b.N {
		n := 0
		for _, err := range s.Changes(ctx, watermark.Cursor{}, watermark.At(s.CurrentRev()), Ignore{}) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != 10001 {
			b.Fatalf("feed = %d", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/10001, "us/entry")
}

// BenchmarkApply10000x10KB applies 10,000 new files of 10 KB in batches of
// 256 into an empty store (staging their chunks is timed too). cpu-us/entry
// is the CPU time of the applying thread alone (Apply runs SQLite on its
// caller's thread), which holds still on a loaded machine where wall time
// does not.
func BenchmarkApply10000x10KB(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		s := benchStore(b)
		st := s.Chunks().NewStage()
		var es []ChangeEntry
		for i := range 10000 {
			data := pattern(10<<10, byte(i))
			data[0], data[1] = byte(i), byte(i>>8)
			ref := chunkstore.Ref{Hash: chunkstore.Sum(data), Size: uint32(len(data))}
			es = append(es, ChangeEntry{Kind: EntryFile, Rev: int64(i + 1), Path: fmt.Sprintf("d/f%05d", i), Mode: 0o644, Size: int64(len(data)), Chunks: chunkstore.Manifest{ref}})
			b.StartTimer()
			if err := st.Put(ctx, ref.Hash, data); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
		}
		b.StartTimer()
		c0 := threadCPU(b)
		for k := 0; k < len(es); k += 256 {
			if _, err := s.Apply(ctx, es[k:min(k+256, len(es))], ApplyOptions{Source: Upstream, Stage: st}); err != nil {
				b.Fatal(err)
			}
		}
		cpu += threadCPU(b) - c0
		b.StopTimer()
		st.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/10000, "us/entry")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/10000, "cpu-us/entry")
}

// threadCPU is the CPU time (user and system) of the calling thread.
func threadCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWrite1GiBPeakHeap reports the peak heap while writing 1 GiB of
// distinct chunks through one handle.
func BenchmarkWrite1GiBPeakHeap(b *testing.B) {
	s := benchStore(b)
	buf := pattern(1<<20, 8)
	for i := range b.N {
		a, _ := s.Create(ctx, RootIno, fmt.Sprint("g", i), NewAttr{Mode: 0o644})
		h, _ := s.OpenHandle(ctx, a.Ino)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, peak := ms.HeapInuse, uint64(0)
		for off := int64(0); off < 1<<30; off += 1 << 20 {
			buf[0], buf[cs] = byte(off>>20), byte(off>>28)
			if _, err := h.WriteAt(ctx, buf, off); err != nil {
				b.Fatal(err)
			}
			if off%(64<<20) == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak-base)/(1<<20), "peak-heap-MiB")
	}
	b.SetBytes(1 << 30)
}
