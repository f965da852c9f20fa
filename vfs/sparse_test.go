package vfs

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
)

// heapInuse is the heap in use after a collection.
func heapInuse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// Issue 9 item 1: `truncate -s 999999999999999` ran the process out of
// memory in commit (a manifest of 1.9 billion refs). Past MaxFileSize a
// truncate, write or allocate is EFBIG before anything is allocated.
func TestPastMaxFileSizeIsEFBIG(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "f")
	before := heapInuse()
	for _, tc := range []struct {
		name string
		err  error
		do   func() error
	}{
		{"truncate 999999999999999", ErrFileTooBig, func() error { return h.Truncate(ctx, 999999999999999) }},
		{"truncate one past the max", ErrFileTooBig, func() error { return h.Truncate(ctx, chunkstore.MaxFileSize+1) }},
		{"write at the max", ErrFileTooBig, func() error { _, err := h.WriteAt(ctx, []byte{1}, chunkstore.MaxFileSize); return err }},
		{"write across the max", ErrFileTooBig, func() error { _, err := h.WriteAt(ctx, []byte{1, 2}, chunkstore.MaxFileSize-1); return err }},
		{"allocate past the max", ErrFileTooBig, func() error { return h.Allocate(ctx, chunkstore.MaxFileSize-10, 11) }},
		{"allocate overflowing", ErrFileTooBig, func() error { return h.Allocate(ctx, 1<<62, 1<<62) }},
		{"setattr size", ErrFileTooBig, func() error {
			size := int64(999999999999999)
			_, err := s.SetAttr(ctx, h.Ino(), SetAttr{Size: &size})
			return err
		}},
		{"negative truncate", ErrInvalid, func() error { return h.Truncate(ctx, -1) }},
		{"negative write offset", ErrInvalid, func() error { _, err := h.WriteAt(ctx, []byte{1}, -1); return err }},
	} {
		if err := tc.do(); !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
	if got := Errno(ErrFileTooBig); got != syscall.EFBIG {
		t.Errorf("Errno(ErrFileTooBig) = %v, want EFBIG", got)
	}
	grew := heapInuse() - before
	t.Logf("heap growth refusing sizes past the max: %d KiB", grew>>10)
	if grew > 4<<20 {
		t.Errorf("heap grew by %d KiB refusing sizes past the max", grew>>10)
	}
	// The file and the store are as they were.
	writeAt(t, h, []byte("still here"), 0)
	must(t, h.Release(ctx))
	if got := string(readFile(t, s, "f")); got != "still here" {
		t.Errorf("f = %q", got)
	}
}

// Issue 9 item 1: `truncate -s 1T` hashed 2 million zero chunks at 100%
// CPU for minutes. A sparse 1 TiB file costs one ref per hole run, a write
// at its end one chunk, and reads of its holes allocate nothing per chunk.
func TestTerabyteSparseFile(t *testing.T) {
	const tib = int64(1) << 40
	s := newStore(t)
	h := createFile(t, s, "sparse")
	before := heapInuse()
	start := time.Now()
	must(t, h.Truncate(ctx, tib))
	t.Logf("truncate to 1 TiB and commit: %v", time.Since(start))
	m, err := s.Manifest(ctx, "sparse")
	must(t, err)
	// 1 TiB in runs of MaxHoleRun: 257 refs, all holes.
	if want := int(tib/chunkstore.MaxHoleRun) + 1; len(m) != want || m.HasHoles() != true || len(m.DataRefs()) != 0 {
		t.Fatalf("manifest of a 1 TiB truncate: %d refs (%d data), want %d holes", len(m), len(m.DataRefs()), want)
	}
	tail := pattern(4096, 9)
	writeAt(t, h, tail, tib-4096)
	// Mid-file and at a run boundary, holes read zeros through the handle.
	for _, off := range []int64{0, tib / 2, chunkstore.MaxHoleRun - 10, tib - cs} {
		p := bytes.Repeat([]byte{0xff}, 64<<10)
		if n, err := h.ReadAt(ctx, p, off); n != len(p) || err != nil || !chunkstore.IsZero(p) {
			t.Fatalf("read at %d: n=%d err=%v zero=%v", off, n, err, chunkstore.IsZero(p))
		}
	}
	must(t, h.Flush(ctx))
	m, err = s.Manifest(ctx, "sparse")
	must(t, err)
	if data := m.DataRefs(); len(data) != 1 || len(m) > 258 || m.Size() != tib {
		t.Fatalf("after the write at the end: %d refs, %d data, %d bytes", len(m), len(data), m.Size())
	}
	if st, err := s.Chunks().Stats(ctx, s.rq); err != nil || st.Chunks != 1 {
		t.Fatalf("stored chunks = %+v, %v; want the one written", st, err)
	}
	must(t, h.Release(ctx))
	// Read back through a fresh open and through a path reader.
	r, size, err := s.OpenReader(ctx, "sparse")
	must(t, err)
	got := make([]byte, 8192)
	n, err := r.ReadAt(got, tib-8192)
	if size != tib || n != len(got) || (err != nil && err != io.EOF) {
		t.Fatalf("read at the end: size=%d n=%d err=%v", size, n, err)
	}
	if !chunkstore.IsZero(got[:4096]) || !bytes.Equal(got[4096:], tail) {
		t.Fatal("the end of the file reads wrong")
	}
	grew := heapInuse() - before
	t.Logf("heap growth for the 1 TiB sparse file: %d KiB", grew>>10)
	if grew > 16<<20 {
		t.Errorf("heap grew by %d MiB for a 1 TiB sparse file", grew>>20)
	}
}

// A chunk whose bytes are all zeros is committed as a hole: nothing is
// hashed or stored, adjacent holes merge, and the file reads the same.
func TestZeroChunksBecomeHoles(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "z")
	data := make([]byte, 5*cs+100)
	copy(data[2*cs:], pattern(cs, 3)) // chunk 2 has data; 0, 1, 3, 4 and the tail are zeros
	writeAt(t, h, data, 0)
	must(t, h.Release(ctx))
	m, err := s.Manifest(ctx, "z")
	must(t, err)
	want := chunkstore.Manifest{{Hash: chunkstore.HoleHash, Size: 2 * cs}, {Hash: chunkstore.Sum(data[2*cs : 3*cs]), Size: cs}, {Hash: chunkstore.HoleHash, Size: 2*cs + 100}}
	if !slices.Equal(m, want) {
		t.Fatalf("manifest = %v, want %v", m, want)
	}
	if !bytes.Equal(readFile(t, s, "z"), data) {
		t.Fatal("content differs")
	}
	// Overwriting the data chunk with zeros turns the file into one hole
	// and drops the chunk's reference.
	h = openAt(t, s, "z")
	writeAt(t, h, make([]byte, cs), 2*cs)
	must(t, h.Release(ctx))
	m, err = s.Manifest(ctx, "z")
	must(t, err)
	if want := (chunkstore.Manifest{{Hash: chunkstore.HoleHash, Size: 5*cs + 100}}); !slices.Equal(m, want) {
		t.Fatalf("manifest = %v, want %v", m, want)
	}
	if st, err := s.Chunks().Stats(ctx, s.rq); err != nil || st.Unreferenced != 1 {
		t.Fatalf("chunk stats = %+v, %v; want the old chunk unreferenced", st, err)
	}
}

func openAt(t testing.TB, s *Store, path string) *Handle {
	t.Helper()
	h, err := s.OpenHandle(ctx, mustResolve(t, s, path))
	must(t, err)
	return h
}

// Shrinking cuts the committed content and drops chunks in flight past the
// new end; growing again reads zeros there, never the old bytes.
func TestShrinkThenGrowReadsZeros(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "f")
	data := pattern(4*cs, 4)
	writeAt(t, h, data, 0)
	must(t, h.Flush(ctx))
	// Full chunks rewritten go into flight; the truncate lands while they
	// may still be there.
	writeAt(t, h, pattern(2*cs, 5), 2*cs)
	must(t, h.Truncate(ctx, cs+cs/2))
	must(t, h.Truncate(ctx, 4*cs))
	want := append(append([]byte(nil), data[:cs+cs/2]...), make([]byte, 4*cs-(cs+cs/2))...)
	got := make([]byte, 4*cs)
	if n, err := h.ReadAt(ctx, got, 0); n != len(got) || err != nil || !bytes.Equal(got, want) {
		t.Fatalf("through the handle: n=%d err=%v equal=%v", n, err, bytes.Equal(got, want))
	}
	released(t, s, h, "f", want)
}

// Found by the fsx run (helper G1): a whole chunk rewritten while its
// previous image was still being stored left that store running after the
// commit released the stage: a nil stage panicked the daemon, or "stage
// released" poisoned the file for good.
func TestRewriteWhileChunkIsStored(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "f")
	a, b := pattern(cs, 1), pattern(cs, 2)
	for range 300 {
		writeAt(t, h, a, 0)
		writeAt(t, h, b, 0)
		must(t, h.Flush(ctx))
	}
	released(t, s, h, "f", b)
}

// Found by the fsx run (helper G1): GetAttr read the node, then took the
// open file's size only if it was still dirty; a commit in between gave
// the size from before a finished write, and the kernel shrank the file.
func TestGetAttrDuringCommitKeepsSize(t *testing.T) {
	s := newStore(t)
	h1 := createFile(t, s, "f")
	h2 := openAt(t, s, "f")
	var size int64
	for i := range 1000 {
		size += 100
		writeAt(t, h1, []byte{1}, size-1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); must(t, h2.Flush(ctx)) }()
		a, err := s.GetAttr(ctx, h1.Ino())
		must(t, err)
		wg.Wait()
		if a.Size != size {
			t.Fatalf("iteration %d: GetAttr size %d after a write that made it %d", i, a.Size, size)
		}
	}
}

// A chunk image in flight past a shrink's new end is superseded: when the
// file grows again it reads zeros there, before and after the store ends.
func TestShrinkDropsChunksInFlight(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "f")
	// Hold every store slot, so the write's full chunks stay in flight.
	for range cap(s.hashSem) {
		s.hashSem <- struct{}{}
	}
	wrote := make(chan error, 1)
	go func() { _, err := h.WriteAt(ctx, pattern(2*cs, 6), 0); wrote <- err }()
	f := h.f
	testutil.WaitFor(t, "two chunks in flight", 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.flights) == 2
	})
	f.mu.Lock()
	must(t, f.resize(ctx, 100))
	must(t, f.resize(ctx, 2*cs))
	got := make([]byte, 2*cs)
	_, err := f.readAt(ctx, got, 0)
	f.mu.Unlock()
	must(t, err)
	want := append(pattern(2*cs, 6)[:100], make([]byte, 2*cs-100)...)
	if !bytes.Equal(got, want) {
		t.Fatal("after shrink and grow, chunks in flight still read")
	}
	for range cap(s.hashSem) {
		<-s.hashSem
	}
	must(t, <-wrote)
	released(t, s, h, "f", want) // the stores in flight came back at commit
}

// WriteFile (the API's write) stores all-zero chunks as holes too.
func TestWriteFileZerosAreHoles(t *testing.T) {
	s := newStore(t)
	data := make([]byte, 3*cs+5)
	data[cs] = 1
	writeFile(t, s, "f", data)
	m, err := s.Manifest(ctx, "f")
	must(t, err)
	if len(m) != 3 || !m[0].IsHole() || m[1].IsHole() || !m[2].IsHole() || m[2].Size != cs+5 {
		t.Fatalf("manifest = %v", m)
	}
	if !bytes.Equal(readFile(t, s, "f"), data) {
		t.Fatal("content differs")
	}
}

// Seek finds data and holes by chunk, through written, stored and
// committed chunks, so sparse-aware copies skip the holes.
func TestSeekDataAndHoles(t *testing.T) {
	s := newStore(t)
	h := createFile(t, s, "f")
	// Committed: data in chunk 1, holes elsewhere, 10 chunks and a tail.
	writeAt(t, h, pattern(100, 1), cs+5)
	must(t, h.Truncate(ctx, 10*cs+7))
	// Uncommitted: a dirty image in chunk 6, and zeros written over chunk 1.
	writeAt(t, h, []byte("x"), 6*cs+9)
	for _, tc := range []struct {
		off  int64
		hole bool
		want int64
		err  error
	}{
		{0, false, cs, nil},
		{cs + 3, false, cs + 3, nil},
		{cs + 3, true, 2 * cs, nil},
		{2 * cs, false, 6 * cs, nil},
		{6*cs + 10, true, 7 * cs, nil},
		{7 * cs, false, 0, ErrPastEnd},
		{9 * cs, true, 9 * cs, nil},
		{10 * cs, true, 10 * cs, nil},
		{10*cs + 7, true, 0, ErrPastEnd},
		{-1, false, 0, ErrInvalid},
	} {
		got, err := h.Seek(ctx, tc.off, tc.hole)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Seek(%d, hole %v) = %d, %v; want %d, %v", tc.off, tc.hole, got, err, tc.want, tc.err)
		}
	}
	// Zeros over the only committed data make chunk 1 a hole at once.
	writeAt(t, h, make([]byte, cs), cs)
	must(t, h.Flush(ctx))
	if got, err := h.Seek(ctx, 0, false); got != 6*cs || err != nil {
		t.Errorf("after zeroing chunk 1: SEEK_DATA from 0 = %d, %v; want %d", got, err, 6*cs)
	}
	// A truncate cuts committed data: growing again finds no data there.
	must(t, h.Truncate(ctx, 6*cs))
	must(t, h.Truncate(ctx, 8*cs))
	if got, err := h.Seek(ctx, 0, false); !errors.Is(err, ErrPastEnd) {
		t.Errorf("after cutting the data: SEEK_DATA = %d, %v; want ENXIO", got, err)
	}
	must(t, h.Release(ctx))
}
