package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/s3test"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

// Benchmarks of serve --object-store (issue 15; docs/PERFORMANCE.md,
// "Object store (issue 15): cost and takeover"), each beside the same
// server on its local disk alone, in the same run:
//
//	WSYNC_VERSITYGW=~/.cache/wsync-tools/versitygw go test -run '^$' -bench 'ObjectStore|Takeover' -benchtime 1x ./tests
//
// The shared servers run with the cluster tests' settings: lease
// clusterTTL, a ship to the bucket every 200 ms. Without versitygw they
// skip, as the cluster tests do.

// proj is the Go client of workspace proj on p's server: the benchmarks
// time calls without the CLI's start.
func (p *pair) proj() *client.Workspace {
	p.t.Helper()
	c, err := client.New(p.url, p.token)
	if err != nil {
		p.t.Fatal(err)
	}
	return c.Workspace("proj")
}

// sides is the same server twice in one run: local on its disk alone,
// shared through a real S3 server.
type sides struct {
	local, shared *pair
}

func newSides(b *testing.B) sides {
	b.Helper()
	s3 := s3test.Start(b) // skips without versitygw, before a pair starts
	s3.Env(b)
	return sides{local: projPair(b, nil), shared: projPair(b, sharedArgs(s3))}
}

// The sides' indexes in what each passes and reportSides reads.
const (
	localSide = iota
	storeSide
)

// each runs f on both sides (i is localSide or storeSide), local first
// in even rounds, shared first in odd ones, so that neither always runs in
// the other's wake.
func (s sides) each(round int, f func(p *pair, i int)) {
	order := []int{localSide, storeSide}
	if round%2 == 1 {
		order = []int{storeSide, localSide}
	}
	for _, i := range order {
		f([]*pair{s.local, s.shared}[i], i)
	}
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// reportSides reports the medians of what the two sides took and their
// ratio, shared over local.
func reportSides(b *testing.B, what string, ds [2][]time.Duration) {
	l, s := percentile(ds[localSide], 0.5), percentile(ds[storeSide], 0.5)
	b.ReportMetric(millis(l), what+"-local-ms")
	b.ReportMetric(millis(s), what+"-store-ms")
	b.ReportMetric(s.Seconds()/l.Seconds(), what+"-x-local")
}

// treeScript writes dirs*100 files of 10,100 random bytes (each a chunk
// above the inline threshold) under dir, dir/dNN/fNN: split writes a
// directory's files in one process, so the command's own time is small
// beside the pull's.
func treeScript(dir string, dirs int) string {
	return fmt.Sprintf(`for d in $(seq -w 0 %d); do mkdir -p %s/d$d && head -c 1010000 /dev/urandom | split -b 10100 -a 2 -d - %s/d$d/f || exit 1; done`, dirs-1, dir, dir)
}

// BenchmarkObjectStoreExecTrue: `exec true` with nothing to sync through
// the Go client, 100 rounds alternating the two sides. The shared side's
// exec does nothing the local one does not (no commit, so nothing to
// ship): what it pays is the replicator's and the lease's background work.
func BenchmarkObjectStoreExecTrue(b *testing.B) {
	s := newSides(b)
	ctx := context.Background()
	s.each(0, func(p *pair, _ int) { p.sh("echo x > f") })
	const runs = 100
	b.ResetTimer()
	for range b.N {
		var took [2][]time.Duration
		for r := range runs {
			s.each(r, func(p *pair, i int) {
				start := time.Now()
				rep, err := p.proj().Exec(ctx, workspace.ExecSpec{Argv: []string{"true"}}, nil)
				if err != nil || rep.ExitCode != 0 || rep.Pushed.Entries != 0 || rep.Pulled.Entries != 0 {
					b.Fatalf("exec true: %+v, %v", rep, err)
				}
				took[i] = append(took[i], time.Since(start))
			})
		}
		reportSides(b, "exec-p50", took)
		b.ReportMetric(millis(percentile(took[localSide], 0.99)), "exec-p99-local-ms")
		b.ReportMetric(millis(percentile(took[storeSide], 0.99)), "exec-p99-store-ms")
	}
}

// BenchmarkObjectStorePush: 200 files of 10 KB of random bytes written
// through the API (one request each), then pushed to the container, five
// rounds alternating the two sides; write-p50 and write-p99 are of one
// request. catchup-store-ms is the time from the
// end of the push until the bucket holds every commit and chunk (status
// polled through the CLI, so to within ~40 ms).
func BenchmarkObjectStorePush(b *testing.B) {
	s := newSides(b)
	ctx := context.Background()
	const rounds, files = 5, 200
	n := 0
	b.ResetTimer()
	for range b.N {
		var write, push, each [2][]time.Duration
		var catchup []time.Duration
		for r := range rounds {
			n++
			s.each(r, func(p *pair, i int) {
				w := p.proj()
				dir := fmt.Sprintf("/push%d", n)
				if _, err := w.Mkdir(ctx, dir, 0o755, false); err != nil {
					b.Fatal(err)
				}
				data := make([]byte, 10_000)
				start := time.Now()
				for f := range files {
					rand.Read(data)
					one := time.Now()
					if _, err := w.WriteFile(ctx, fmt.Sprintf("%s/f%03d", dir, f), bytes.NewReader(data), nil); err != nil {
						b.Fatal(err)
					}
					each[i] = append(each[i], time.Since(one))
				}
				wrote := time.Now()
				rep, err := w.Push(ctx)
				if err != nil || rep.Entries < files {
					b.Fatalf("push: %+v, %v", rep, err)
				}
				pushed := time.Now()
				write[i] = append(write[i], wrote.Sub(start))
				push[i] = append(push[i], pushed.Sub(wrote))
				if i == storeSide {
					p.caughtUp("proj")
					catchup = append(catchup, time.Since(pushed))
				}
			})
		}
		reportSides(b, "write200", write)
		reportSides(b, "write-p50", each)
		b.ReportMetric(millis(percentile(each[localSide], 0.99)), "write-p99-local-ms")
		b.ReportMetric(millis(percentile(each[storeSide], 0.99)), "write-p99-store-ms")
		reportSides(b, "push", push)
		b.ReportMetric(millis(percentile(catchup, 0.5)), "catchup-store-ms")
		b.ReportMetric(1000*histogramMean(b, s.shared, "wsync_replica_gate_seconds"), "gate-mean-store-ms")
	}
}

// histogramMean is the mean of a Prometheus histogram of p's server, from
// its /metrics (all observations since it started).
func histogramMean(b *testing.B, p *pair, name string) float64 {
	b.Helper()
	status, body, _ := rawGet(b, p, "/metrics")
	if status != http.StatusOK {
		b.Fatalf("/metrics: status %d", status)
	}
	var sum, count float64
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+"_sum "); ok {
			sum, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		} else if v, ok := strings.CutPrefix(line, name+"_count "); ok {
			count, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if count == 0 {
		b.Fatalf("/metrics has no %s", name)
	}
	return sum / count
}

// BenchmarkObjectStorePull: an exec that writes 1,000 files of ~10 KB,
// then one that writes a 4 MiB file, each timed end to end (the command,
// then the pull that brings its files to the server), three rounds
// alternating the two sides. pull-* is the pull alone as the server timed
// it; catchup is as in BenchmarkObjectStorePush, after the 1,000 files.
func BenchmarkObjectStorePull(b *testing.B) {
	s := newSides(b)
	ctx := context.Background()
	const rounds = 3
	n := 0
	b.ResetTimer()
	for range b.N {
		var exec1k, pull1k, execBig, pullBig [2][]time.Duration
		var catchup []time.Duration
		for r := range rounds {
			n++
			s.each(r, func(p *pair, i int) {
				w := p.proj()
				run := func(script string, entries int, exec, pull *[2][]time.Duration) {
					start := time.Now()
					rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: script, Timeout: 5 * time.Minute}, nil)
					if err != nil || rep.ExitCode != 0 || rep.Sync != workspace.SyncComplete || rep.Pulled.Entries < entries {
						b.Fatalf("exec %q: %+v, %v", script, rep, err)
					}
					exec[i] = append(exec[i], time.Since(start))
					pull[i] = append(pull[i], rep.Pulled.Duration)
				}
				run(treeScript(fmt.Sprintf("pull%d", n), 10), 1000, &exec1k, &pull1k)
				if i == storeSide {
					start := time.Now()
					p.caughtUp("proj")
					catchup = append(catchup, time.Since(start))
				}
				run(fmt.Sprintf("head -c 4194304 /dev/urandom > pull%d/big.bin", n), 1, &execBig, &pullBig)
			})
		}
		reportSides(b, "exec1k", exec1k)
		reportSides(b, "pull1k", pull1k)
		reportSides(b, "exec4MiB", execBig)
		reportSides(b, "pull4MiB", pullBig)
		b.ReportMetric(millis(percentile(catchup, 0.5)), "catchup1k-store-ms")
	}
}

// restoredTook is what the log line of B's restore says it took.
var restoredTook = regexp.MustCompile(`workspace restored from the object store.* took=(\S+)`)

// BenchmarkTakeover: workspace proj of 10,000 files of ~10 KB (written by
// one exec in the container, so pulled to server A), caught up in the
// bucket; A is SIGKILLed and the time is taken until server B serves proj
// (its status answers 200: B claimed the lease once it expired, then
// restored the store) and until B has read one file through (its chunk
// comes from the bucket). The lease is clusterTTL; a claim waits for the
// lease's expiry plus lease.MaxSkew (2 s), so serve-store-s is MaxSkew
// plus the TTL less the time since A's last renewal (renewed every third
// of the TTL). restore-store-s is the restore alone, from B's log. The local baseline is the same server
// without the object store SIGKILLed and started again on its own disk.
func BenchmarkTakeover(b *testing.B) {
	for range b.N {
		s := newSides(b)
		a := s.shared
		peer := a.peer("data-b")
		const probe = "/tree/d50/f50"
		var want [2][]byte
		s.each(0, func(p *pair, i int) {
			start := time.Now()
			rep, err := p.proj().Exec(context.Background(), workspace.ExecSpec{Shell: treeScript("tree", 100), Timeout: 10 * time.Minute}, nil)
			if err != nil || rep.ExitCode != 0 || rep.Sync != workspace.SyncComplete || rep.Pulled.Entries < 10_000 {
				b.Fatalf("exec: %+v, %v", rep, err)
			}
			if i == storeSide {
				b.ReportMetric(time.Since(start).Seconds(), "exec10k-store-s")
				start = time.Now()
				p.caughtUp("proj")
				b.ReportMetric(time.Since(start).Seconds(), "catchup10k-store-s")
			} else {
				b.ReportMetric(time.Since(start).Seconds(), "exec10k-local-s")
			}
			want[i] = []byte(p.ok("read", probe))
		})

		// serveAndRead waits for q to serve proj after start, then reads
		// the probe through it.
		serveAndRead := func(q *pair, start time.Time, want []byte, what string) (served, read time.Duration) {
			testutil.WaitFor(b, what+" to serve proj", time.Minute, func() bool { return q.serves("proj") })
			served = time.Since(start)
			got, err := q.proj().ReadFile(context.Background(), probe)
			if err != nil || !bytes.Equal(got, want) {
				b.Fatalf("%s's %s: %d bytes (want %d), %v", what, probe, len(got), len(want), err)
			}
			return served, time.Since(start)
		}

		start := time.Now()
		s.local.server.kill()
		s.local.startServer()
		localServe, localRead := serveAndRead(s.local, start, want[localSide], "the restarted local server")

		start = time.Now()
		a.server.kill()
		serve, read := serveAndRead(peer, start, want[storeSide], "B")
		m := restoredTook.FindStringSubmatch(peer.server.output())
		if m == nil {
			b.Fatalf("B's log has no restore:\n%s", peer.server.output())
		}
		restore, err := time.ParseDuration(m[1])
		if err != nil {
			b.Fatalf("B's restore took %q: %v", m[1], err)
		}
		ttl, _ := time.ParseDuration(clusterTTL)
		b.ReportMetric(ttl.Seconds(), "lease-ttl-s")
		b.ReportMetric(serve.Seconds(), "serve-store-s")
		b.ReportMetric(read.Seconds(), "read-store-s")
		b.ReportMetric(restore.Seconds(), "restore-store-s")
		b.ReportMetric(localServe.Seconds(), "serve-local-s")
		b.ReportMetric(localRead.Seconds(), "read-local-s")
		b.ReportMetric(serve.Seconds()/localServe.Seconds(), "serve-x-local")
		b.ReportMetric(restore.Seconds()/localServe.Seconds(), "restore/local-restart")
	}
}
