package syncwire

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
)

// Benchmarks of the sync pair on loopback, as in issue 3's Measure section.
// Run: go test -run '^$' -bench . -benchtime 1x ./syncwire
// (WSYNC_BENCH_DIR picks where the stores live, e.g. /dev/shm).

// populateRandom writes n files of size random bytes under dir on s, in
// Local applies of up to 1000 entries (fast setup, not the measured part).
func populateRandom(tb testing.TB, s *vfs.Store, dir string, n, size int, seed uint64) int64 {
	tb.Helper()
	ctx := context.Background()
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	if err := s.MkdirPath(ctx, dir, 0o755, true); err != nil {
		tb.Fatal(err)
	}
	var total int64
	buf := make([]byte, chunkstore.ChunkSize)
	for start := 0; start < n; {
		st := s.Chunks().NewStage()
		var es []vfs.ChangeEntry
		var batchBytes int
		for ; start < n && len(es) < 1000 && batchBytes < 256<<20; start++ {
			e := vfs.ChangeEntry{Kind: vfs.EntryFile, Path: fmt.Sprintf("%s/d%03d/f%06d", dir, start/1000, start), Mode: 0o644, Mtime: 1, Size: int64(size)}
			for off := 0; off < size; off += chunkstore.ChunkSize {
				c := buf[:min(chunkstore.ChunkSize, size-off)]
				rng.Read(c)
				ref, err := st.PutHashed(ctx, c)
				if err != nil {
					tb.Fatal(err)
				}
				e.Chunks = append(e.Chunks, ref)
			}
			es = append(es, e)
			batchBytes += size
			total += int64(size)
		}
		if _, err := s.Apply(ctx, es, vfs.ApplyOptions{Source: vfs.Local, Stage: st}); err != nil {
			tb.Fatal(err)
		}
		st.Release()
	}
	return total
}

// peakTracker samples the Go heap while a measured operation runs and
// resets the kernel's peak-RSS counter at its start.
type peakTracker struct {
	stop chan struct{}
	done chan struct{}
	heap atomic.Uint64
}

func trackPeak() *peakTracker {
	runtime.GC()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	p := &peakTracker{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > p.heap.Load() {
				p.heap.Store(v)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peakTracker) finish() (heap, rss uint64) {
	close(p.stop)
	<-p.done
	return p.heap.Load(), vmHWM()
}

func vmHWM() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func benchPair(b *testing.B) *pair {
	b.Helper()
	dir := testutil.BenchDir(b, "syncwire-bench-")
	b.Setenv("TMPDIR", dir)
	return newPair(b, DriverOptions{Conflicts: &vfs.ConflictOptions{}}) // as the server runs it
}

func reportSync(b *testing.B, what string, d time.Duration, res Result, bytes int64) {
	b.ReportMetric(float64(d.Milliseconds()), what+"-ms")
	b.ReportMetric(float64(bytes)/d.Seconds()/1e6, what+"-MB/s")
	b.ReportMetric(float64(res.Entries)/d.Seconds(), what+"-entries/s")
	b.Logf("%s: %v, %d entries, %.1f MB in %.1f MB on the wire, %.0f MB/s, %.0f entries/s",
		what, d.Round(time.Millisecond), res.Entries, float64(bytes)/1e6, float64(res.WireBytes)/1e6,
		float64(bytes)/d.Seconds()/1e6, float64(res.Entries)/d.Seconds())
}

// BenchmarkSmallFiles: 10,000 files of 10 KB (about 100 MB), pushed to an
// empty container, pulled into an empty server, then a second pull after
// changing one file.
func BenchmarkSmallFiles(b *testing.B) {
	for range b.N {
		p := benchPair(b)
		ctx := context.Background()
		total := populateRandom(b, p.server, "push", 10000, 10000, 1)
		populateRandom(b, p.cont, "pull", 10000, 10000, 2)

		// Pull first, as a tick does: the push's bounce suppression needs
		// the peer's earlier writes fetched.
		pt := trackPeak()
		start := time.Now()
		res, err := p.drv.PullOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		heap, rss := pt.finish()
		reportSync(b, "pull", d, res, total)
		b.Logf("pull peaks: Go heap %.1f MiB, process RSS (both sides) %.1f MiB", float64(heap)/(1<<20), float64(rss)/(1<<20))

		start = time.Now()
		res, err = p.drv.PushOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		reportSync(b, "push", time.Since(start), res, total)

		write(b, p.cont, "pull/d005/f005000", []byte("changed"))
		start = time.Now()
		res, err = p.drv.PullOnce(ctx)
		if err != nil || res.Applied != 1 {
			b.Fatalf("second pull: %+v, %v", res, err)
		}
		d = time.Since(start)
		b.ReportMetric(float64(d.Microseconds())/1000, "second-pull-ms")
		b.Logf("second pull after one change: %v, %d wire bytes", d, res.WireBytes)

		start = time.Now()
		tr, err := p.drv.Tick(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("idle tick: %v, %d wire bytes", time.Since(start), tr.Pull.WireBytes+tr.Push.WireBytes)
	}
}

// BenchmarkLargeFiles: 1 GiB in 16 files of 64 MiB, push then pull, with
// peak memory during the pull; then a one-chunk edit of a 100 MiB file.
func BenchmarkLargeFiles(b *testing.B) {
	for range b.N {
		p := benchPair(b)
		ctx := context.Background()
		total := populateRandom(b, p.server, "push", 16, 64<<20, 3)
		start := time.Now()
		res, err := p.drv.PushOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		reportSync(b, "push", time.Since(start), res, total)

		populateRandom(b, p.cont, "pull", 16, 64<<20, 4)
		pt := trackPeak()
		start = time.Now()
		res, err = p.drv.PullOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		heap, rss := pt.finish()
		reportSync(b, "pull", d, res, total)
		b.ReportMetric(float64(rss)/(1<<20), "pull-peak-rss-MiB")
		b.Logf("1 GiB pull peaks: Go heap %.1f MiB, process RSS (both sides in one process) %.1f MiB",
			float64(heap)/(1<<20), float64(rss)/(1<<20))

		// One 512 KiB region of a 100 MiB file.
		big := make([]byte, 100<<20)
		rand.NewChaCha8([32]byte{5}).Read(big)
		write(b, p.server, "edit/big.bin", big)
		if _, err := p.drv.PushOnce(ctx); err != nil {
			b.Fatal(err)
		}
		copy(big[37*chunkstore.ChunkSize+1000:], bytes.Repeat([]byte{0xee}, 4096))
		write(b, p.server, "edit/big.bin", big)
		res, err = p.drv.PushOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.WireBytes), "edit-wire-bytes")
		b.Logf("one-chunk edit of 100 MiB: %d chunk(s), %d chunk bytes, %d bytes on the wire", res.Chunks, res.ChunkBytes, res.WireBytes)
	}
}

// BenchmarkRsync runs rsync -a over a loopback rsync daemon on the same
// shapes, as the baseline of the ratios.
func BenchmarkRsync(b *testing.B) {
	if _, err := exec.LookPath("rsync"); err != nil {
		b.Skip("rsync not installed")
	}
	for range b.N {
		dir := testutil.BenchDir(b, "syncwire-bench-")
		small := filepath.Join(dir, "small")
		large := filepath.Join(dir, "large")
		writeTree(b, small, 10000, 10000, 2)
		writeTree(b, large, 16, 64<<20, 4)
		port := startRsyncd(b, dir)
		run := func(what, module, dst string) time.Duration {
			start := time.Now()
			out, err := exec.Command("rsync", "-a", fmt.Sprintf("rsync://127.0.0.1:%d/%s/", port, module), dst+"/").CombinedOutput()
			if err != nil {
				b.Fatalf("rsync %s: %v\n%s", what, err, out)
			}
			d := time.Since(start)
			b.ReportMetric(float64(d.Milliseconds()), what+"-ms")
			b.Logf("rsync %s: %v", what, d.Round(time.Millisecond))
			return d
		}
		run("small", "small", filepath.Join(dir, "small-copy"))
		os.WriteFile(filepath.Join(small, "d005", "f005000"), []byte("changed"), 0o644)
		run("small-second", "small", filepath.Join(dir, "small-copy"))
		run("large", "large", filepath.Join(dir, "large-copy"))
	}
}

func writeTree(b *testing.B, root string, n, size int, seed byte) {
	rng := rand.NewChaCha8([32]byte{seed})
	buf := make([]byte, size)
	for i := range n {
		d := filepath.Join(root, fmt.Sprintf("d%03d", i/1000))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%06d", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func startRsyncd(b *testing.B, dir string) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(dir, "rsyncd.conf")
	os.WriteFile(conf, fmt.Appendf(nil, "use chroot = no\nuid = %d\ngid = %d\n[small]\npath = %s/small\nread only = yes\n[large]\npath = %s/large\nread only = yes\n", os.Getuid(), os.Getgid(), dir, dir), 0o644)
	cmd := exec.Command("rsync", "--daemon", "--no-detach", "--port", strconv.Itoa(port), "--address", "127.0.0.1", "--config", conf)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return port
		}
		if time.Now().After(deadline) {
			b.Fatal("rsync daemon did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
