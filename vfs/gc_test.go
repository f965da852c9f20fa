package vfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
)

// rss is the process's resident set, from /proc/self/statm.
func rss(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	must(t, err)
	f := strings.Fields(string(b))
	n, err := strconv.ParseInt(f[1], 10, 64)
	must(t, err)
	return n * int64(os.Getpagesize())
}

// settledRSS frees what Go holds that nothing uses and returns the RSS.
func settledRSS(t testing.TB) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	return rss(t)
}

// dbBytes is the in-use size of the store's database: its pages less the
// free ones.
func dbBytes(t testing.TB, s *Store) int64 {
	t.Helper()
	var pages, free, size int64
	must(t, s.r.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages))
	must(t, s.r.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free))
	must(t, s.r.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&size))
	return pages * size
}

const gcTestMiB = 40

// TestLiveGCReturnsMemoryOfAMemoryStore is the reproduction of issue 9
// item 7: a :memory: store written and emptied of 40 MiB gives the memory
// back while it stays open, the background collector triggered by the bytes
// dropped. Before live collection the database kept every page (40 MiB of
// free pages) and the process its 40 MiB until a restart.
func TestLiveGCReturnsMemoryOfAMemoryStore(t *testing.T) {
	const threshold = 8 << 20
	s, err := Open(ctx, Memory, Options{GC: GCOptions{Interval: time.Second, Threshold: threshold, Grace: -1}})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	db0, rss0 := dbBytes(t, s), settledRSS(t)

	n := gcTestMiB * 2 // files of 512 KiB
	for i := range n {
		writeFile(t, s, fmt.Sprintf("f%d", i), pattern(cs, byte(i)))
	}
	dbFull, rssFull := dbBytes(t, s), settledRSS(t)
	if dbFull-db0 < gcTestMiB<<20 {
		t.Fatalf("the database grew by %d bytes for %d MiB written", dbFull-db0, gcTestMiB)
	}
	runs := counterValue(t, "threshold")
	for i := range n {
		must(t, s.RemovePath(ctx, fmt.Sprintf("f%d", i), false))
	}
	// A threshold's worth of drops starts a pass at once; what is left
	// under the threshold goes at the next periodic pass.
	testutil.WaitFor(t, "a pass started by the bytes dropped", 30*time.Second, func() bool {
		return counterValue(t, "threshold") > runs
	})
	testutil.WaitFor(t, "the collector to free the deleted chunks' pages", 30*time.Second, func() bool {
		st, err := s.Chunks().Stats(ctx, s.r)
		return err == nil && st.Chunks == 0 && dbBytes(t, s)-db0 < 1<<20
	})
	rssAfter := settledRSS(t)
	t.Logf("database %d -> %d -> %d KiB; RSS %d -> %d -> %d MiB", db0>>10, dbFull>>10, dbBytes(t, s)>>10, rss0>>20, rssFull>>20, rssAfter>>20)
	if rssFull-rssAfter < (gcTestMiB-8)<<20 {
		t.Errorf("RSS went %d -> %d MiB after deleting %d MiB: the memory did not come back", rssFull>>20, rssAfter>>20, gcTestMiB)
	}
}

// TestLiveGCThresholdWaitsOutTheGrace: bytes that cross the threshold
// start a pass once their grace is over. A pass at once could collect
// none of them, all younger than the grace, and ran in the middle of the
// deletes that dropped them (7% of computerd's CPU during an rm -rf of
// node_modules).
func TestLiveGCThresholdWaitsOutTheGrace(t *testing.T) {
	const grace = time.Second
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := Open(ctx, path, Options{NoSync: true, GC: GCOptions{Interval: time.Hour, Threshold: 1 << 20, Grace: grace}})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	for i := range 8 {
		writeFile(t, s, fmt.Sprintf("d/f%d", i), pattern(cs, byte(i)))
	}
	runs := counterValue(t, "threshold")
	start := time.Now()
	// One removal drops every chunk at once: a pass waits out the grace of
	// the bytes that crossed the threshold, and files removed one by one
	// on a loaded machine could leave the last ones younger than that.
	must(t, s.RemovePath(ctx, "d", true))
	testutil.WaitFor(t, "a pass started by the bytes dropped", 30*time.Second, func() bool {
		return counterValue(t, "threshold") > runs
	})
	if d := time.Since(start); d < grace {
		t.Errorf("a threshold pass ended %v after the deletes, within their grace of %v", d, grace)
	}
	st, err := s.Chunks().Stats(ctx, s.r)
	must(t, err)
	if st.Chunks != 0 {
		t.Errorf("%d chunks left after the threshold pass: it ran before they were old enough", st.Chunks)
	}
}

// diskBytes sums the chunk files and packs under dir. A collector may run
// while it walks, so a file listed and gone before its size is read counts
// as gone.
func diskBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p != dir {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	must(t, err)
	return n
}

// TestLiveGCFreesDiskWhileOpen: on disk, the chunk files of deleted and
// cut-short files and the dead space of packs go while the store stays
// open (the periodic pass), where they used to wait for a restart.
func TestLiveGCFreesDiskWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := Open(ctx, path, Options{NoSync: true, GC: GCOptions{Interval: 20 * time.Millisecond, SliceChunks: 16, Grace: -1}})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	dir := path + ".chunks"

	want := map[string][]byte{}
	// 20 MiB of full chunks, and 200 files of 100 KB (pack records).
	for i := range 10 {
		p := fmt.Sprintf("big%d", i)
		want[p] = pattern(4*cs, byte(i))
		writeFile(t, s, p, want[p])
	}
	for i := range 200 {
		p := fmt.Sprintf("small%d", i)
		want[p] = pattern(100_000, byte(100+i))
		writeFile(t, s, p, want[p])
	}
	full := diskBytes(t, dir)
	// Delete the big files but one, cut that one short, delete 3 in 4 of
	// the small ones.
	for i := 1; i < 10; i++ {
		p := fmt.Sprintf("big%d", i)
		must(t, s.RemovePath(ctx, p, false))
		delete(want, p)
	}
	want["big0"] = want["big0"][:1000]
	writeFile(t, s, "big0", want["big0"])
	for i := range 200 {
		if i%4 != 0 {
			p := fmt.Sprintf("small%d", i)
			must(t, s.RemovePath(ctx, p, false))
			delete(want, p)
		}
	}
	var live int64
	for _, b := range want {
		live += int64(len(b))
	}
	testutil.WaitFor(t, "the collector to free the deleted bytes", 30*time.Second, func() bool {
		return diskBytes(t, dir) < 2*live
	})
	t.Logf("chunk files and packs: %d KiB written, %d KiB live, %d KiB on disk after live GC", full>>10, live>>10, diskBytes(t, dir)>>10)
	for p, b := range want {
		if got := readFile(t, s, p); !bytes.Equal(got, b) {
			t.Fatalf("%s damaged by live GC", p)
		}
	}
}

// TestLiveGCStepsAreBounded: a pass collects in steps of at most
// SliceChunks chunks (rows deleted, records moved), each its own
// transaction, so a writer waits one step at most.
func TestLiveGCStepsAreBounded(t *testing.T) {
	const slice = 32
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := Open(ctx, path, Options{NoSync: true, GC: GCOptions{SliceChunks: slice, Grace: -1}})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	const files = 600
	for i := range files {
		// Inline rows, pack records and chunk files.
		writeFile(t, s, fmt.Sprintf("f%d", i), pattern([]int{100, 20_000, cs}[i%3], byte(i)))
	}
	for i := range files {
		must(t, s.RemovePath(ctx, fmt.Sprintf("f%d", i), false))
	}
	rep, err := s.RunGC(ctx)
	must(t, err)
	t.Logf("%d rows, %d files, %d packs, %d bytes in %d steps; most chunks in a step %d, longest pause %v",
		rep.Rows, rep.Files, rep.Packs, rep.Bytes, rep.Steps, rep.MaxStepChunks, rep.MaxPause)
	if rep.Rows != files {
		t.Errorf("collected %d rows, want %d", rep.Rows, files)
	}
	if rep.MaxStepChunks > slice {
		t.Errorf("a step collected %d chunks, more than the slice of %d", rep.MaxStepChunks, slice)
	}
	if rep.Steps < files/slice {
		t.Errorf("%d rows in %d steps: the steps are not bounded by %d", rep.Rows, rep.Steps, slice)
	}
}

// TestLiveGCRacesWritersAndApplies runs collection passes without grace
// and with tiny steps while 8 writers write, overwrite, delete and apply
// files drawn from a small pool of contents (so chunks lose their last
// reference and are referenced again all the time, by other writers), some
// through open handles. Every file reads back as the writers left it, open
// and after a reopen.
func TestLiveGCRacesWritersAndApplies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := Open(ctx, path, Options{NoSync: true, GC: GCOptions{SliceChunks: 4, Grace: -1}})
	must(t, err)
	ops := 150
	if os.Getenv("WSYNC_LONG") != "" {
		ops = 2000
	}
	pool := make([][]byte, 12)
	for i := range pool {
		pool[i] = pattern([]int{50, 3000, 20_000, cs + 7, 2 * cs}[i%5], byte(200+i))
	}

	gctx, stop := context.WithCancel(ctx)
	var gcWG sync.WaitGroup
	gcWG.Add(1)
	passes := 0
	var collected int64
	go func() {
		defer gcWG.Done()
		for gctx.Err() == nil {
			rep, err := s.RunGC(gctx)
			if err != nil && gctx.Err() == nil {
				t.Errorf("gc: %v", err)
				return
			}
			passes++
			collected += rep.Rows
		}
	}()

	for w := range 8 {
		must(t, s.MkdirPath(ctx, fmt.Sprintf("w%d", w), 0o755, false))
	}
	var mu sync.Mutex
	want := map[string][]byte{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			model := map[string][]byte{}
			for range ops {
				p := fmt.Sprintf("w%d/f%d", w, rng.IntN(6))
				b := pool[rng.IntN(len(pool))]
				var err error
				switch op := rng.IntN(10); {
				case op < 3:
					_, err = s.WriteFile(ctx, p, b, 0o644)
					model[p] = b
				case op < 5:
					if _, ok := model[p]; ok {
						err = s.RemovePath(ctx, p, false)
						delete(model, p)
					}
				case op < 7:
					err = applyOne(s, p, b)
					model[p] = b
				default:
					// Through a handle: rewrite the first chunk of an
					// existing file, keeping the rest of its chunks.
					old, ok := model[p]
					if !ok {
						continue
					}
					nb := append([]byte(nil), old...)
					copy(nb, b[:min(len(b), len(nb), 4000)])
					err = handleWrite(s, p, nb[:min(len(b), len(nb), 4000)])
					model[p] = nb
				}
				if err != nil {
					t.Errorf("writer %d: %s: %v", w, p, err)
					return
				}
			}
			mu.Lock()
			for p, b := range model {
				want[p] = b
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	stop()
	gcWG.Wait()
	if t.Failed() {
		s.Close()
		return
	}
	rep, err := s.RunGC(ctx)
	must(t, err)
	t.Logf("%d passes collected %d rows during the run, %d after", passes, collected, rep.Rows)
	if passes < 2 || collected == 0 {
		t.Errorf("the collector ran %d passes and collected %d rows: it did not race the writers", passes, collected)
	}
	check := func(s *Store) {
		for p, b := range want {
			if got, err := s.ReadFile(ctx, p); err != nil || !bytes.Equal(got, b) {
				t.Errorf("%s: %d bytes, err %v; want %d bytes", p, len(got), err, len(b))
			}
		}
	}
	check(s)
	must(t, s.Close())
	s = openStore(t, path)
	check(s)
}

// applyOne applies one file entry as a sync peer would: its chunks staged,
// applied in one batch.
func applyOne(s *Store, p string, b []byte) error {
	st := s.Chunks().NewStage()
	defer st.Release()
	var m chunkstore.Manifest
	for off := 0; off < len(b); off += cs {
		ref, err := st.PutHashed(ctx, b[off:min(off+cs, len(b))])
		if err != nil {
			return err
		}
		m = append(m, ref)
	}
	_, err := s.Apply(ctx, []ChangeEntry{{Kind: EntryFile, Rev: 1, Path: p, Mode: 0o644, Mtime: time.Now().UnixNano(), Size: int64(len(b)), Chunks: m}},
		ApplyOptions{Source: Upstream, Stage: st})
	return err
}

// handleWrite writes b at offset 0 of the file at p through a handle.
func handleWrite(s *Store, p string, b []byte) error {
	ino, err := s.ResolvePath(ctx, p)
	if err != nil {
		return err
	}
	h, err := s.OpenHandle(ctx, ino)
	if err != nil {
		return err
	}
	if _, err := h.WriteAt(ctx, b, 0); err != nil {
		h.Release(ctx)
		return err
	}
	return h.Release(ctx)
}

// counterValue reads wsync_chunkstore_gc_runs_total{trigger, result="ok"}.
func counterValue(t testing.TB, trigger string) float64 {
	t.Helper()
	var m dto.Metric
	must(t, metricGCRuns.WithLabelValues(trigger, "ok").Write(&m))
	return m.GetCounter().GetValue()
}

const gcCrashEnv = "WSYNC_VFS_GC_CRASH_DB"

// gcCrashContent is the content of a file the crash test's child writes:
// sizes cycle through inline rows, pack records and chunk files.
func gcCrashContent(name string, i int) []byte {
	return pattern([]int{300, 40_000, 90_000, cs + 5000}[i%4], byte(len(name)*31+i))
}

// TestLiveGCSurvivesSIGKILL kills a process while live collection deletes
// rows, unlinks files and compacts packs under writers (a real child, SIGKILL):
// the store opens and every file committed reads back.
func TestLiveGCSurvivesSIGKILL(t *testing.T) {
	if db := os.Getenv(gcCrashEnv); db != "" {
		gcCrashChild(db)
		return
	}
	seeds := 2
	if os.Getenv("WSYNC_LONG") != "" {
		seeds = 8
	}
	for seed := range seeds {
		db := filepath.Join(t.TempDir(), "store.db")
		child := testutil.StartChild(t, "TestLiveGCSurvivesSIGKILL", gcCrashEnv+"="+db)
		// Kill once the child has compacted and collected, at a point that
		// moves with the seed.
		compacted, passes := false, 0
		child.ReadUntil(t, "compacting a pack", func(line string) bool {
			var rows, moved, packs int64
			if _, err := fmt.Sscanf(line, "gc %d %d %d", &rows, &moved, &packs); err == nil {
				passes++
				compacted = compacted || moved > 0 || packs > 0
			}
			return compacted && passes >= 3+seed*7
		})
		child.Kill(t) // SIGKILL

		s := openStore(t, db)
		for i := range gcCrashKept {
			p := fmt.Sprintf("k%d", i)
			if got, err := s.ReadFile(ctx, p); err != nil || !bytes.Equal(got, gcCrashContent(p, i)) {
				t.Fatalf("seed %d: kept file %s: %d bytes, err %v", seed, p, len(got), err)
			}
		}
		es, err := s.List(ctx, "")
		must(t, err)
		for _, e := range es {
			var r, i int
			if _, err := fmt.Sscanf(e.Name, "g%d-%d", &r, &i); err != nil {
				continue
			}
			if got, err := s.ReadFile(ctx, e.Name); err != nil || !bytes.Equal(got, gcCrashContent(e.Name, i)) {
				t.Fatalf("seed %d: %s committed before the crash: %d bytes, err %v", seed, e.Name, len(got), err)
			}
		}
		must(t, s.Close())
	}
}

const gcCrashKept = 24

// gcCrashChild writes the kept files, then rounds of garbage files it
// deletes again, while a collector runs passes of tiny steps and reports
// each pass that did something; it runs until killed.
func gcCrashChild(db string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := Open(ctx, db, Options{NoSync: true, GC: GCOptions{SliceChunks: 4, Grace: -1}})
	if err != nil {
		fail(err)
	}
	for i := range gcCrashKept {
		p := fmt.Sprintf("k%d", i)
		if _, err := s.WriteFile(ctx, p, gcCrashContent(p, i), 0o644); err != nil {
			fail(err)
		}
	}
	go func() {
		for {
			rep, err := s.RunGC(ctx)
			if err != nil {
				fail(err)
			}
			if rep.Rows+rep.Moved+rep.Packs > 0 {
				fmt.Printf("gc %d %d %d\n", rep.Rows, rep.Moved, rep.Packs)
			}
		}
	}()
	for r := 0; ; r++ {
		// About 10 MB of pack records a round: the current pack fills
		// past sealMinSize and, mostly dead, is sealed and compacted.
		for i := range 120 {
			p := fmt.Sprintf("g%d-%d", r, i)
			if _, err := s.WriteFile(ctx, p, gcCrashContent(p, i), 0o644); err != nil {
				fail(err)
			}
		}
		for i := range 120 {
			if err := s.RemovePath(ctx, fmt.Sprintf("g%d-%d", r, i), false); err != nil {
				fail(err)
			}
		}
	}
}
