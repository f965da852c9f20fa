package fusefs_test

import (
	"context"
	"fmt"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
)

// The metadata benchmarks run one workload on our mount and, in the same
// run, on go-fuse's loopback filesystem over a directory of the same medium
// (WSYNC_BENCH_DIR, e.g. /dev/shm) with the mount options ours uses: the
// ratio of the two is the figure (SPEC section 7, issue 12). Both servers
// run in this process, so `-cpuprofile` profiles the daemon too:
//
//	WSYNC_BENCH_DIR=/dev/shm go test -run '^$' -bench Mount -benchtime 3x ./fusefs

// benchTargets mounts ours and the loopback, each with an empty directory.
func benchTargets(b *testing.B) map[string]string {
	b.Helper()
	base := testutil.BenchDir(b, "fusefsbench")
	m := fusetest.NewMount(b, fusetest.Options{StoreDir: base})
	src, err := os.MkdirTemp(base, "loopback-src-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(src) })
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		b.Fatal(err)
	}
	sec := time.Second
	mnt := b.TempDir()
	srv, err := fs.Mount(mnt, root, &fs.Options{
		EntryTimeout: &sec, AttrTimeout: &sec, NullPermissions: true,
		MountOptions: fuse.MountOptions{AllowOther: true, DirectMount: true, MaxWrite: 1 << 20,
			Options: []string{"default_permissions"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			b.Logf("loopback unmount: %v", err)
		}
	})
	return map[string]string{"ours": m.Dir, "loopback": mnt}
}

// runTargets runs fn(b, dir) as a sub-benchmark per target, each iteration
// in a fresh directory that setup (untimed) prepares.
func runTargets(b *testing.B, setup, fn func(b *testing.B, dir string)) {
	targets := benchTargets(b)
	for _, name := range []string{"loopback", "ours"} {
		b.Run(name, func(b *testing.B) {
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				dir, err := os.MkdirTemp(targets[name], "run-")
				if err != nil {
					b.Fatal(err)
				}
				if setup != nil {
					setup(b, dir)
				}
				c0 := testutil.ProcessCPU(b)
				b.StartTimer()
				fn(b, dir)
				b.StopTimer()
				cpu += testutil.ProcessCPU(b) - c0
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

func create1000(b *testing.B, dir string) {
	data := []byte("a small file of about forty bytes here\n")
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMountCreate1000(b *testing.B) { runTargets(b, nil, create1000) }

func BenchmarkMountUnlink1000(b *testing.B) {
	runTargets(b, create1000, func(b *testing.B, dir string) {
		for i := range 1000 {
			if err := os.Remove(filepath.Join(dir, fmt.Sprint("f", i))); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMountMkdir1000(b *testing.B) {
	runTargets(b, nil, func(b *testing.B, dir string) {
		for i := range 1000 {
			if err := os.Mkdir(filepath.Join(dir, fmt.Sprint("d", i)), 0o755); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// tree5600 writes a tree shaped like a node_modules: 200 packages, each a
// package.json and a lib directory of 25 small files (5,601 entries).
func tree5600(b *testing.B, dir string) {
	data := []byte("module.exports = 1\n")
	for p := range 200 {
		pd := filepath.Join(dir, fmt.Sprint("pkg", p), "lib")
		if err := os.MkdirAll(pd, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 25 {
			if err := os.WriteFile(filepath.Join(pd, fmt.Sprint("f", f, ".js")), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("pkg", p), "package.json"), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMountRmTree: `rm -rf` of tree5600 (the rm -rf node_modules
// scenario's shape, in-process so -cpuprofile sees the daemon).
func BenchmarkMountRmTree(b *testing.B) {
	runTargets(b, tree5600, func(b *testing.B, dir string) {
		if out, err := exec.Command("rm", "-rf", dir).CombinedOutput(); err != nil {
			b.Fatalf("rm -rf: %v: %s", err, out)
		}
	})
}

// BenchmarkMountReadTree reads every file of tree5600 after the kernel's
// caches were dropped (the read node_modules scenario's shape): a walk,
// then open, read and close of each file.
func BenchmarkMountReadTree(b *testing.B) {
	runTargets(b, func(b *testing.B, dir string) {
		tree5600(b, dir)
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
			b.Skipf("drop caches: %v", err)
		}
	}, func(b *testing.B, dir string) {
		n := 0
		err := filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(p)
			n++
			return err
		})
		if err != nil || n != 5200 {
			b.Fatalf("read %d files: %v", n, err)
		}
	})
}

// BenchmarkMountReadByPath reads every file of tree5600 by its path after
// the kernel's caches were dropped, with no listing (a compiler reading its
// includes, node resolving requires): a lookup, then open, read and close
// of each file.
func BenchmarkMountReadByPath(b *testing.B) {
	var paths []string
	for p := range 200 {
		paths = append(paths, filepath.Join(fmt.Sprint("pkg", p), "package.json"))
		for f := range 25 {
			paths = append(paths, filepath.Join(fmt.Sprint("pkg", p), "lib", fmt.Sprint("f", f, ".js")))
		}
	}
	runTargets(b, func(b *testing.B, dir string) {
		tree5600(b, dir)
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
			b.Skipf("drop caches: %v", err)
		}
	}, func(b *testing.B, dir string) {
		for _, p := range paths {
			if _, err := os.ReadFile(filepath.Join(dir, p)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMountUntar: `tar -xf` of tree5600 (the untar scenario's shape:
// mkdir, create, write, close, and the times and modes tar sets).
func BenchmarkMountUntar(b *testing.B) {
	src := b.TempDir()
	tree5600(b, src)
	tarball := filepath.Join(b.TempDir(), "tree.tar")
	if out, err := exec.Command("tar", "-cf", tarball, "-C", src, ".").CombinedOutput(); err != nil {
		b.Fatalf("tar -c: %v: %s", err, out)
	}
	runTargets(b, nil, func(b *testing.B, dir string) {
		if out, err := exec.Command("tar", "-xf", tarball, "-C", dir).CombinedOutput(); err != nil {
			b.Fatalf("tar -x: %v: %s", err, out)
		}
	})
}

// BenchmarkApplyNewTree: an upstream apply of a new tree of 10,000 empty
// files in 100 directories, then the wait for its invalidations that a
// command's start makes (Server.WaitInvalidated): what a push of a new
// subtree costs the container before its command runs.
func BenchmarkApplyNewTree(b *testing.B) {
	m := fusetest.NewMount(b, fusetest.Options{StoreDir: testutil.BenchDir(b, "fusefsbench")})
	ctx := context.Background()
	var wait time.Duration
	for i := range b.N {
		es := make([]vfs.ChangeEntry, 0, 10_000)
		for k := range 10_000 {
			es = append(es, vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: int64(i + 1), Path: fmt.Sprintf("t%d/d%d/f%d", i, k%100, k), Mode: 0o644})
		}
		if _, err := m.Store.Apply(ctx, es, vfs.ApplyOptions{Source: vfs.Upstream}); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := m.Server.WaitInvalidated(ctx); err != nil {
			b.Fatal(err)
		}
		wait += time.Since(t0)
	}
	b.ReportMetric(float64(wait.Microseconds())/1000/float64(b.N), "wait-ms/op")
	b.ReportMetric(float64(m.Server.Stats().Invalidations+m.Server.Stats().InvalidationsUnknown)/float64(b.N), "notifications/op")
}
