package fusefs_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/vfs"
)

// Attacks on the mount by processes that are unprivileged (uid 65534) or
// merely hostile, through the mount alone. Each test checks what the
// attacker gets (a clear errno) and that the others lose nothing: the
// mount still answers and a file fsynced before the attack is intact
// (abuseMount). tests/abuse_test.go has the attacks that need a real
// computerd (a full state disk, a crash). WSYNC_ABUSE_LONG=1 runs the long
// variants.

const nobody = 65534

func init() {
	helpers["abuse-xattrs"] = helperAbuseXattrs
	helpers["abuse-nest"] = helperAbuseNest
	helpers["abuse-writer"] = helperAbuseWriter
	helpers["abuse-excl"] = helperAbuseExcl
	helpers["abuse-mmap"] = helperAbuseMmap
}

// abuseMount mounts a store with a directory "home" that uid 65534 owns
// and a file "precious" fsynced before any attack. The returned check
// fails t unless the mount still answers a create, a stat and an unlink
// within 10 s and precious reads back whole.
func abuseMount(t *testing.T) (*fusetest.Mount, func()) {
	t.Helper()
	m := fusetest.NewMount(t, fusetest.Options{})
	openUp(t, m.Dir)
	if err := os.Mkdir(m.Path("home"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(m.Path("home"), nobody, nobody); err != nil {
		t.Fatal(err)
	}
	precious := chunkPattern(600<<10, 42)
	f, err := os.Create(m.Path("precious"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(precious); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return m, func() {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			p := m.Path("alive")
			err := os.WriteFile(p, []byte("yes"), 0o644)
			if err == nil {
				_, err = os.Stat(p)
			}
			if err == nil {
				err = os.Remove(p)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the mount after the attack: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the mount after the attack: a create, stat and unlink hang for 10 s")
		}
		if got, err := os.ReadFile(m.Path("precious")); err != nil || string(got) != string(precious) {
			t.Fatalf("precious after the attack: %d bytes, %v; want the %d fsynced", len(got), err, len(precious))
		}
	}
}

// nobodyCmd is helper name run as uid 65534 (helperCmdAs).
func nobodyCmd(t *testing.T, ctx context.Context, name string, args ...string) *exec.Cmd {
	t.Helper()
	return helperCmdAs(t, ctx, nobody, name, args...)
}

// startNobody starts helper name as uid 65534 and returns once it says it
// is ready (its first line of output); the caller waits for it.
func startNobody(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := nobodyCmd(t, t.Context(), name, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("helper %s never said it was ready: %v", name, err)
	}
	return cmd
}

// runAsNobody runs helper name as uid 65534 to completion and returns its
// output.
func runAsNobody(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := nobodyCmd(t, ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s as uid %d: %v\n%s", name, nobody, err, out)
	}
	return string(out)
}

// helperAbuseXattrs sets args[1] xattrs of args[2] bytes with 250-byte
// names on args[0] until one fails, and prints how many it set and the
// errno that stopped it ("ok" when none did).
func helperAbuseXattrs(args []string) error {
	var n, size int
	fmt.Sscan(args[1], &n)
	fmt.Sscan(args[2], &size)
	val := []byte(strings.Repeat("v", size))
	for i := range n {
		if err := unix.Setxattr(args[0], fmt.Sprintf("user.%0245d", i), val, 0); err != nil {
			fmt.Printf("%d %s\n", i, unix.ErrnoName(err.(syscall.Errno)))
			return nil
		}
	}
	fmt.Printf("%d ok\n", n)
	return nil
}

// TestAbuseXattrFlood: extended attributes are not files, so the quota
// does not count them, and a node took any number of them: uid 65534 stored
// 32 MiB of values on one file of its own under a 1 MiB quota, and a node
// with more than 64 KiB of names could never be listed again (listxattr:
// E2BIG, so cp -a, tar and rsync -X fail on it). A node's xattrs are
// bounded as on a local file system: the names fit one listxattr and the
// values 256 KiB, past which setxattr is ENOSPC.
func TestAbuseXattrFlood(t *testing.T) {
	m, survived := abuseMount(t)
	for _, name := range []string{"home/names", "home/values"} {
		if err := os.WriteFile(m.Path(name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(m.Path(name), nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		file    string
		n, size int
		fit     int // xattrs set before the refusal
	}{
		// A 250-byte name takes 251 bytes of a listing: 261 fit in 64 KiB.
		{"home/names", 1000, 0, 261},
		// 64 KiB values: four fit in 256 KiB.
		{"home/values", 100, 64 << 10, 4},
	} {
		out := runAsNobody(t, "abuse-xattrs", m.Path(tc.file), fmt.Sprint(tc.n), fmt.Sprint(tc.size))
		var set int
		var errno string
		fmt.Sscan(out, &set, &errno)
		if set != tc.fit || errno != "ENOSPC" {
			t.Errorf("%s: %d xattrs of %d bytes set, then %s; want %d, then ENOSPC", tc.file, set, tc.size, errno, tc.fit)
		}
		// Every node stays listable.
		buf := make([]byte, 64<<10)
		n, err := unix.Listxattr(m.Path(tc.file), buf)
		if err != nil {
			t.Errorf("%s: listxattr: %v", tc.file, err)
		} else if got := strings.Count(string(buf[:n]), "\x00"); got != set {
			t.Errorf("%s: listxattr lists %d names, want the %d set", tc.file, got, set)
		}
		// Replacing a value does not count the old one, and removing one
		// makes room again.
		name := fmt.Sprintf("user.%0245d", 0)
		if err := unix.Setxattr(m.Path(tc.file), name, []byte(strings.Repeat("w", tc.size)), unix.XATTR_REPLACE); err != nil {
			t.Errorf("%s: replace a value by one as large: %v", tc.file, err)
		}
		if err := unix.Removexattr(m.Path(tc.file), name); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(m.Path(tc.file), name, []byte(strings.Repeat("w", tc.size)), 0); err != nil {
			t.Errorf("%s: set again after a removal: %v", tc.file, err)
		}
	}
	// The largest value the kernel passes fits a node of its own; one
	// byte more the kernel refuses.
	writeFile(t, m.Path("big"), "x")
	if err := unix.Setxattr(m.Path("big"), "user.big", make([]byte, 64<<10), 0); err != nil {
		t.Errorf("a 64 KiB value: %v", err)
	}
	if err := unix.Setxattr(m.Path("big"), "user.bigger", make([]byte, 64<<10+1), 0); !errors.Is(err, syscall.E2BIG) {
		t.Errorf("a value of 64 KiB + 1: %v, want E2BIG", err)
	}
	// No user.* xattr on a symlink (the kernel's rule), and names past 255
	// bytes are refused.
	if err := os.Symlink("precious", m.Path("link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(m.Path("link"), "user.a", []byte("v"), 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("user.* on a symlink: %v, want EPERM", err)
	}
	if err := unix.Setxattr(m.Path("big"), "user."+strings.Repeat("a", 251), []byte("v"), 0); !errors.Is(err, syscall.ERANGE) {
		t.Errorf("a 256-byte name: %v, want ERANGE", err)
	}
	survived()
}

// TestAbuseTimesOutOfRange: the store keeps times as int64 nanoseconds
// (1677 to 2262); a time outside wrapped round (touch -d 'year 36812'
// showed 1738; 2^62 seconds showed 1970) and the wrong time synced. Times
// outside are clamped to the nearest one the store can hold, as the
// kernel clamps to any file system's range.
func TestAbuseTimesOutOfRange(t *testing.T) {
	m, survived := abuseMount(t)
	p := m.Path("home/f")
	writeFile(t, p, "x")
	maxSec, minSec := int64(math.MaxInt64/int64(time.Second)), int64(math.MinInt64/int64(time.Second))
	for _, tc := range []struct{ sec, want int64 }{
		{1 << 40, maxSec},
		{1 << 62, maxSec},
		// The earliest time held is 1677-09-21 00:12:43.145224192: a
		// second count of minSec - 1 and 145224192 ns.
		{-(1 << 40), minSec - 1},
		{-1, -1},
		{maxSec, maxSec},
	} {
		// The file's owner (uid 65534 in an attack) may set any time;
		// utimensat(2) passes any second count, where touch(1) would not.
		if err := unix.UtimesNano(p, []unix.Timespec{{Sec: tc.sec}, {Sec: tc.sec}}); err != nil {
			t.Fatalf("utimensat %d: %v", tc.sec, err)
		}
		if got := stat(t, p).Mtim.Sec; got != tc.want {
			t.Errorf("mtime set to %d s: stat shows %d, want %d", tc.sec, got, tc.want)
		}
		a, err := m.Store.Stat(context.Background(), "home/f")
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Mtime.Unix(); got != tc.want {
			t.Errorf("mtime set to %d s: the store holds %d, want %d", tc.sec, got, tc.want)
		}
	}
	survived()
}

// TestAbuseNamesOffsetsAndSizes: names, offsets and sizes at and past
// every limit get a clear errno and change nothing; the file keeps its
// bytes.
func TestAbuseNamesOffsetsAndSizes(t *testing.T) {
	m, survived := abuseMount(t)
	if err := os.WriteFile(m.Path(strings.Repeat("n", 255)), []byte("x"), 0o644); err != nil {
		t.Errorf("a 255-byte name: %v", err)
	}
	for _, n := range []int{256, 1024, 4000} {
		if err := os.Mkdir(m.Path(strings.Repeat("d", n)), 0o755); !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("mkdir of a %d-byte name: %v, want ENAMETOOLONG", n, err)
		}
	}
	if err := os.Symlink(strings.Repeat("t", 4095), m.Path("longlink")); err != nil {
		t.Errorf("a 4095-byte symlink target: %v", err)
	}

	p := m.Path("f")
	writeFile(t, p, "abc")
	fd, err := unix.Open(p, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const max = chunkstore.MaxFileSize
	for _, tc := range []struct {
		what string
		err  error
		want syscall.Errno
	}{
		{"pwrite at 4 TiB", pwrite(fd, max), syscall.EFBIG},
		{"pwrite at 2^62", pwrite(fd, 1<<62), syscall.EFBIG},
		{"pwrite at 2^63-2", pwrite(fd, math.MaxInt64-1), syscall.EINVAL},
		{"ftruncate past 4 TiB", unix.Ftruncate(fd, max+1), syscall.EFBIG},
		{"ftruncate to 2^63-1", unix.Ftruncate(fd, math.MaxInt64), syscall.EFBIG},
		{"ftruncate to -1", unix.Ftruncate(fd, -1), syscall.EINVAL},
		{"fallocate past 4 TiB", unix.Fallocate(fd, 0, max-1, 2), syscall.EFBIG},
		{"fallocate at 2^63-1", unix.Fallocate(fd, 0, math.MaxInt64, 1), syscall.EFBIG},
		{"fallocate at -1", unix.Fallocate(fd, 0, -1, 10), syscall.EINVAL},
		{"fallocate to punch a hole", unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 1), syscall.EOPNOTSUPP},
		{"copy_file_range to 4 TiB - 2", copyRange(fd, 0, max-2, 3), syscall.EFBIG},
		{"copy_file_range onto itself, overlapping", copyRange(fd, 0, 1, 2), syscall.EINVAL},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.want)
		}
	}
	for _, off := range []int64{max, 1 << 62, math.MaxInt64} {
		if _, err := unix.Seek(fd, off, unix.SEEK_DATA); !errors.Is(err, syscall.ENXIO) {
			t.Errorf("SEEK_DATA at %d: %v, want ENXIO", off, err)
		}
	}
	if got := readFile(t, p); got != "abc" {
		t.Errorf("f = %q after the refused offsets, want abc", got)
	}
	// At the limit itself: a byte at 4 TiB - 1, a sparse file of 4 TiB.
	if n, err := unix.Pwrite(fd, []byte("z"), max-1); n != 1 || err != nil {
		t.Errorf("pwrite at 4 TiB - 1: %d, %v", n, err)
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, p); st.Size != max {
		t.Errorf("size %d, want 4 TiB", st.Size)
	}
	survived()
}

func pwrite(fd int, off int64) error {
	_, err := unix.Pwrite(fd, []byte("ab"), off)
	return err
}

func copyRange(fd int, in, out int64, n int) error {
	_, err := unix.CopyFileRange(fd, &in, fd, &out, n, 0)
	return err
}

// TestAbuseRenameCyclesAndLinks: a directory moved into its own subtree,
// a hard link to a directory and symlink loops are refused; two processes
// moving two directories into each other's subtree at once never make a
// cycle: every directory stays reachable from the root, once.
func TestAbuseRenameCyclesAndLinks(t *testing.T) {
	m, survived := abuseMount(t)
	if err := os.MkdirAll(m.Path("a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.Path("a"), m.Path("a/b/c/a")); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("rename a into a/b/c: %v, want EINVAL", err)
	}
	if err := os.Link(m.Path("a"), m.Path("alink")); !errors.Is(err, syscall.EPERM) {
		t.Errorf("hard link to a directory: %v, want EPERM", err)
	}
	os.Symlink("loop2", m.Path("loop1"))
	os.Symlink("loop1", m.Path("loop2"))
	if _, err := os.ReadFile(m.Path("loop1")); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("read through a symlink loop: %v, want ELOOP", err)
	}

	if err := os.MkdirAll(m.Path("x/x1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.Path("y/y1"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	script := func(from, to string) string {
		return fmt.Sprintf(`for i in $(seq 300); do mv %s %s 2>/dev/null; mv %s %s 2>/dev/null; done; true`, from, to, to, from)
	}
	one := exec.CommandContext(ctx, "sh", "-c", "cd "+shellQuote(m.Dir)+" && "+script("x", "y/y1/x"))
	two := exec.CommandContext(ctx, "sh", "-c", "cd "+shellQuote(m.Dir)+" && "+script("y", "x/x1/y"))
	if err := one.Start(); err != nil {
		t.Fatal(err)
	}
	if err := two.Start(); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(one.Wait(), two.Wait()); err != nil {
		t.Fatalf("the renaming processes: %v", err)
	}
	// The kernel's entries expire in a second; the store is the truth.
	seen := map[string]int{}
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		if depth > 10 {
			t.Fatalf("%s: deeper than the tree can be: a cycle", rel)
		}
		es, err := m.Store.List(context.Background(), rel)
		if err != nil {
			t.Fatalf("list %q: %v", rel, err)
		}
		for _, e := range es {
			seen[e.Name]++
			if e.Kind == vfs.KindDir {
				walk(strings.TrimPrefix(rel+"/"+e.Name, "/"), depth+1)
			}
		}
	}
	walk("", 0)
	for _, d := range []string{"a", "b", "c", "x", "x1", "y", "y1"} {
		if seen[d] != 1 {
			t.Errorf("directory %s reachable %d times from the root, want once", d, seen[d])
		}
	}
	survived()
}

// helperAbuseWriter writes 64 KiB blocks, block i all bytes i, to a new
// file args[0] until it is killed; it says "writing" after 8 blocks.
func helperAbuseWriter(args []string) error {
	f, err := os.OpenFile(args[0], os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	block := make([]byte, 64<<10)
	for i := 0; ; i++ {
		for j := range block {
			block[j] = byte(i)
		}
		if _, err := f.Write(block); err != nil {
			return err
		}
		if i == 8 {
			fmt.Println("writing")
		}
	}
}

// TestAbuseKilledWriters: processes SIGKILLed in the middle of a stream of
// writes leave a file holding whole blocks in order (what their last
// writes returned, committed by the kernel's close of their descriptors)
// and no handle behind.
func TestAbuseKilledWriters(t *testing.T) {
	m, survived := abuseMount(t)
	for round := range 4 {
		p := m.Path(fmt.Sprintf("home/w%d", round))
		cmd := startNobody(t, "abuse-writer", p)
		time.Sleep(time.Duration(round*20) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 9<<16 {
			t.Errorf("w%d: %d bytes, want at least the 9 blocks written before it said so", round, len(data))
		}
		for i := range data {
			if data[i] != byte(i>>16) {
				t.Fatalf("w%d: byte %d of %d is %d, want %d", round, i, len(data), data[i], byte(i>>16))
			}
		}
	}
	testutilWait(t, "every handle released", func() bool { return m.Server.OpenHandles() == 0 })
	survived()
}

// testutilWait polls cond for up to 10 s (the kernel's RELEASE of a dead
// process's descriptors comes asynchronously).
func testutilWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: not %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// TestAbuseManyDescriptors: 10,000 descriptors of one file, each writing
// its own byte, all see each other's bytes, and closing them releases
// every handle.
func TestAbuseManyDescriptors(t *testing.T) {
	m, survived := abuseMount(t)
	n := 10000
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < uint64(n+100) {
		n = int(rl.Cur) - 100
	}
	p := m.Path("f")
	writeFile(t, p, "")
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for range n {
		fd, err := unix.Open(p, unix.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open %d: %v", len(fds), err)
		}
		fds = append(fds, fd)
	}
	for i, fd := range fds {
		if _, err := unix.Pwrite(fd, []byte{byte('a' + i%26)}, int64(i)); err != nil {
			t.Fatalf("pwrite through descriptor %d: %v", i, err)
		}
	}
	buf := make([]byte, n)
	if k, err := unix.Pread(fds[0], buf, 0); k != n || err != nil {
		t.Fatalf("pread: %d, %v", k, err)
	}
	for i, b := range buf {
		if b != byte('a'+i%26) {
			t.Fatalf("byte %d = %q through the first descriptor", i, b)
		}
	}
	for _, fd := range fds {
		if err := unix.Close(fd); err != nil {
			t.Fatal(err)
		}
	}
	fds = fds[:0]
	testutilWait(t, "every handle released", func() bool { return m.Server.OpenHandles() == 0 })
	if got := storeFile(t, m, "f"); len(got) != n {
		t.Errorf("the store holds %d bytes, want %d", len(got), n)
	}
	survived()
}

// helperAbuseExcl tries O_CREAT|O_EXCL on lock0..lock199 in args[0],
// writes args[1] into each it made, and prints their numbers.
func helperAbuseExcl(args []string) error {
	for i := range 200 {
		fd, err := unix.Open(filepath.Join(args[0], fmt.Sprintf("lock%d", i)), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return err
		}
		unix.Write(fd, []byte(args[1]))
		if err := unix.Close(fd); err != nil {
			return err
		}
		fmt.Println(i)
	}
	return nil
}

// TestAbuseExclusiveCreates: eight processes race to create the same 200
// names with O_EXCL; each name has exactly one winner, whose bytes it
// holds.
func TestAbuseExclusiveCreates(t *testing.T) {
	m, survived := abuseMount(t)
	type racer struct {
		cmd *exec.Cmd
		out strings.Builder
	}
	racers := make([]*racer, 8)
	for k := range racers {
		r := &racer{cmd: nobodyCmd(t, t.Context(), "abuse-excl", m.Path("home"), fmt.Sprintf("w%d", k))}
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		racers[k] = r
	}
	won := map[string]int{}
	for k, r := range racers {
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("racer %d: %v\n%s", k, err, r.out.String())
		}
		for _, i := range strings.Fields(r.out.String()) {
			won[i]++
			if got, want := readFile(t, m.Path("home/lock"+i)), fmt.Sprintf("w%d", k); got != want {
				t.Errorf("lock%s holds %q, its winner wrote %q", i, got, want)
			}
		}
	}
	if len(won) != 200 {
		t.Errorf("%d names created, want 200", len(won))
	}
	for i, n := range won {
		if n != 1 {
			t.Errorf("lock%s created by %d processes, want 1", i, n)
		}
	}
	survived()
}

// TestAbuseReaddirDuringRenames: listings of a large directory while
// another process renames some of its entries back and forth show every
// entry that is never renamed exactly once. (WSYNC_ABUSE_LONG=1: 100,000
// entries.)
func TestAbuseReaddirDuringRenames(t *testing.T) {
	m, survived := abuseMount(t)
	n, rounds := 5000, 4
	if os.Getenv("WSYNC_ABUSE_LONG") == "1" {
		n, rounds = 100_000, 3
	}
	d := m.Path("d")
	sh(t, m.Dir, fmt.Sprintf(`mkdir d && cd d && seq -f k%%06g 1 %d | xargs touch && seq -f r%%06g 1 200 | xargs touch`, n))
	ctx, cancel := context.WithCancel(context.Background())
	renamer := exec.CommandContext(ctx, "sh", "-c", "cd "+shellQuote(d)+
		` && while :; do for i in $(seq -f %06g 1 200); do mv r$i a$i; mv a$i r$i; done; done`)
	if err := renamer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		renamer.Wait()
	}()
	for round := range rounds {
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			t.Fatalf("round %d: readdir: %v", round, err)
		}
		seen := make(map[string]int, len(names))
		for _, nm := range names {
			seen[nm]++
		}
		bad := 0
		for i := 1; i <= n; i++ {
			if c := seen[fmt.Sprintf("k%06d", i)]; c != 1 {
				if bad++; bad <= 3 {
					t.Errorf("round %d: k%06d listed %d times, want once", round, i, c)
				}
			}
		}
	}
	cancel()
	renamer.Wait()
	survived()
}

// helperAbuseMmap maps the first MiB of args[0] shared and writable and
// writes through it until killed (or SIGBUS, past a truncated end).
func helperAbuseMmap(args []string) error {
	f, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return err
	}
	fmt.Println("mapped")
	for i := 0; ; i++ {
		mem[(i*4096)%(1<<20)] = byte(i)
	}
}

// TestAbuseMmapTruncate: a file truncated under a process writing through
// a shared mapping of it kills that process (SIGBUS), not the mount.
func TestAbuseMmapTruncate(t *testing.T) {
	m, survived := abuseMount(t)
	p := m.Path("home/mapped")
	if err := os.WriteFile(p, chunkPattern(1<<20, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := startNobody(t, "abuse-mmap", p)
	for i := range 20 {
		if err := os.Truncate(p, int64(i%3)*(300<<10)); err != nil {
			t.Fatalf("truncate under the mapping: %v", err)
		}
	}
	time.Sleep(50 * time.Millisecond) // let the writer run into the cut
	cmd.Process.Kill()
	cmd.Wait()
	if st := stat(t, p); st.Size != 300<<10 {
		t.Errorf("size after the truncations: %d, want %d", st.Size, 300<<10)
	}
	survived()
}

// helperAbuseNest nests directories of 255-byte names under args[0], from
// a descriptor (mkdirat, openat), args[1] deep or until one fails, and
// prints the depth reached and the errno ("ok").
func helperAbuseNest(args []string) error {
	var depth int
	fmt.Sscan(args[1], &depth)
	fd, err := unix.Open(args[0], unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	name := strings.Repeat("n", 255)
	for i := range depth {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			fmt.Printf("%d %s\n", i, unix.ErrnoName(err.(syscall.Errno)))
			return nil
		}
		nfd, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		unix.Close(fd)
		fd = nfd
	}
	fmt.Printf("%d ok\n", depth)
	return nil
}

// TestAbuseDeepNesting: uid 65534 nests directories past PATH_MAX. The
// store took any depth (to 2,048 levels): a path the wire refuses
// (tests.TestPathPastPathMaxKeepsSyncing: every pull fails), and memory
// and disk in the square of the depth (each directory's whole path is
// cached and indexed): 1,200 levels held 180 MiB of the daemon's heap and
// 480 MiB of its database. A mkdir whose path would pass PATH_MAX (4096
// bytes) must fail with ENAMETOOLONG.
func TestAbuseDeepNesting(t *testing.T) {
	m, survived := abuseMount(t)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := runAsNobody(t, "abuse-nest", m.Path("home"), "400")
	var depth int
	var errno string
	fmt.Sscan(out, &depth, &errno)
	// "home/" and 15 levels of 256 bytes are 3,845 bytes; a 16th passes
	// 4,096.
	if depth != 15 || errno != "ENAMETOOLONG" {
		t.Errorf("nesting 255-byte names: %d levels, then %s; want 15, then ENAMETOOLONG", depth, errno)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
		t.Errorf("the heap grew by %d MiB for %d directories", grew>>20, depth)
	}
	survived()
}

// TestAbuseODirectAndLockStorms: O_DIRECT reads and writes at offsets no
// block aligns reach the bytes buffered readers see; 16 processes of uid
// 65534 taking and dropping flock(2) and fcntl(2) locks on one file (the
// kernel keeps them: go-fuse's EnableLocks is off) leave the mount and
// the file as they were.
func TestAbuseODirectAndLockStorms(t *testing.T) {
	m, survived := abuseMount(t)
	p := m.Path("home/direct")
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_RDWR|unix.O_DIRECT, 0o666)
	if err != nil {
		t.Fatalf("open O_DIRECT: %v", err)
	}
	defer unix.Close(fd)
	if n, err := unix.Pwrite(fd, []byte("hello"), 3); n != 5 || err != nil {
		t.Fatalf("O_DIRECT pwrite at 3: %d, %v", n, err)
	}
	buf := make([]byte, 100)
	if n, err := unix.Pread(fd, buf, 1); err != nil || string(buf[:n]) != "\x00\x00hello" {
		t.Errorf("O_DIRECT pread at 1: %q, %v", buf[:max(n, 0)], err)
	}
	if got := readFile(t, p); got != "\x00\x00\x00hello" {
		t.Errorf("a buffered read after O_DIRECT writes: %q", got)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var storm []*exec.Cmd
	for k := range 16 {
		lock := "flock -x direct true"
		if _, err := exec.LookPath("perl"); err == nil && k%2 == 1 {
			lock = `perl -e 'use Fcntl; open(F, "+<", "direct") or die; my $l = pack("s2x4q2ix4", F_WRLCK, 0, 0, 0, 0); fcntl(F, F_SETLKW, $l) or die "fcntl: $!"'`
		}
		cmd := exec.CommandContext(ctx, "sh", "-c", fmt.Sprintf("cd %s && for i in $(seq 30); do %s; done", shellQuote(m.Path("home")), lock))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		storm = append(storm, cmd)
	}
	for _, cmd := range storm {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("a locking process: %v", err)
		}
	}
	if got := readFile(t, p); got != "\x00\x00\x00hello" {
		t.Errorf("the file after the lock storm: %q", got)
	}
	survived()
}

// TestAbuseSeekdirAfterUnlinks: a process that remembers a place in a
// listing (telldir) and returns to it (seekdir) after another process
// unlinked entries before it skips as many entries that are still there:
// a directory offset is a position, and a seek outside the page in hand
// counts positions again from the start. (rm -r reads on without seeking
// and misses nothing.)
func TestAbuseSeekdirAfterUnlinks(t *testing.T) {
	m, survived := abuseMount(t)
	sh(t, m.Dir, `mkdir d && cd d && seq -f k%04g 1 2000 | xargs touch`)
	f, err := os.Open(m.Path("d"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	type dirent struct {
		name string
		off  int64
	}
	read := func() []dirent {
		buf := make([]byte, 8192)
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		var out []dirent
		for b := buf[:n]; len(b) > 0; {
			reclen := int(b[16]) | int(b[17])<<8
			name := string(b[19:reclen])
			out = append(out, dirent{name[:strings.IndexByte(name, 0)], int64(binary.LittleEndian.Uint64(b[8:16]))})
			b = b[reclen:]
		}
		return out
	}
	var seen []dirent
	for len(seen) < 1000 {
		seen = append(seen, read()...)
	}
	// telldir after k0500 ("." and ".." come first).
	at, next := seen[501].off, seen[502].name
	sh(t, m.Dir, `cd d && seq -f k%04g 1 300 | xargs rm`)
	if _, err := unix.Seek(fd, at, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if got := read()[0].name; got != next {
		t.Errorf("after seekdir to the place after k0500, with k0001..k0300 unlinked: next %s, want %s", got, next)
	}
	survived()
}
