package fusefs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/internal/fusetest"
)

func TestCreateExclTruncAppend(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("f")

	fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o640)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	syscall.Write(fd, []byte("hello world"))
	syscall.Close(fd)
	if got, want := stat(t, p).Mode&0o7777, uint32(0o640); got != want {
		t.Errorf("mode %o, want %o", got, want)
	}

	if _, err := syscall.Open(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o640); err != syscall.EEXIST {
		t.Errorf("O_EXCL on an existing file: %v, want EEXIST", err)
	}

	fd, err = syscall.Open(p, syscall.O_TRUNC|syscall.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Write(fd, []byte("abc"))
	syscall.Close(fd)
	if got, want := readFile(t, p), "abc"; got != want {
		t.Errorf("after O_TRUNC: %q, want %q", got, want)
	}

	sh(t, m.Dir, `echo -n def >> f; echo -n ghi >> f`)
	// O_APPEND ignores the offset a writer gives.
	fd, err = syscall.Open(p, syscall.O_APPEND|syscall.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Pwrite(fd, []byte("jkl"), 0)
	syscall.Close(fd)
	if got, want := readFile(t, p), "abcdefghijkl"; got != want {
		t.Errorf("after appends: %q, want %q", got, want)
	}
	if got, want := storeFile(t, m, "f"), "abcdefghijkl"; got != want {
		t.Errorf("store has %q, want %q", got, want)
	}
}

func TestSparseWritesAndTruncate(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	const off = 3<<20 + 12345 // past several chunks, mid-chunk
	if _, err := f.WriteAt([]byte("tail"), off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	// Size is visible before the commit.
	if got, want := stat(t, p).Size, int64(off+4); got != want {
		t.Errorf("size while open %d, want %d", got, want)
	}
	f.Close()

	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, off+4)
	copy(want, "head")
	copy(want[off:], "tail")
	if !bytes.Equal(data, want) {
		t.Errorf("sparse file reads back wrong (len %d, want %d)", len(data), len(want))
	}

	if err := os.Truncate(p, 2); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, p), "he"; got != want {
		t.Errorf("after truncate down: %q, want %q", got, want)
	}
	if err := os.Truncate(p, 5); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, p), "he\x00\x00\x00"; got != want {
		t.Errorf("after truncate up: %q, want %q", got, want)
	}
	if got, want := storeFile(t, m, "sparse"), "he\x00\x00\x00"; got != want {
		t.Errorf("store has %q, want %q", got, want)
	}

	// ftruncate through an open descriptor with pending writes.
	f, err = os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("XYZ"), 1)
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, want := readFile(t, p), "hXY"; got != want {
		t.Errorf("after write+ftruncate: %q, want %q", got, want)
	}

	// fallocate mode 0 extends; punching holes is refused cleanly.
	f, _ = os.OpenFile(p, os.O_RDWR, 0)
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 10); err != nil {
		t.Errorf("fallocate: %v", err)
	}
	if got := stat(t, p).Size; got != 10 {
		t.Errorf("size after fallocate %d, want 10", got)
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 2)
	if err != syscall.EOPNOTSUPP {
		t.Errorf("punch hole: %v, want EOPNOTSUPP", err)
	}
}

func TestRenames(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	sh(t, m.Dir, `
		mkdir -p a b emptydir full/x
		echo one > a/f1; echo two > a/f2
		mv a/f1 a/f2                # over a file
		mv emptydir b/target0 && mkdir b/target && mv b/target0 b/target # over an empty dir
		mv a/f2 b/moved             # across dirs
	`)
	if got, want := readFile(t, m.Path("b/moved")), "one\n"; got != want {
		t.Errorf("b/moved = %q, want %q", got, want)
	}
	if _, err := os.Stat(m.Path("a/f1")); !os.IsNotExist(err) {
		t.Errorf("a/f1 still there: %v", err)
	}
	if fi, err := os.Stat(m.Path("b/target")); err != nil || !fi.IsDir() {
		t.Errorf("b/target: %v", err)
	}
	if err := os.Rename(m.Path("b"), m.Path("full")); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Errorf("rename over a non-empty dir: %v, want ENOTEMPTY", err)
	}

	// renameat2 flags.
	writeFile(t, m.Path("x"), "x")
	writeFile(t, m.Path("y"), "y")
	if err := unix.Renameat2(unix.AT_FDCWD, m.Path("x"), unix.AT_FDCWD, m.Path("y"), unix.RENAME_NOREPLACE); err != syscall.EEXIST {
		t.Errorf("RENAME_NOREPLACE over a file: %v, want EEXIST", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, m.Path("x"), unix.AT_FDCWD, m.Path("z"), unix.RENAME_NOREPLACE); err != nil {
		t.Errorf("RENAME_NOREPLACE to a free name: %v", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, m.Path("z"), unix.AT_FDCWD, m.Path("y"), unix.RENAME_EXCHANGE); err != syscall.EINVAL {
		t.Errorf("RENAME_EXCHANGE: %v, want EINVAL", err)
	}

	// Renaming an open file: the descriptor follows the inode.
	f, err := os.OpenFile(m.Path("y"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.Path("y"), m.Path("b/y-renamed")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("Y2"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, want := readFile(t, m.Path("b/y-renamed")), "Y2"; got != want {
		t.Errorf("renamed open file = %q, want %q", got, want)
	}
	if got, want := storeFile(t, m, "b/y-renamed"), "Y2"; got != want {
		t.Errorf("store: %q, want %q", got, want)
	}
}

func TestRmRfDeepTree(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	sh(t, m.Dir, `
		d=tree; for i in $(seq 1 40); do d=$d/d$i; done; mkdir -p $d
		for i in $(seq 1 40); do p=tree; for j in $(seq 1 $i); do p=$p/d$j; done; touch $p/f1 $p/f2; done
		mkdir -p wide; for i in $(seq 1 600); do echo $i > wide/f$i; done
	`)
	if got := strings.TrimSpace(sh(t, m.Dir, `find tree wide | wc -l`)); got != strconv.Itoa(1+40*3+1+600) {
		t.Errorf("find counts %s entries", got)
	}
	sh(t, m.Dir, `rm -rf tree wide`)
	if got := sh(t, m.Dir, `ls -A`); got != "" {
		t.Errorf("root not empty after rm -rf: %q", got)
	}
	if list, _ := m.Store.List(t.Context(), ""); len(list) != 0 {
		t.Errorf("store root lists %d entries", len(list))
	}
}

func TestSymlinks(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	sh(t, m.Dir, `echo data > target; ln -s target link; ln -s /nonexistent dangling; mkdir d; ln -s ../target d/up`)
	if got, want := readFile(t, m.Path("link")), "data\n"; got != want {
		t.Errorf("through link: %q", got)
	}
	if got, want := readFile(t, m.Path("d/up")), "data\n"; got != want {
		t.Errorf("through relative link: %q", got)
	}
	if got, _ := os.Readlink(m.Path("dangling")); got != "/nonexistent" {
		t.Errorf("readlink dangling = %q", got)
	}
	if st := stat(t, m.Path("link")); st.Mode&syscall.S_IFMT != syscall.S_IFLNK || st.Size != int64(len("target")) {
		t.Errorf("lstat link: mode %o size %d", st.Mode, st.Size)
	}
	if got, _ := m.Store.ReadLinkPath(t.Context(), "d/up"); got != "../target" {
		t.Errorf("store target %q", got)
	}
}

func TestHardlinks(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	writeFile(t, m.Path("a"), "v1")
	sh(t, m.Dir, `mkdir sub; ln a sub/b`)
	sa, sb := stat(t, m.Path("a")), stat(t, m.Path("sub/b"))
	if sa.Ino != sb.Ino || sa.Nlink != 2 || sb.Nlink != 2 {
		t.Errorf("ino %d/%d nlink %d/%d, want one inode with nlink 2", sa.Ino, sb.Ino, sa.Nlink, sb.Nlink)
	}
	writeFile(t, m.Path("sub/b"), "v2 through b")
	if got, want := readFile(t, m.Path("a")), "v2 through b"; got != want {
		t.Errorf("a = %q, want %q", got, want)
	}
	f, _ := os.OpenFile(m.Path("a"), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("+a")
	f.Close()
	if got, want := readFile(t, m.Path("sub/b")), "v2 through b+a"; got != want {
		t.Errorf("b = %q, want %q", got, want)
	}
	if got, want := storeFile(t, m, "sub/b"), "v2 through b+a"; got != want {
		t.Errorf("store b = %q, want %q", got, want)
	}
	os.Remove(m.Path("a"))
	if st := stat(t, m.Path("sub/b")); st.Nlink != 1 {
		t.Errorf("nlink after unlink %d, want 1", st.Nlink)
	}
}

func TestChmodChownTouch(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	openUp(t, m.Dir)
	sh(t, m.Dir, `echo x > f; chmod 0640 f; chown 1000:1001 f; mkdir shared; chmod 0777 shared`)
	st := stat(t, m.Path("f"))
	if st.Mode&0o7777 != 0o640 || st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("f: mode %o owner %d:%d", st.Mode&0o7777, st.Uid, st.Gid)
	}
	sh(t, m.Dir, `touch -m -d '2001-02-03 04:05:06.5 UTC' f; touch -a -d '1999-01-01 00:00:00 UTC' f`)
	st = stat(t, m.Path("f"))
	if got, want := time.Unix(st.Mtim.Unix()).UTC(), time.Date(2001, 2, 3, 4, 5, 6, 5e8, time.UTC); !got.Equal(want) {
		t.Errorf("mtime %v, want %v", got, want)
	}
	if got, want := time.Unix(st.Atim.Unix()).UTC(), time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("atime %v, want %v", got, want)
	}

	// A new node belongs to its creator.
	if out, err := asUser(1000, 1000, m.Path("shared"), "sh", "-c", "echo hi > mine && mkdir mydir"); err != nil {
		t.Fatalf("create as 1000: %v %s", err, out)
	}
	if st := stat(t, m.Path("shared/mine")); st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("new file owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
	}
	// Only the owner (or root) chmods; only root chowns.
	if out, err := asUser(1001, 1001, m.Dir, "chmod", "0600", "shared/mine"); err == nil {
		t.Errorf("chmod by a non-owner succeeded: %s", out)
	}
	if out, err := asUser(1000, 1000, m.Dir, "chmod", "0600", "shared/mine"); err != nil {
		t.Errorf("chmod by the owner: %v %s", err, out)
	}
	if out, err := asUser(1000, 1000, m.Dir, "chown", "1001", "shared/mine"); err == nil {
		t.Errorf("chown to another uid by a non-root user succeeded: %s", out)
	}
	if out, err := asUser(1001, 1001, m.Dir, "touch", "-d", "2000-01-01", "f"); err == nil {
		t.Errorf("explicit utimens by a non-owner succeeded: %s", out)
	}
	// default_permissions: mode bits are enforced.
	if out, err := asUser(1001, 1001, m.Dir, "cat", "shared/mine"); err == nil {
		t.Errorf("reading a 0600 file of another user succeeded: %s", out)
	}

	// A setgid directory hands its group down, to symlinks too (they
	// took the caller's group).
	sh(t, m.Dir, `mkdir sg; chown 0:2000 sg; chmod 2777 sg`)
	if out, err := asUser(1000, 1000, m.Path("sg"), "sh", "-c", "touch file && mkdir sub && ln -s file link"); err != nil {
		t.Fatalf("create in setgid dir: %v %s", err, out)
	}
	var lst unix.Stat_t
	if err := unix.Lstat(m.Path("sg/link"), &lst); err != nil || lst.Gid != 2000 {
		t.Errorf("symlink in setgid dir: gid %d (%v), want 2000", lst.Gid, err)
	}
	if st := stat(t, m.Path("sg/file")); st.Gid != 2000 {
		t.Errorf("file in setgid dir has gid %d, want 2000", st.Gid)
	}
	if st := stat(t, m.Path("sg/sub")); st.Gid != 2000 || st.Mode&syscall.S_ISGID == 0 {
		t.Errorf("dir in setgid dir: gid %d mode %o, want 2000 and setgid", st.Gid, st.Mode&0o7777)
	}
}

func TestXattrs(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("f")
	writeFile(t, p, "x")
	if err := unix.Setxattr(p, "user.color", []byte("blue"), 0); err != nil {
		t.Fatalf("setxattr: %v", err)
	}
	if err := unix.Setxattr(p, "user.color", []byte("red"), unix.XATTR_CREATE); err != syscall.EEXIST {
		t.Errorf("XATTR_CREATE on an existing name: %v, want EEXIST", err)
	}
	if err := unix.Setxattr(p, "user.none", []byte("v"), unix.XATTR_REPLACE); err != syscall.ENODATA {
		t.Errorf("XATTR_REPLACE on a missing name: %v, want ENODATA", err)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(p, "user.color", buf)
	if err != nil || string(buf[:n]) != "blue" {
		t.Errorf("getxattr = %q, %v", buf[:n], err)
	}
	if n, err := unix.Getxattr(p, "user.color", nil); err != nil || n != 4 {
		t.Errorf("getxattr size = %d, %v", n, err)
	}
	if _, err := unix.Getxattr(p, "user.color", make([]byte, 2)); err != syscall.ERANGE {
		t.Errorf("getxattr small buffer: %v, want ERANGE", err)
	}
	unix.Setxattr(p, "user.b", nil, 0)
	n, err = unix.Listxattr(p, buf)
	if got := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00"); err != nil || len(got) != 2 {
		t.Errorf("listxattr = %q, %v", got, err)
	}
	if err := unix.Removexattr(p, "user.color"); err != nil {
		t.Errorf("removexattr: %v", err)
	}
	if _, err := unix.Getxattr(p, "user.color", buf); err != syscall.ENODATA {
		t.Errorf("getxattr after remove: %v, want ENODATA", err)
	}
	if err := unix.Setxattr(p, "trusted.x", []byte("v"), 0); err != syscall.EOPNOTSUPP {
		t.Errorf("trusted.* xattr: %v, want EOPNOTSUPP", err)
	}
}

func TestStatfsAndMountTable(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	var st unix.Statfs_t
	if err := unix.Statfs(m.Dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks == 0 || st.Bsize == 0 || st.Bavail > st.Blocks || st.Namelen != 255 {
		t.Errorf("statfs: blocks %d avail %d bsize %d namelen %d", st.Blocks, st.Bavail, st.Bsize, st.Namelen)
	}
	out := sh(t, m.Dir, `df -T . | tail -1; grep " $(pwd) " /proc/mounts`)
	if !strings.Contains(out, "wsync") || !strings.Contains(out, "fuse.wsync") {
		t.Errorf("df / mounts do not name wsync:\n%s", out)
	}
	for _, opt := range []string{"allow_other", "default_permissions"} {
		if !strings.Contains(out, opt) {
			t.Errorf("mount options lack %s:\n%s", opt, out)
		}
	}
}

func TestMmap(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("mapped")
	writeFile(t, p, strings.Repeat(".", 8192))
	if out, err := runHelper(t, "mmap-write", p, "written through a mapping"); err != nil {
		t.Fatalf("mmap write: %v %s", err, out)
	}
	got := readFile(t, p)
	if want := "written through a mapping" + strings.Repeat(".", 8192-25); got != want {
		t.Errorf("after mmap write: %q...", got[:40])
	}
	if got := storeFile(t, m, "mapped"); !strings.HasPrefix(got, "written through a mapping...") {
		t.Errorf("store after mmap write: %q...", got[:40])
	}
	out, err := runHelper(t, "mmap-read", p, "25")
	if err != nil || out != "written through a mapping" {
		t.Errorf("mmap read: %q %v", out, err)
	}
}

func TestOpenUnlinkedFileStaysUsable(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("tmp")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("before")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("name still visible: %v", err)
	}
	if _, err := f.WriteString("+after"); err != nil {
		t.Errorf("write after unlink: %v", err)
	}
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if got := string(buf[:n]); got != "before+after" {
		t.Errorf("read after unlink: %q %v", got, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 || st.Size != 12 {
		t.Errorf("fstat after unlink: nlink %d size %d %v", st.Nlink, st.Size, err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if list, _ := m.Store.List(t.Context(), ""); len(list) != 0 {
		t.Errorf("store lists %v", list)
	}
}

func TestLocksBetweenProcesses(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("lockfile")
	writeFile(t, p, "")

	// flock(2): held here, refused to another process, free again after.
	f, _ := os.OpenFile(p, os.O_RDWR, 0)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := shErr(m.Dir, `flock -n -x lockfile true`); err == nil {
		t.Error("flock -n succeeded while another process holds the lock")
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	sh(t, m.Dir, `flock -n -x lockfile true`)

	// fcntl(2) record locks.
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if out, err := runHelper(t, "fcntl-try", p); err != nil || out != "busy" {
		t.Errorf("fcntl lock in a child while held: %q %v, want busy", out, err)
	}
	f.Close() // drops the record lock
	if out, err := runHelper(t, "fcntl-try", p); err != nil || out != "locked" {
		t.Errorf("fcntl lock in a child after release: %q %v, want locked", out, err)
	}
}

func TestReaddirStableOrder(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	for i := 0; i < 700; i++ { // several store pages
		writeFile(t, m.Path("d"+strconv.Itoa(i)), "")
	}
	a := sh(t, m.Dir, `ls -f`)
	b := sh(t, m.Dir, `ls -f`)
	if a != b {
		t.Error("two listings differ")
	}
	names := strings.Fields(a)
	if len(names) != 702 || names[0] != "." || names[1] != ".." {
		t.Fatalf("ls -f gives %d names starting %v", len(names), names[:2])
	}
	for i := 3; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("not in name order at %d: %q then %q", i, names[i-1], names[i])
		}
	}
	_ = filepath.Join
}

func TestCopyFileRange(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	data := bytes.Repeat([]byte("0123456789abcdef"), 200000) // 3.2 MB: several chunks
	if err := os.WriteFile(m.Path("src"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, m.Dir, `cp src whole`)
	if got := readFile(t, m.Path("whole")); got != string(data) {
		t.Errorf("cp copy differs (len %d)", len(got))
	}
	in, _ := os.Open(m.Path("src"))
	defer in.Close()
	out, _ := os.Create(m.Path("part"))
	defer out.Close()
	offIn, offOut := int64(1000), int64(10)
	n, err := unix.CopyFileRange(int(in.Fd()), &offIn, int(out.Fd()), &offOut, 1<<20, 0)
	if err != nil || n != 1<<20 {
		t.Fatalf("copy_file_range: %d %v", n, err)
	}
	out.Close()
	want := append(make([]byte, 10), data[1000:1000+1<<20]...)
	if got := storeFile(t, m, "part"); got != string(want) {
		t.Errorf("partial copy differs (len %d, want %d)", len(got), len(want))
	}
}
