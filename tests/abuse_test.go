package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Attacks on a real computerd through its mount alone, by processes that
// are unprivileged (uid 65534, through exec --user) or merely hostile: each
// test checks that the daemon survives, that the mount answers, and that
// what was fsynced before is still there. fusefs/abuse_test.go has the
// attacks an in-process mount can judge.

// openMountUp lets uid 65534 reach the pair's mount through t.TempDir's
// 0700 directories.
func openMountUp(t *testing.T, p *pair) {
	t.Helper()
	for d := filepath.Dir(p.mount); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// asNobody runs script with sh in the container as uid 65534, from a
// directory "home" it owns, and returns the result.
func (p *pair) asNobody(script string) result {
	p.t.Helper()
	return p.cli("", "exec", "--user", "65534", "--", "sh", "-c", "cd home && "+script)
}

// TestFsyncOfADirectoryIsDurable: the atomic replace of a file (write a
// temporary, fsync it, rename it over the name, fsync the directory) keeps
// the rename across a SIGKILL of computerd once the directory's fsync
// returned. fsync(2) of a directory went to the directory handle, which
// answered at once without committing the open group of mutations: the
// rename was lost by a crash inside the group window.
func TestFsyncOfADirectoryIsDurable(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	// The longest window computerd takes, so that the group is surely open
	// when the daemon dies.
	p.stopContainer()
	p.launchComputerd("COMPUTERD_GROUP_COMMIT=1s")
	waitHealthy(t, "http://"+p.cdAddr, p.cd)

	dir := filepath.Join(p.mount, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, final := filepath.Join(dir, "tmp"), filepath.Join(dir, "final")
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("new"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of the directory: %v", err)
	}
	d.Close()
	p.cd.kill()
	syscallUnmount(p.mount)
	p.startComputerd()

	if b, err := os.ReadFile(final); err != nil || string(b) != "new" {
		t.Errorf("after the crash: final = %q, %v; want the renamed file", b, err)
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the crash: tmp is back (%v)", err)
	}
}

// TestFullStateDiskThroughMount: an unprivileged process fills the disk
// under computerd's state through the mount. Every write either fails
// with a clear error (ENOSPC) or is durable: each file whose write and
// fsync succeeded is whole after a SIGKILL of computerd and a restart on
// the same full disk; a file fsynced before the attack too. computerd
// stays up throughout.
func TestFullStateDiskThroughMount(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk", stateTmpfs: 24 << 20})
	openMountUp(t, p)
	p.ok("exec", "--", "sh", "-c", "mkdir -m 777 home && echo precious > precious && sync precious")
	// sha256sum of 128 KiB incompressible files until the disk is full;
	// stderr is dropped, the shell's own "cannot create" included.
	r := p.asNobody(`exec 2>/dev/null; i=0; fails=0
while [ $fails -lt 20 ] && [ $i -lt 1000 ]; do
  if head -c 131072 /dev/urandom > f$i && sync f$i; then
    echo "f$i $(sha256sum < f$i | cut -c1-64)"
  else
    fails=$((fails+1))
  fi
  i=$((i+1))
done; echo done $i`)
	if !strings.Contains(r.stdout, "done ") {
		t.Fatalf("the filling command did not finish: %+v", r)
	}
	written := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "f") {
			written[f[0]] = f[1]
		}
	}
	if len(written) == 0 || len(written) > 24<<20/(128<<10) {
		t.Fatalf("%d files of 128 KiB written into 24 MiB: want some, and fewer than fit", len(written))
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(p.cdState), &st); err != nil {
		t.Fatal(err)
	}
	// Filled up to the store's reserve (1/16 of the disk, 1.5 MiB here,
	// which local writes may not take: vfs/reserve.go) and a write's worth.
	if free := st.Bavail * uint64(st.Bsize); free > 3<<20 {
		t.Fatalf("the state disk still has %d bytes free: the attack did not fill it", free)
	}
	select {
	case <-p.cd.done:
		t.Fatalf("computerd exited on a full disk: %v", p.cd.err)
	default:
	}
	if resp, err := http.Get("http://" + p.cdAddr + "/health"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("computerd's health on a full disk: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A write now fails with ENOSPC, never silently.
	if err := os.WriteFile(filepath.Join(p.mount, "home", "late"), randomBytes(rand.New(rand.NewPCG(1, 2)), 1<<20), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a 1 MiB write on the full disk: %v, want ENOSPC", err)
	}

	p.cd.kill()
	syscallUnmount(p.mount)
	p.startComputerd()
	check := func(rel, want string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(p.mount, rel))
		if err != nil {
			t.Errorf("%s after the crash: %v", rel, err)
			return
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s after the crash: %d bytes, sha256 %s; want %s", rel, len(b), got[:16], want[:16])
		}
	}
	sum := sha256.Sum256([]byte("precious\n"))
	check("precious", hex.EncodeToString(sum[:]))
	for f, want := range written {
		check(filepath.Join("home", f), want)
	}
}

// TestFullStateDiskStillDeletes: once the state disk is full, a process
// must still be able to free space through the mount (as on a local file
// system, where unlink needs no new blocks). It could not: every unlink,
// rmdir and truncate failed with ENOSPC (each is a SQLite write
// transaction, which needs room in the WAL), and an exec could be refused
// outright (its pre-exec push could not commit): the workspace stayed
// wedged until an operator freed space under the state directory. Local
// writes now stop short of a reserve the removals use (vfs/reserve.go).
func TestFullStateDiskStillDeletes(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk", stateTmpfs: 24 << 20})
	openMountUp(t, p)
	p.ok("exec", "--", "sh", "-c", "mkdir -m 777 home")
	p.asNobody(`exec 2>/dev/null; i=0; while [ $i -lt 400 ]; do head -c 131072 /dev/urandom > f$i; i=$((i+1)); done`)
	home := filepath.Join(p.mount, "home")
	if err := os.Remove(filepath.Join(home, "f1")); err != nil {
		t.Errorf("unlink on a full state disk: %v", err)
	}
	if err := os.Truncate(filepath.Join(home, "f2"), 0); err != nil {
		t.Errorf("truncate to 0 on a full state disk: %v", err)
	}
	if r := p.asNobody("rm -f f3 f4 f5"); r.code != 0 {
		t.Errorf("exec rm on a full state disk: exit %d: %s", r.code, r.stderr)
	}
	// The bytes of removed files come back to the disk when the chunk
	// collector runs (their chunks sit in packs past a grace of 30 s), not
	// at the unlink: a write right after may still be refused.
}

// TestPathPastPathMaxKeepsSyncing: a process can nest directories (with
// mkdirat from a descriptor, as find and rm -r do) until a path is longer
// than PATH_MAX, which the store accepts and the wire refuses: every pull
// failed from then on (EPROTOCOL, "path of 4266 bytes"), so nothing any
// process wrote afterwards reached the server, and every exec was
// refused. The nesting itself costs the daemon memory and disk in the
// square of the depth (each directory's path is cached and indexed whole:
// 1,500 levels of 255-byte names held 200 MiB of computerd's heap and 480
// MiB of its database). The mount refuses such a path (ENAMETOOLONG), and
// the sync goes on.
func TestPathPastPathMaxKeepsSyncing(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	fd, err := unix.Open(p.mount, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("n", 250)
	depth := 0
	for ; depth < 20; depth++ {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			if !errors.Is(err, syscall.ENAMETOOLONG) {
				t.Errorf("mkdirat at depth %d: %v, want ENAMETOOLONG if anything", depth, err)
			}
			break
		}
		nfd, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = nfd
	}
	unix.Close(fd)
	t.Logf("nested %d levels (a path of %d bytes)", depth, depth*(len(name)+1))
	if err := os.WriteFile(filepath.Join(p.mount, "after"), []byte("after\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if r := p.cli("", "pull"); r.code != 0 {
		t.Fatalf("pull after the nesting: exit %d: %s", r.code, r.stderr)
	}
	if got := p.ok("read", "/after"); got != "after\n" {
		t.Errorf("read /after = %q", got)
	}
	t.Logf("pull in %v", time.Since(start))
}
