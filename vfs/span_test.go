package vfs

import (
	"bytes"
	"testing"
)

// ReadSpan gives where committed bytes of a full chunk lie in its chunk
// file, and nothing else: not bytes written and not committed, not a
// span across two chunks, not a hole, not a chunk kept in a pack.
func TestReadSpanOnlyForCommittedChunkFiles(t *testing.T) {
	s := newStore(t)
	data := pattern(2*cs, 3)
	writeFile(t, s, "f", data)
	a, err := s.Lookup(ctx, RootIno, "f")
	must(t, err)
	h, err := s.OpenHandle(ctx, a.Ino)
	must(t, err)
	defer h.Release(ctx)

	span := func(off int64, n int) ([]byte, bool) {
		t.Helper()
		sp, ok := h.ReadSpan(ctx, off, n)
		if !ok {
			return nil, false
		}
		defer sp.Release()
		got := make([]byte, sp.N)
		if _, err := sp.File.ReadAt(got, sp.Off); err != nil {
			t.Fatalf("span at %d: %v", off, err)
		}
		return got, true
	}
	want := func(off int64, n int, ok bool, of []byte) {
		t.Helper()
		got, gotOK := span(off, n)
		if gotOK != ok {
			t.Fatalf("span of %d bytes at %d: ok = %v, want %v", n, off, gotOK, ok)
		}
		if ok && !bytes.Equal(got, of[off:off+int64(len(got))]) {
			t.Fatalf("span of %d bytes at %d holds other bytes", n, off)
		}
	}
	want(0, 128<<10, true, data)
	want(cs+100, 1000, true, data)
	want(cs-10, 128<<10, false, data) // two chunks
	if got, ok := span(2*cs-64<<10, 128<<10); !ok || len(got) != 64<<10 {
		t.Fatalf("span at the end of the file: %d bytes, ok %v; want the 64 KiB before the end", len(got), ok)
	}
	want(2*cs, 128<<10, false, data) // past the end

	// Written and not committed: the image has the bytes, the span goes.
	fresh := bytes.Repeat([]byte{0x5a}, 4096)
	if _, err := h.WriteAt(ctx, fresh, cs+8192); err != nil {
		t.Fatal(err)
	}
	want(cs, 128<<10, false, data)
	want(0, 128<<10, true, data) // the other chunk is as committed
	must(t, h.Flush(ctx))
	copy(data[cs+8192:], fresh)
	want(cs, 128<<10, true, data)

	// A hole, and the short chunk a pack keeps.
	must(t, h.Truncate(ctx, 4*cs))
	want(3*cs, 128<<10, false, data)
	writeFile(t, s, "small", pattern(200<<10, 4))
	b, err := s.Lookup(ctx, RootIno, "small")
	must(t, err)
	hs, err := s.OpenHandle(ctx, b.Ino)
	must(t, err)
	defer hs.Release(ctx)
	if sp, ok := hs.ReadSpan(ctx, 0, 128<<10); ok {
		sp.Release()
		t.Fatal("a span of a chunk kept in a pack")
	}
}
