package fusefs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

func init() { helpers["unix-dial"] = helperUnixDial }

// helperUnixDial connects to the Unix socket args[0], sends args[1] and a
// newline, and prints the line it gets back.
func helperUnixDial(args []string) error {
	c, err := net.Dial("unix", args[0])
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := fmt.Fprintln(c, args[1]); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	fmt.Print(line)
	return nil
}

// assertLocalOnly checks that no special file under the mount reaches what
// syncs: the change feed has no live entry for one, EntriesAt reads each
// as a delete, and the Merkle scan has no row for one. It returns how many
// names of special files it found.
func assertLocalOnly(t *testing.T, m *fusetest.Mount) int {
	t.Helper()
	ctx := context.Background()
	specials := map[string]uint64{} // store path -> inode
	err := filepath.WalkDir(m.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice|fs.ModeCharDevice) != 0 {
			rel, _ := filepath.Rel(m.Dir, p)
			st := stat(t, p)
			specials[rel] = st.Ino
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[uint64]string{}
	for p, ino := range specials {
		inodes[ino] = p
	}
	for e, err := range m.Store.Changes(ctx, watermark.Cursor{}, watermark.At(m.Store.CurrentRev()), vfs.Ignore{}) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := specials[e.Path]; ok && e.Kind != vfs.EntryDelete {
			t.Errorf("the feed has a %s entry for special file %s", e.Kind, e.Path)
		}
	}
	var paths []string
	for p := range specials {
		paths = append(paths, p)
	}
	es, err := m.Store.EntriesAt(ctx, paths)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind != vfs.EntryDelete {
			t.Errorf("EntriesAt(%s) = %s, want delete", e.Path, e.Kind)
		}
	}
	_, err = m.Store.ScanTree(ctx, func(r *vfs.TreeRow) error {
		if p, ok := inodes[uint64(r.Ino)]; ok {
			t.Errorf("the Merkle scan has a row for special file %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(specials)
}

func TestFifoBetweenProcesses(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	openUp(t, m.Dir)
	// A writer and a reader process, 3 MB through a pipe of 64 KiB. (Every
	// open of a FIFO is under timeout: a writer left blocked in open(2)
	// would hold the script's output open forever.)
	out := sh(t, m.Dir, `mkdir d; mkfifo d/p; stat -c %F d/p
		head -c 3000000 /dev/urandom > src
		timeout 20 cp src d/p & timeout 20 cat d/p > dst; wait
		cmp src dst && echo same`)
	if out != "fifo\nsame\n" {
		t.Fatalf("output %q, want fifo and same", out)
	}

	// rename, chmod, chown, a hardlink, and the FIFO still works after.
	sh(t, m.Dir, `mv d/p d/q; chmod 0620 d/q; chown 1000:1001 d/q; ln d/q r`)
	for _, p := range []string{"d/q", "r"} {
		st := stat(t, m.Path(p))
		if st.Mode&syscall.S_IFMT != syscall.S_IFIFO || st.Mode&0o7777 != 0o620 || st.Uid != 1000 || st.Gid != 1001 || st.Nlink != 2 {
			t.Errorf("%s: mode %o owner %d:%d nlink %d, want a FIFO 0620 1000:1001 with 2 links", p, st.Mode, st.Uid, st.Gid, st.Nlink)
		}
	}
	if out := sh(t, m.Dir, `true; timeout 20 bash -c 'echo through-link > r' & timeout 20 cat d/q; wait`); out != "through-link\n" {
		t.Errorf("through the hardlink: %q", out)
	}
	// The kernel checks the mode: the owner reads and writes, others not.
	if out, err := asUser(1000, 1000, m.Dir, "bash", "-c", "timeout 20 bash -c 'echo by-owner > r' & timeout 20 cat d/q; wait"); err != nil || out != "by-owner\n" {
		t.Errorf("the owner through its 0620 FIFO: %q %v", out, err)
	}
	if out, err := asUser(1002, 1002, m.Dir, "bash", "-c", "timeout 20 cat d/q"); err == nil {
		t.Errorf("another user read a 0620 FIFO: %q", out)
	}
	if n := assertLocalOnly(t, m); n != 2 {
		t.Errorf("found %d special files, want 2", n)
	}
	// An open(2) that does not block: no reader is ENXIO, as on any disk.
	if _, err := os.OpenFile(m.Path("r"), os.O_WRONLY|syscall.O_NONBLOCK, 0); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("nonblocking write-open without a reader: %v, want ENXIO", err)
	}
	sh(t, m.Dir, `rm r d/q; rmdir d`)
	if _, err := m.Store.ResolvePath(context.Background(), "d"); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("d after rmdir: %v", err)
	}
}

// TestUnixSocketInMount binds a server inside the mount, connects from
// another process, and keeps connecting through a rename, a chmod and an
// upstream apply that invalidates the directory.
func TestUnixSocketInMount(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	openUp(t, m.Dir)
	if err := os.Mkdir(m.Path("run"), 0o777); err != nil {
		t.Fatal(err)
	}
	testutil.EchoSocket(t, m.Path("run/server.sock"))
	dial := func(path string) (string, error) {
		return runHelper(t, "unix-dial", path, "ping")
	}
	if out, err := dial(m.Path("run/server.sock")); err != nil || out != "echo:ping\n" {
		t.Fatalf("connect from another process: %q %v", out, err)
	}
	if st := stat(t, m.Path("run/server.sock")); st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		t.Errorf("server.sock mode %o, want a socket", st.Mode)
	}
	// In-process too, with bytes both ways.
	c, err := net.Dial("unix", m.Path("run/server.sock"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(c, "in-process")
	if b, err := io.ReadAll(c); err != nil || string(b) != "echo:in-process\n" {
		t.Errorf("in-process exchange: %q %v", b, err)
	}
	c.Close()

	// The socket follows its inode: a rename keeps it reachable.
	if err := os.Rename(m.Path("run/server.sock"), m.Path("run/moved.sock")); err != nil {
		t.Fatal(err)
	}
	if out, err := dial(m.Path("run/moved.sock")); err != nil || out != "echo:ping\n" {
		t.Errorf("connect after rename: %q %v", out, err)
	}
	// An apply into the same directory invalidates the kernel's entries
	// there; the next lookup must find the same inode, or connect fails.
	applyUpstream(t, m.Store, []vfs.ChangeEntry{{Kind: vfs.EntryFile, Rev: 1, Path: "run/pidfile", Mode: 0o644, Mtime: 1}},
		map[string]string{"run/pidfile": "pid 1\n"})
	if err := m.Server.WaitInvalidated(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, err := dial(m.Path("run/moved.sock")); err != nil || out != "echo:ping\n" {
		t.Errorf("connect after an apply invalidated its directory: %q %v", out, err)
	}
	// connect(2) needs write permission on the socket file.
	if err := os.Chmod(m.Path("run/moved.sock"), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := dialAs(t, 1000, m.Path("run/moved.sock")); err == nil {
		t.Errorf("uid 1000 connected to a 0700 root socket: %q", out)
	}
	if err := os.Chown(m.Path("run/moved.sock"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if out, err := dialAs(t, 1000, m.Path("run/moved.sock")); err != nil || out != "echo:ping\n" {
		t.Errorf("uid 1000 connecting to its own socket: %q %v", out, err)
	}
	if n := assertLocalOnly(t, m); n != 1 {
		t.Errorf("found %d special files, want 1", n)
	}
	if err := os.Remove(m.Path("run/moved.sock")); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(m.Path("run/moved.sock")); err == nil {
		t.Error("connect after unlink succeeded")
	}
	// The same name can be bound again.
	l2, err := net.Listen("unix", m.Path("run/moved.sock"))
	if err != nil {
		t.Fatalf("bind again after unlink: %v", err)
	}
	l2.Close()
}

// dialAs runs the unix-dial helper as uid:uid (helperCmdAs).
func dialAs(t *testing.T, uid uint32, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := helperCmdAs(t, ctx, uid, "unix-dial", path, "ping").CombinedOutput()
	return string(out), err
}

// specialOps runs a table of special-file operations under dir and
// describes each outcome: an errno, or "ok" with what lstat then shows.
// TestSpecialFilesAsOnNodevTmpfs runs it on the mount and on a nodev tmpfs
// and wants the same lines.
func specialOps(t *testing.T, dir string) []string {
	t.Helper()
	var log []string
	p := func(name string) string { return filepath.Join(dir, name) }
	desc := func(name string) string {
		var st unix.Stat_t
		if err := unix.Lstat(p(name), &st); err != nil {
			return "lstat " + err.Error()
		}
		s := fmt.Sprintf("type %o mode %o owner %d:%d", st.Mode&unix.S_IFMT, st.Mode&0o7777, st.Uid, st.Gid)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			// The mount reports a directory's nlink as 1 (find(1)'s
			// "unknown"), not 2 plus its subdirectories.
			s += fmt.Sprintf(" nlink %d", st.Nlink)
		}
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFCHR || t == unix.S_IFBLK {
			s += fmt.Sprintf(" dev %d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			s += fmt.Sprintf(" size %d", st.Size)
		}
		return s
	}
	step := func(what, name string, err error) {
		if err != nil {
			log = append(log, what+": "+err.Error())
			return
		}
		log = append(log, what+": ok, "+desc(name))
	}
	open := func(name string, flags int) error {
		fd, err := unix.Open(p(name), flags|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	old := unix.Umask(0o022)
	defer unix.Umask(old)

	step("mkfifo p", "p", unix.Mkfifo(p("p"), 0o666))
	step("mkfifo p again", "p", unix.Mkfifo(p("p"), 0o666))
	step("mknod char 1,3", "c", unix.Mknod(p("c"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	step("open char rdonly", "c", open("c", unix.O_RDONLY))
	step("open char wronly", "c", open("c", unix.O_WRONLY|unix.O_NONBLOCK))
	step("mknod block 7,0", "b", unix.Mknod(p("b"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))))
	step("open block", "b", open("b", unix.O_RDONLY))
	step("mknod socket", "s", unix.Mknod(p("s"), unix.S_IFSOCK|0o755, 0))
	step("open socket", "s", open("s", unix.O_RDONLY))
	step("mknod regular", "r", unix.Mknod(p("r"), unix.S_IFREG|0o640, 0))
	step("mknod dir type", "x", unix.Mknod(p("x"), unix.S_IFDIR|0o755, 0))
	step("mknod bad type", "x", unix.Mknod(p("x"), 0o170000|0o644, 0))
	step("mknod under a file", "r/x", unix.Mknod(p("r/x"), unix.S_IFIFO|0o644, 0))
	step("open fifo wronly nonblock, no reader", "p", open("p", unix.O_WRONLY|unix.O_NONBLOCK))
	step("open fifo rdonly nonblock", "p", open("p", unix.O_RDONLY|unix.O_NONBLOCK))
	step("truncate fifo", "p", unix.Truncate(p("p"), 0))
	step("open fifo O_TRUNC nonblock", "p", open("p", unix.O_RDONLY|unix.O_TRUNC|unix.O_NONBLOCK))
	step("chmod fifo", "p", unix.Chmod(p("p"), 0o600))
	step("chown fifo", "p", unix.Lchown(p("p"), 1000, 1001))
	step("chmod char", "c", unix.Chmod(p("c"), 0o620))
	step("chown socket", "s", unix.Lchown(p("s"), 1000, 1000))
	step("utimes fifo", "p", unix.UtimesNano(p("p"), []unix.Timespec{{Sec: 1e9}, {Sec: 1e9, Nsec: 5}}))
	var st unix.Stat_t
	if err := unix.Lstat(p("p"), &st); err == nil {
		log = append(log, fmt.Sprintf("fifo mtime %d.%09d", st.Mtim.Sec, st.Mtim.Nsec))
	}
	step("setxattr user on fifo", "p", unix.Setxattr(p("p"), "user.k", []byte("v"), 0))
	step("link fifo", "p2", unix.Link(p("p"), p("p2")))
	step("stat fifo after link", "p", nil)
	step("rename fifo link over regular", "r", unix.Rename(p("p2"), p("r")))
	step("stat fifo after rename", "p", nil)
	step("mkdir d", "d", unix.Mkdir(p("d"), 0o755))
	step("rename fifo over dir", "d", unix.Rename(p("p"), p("d")))
	step("rename dir over fifo", "d", unix.Rename(p("d"), p("p")))
	step("mknod fifo in d", "d/q", unix.Mknod(p("d/q"), unix.S_IFIFO|0o644, 0))
	step("rmdir d with a fifo", "d", unix.Rmdir(p("d")))
	step("rename socket into d", "d/s", unix.Rename(p("s"), p("d/s")))
	step("rename regular over fifo", "d/q", unix.Rename(p("c"), p("d/q")))
	step("unlink r", "p", unix.Unlink(p("r")))
	step("unlink fifo", "d", unix.Unlink(p("p")))
	step("rename d", "e", unix.Rename(p("d"), p("e")))
	step("stat moved socket", "e/s", nil)
	step("mkdir shared", "shared", unix.Mkdir(p("shared"), 0o777))
	if err := unix.Chmod(p("shared"), 0o777); err != nil {
		t.Fatal(err)
	}

	// As an ordinary user: the kernel checks CAP_MKNOD and the directory.
	as := func(what, name string, argv ...string) {
		out, err := asUser(1000, 1000, dir, argv...)
		if err != nil {
			log = append(log, fmt.Sprintf("%s: %v %s", what, err, strings.TrimSpace(out)))
			return
		}
		log = append(log, what+": ok, "+desc(name))
	}
	as("mkfifo as 1000 in a 0755 root dir", "u", "mkfifo", "u")
	as("mkfifo as 1000 in a 0777 dir", "shared/u", "mkfifo", "-m", "0640", "shared/u")
	as("mknod char as 1000", "shared/c", "mknod", "shared/c", "c", "1", "3")
	as("mknod block as 1000", "shared/b", "mknod", "shared/b", "b", "7", "0")
	as("mknod fifo as 1000", "shared/f", "mknod", "shared/f", "p")
	return log
}

// TestSpecialFilesAsOnNodevTmpfs runs the same table of FIFO, socket and
// device-node operations on the mount and on a tmpfs mounted nodev, and
// wants the same outcome from each: the mount behaves as a local nodev
// disk for special files.
func TestSpecialFilesAsOnNodevTmpfs(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	openUp(t, m.Dir)
	ref := t.TempDir()
	openUp(t, ref)
	if err := unix.Mount("tmpfs", ref, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "size=4m,mode=0755"); err != nil {
		t.Fatalf("mount the reference tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(ref, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the reference tmpfs: %v", err)
		}
	})
	for _, d := range []string{m.Path("t"), filepath.Join(ref, "t")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := specialOps(t, filepath.Join(ref, "t"))
	got := specialOps(t, m.Path("t"))
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("step %d:\n  mount: %s\n  tmpfs: %s", i, g, w)
		} else {
			t.Log(g)
		}
	}
	if n := assertLocalOnly(t, m); n != 5 { // b, e/q, e/s, shared/u, shared/f
		t.Errorf("found %d special files, want 5", n)
	}
}

// TestApplyReplacesLocalFifo: an upstream file for a path where a local
// FIFO sits replaces it, and the processes of the container see the file
// at once; a directory delete takes the special files under it; an
// upstream delete of a path that is a local FIFO leaves the FIFO.
func TestApplyReplacesLocalFifo(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour}})
	sh(t, m.Dir, `mkfifo p keep; mkdir d; mkfifo d/f; stat -c %F p keep d/f >/dev/null`)
	res := applyUpstream(t, m.Store, []vfs.ChangeEntry{
		{Kind: vfs.EntryFile, Rev: 1, Path: "p", Mode: 0o644, Mtime: 1},
		{Kind: vfs.EntryDelete, Rev: 2, Path: "keep"},
		{Kind: vfs.EntryDelete, Rev: 3, Path: "d"},
	}, map[string]string{"p": "from upstream\n"})
	if res.Applied != 2 || res.Skipped != 1 {
		t.Errorf("apply = %+v, want 2 applied, the FIFO's delete skipped", res)
	}
	if err := m.Server.WaitInvalidated(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Without the invalidation the kernel would still open p as a FIFO
	// and block: timeout turns that into a failure.
	if out := sh(t, m.Dir, `stat -c %F p keep; timeout 10 cat p; test -e d || echo d-gone`); out != "regular file\nfifo\nfrom upstream\nd-gone\n" {
		t.Errorf("after the apply: %q", out)
	}
}
