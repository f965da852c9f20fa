package fusefs_test

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
)

// The divergences TestDiffAgainstTmpfs found and steers around
// (diffKnown), each reduced to what tmpfs does and the mount does not.
// They fail until fixed, so they run only with WSYNC_DIFFTEST_KNOWN=0;
// a fix removes the skip and the diffKnown entry together.

// knownDivergence skips t unless WSYNC_DIFFTEST_KNOWN=0, and mounts.
func knownDivergence(t *testing.T, name string) *fusetest.Mount {
	t.Helper()
	why, ok := diffKnown[name]
	if !ok {
		t.Fatalf("no known divergence %q", name)
	}
	if os.Getenv("WSYNC_DIFFTEST_KNOWN") != "0" {
		t.Skipf("known divergence %s (WSYNC_DIFFTEST_KNOWN=0 runs it): %s", name, why)
	}
	return fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour}})
}

// oldFile makes path a file of data whose mtime is 2001's.
func oldFile(t *testing.T, path string, data []byte) time.Time {
	t.Helper()
	old := time.Unix(1_000_000_000, 0)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return old
}

func checkMtimeMarked(t *testing.T, path string, old time.Time, what string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.ModTime().Equal(old) {
		t.Errorf("%s: mtime still %v, want now", what, old)
	}
}

// TestKnownOpenTruncOfAnEmptyFileMarksMtime: the shell's `: > stamp`
// (a make stamp) on an empty stamp.
func TestKnownOpenTruncOfAnEmptyFileMarksMtime(t *testing.T) {
	m := knownDivergence(t, "truncate-keeps-mtime")
	p := m.Path("stamp")
	old := oldFile(t, p, nil)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	checkMtimeMarked(t, p, old, "open(O_TRUNC) of an empty file")
}

func TestKnownFtruncateToTheSameSizeMarksMtime(t *testing.T) {
	m := knownDivergence(t, "truncate-keeps-mtime")
	p := m.Path("f")
	old := oldFile(t, p, []byte("abc"))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	checkMtimeMarked(t, p, old, "ftruncate to the same size")
}

func TestKnownFallocateKeepSizeMarksMtime(t *testing.T) {
	m := knownDivergence(t, "fallocate-keeps-mtime")
	p := m.Path("f")
	old := oldFile(t, p, []byte("abc"))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 3); err != nil {
		t.Fatal(err)
	}
	checkMtimeMarked(t, p, old, "fallocate(FALLOC_FL_KEEP_SIZE)")
}

func TestKnownSymlinkInASetgidDirectoryTakesItsGroup(t *testing.T) {
	m := knownDivergence(t, "symlink-ignores-setgid")
	d := m.Path("d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, 0, 1001); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(d, 0o2755); err != nil { // os.Chmod drops a raw 02000
		t.Fatal(err)
	}
	if err := os.Symlink("target", m.Path("d/l")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(m.Path("d/l"), &st); err != nil {
		t.Fatal(err)
	}
	if got, want := st.Gid, uint32(1001); got != want {
		t.Errorf("symlink made by root in a setgid directory of group %d: group %d", want, got)
	}
}
