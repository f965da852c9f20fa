package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
)

// The workspace's quota through the mount: a write or create past it is
// EDQUOT and writes nothing, what was written before stays, a file past
// the max file size is EFBIG, and statfs (df) shows the quota.
func TestMountQuota(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	if err := m.Store.SetQuota(vfs.Quota{MaxBytes: 1 << 20, MaxEntries: 10}); err != nil {
		t.Fatal(err)
	}
	a := chunkPattern(600<<10, 1)
	if err := os.WriteFile(m.Path("a"), a, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(m.Path("b"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	b := chunkPattern(300<<10, 2)
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Write(chunkPattern(200<<10, 3)); !errors.Is(err, syscall.EDQUOT) || n != 0 {
		t.Fatalf("write past the quota: n = %d, err = %v; want 0, EDQUOT", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close after EDQUOT: %v", err)
	}
	if got, _ := os.ReadFile(m.Path("a")); !bytes.Equal(got, a) {
		t.Error("a changed")
	}
	if got, _ := os.ReadFile(m.Path("b")); !bytes.Equal(got, b) {
		t.Errorf("b is %d bytes, want the %d written before the quota", len(got), len(b))
	}
	if _, err := shErr(m.Dir, "head -c 200000 /dev/zero > c"); err == nil {
		t.Error("a shell redirect past the quota succeeded")
	}

	var st unix.Statfs_t
	if err := unix.Statfs(m.Dir, &st); err != nil {
		t.Fatal(err)
	}
	bs := uint64(st.Bsize)
	if got := st.Blocks * bs; got != 1<<20 {
		t.Errorf("statfs total %d bytes, want the quota %d", got, 1<<20)
	}
	used := uint64(900 << 10)
	if c, err := os.Stat(m.Path("c")); err == nil {
		used += uint64(c.Size())
	}
	if got, want := st.Bfree*bs, (1<<20-used)/bs*bs; got != want {
		t.Errorf("statfs free %d bytes, want quota - used = %d", got, want)
	}
	if st.Files != 10 {
		t.Errorf("statfs files %d, want the max entries 10", st.Files)
	}
	if out := sh(t, m.Dir, "df -B1 --output=size . | tail -1"); strings.TrimSpace(out) != "1048576" {
		t.Errorf("df shows size %q, want 1048576", out)
	}

	// Entries: creates until the quota, then EDQUOT for files and dirs.
	n := 0
	for ; n < 20; n++ {
		f, err := os.Create(m.Path(fmt.Sprintf("e%d", n)))
		if err != nil {
			if !errors.Is(err, syscall.EDQUOT) {
				t.Fatalf("create e%d: %v, want EDQUOT at the quota", n, err)
			}
			break
		}
		f.Close()
	}
	if got := m.Store.Usage().Entries; got != 10 {
		t.Errorf("%d entries after creating to the quota, want 10", got)
	}
	if err := os.Mkdir(m.Path("d"), 0o755); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("mkdir past max entries: %v, want EDQUOT", err)
	}
	if err := unix.Statfs(m.Dir, &st); err != nil || st.Ffree != 0 {
		t.Errorf("statfs free files %d (%v), want 0", st.Ffree, err)
	}

	// A quota lowered below the usage keeps the data; deletes free room.
	if err := m.Store.SetQuota(vfs.Quota{MaxBytes: 100 << 10, MaxFileSize: 50 << 10}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(m.Path("a")); !bytes.Equal(got, a) {
		t.Error("lowering the quota changed a")
	}
	if err := os.Truncate(m.Path("e0"), 60<<10); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("truncate past the max file size: %v, want EFBIG", err)
	}
	if err := os.WriteFile(m.Path("e1"), []byte("x"), 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("write over a lowered quota: %v, want EDQUOT", err)
	}
	if err := os.Remove(m.Path("a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.Path("b")); err != nil {
		t.Fatal(err)
	}
	os.Remove(m.Path("c"))
	// The kernel sends a file's RELEASE after close(2) returns, in the
	// background: a name removed before it arrives leaves an open,
	// unlinked node whose bytes count until then. Wait for the room.
	testutil.WaitFor(t, "the removed files' bytes to leave the usage", 10*time.Second, func() bool {
		return m.Store.Usage().Bytes <= 60<<10
	})
	if err := os.WriteFile(m.Path("e1"), chunkPattern(40<<10, 4), 0o644); err != nil {
		t.Errorf("write after deletes made room: %v", err)
	}
}
