package converge

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// BenchmarkBootstrap10000x10KB: the snapshot bootstrap of an empty
// container from a server holding 10,000 files of about 10 KB of random
// bytes in 100 directories (issue 12's bootstrap bar), both stores on
// WSYNC_BENCH_DIR (default: the test's temp dir), over a loopback
// WebSocket, beside `rsync -a` of the same tree (plain files in the same
// directory) from a loopback rsync daemon in the same run.
// WSYNC_BOOTSTRAP_FILES sets another count (the curve: 30000, 100000).
//
//	WSYNC_BENCH_DIR=/dev/shm go test -run '^$' -bench Bootstrap -benchtime 1x ./converge
func BenchmarkBootstrap10000x10KB(b *testing.B) {
	ctx := context.Background()
	n := 10000
	if v := os.Getenv("WSYNC_BOOTSTRAP_FILES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("WSYNC_BOOTSTRAP_FILES=%q: want a count of at least 100", v)
		}
	}
	dir := b.TempDir()
	if d := os.Getenv("WSYNC_BENCH_DIR"); d != "" {
		var err error
		dir, err = os.MkdirTemp(d, "wsync-bench")
		must(b, err)
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	server := openStore(b, filepath.Join(dir, "server.db"))
	src := filepath.Join(dir, "src")
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i += 256 {
		st := server.Chunks().NewStage()
		var es []vfs.ChangeEntry
		for j := i; j < min(i+256, n); j++ {
			if j%100 == 0 {
				es = append(es, vfs.ChangeEntry{Kind: vfs.EntryDir, Path: fmt.Sprintf("d%03d", j/100), Mode: 0o755})
			}
			data := make([]byte, 8000+rnd.IntN(4000))
			for k := range data {
				data[k] = byte(rnd.Uint32())
			}
			r, err := st.PutHashed(ctx, data)
			must(b, err)
			p := filepath.Join(src, fmt.Sprintf("d%03d/f%02d", j/100, j%100))
			must(b, os.MkdirAll(filepath.Dir(p), 0o755))
			must(b, os.WriteFile(p, data, 0o644))
			es = append(es, vfs.ChangeEntry{Kind: vfs.EntryFile, Path: fmt.Sprintf("d%03d/f%02d", j/100, j%100), Mode: 0o644,
				Mtime: 1_700_000_000_000_000_000, Size: int64(len(data)), Chunks: chunkstore.Manifest{r}})
		}
		_, err := server.Apply(ctx, es, vfs.ApplyOptions{Source: vfs.Local, Stage: st})
		st.Release()
		must(b, err)
	}
	url := rsyncDaemon(b, src)
	b.ResetTimer()
	for i := range b.N {
		dst := filepath.Join(dir, fmt.Sprintf("rsync%d", i))
		start := time.Now()
		if out, err := exec.Command("rsync", "-a", url, dst+"/").CombinedOutput(); err != nil {
			b.Fatalf("rsync: %v: %s", err, out)
		}
		rs := time.Since(start)
		must(b, os.RemoveAll(dst))
		cont := openStore(b, filepath.Join(dir, fmt.Sprintf("cont%d.db", i)))
		var logs strings.Builder
		srv := syncwire.NewServer(cont, rpc.ServerOptions{Config: testConfig()})
		r := serveRig(b, server, cont, srv, Register(srv, cont, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		start = time.Now()
		br, err := Bootstrap(ctx, server, r.session(b), BootstrapOptions{Peer: "bench"})
		must(b, err)
		took := time.Since(start)
		if want := n + (n+99)/100; br.Total != want {
			b.Fatalf("bootstrap of %d records, want %d", br.Total, want)
		}
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "snapshot timing") {
				b.Log(l)
			}
		}
		b.ReportMetric(took.Seconds()*1000, "bootstrap-ms")
		b.ReportMetric(rs.Seconds()*1000, "rsync-ms")
		b.ReportMetric(took.Seconds()/rs.Seconds(), "bootstrap/rsync")
		b.ReportMetric(float64(took.Microseconds())/float64(n), "us/file")
	}
}

// rsyncDaemon serves dir as module "tree" from an rsync daemon on a
// loopback port, for the length of the benchmark.
func rsyncDaemon(b *testing.B, dir string) string {
	b.Helper()
	if _, err := exec.LookPath("rsync"); err != nil {
		b.Skip("rsync is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	addr := ln.Addr().String()
	ln.Close()
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	conf := filepath.Join(b.TempDir(), "rsyncd.conf")
	must(b, os.WriteFile(conf, []byte("use chroot = no\n[tree]\npath = "+dir+"\nread only = yes\nuid = root\ngid = root\n"), 0o644))
	d := exec.Command("rsync", "--daemon", "--no-detach", "--address=127.0.0.1", "--port="+port, "--config="+conf)
	must(b, d.Start())
	b.Cleanup(func() { d.Process.Kill(); d.Wait() })
	testutil.WaitFor(b, "rsyncd to listen", 10*time.Second, func() bool {
		return exec.Command("rsync", "rsync://127.0.0.1:"+port+"/").Run() == nil
	})
	return "rsync://127.0.0.1:" + port + "/tree/"
}
