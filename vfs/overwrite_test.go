package vfs

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A write that replaces whole chunks does not read them first: with the
// old chunks' bytes gone from disk, overwriting them whole still works,
// while a write into part of one still needs (and fails to read) the rest.
func TestWholeChunkOverwriteReadsNothing(t *testing.T) {
	s := newStore(t)
	old := pattern(2*cs+cs/2, 1)
	writeFile(t, s, "f", old)
	must(t, s.Sync(ctx))
	a, err := s.Lookup(ctx, RootIno, "f")
	must(t, err)
	// The old bytes are lost (the chunk files and packs emptied).
	err = filepath.WalkDir(s.Path()+".chunks", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			err = os.Truncate(p, 0)
		}
		return err
	})
	must(t, err)

	h, err := s.OpenHandle(ctx, a.Ino)
	must(t, err)
	defer h.Release(ctx)
	if _, err := h.WriteAt(ctx, []byte("x"), cs+10); err == nil {
		t.Fatal("a write into part of a chunk whose bytes are gone succeeded: the test cannot tell a read from none")
	}
	fresh := pattern(2*cs, 2)
	if _, err := h.WriteAt(ctx, fresh, 0); err != nil {
		t.Fatalf("overwrite of two whole chunks: %v", err)
	}
	must(t, h.Flush(ctx))
	got := make([]byte, 2*cs)
	if _, err := h.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fresh) {
		t.Fatal("the overwritten chunks read back wrong")
	}
}
