package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/execrpc"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/workspace"
)

// Benchmarks of the whole pair (docs/PERFORMANCE.md, issue 5), with real
// binaries and a real mount:
//
//	sudo go test -run '^$' -bench . -benchtime 1x ./tests
//
// Each reports its baseline from the same run.

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkExecTrueRoundTrip: `exec true` with nothing to sync, end to end
// over HTTP on loopback (the Go client's exec: push, the command, pull),
// on a workspace holding a file, beside a bare `true` through computerd's
// exec call (no bracket, no HTTP) and a fork+exec of /bin/true by this
// process: 200 rounds of one of each, interleaved so that all three see the
// same load. pull-p50-ms is the pull after the command as the server timed
// it (0 when it skipped the pull). ns/op is the mean of one exec
// through HTTP; the percentiles are in ms (issue 12's bar: under 3 ms where
// a fork+exec costs about 1 ms).
func BenchmarkExecTrueRoundTrip(b *testing.B) {
	p := newPair(b, pairOpts{separate: "disk"})
	c := p.client()
	ctx := context.Background()
	if rep, err := c.Exec(ctx, workspace.ExecSpec{Shell: "echo x > f"}, nil); err != nil || rep.Pulled.Entries != 1 {
		b.Fatalf("setup exec: %+v, %v", rep, err)
	}
	const runs = 200
	for range b.N {
		token, _ := os.ReadFile(p.tokenFile())
		cl := rpc.NewClient(rpc.ClientOptions{URL: "ws://" + p.cdAddr + "/sync", Token: strings.TrimSpace(string(token))})
		sess, _, err := cl.Session(ctx)
		if err != nil {
			b.Fatal(err)
		}
		// One of each per round, so the three see the same load on a
		// shared machine.
		var bracket, bare, fork, pulled []time.Duration
		for range runs {
			start := time.Now()
			rep, err := c.Exec(ctx, workspace.ExecSpec{Argv: []string{"true"}}, nil)
			if err != nil || rep.ExitCode != 0 || rep.Pushed.Entries != 0 || rep.Pulled.Entries != 0 {
				b.Fatalf("exec true: %+v, %v", rep, err)
			}
			bracket = append(bracket, time.Since(start))
			pulled = append(pulled, rep.Pulled.Duration)

			start = time.Now()
			st, err := execrpc.Start(ctx, sess, execrpc.Request{Argv: []string{"true"}})
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := st.Next(ctx); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			st.Close()
			bare = append(bare, time.Since(start))

			start = time.Now()
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
			fork = append(fork, time.Since(start))
		}
		cl.Close()
		var total time.Duration
		for _, d := range bracket {
			total += d
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(float64(total.Nanoseconds())/runs, "ns/op")
		b.ReportMetric(ms(percentile(bracket, 0.5)), "bracket-p50-ms")
		b.ReportMetric(ms(percentile(bracket, 0.99)), "bracket-p99-ms")
		b.ReportMetric(ms(percentile(pulled, 0.5)), "pull-p50-ms")
		b.ReportMetric(ms(percentile(bare, 0.5)), "bare-p50-ms")
		b.ReportMetric(ms(percentile(fork, 0.5)), "fork-p50-ms")
		b.ReportMetric(ms(percentile(fork, 0.99)), "fork-p99-ms")
		b.ReportMetric(ms(percentile(bracket, 0.5)-percentile(bare, 0.5)), "added-p50-ms")
		b.ReportMetric(percentile(bracket, 0.5).Seconds()/percentile(fork, 0.5).Seconds(), "bracket/fork")
	}
}

// rsyncDaemon serves dir as module "tree" on a loopback port.
func rsyncDaemon(b *testing.B, dir string) string {
	b.Helper()
	if _, err := exec.LookPath("rsync"); err != nil {
		b.Skip("rsync is not installed")
	}
	addr := freePort(b)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	conf := filepath.Join(b.TempDir(), "rsyncd.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("use chroot = no\n[tree]\npath = %s\nread only = yes\nuid = root\ngid = root\n", dir)), 0o644)
	d := start(b, "rsyncd", []string{"rsync", "--daemon", "--no-detach", "--address=127.0.0.1", "--port=" + port, "--config=" + conf})
	waitFor(b, "rsyncd to listen", 10*time.Second, func() bool {
		return exec.Command("rsync", "rsync://127.0.0.1:"+port+"/").Run() == nil
	})
	_ = d
	return "rsync://127.0.0.1:" + port + "/tree/"
}

func timeCmd(b *testing.B, name string, args ...string) time.Duration {
	b.Helper()
	start := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return time.Since(start)
}

// BenchmarkPullTenThousandFiles: an exec writes 10,000 files of ~10 KB
// (about 100 MB) in 100 directories; the pull that follows is timed, then a
// second exec changes one file and its pull is timed. rsync -a of the same
// tree over a loopback rsync daemon, initial and after one change, in the
// same run.
func BenchmarkPullTenThousandFiles(b *testing.B) {
	for range b.N {
		p := newPair(b, pairOpts{separate: "disk"})
		c := p.client()
		ctx := context.Background()
		script := `for d in $(seq -w 0 99); do mkdir -p tree/d$d; for f in $(seq -w 0 99); do head -c $((8000 + 1$f % 4000)) /dev/urandom > tree/d$d/f$f; done; done`
		rep, err := c.Exec(ctx, workspace.ExecSpec{Shell: script, Timeout: 10 * time.Minute}, nil)
		if err != nil || rep.ExitCode != 0 || rep.Sync != workspace.SyncComplete {
			b.Fatalf("exec: %+v, %v", rep, err)
		}
		first := rep.Pulled.Duration
		rep, err = c.Exec(ctx, workspace.ExecSpec{Shell: `echo changed > tree/d50/f50`}, nil)
		if err != nil || rep.Pulled.Entries != 1 {
			b.Fatalf("second exec: %+v, %v", rep, err)
		}
		second := rep.Pulled.Duration

		// rsync of the same tree, from the container's mount (read through
		// FUSE, as a fair source would be a local disk: copy it to tmpfs).
		src := filepath.Join("/dev/shm", fmt.Sprintf("wsync-rsync-src-%d", os.Getpid()))
		os.RemoveAll(src)
		defer os.RemoveAll(src)
		if out, err := exec.Command("cp", "-a", filepath.Join(p.mount, "tree"), src).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		url := rsyncDaemon(b, src)
		dst := filepath.Join("/dev/shm", fmt.Sprintf("wsync-rsync-dst-%d", os.Getpid()))
		os.RemoveAll(dst)
		defer os.RemoveAll(dst)
		rs1 := timeCmd(b, "rsync", "-a", url, dst+"/")
		os.WriteFile(filepath.Join(src, "d50", "f50"), []byte("changed again\n"), 0o644)
		rs2 := timeCmd(b, "rsync", "-a", url, dst+"/")

		b.ReportMetric(float64(first.Microseconds())/1000, "pull-ms")
		b.ReportMetric(float64(rs1.Microseconds())/1000, "rsync-ms")
		b.ReportMetric(first.Seconds()/rs1.Seconds(), "pull/rsync")
		b.ReportMetric(float64(second.Microseconds())/1000, "pull2-ms")
		b.ReportMetric(float64(rs2.Microseconds())/1000, "rsync2-ms")
	}
}

// vmHWM is a process's peak resident set, from /proc.
func vmHWM(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb << 10
		}
	}
	b.Fatal("no VmHWM")
	return 0
}

// BenchmarkOneGiB: an exec writes 1 GiB (16 files of 64 MiB of random
// bytes) through the mount, and the pull brings it to the server. Reports
// computerd's and the server's peak RSS (the bar: both under 128 MiB) and the
// pull's throughput.
func BenchmarkOneGiB(b *testing.B) {
	for range b.N {
		p := newPair(b, pairOpts{separate: "disk"})
		c := p.client()
		rep, err := c.Exec(context.Background(), workspace.ExecSpec{
			Shell:   `mkdir big && for i in $(seq 1 16); do head -c 67108864 /dev/urandom > big/f$i; done`,
			Timeout: 20 * time.Minute,
		}, nil)
		if err != nil || rep.ExitCode != 0 || rep.Sync != workspace.SyncComplete {
			b.Fatalf("exec: %+v, %v", rep, err)
		}
		b.ReportMetric(float64(vmHWM(b, p.cd.cmd.Process.Pid))/(1<<20), "computerd-peak-MiB")
		b.ReportMetric(float64(vmHWM(b, p.server.cmd.Process.Pid))/(1<<20), "server-peak-MiB")
		b.ReportMetric(float64(rep.Pulled.Bytes)/rep.Pulled.Duration.Seconds()/1e6, "pull-MB/s")
		b.ReportMetric(float64(rep.Pulled.Duration.Milliseconds()), "pull-ms")
	}
}
