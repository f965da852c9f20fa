package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/testutil"
)

// chunkPattern is n bytes that differ by seed and are never all zero.
func chunkPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x) | 1
	}
	return b
}

// Issue 9 item 1 through the mount: `truncate -s 999999999999999` killed
// computerd (out of memory) and took the mount down for every process;
// `truncate -s 1T` pinned it at 100% CPU for minutes. Past the largest
// file the caller gets EFBIG and the mount keeps answering; a 1 TiB sparse
// file is created, written at its end and read back at once.
func TestMountHugeSizes(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	const tib = int64(1) << 40
	path := m.Path("f")
	writeFile(t, path, "x")

	if err := os.Truncate(path, 999999999999999); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("truncate 999999999999999: %v, want EFBIG", err)
	}
	if out, err := shErr(m.Dir, "truncate -s 999999999999999 f"); err == nil || !strings.Contains(out, "too large") {
		t.Fatalf("truncate(1) past the max: %q, %v; want \"File too large\"", out, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("y"), chunkstore.MaxFileSize); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("write at the max: %v, want EFBIG", err)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, chunkstore.MaxFileSize-1, 2); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("fallocate past the max: %v, want EFBIG", err)
	}
	// The mount still answers, and the file is as it was.
	if got := readFile(t, path); got != "x" {
		t.Fatalf("f = %q after refused sizes", got)
	}

	// 1 TiB: a hole, committed as 257 refs, not 2 million hashed chunks.
	start := time.Now()
	sh(t, m.Dir, "truncate -s 1T f")
	t.Logf("truncate -s 1T through the mount: %v", time.Since(start))
	tail := chunkPattern(4096, 7)
	if _, err := f.WriteAt(tail, tib-4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8192)
	if _, err := f.ReadAt(got, tib-8192); err != nil {
		t.Fatal(err)
	}
	if !chunkstore.IsZero(got[:4096]) || !bytes.Equal(got[4096:], tail) {
		t.Fatal("the end of the 1 TiB file reads wrong")
	}
	mid := make([]byte, 1<<20)
	if _, err := f.ReadAt(mid, tib/3); err != nil || !chunkstore.IsZero(mid) {
		t.Fatalf("a hole in the middle: %v, zero %v", err, chunkstore.IsZero(mid))
	}
	if st := stat(t, path); st.Size != tib {
		t.Fatalf("size = %d, want 1 TiB", st.Size)
	}
	man, err := m.Store.Manifest(context.Background(), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(man) > 260 || len(man.DataRefs()) != 2 {
		t.Fatalf("manifest of the sparse file: %d refs, %d with data; want ~258 and 2", len(man), len(man.DataRefs()))
	}
	// SEEK_DATA and SEEK_HOLE skip the terabyte of holes in one call each.
	const seekData, seekHole = 3, 4
	fd := int(f.Fd())
	for _, tc := range []struct {
		off    int64
		whence int
		want   int64
	}{
		{0, seekHole, chunkstore.ChunkSize}, // "x" is in chunk 0
		{1, seekData, 1},
		{chunkstore.ChunkSize, seekData, tib - chunkstore.ChunkSize},
		{tib - chunkstore.ChunkSize, seekHole, tib},
	} {
		if got, err := syscall.Seek(fd, tc.off, tc.whence); got != tc.want || err != nil {
			t.Errorf("lseek(%d, %d) = %d, %v; want %d", tc.off, tc.whence, got, err, tc.want)
		}
	}
	if _, err := syscall.Seek(fd, tib, seekData); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("SEEK_DATA at the end: %v, want ENXIO", err)
	}
	// fallocate mode 0 past the end extends by a hole.
	if err := syscall.Fallocate(int(f.Fd()), 0, tib, 1<<30); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if st := stat(t, path); st.Size != tib+1<<30 {
		t.Fatalf("size after fallocate = %d", st.Size)
	}
}

// Issue 9 item 4 through the mount, on a real full disk: the state
// directory is a small tmpfs. Writes that cannot be stored are reported to
// the writer (write, fsync and close get ENOSPC, never success); files
// committed before are intact; the pull's flush does not fail; and once a
// file is deleted to free space, the same descriptor's writes commit.
func TestMountFullDisk(t *testing.T) {
	disk := testutil.Tmpfs(t, 16<<20)
	m := fusetest.NewMount(t, fusetest.Options{StoreDir: disk})
	kept := chunkPattern(700<<10, 1)
	if err := os.WriteFile(m.Path("kept"), kept, 0o644); err != nil {
		t.Fatal(err)
	}
	// About 1 MiB for the writes, past the store's reserve (1/16 of the
	// disk, vfs/reserve.go), which they may not take.
	ballast := testutil.Fill(t, disk, 2<<20)

	f, err := os.OpenFile(m.Path("big"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := os.OpenFile(m.Path("big"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	var werr error
	for i := range 24 {
		p := chunkPattern(chunkstore.ChunkSize, byte(10+i))
		if _, werr = f.WriteAt(p, int64(len(data))); werr != nil {
			break
		}
		data = append(data, p...)
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 12 MiB into 1 MiB of space: %v, want ENOSPC", werr)
	}
	if err := f.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fsync on a full disk: %v, want ENOSPC", err)
	}
	if err := other.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("close on a full disk: %v, want ENOSPC", err)
	}
	if got, err := os.ReadFile(m.Path("kept")); err != nil || !bytes.Equal(got, kept) {
		t.Fatalf("a committed file on a full disk: %v, equal %v", err, bytes.Equal(got, kept))
	}
	// What a pull runs first does not fail for the one file.
	if err := m.Server.Flush(context.Background()); err != nil {
		t.Fatalf("flush before a pull: %v", err)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync once space is free: %v", err)
	}
	more := chunkPattern(1000, 99)
	if _, err := f.WriteAt(more, int64(len(data))); err != nil {
		t.Fatalf("write once space is free: %v", err)
	}
	data = append(data, more...)
	if err := f.Close(); err != nil {
		t.Fatalf("close once space is free: %v", err)
	}
	got, err := os.ReadFile(m.Path("big"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("big: %d bytes, %v; want the %d written", len(got), err, len(data))
	}
	if got, err := os.ReadFile(m.Path("kept")); err != nil || !bytes.Equal(got, kept) {
		t.Fatal("kept changed")
	}
}
