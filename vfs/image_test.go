package vfs

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// A file written in 128 KiB pieces grows each chunk's image in place, in
// one full chunk's buffer (from the pool, or allocated once when the pool
// is empty): it allocated 1.75 bytes per byte written when each piece
// doubled the image through fresh buffers of 128, 256 and 512 KiB.
func TestImagesGrowInPlace(t *testing.T) {
	s := newStore(t)
	const size = 16 * cs
	data := pattern(size, 7)
	write := func(name string) uint64 {
		a, err := s.Create(ctx, RootIno, name, NewAttr{Mode: 0o644})
		must(t, err)
		h, err := s.OpenHandle(ctx, a.Ino)
		must(t, err)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for off := 0; off < size; off += 128 << 10 {
			if _, err := h.WriteAt(ctx, data[off:off+128<<10], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
		must(t, h.Release(ctx))
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	write("warm") // the store's first file opens its packs and statements
	got := write("f")
	if limit := uint64(size) * 5 / 4; got > limit {
		t.Errorf("writing %d bytes in 128 KiB pieces allocated %d bytes (limit %d)", size, got, limit)
	}
	t.Logf("%d bytes written, %d allocated", size, got)
	back, err := s.ReadFile(ctx, "f")
	must(t, err)
	if !bytes.Equal(back, data) {
		t.Fatal("the file does not read back as written")
	}
}

// An image taken from the pool holds another file's bytes; none of them
// ever shows: not in a gap a later write leaves, not past a truncate that
// grows the file, not after the commit.
func TestPooledImagesNeverShowOldBytes(t *testing.T) {
	s := newStore(t)
	for i := range 4 { // images full of 0xAA go back to the pool
		writeFile(t, s, fmt.Sprint("old", i), bytes.Repeat([]byte{0xaa}, 2*cs))
	}
	a, err := s.Create(ctx, RootIno, "new", NewAttr{Mode: 0o644})
	must(t, err)
	h, err := s.OpenHandle(ctx, a.Ino)
	must(t, err)
	want := make([]byte, 300<<10)
	write := func(p []byte, off int) {
		t.Helper()
		if _, err := h.WriteAt(ctx, p, int64(off)); err != nil {
			t.Fatal(err)
		}
		if end := off + len(p); end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		copy(want[off:], p)
	}
	write(bytes.Repeat([]byte{0x11}, 130<<10), 0)  // an image of 130 KiB: a pooled buffer
	write([]byte{0x22}, 200<<10)                   // grows it in place over a gap
	must(t, h.Truncate(ctx, 300<<10))              // and again by a truncate
	write(bytes.Repeat([]byte{0x33}, 100), cs+100) // a second chunk, its head a gap
	check := func(when string) {
		t.Helper()
		got := make([]byte, len(want))
		n, err := h.ReadAt(ctx, got, 0)
		if err != nil || n != len(want) {
			t.Fatalf("%s: read %d of %d bytes: %v", when, n, len(want), err)
		}
		if i := bytes.IndexByte(got, 0xaa); i >= 0 {
			t.Fatalf("%s: byte %d holds another file's byte", when, i)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the file does not read back as written", when)
		}
	}
	check("before the commit")
	must(t, h.Flush(ctx))
	check("after the commit")
	must(t, h.Release(ctx))
	back, err := s.ReadFile(ctx, "new")
	must(t, err)
	if !bytes.Equal(back, want) {
		t.Fatal("the committed file does not read back as written")
	}
}
