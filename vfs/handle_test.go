package vfs

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/wsync/wsync/chunkstore"
)

// createFile creates name in the root and opens it.
func createFile(t testing.TB, s *Store, name string) *Handle {
	t.Helper()
	_, err := s.Create(ctx, RootIno, name, NewAttr{Mode: 0o644})
	must(t, err)
	return openAt(t, s, name)
}

// released releases h and checks the committed content of the file at
// path.
func released(t testing.TB, s *Store, h *Handle, path string, want []byte) {
	t.Helper()
	must(t, h.Release(ctx))
	if got := readFile(t, s, path); !bytes.Equal(got, want) {
		t.Fatalf("%s after release: %d bytes, want %d (equal: %v)", path, len(got), len(want), bytes.Equal(got, want))
	}
}

// writeAt writes data at off through h.
func writeAt(t testing.TB, h *Handle, data []byte, off int64) {
	t.Helper()
	if _, err := h.WriteAt(ctx, data, off); err != nil {
		t.Fatal(err)
	}
}

func TestHandleWritesCommitAsOneRev(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "f")
	rev := s.CurrentRev()
	data := pattern(3*cs+1234, 2)
	for off := 0; off < len(data); off += 4096 {
		_, err := h.WriteAt(ctx, data[off:min(off+4096, len(data))], int64(off))
		must(t, err)
	}
	if s.CurrentRev() != rev {
		t.Fatalf("writes stamped revs before flush: %d -> %d", rev, s.CurrentRev())
	}
	// Reads through the handle and getattr see buffered bytes.
	got := make([]byte, len(data))
	n, err := h.ReadAt(ctx, got, 0)
	if n != len(data) || (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(got, data) {
		t.Fatalf("read before flush: n=%d err=%v equal=%v", n, err, bytes.Equal(got, data))
	}
	a, _ := s.GetAttr(ctx, h.Ino())
	if a.Size != int64(len(data)) {
		t.Errorf("getattr size before flush = %d", a.Size)
	}
	must(t, h.Flush(ctx))
	if s.CurrentRev() != rev+1 {
		t.Errorf("flush stamped %d revs, want 1", s.CurrentRev()-rev)
	}
	released(t, s, h, "f", data)
	m, err := s.Manifest(ctx, "f")
	must(t, err)
	if len(m) != 4 || m[3].Size != 1234 {
		t.Errorf("manifest = %d chunks, last %d bytes", len(m), m[len(m)-1].Size)
	}
}

func TestHandleSparseWriteReadsZeros(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "sparse")
	_, err := h.WriteAt(ctx, []byte("end"), 2*cs+100)
	must(t, err)
	must(t, h.Release(ctx))
	got := readFile(t, s, "sparse")
	want := make([]byte, 2*cs+103)
	copy(want[2*cs+100:], "end")
	if !bytes.Equal(got, want) {
		t.Error("sparse region does not read as zeros")
	}
}

func TestHandleOverwriteInMiddle(t *testing.T) {
	s := newStore(t)
	data := pattern(3*cs, 3)
	writeFile(t, s, "f", data)
	before, _ := s.Manifest(ctx, "f")
	ino, _ := s.ResolvePath(ctx, "f")
	h, err := s.OpenHandle(ctx, ino)
	must(t, err)
	_, err = h.WriteAt(ctx, []byte("XYZ"), cs+10)
	must(t, err)
	must(t, h.Release(ctx))
	copy(data[cs+10:], "XYZ")
	if !bytes.Equal(readFile(t, s, "f"), data) {
		t.Fatal("content after overwrite differs")
	}
	after, _ := s.Manifest(ctx, "f")
	if before[0] != after[0] || before[2] != after[2] || before[1] == after[1] {
		t.Errorf("an in-place edit of chunk 1 changed chunks other than 1")
	}
}

func TestHandleTruncateShrinkAndGrow(t *testing.T) {
	s := newStore(t)
	data := pattern(2*cs+500, 4)
	writeFile(t, s, "f", data)
	ino, _ := s.ResolvePath(ctx, "f")
	h, err := s.OpenHandle(ctx, ino)
	must(t, err)
	must(t, h.Truncate(ctx, cs+7))
	must(t, h.Truncate(ctx, 3*cs))
	must(t, h.Release(ctx))
	want := make([]byte, 3*cs)
	copy(want, data[:cs+7])
	if got := readFile(t, s, "f"); !bytes.Equal(got, want) {
		t.Errorf("shrink then grow: bytes past the shrink point are not zero")
	}
}

func TestTwoHandlesShareState(t *testing.T) {
	s := newStore(t)
	h1 := createFile(t, s, "f")
	h2 := openAt(t, s, "f")
	writeAt(t, h1, []byte("aaaa"), 0)
	writeAt(t, h2, []byte("bb"), 4)
	must(t, h1.Release(ctx))
	must(t, h2.Release(ctx))
	if got := string(readFile(t, s, "f")); got != "aaaabb" {
		t.Errorf("content = %q, want both handles' writes", got)
	}
}

func TestUnlinkedOpenFileStaysUsable(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "f")
	_, err := h.WriteAt(ctx, []byte("keep"), 0)
	must(t, err)
	must(t, h.Flush(ctx))
	must(t, s.Unlink(ctx, RootIno, "f"))
	if _, err := s.Stat(ctx, "f"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	_, err = h.WriteAt(ctx, []byte("!"), 4)
	must(t, err)
	must(t, h.Flush(ctx))
	got := make([]byte, 5)
	if _, err := h.ReadAt(ctx, got, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if string(got) != "keep!" {
		t.Errorf("read unlinked file = %q", got)
	}
	ino := h.Ino()
	must(t, h.Release(ctx))
	if _, err := s.GetAttr(ctx, ino); !errors.Is(err, ErrNotExist) {
		t.Errorf("node of unlinked file survives its last release: %v", err)
	}
}

func TestLargeSequentialWriteHoldsFewChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 256 MiB")
	}
	s := newStore(t)
	h := createFile(t, s, "big")
	buf := pattern(1<<20, 5)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak uint64
	const total = 256 << 20
	for off := int64(0); off < total; off += int64(len(buf)) {
		_, err := h.WriteAt(ctx, buf, off)
		must(t, err)
		if off%(32<<20) == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	must(t, h.Release(ctx))
	growth := int64(peak) - int64(base)
	t.Logf("heap growth while writing 256 MiB: %d KiB", growth>>10)
	if growth > 64<<20 {
		t.Errorf("heap grew by %d MiB while writing; the write path must hold only a few chunks", growth>>20)
	}
	a, _ := s.Stat(ctx, "big")
	if a.Size != total {
		t.Errorf("size = %d", a.Size)
	}
}

func TestCloseCommitsDirtyHandles(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir+"/s.db")
	h := createFile(t, s, "f")
	writeAt(t, h, []byte("unflushed"), 0)
	must(t, s.Close())
	s2 := openStore(t, dir+"/s.db")
	if got := string(readFile(t, s2, "f")); got != "unflushed" {
		t.Errorf("after Close with a dirty handle, f = %q", got)
	}
}

// An open takes the file's committed state from the node it reads, so the
// first read needs no second query; content an apply replaces after the
// open is still what the handle reads next.
func TestOpenLoadsTheCommittedState(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "f", []byte("old content"))
	must(t, s.Sync(ctx))
	h := openAt(t, s, "f")
	defer h.Release(ctx)
	h.f.mu.Lock()
	loaded := !h.f.needsLoad()
	h.f.mu.Unlock()
	if !loaded {
		t.Fatal("the handle is not loaded after its open")
	}
	fresh := []byte("content an apply brought")
	st := s.Chunks().NewStage()
	defer st.Release()
	ref, err := st.PutHashed(ctx, fresh)
	must(t, err)
	_, err = s.Apply(ctx, []ChangeEntry{{Kind: EntryFile, Path: "f", Rev: 9, Mode: 0o644, Size: int64(len(fresh)),
		Chunks: []chunkstore.Ref{ref}}}, ApplyOptions{Source: Upstream, Stage: st})
	must(t, err)
	got := make([]byte, 64)
	n, err := h.ReadAt(ctx, got, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:n], fresh) {
		t.Fatalf("read %q after the apply, want %q", got[:n], fresh)
	}
}
