package vfs

import (
	"testing"
)

// TestReadDirAttrs: a page of entries with their attributes, equal to what
// Lookup answers; AttrAsOf gives them (with an open handle's buffered
// writes) while nothing was written since the page was read, and refuses
// once anything was.
func TestReadDirAttrs(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", []byte("one"))
	writeFile(t, s, "b", []byte("three"))
	must(t, s.MkdirPath(ctx, "c", 0o755, false))

	page, gen, err := s.ReadDirAttrs(ctx, RootIno, "", 10)
	must(t, err)
	if len(page) != 3 || page[0].Name != "a" || page[1].Name != "b" || page[2].Name != "c" {
		t.Fatalf("page: %+v", page)
	}
	for _, e := range page {
		want, err := s.Lookup(ctx, RootIno, e.Name)
		must(t, err)
		got, ok := s.AttrAsOf(e.Attr, gen)
		if !ok || got != want {
			t.Fatalf("%s: AttrAsOf %+v %v, Lookup %+v", e.Name, got, ok, want)
		}
	}

	// An open handle's buffered write shows, as it does in a Lookup.
	h, err := s.OpenHandle(ctx, page[0].Attr.Ino)
	must(t, err)
	defer h.Release(ctx)
	if _, err := h.WriteAt(ctx, []byte("longer than before"), 0); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.AttrAsOf(page[0].Attr, gen); !ok || got.Size != int64(len("longer than before")) {
		t.Fatalf("AttrAsOf with a buffered write: %+v %v", got, ok)
	}

	// Any write to the store since the page: not as of gen any more.
	writeFile(t, s, "b", []byte("changed, and longer"))
	if _, ok := s.AttrAsOf(page[1].Attr, gen); ok {
		t.Fatal("AttrAsOf answered after a write since the page")
	}
	// Nor an unlink.
	page, gen, err = s.ReadDirAttrs(ctx, RootIno, "", 10)
	must(t, err)
	must(t, s.Unlink(ctx, RootIno, "b"))
	if _, ok := s.AttrAsOf(page[1].Attr, gen); ok {
		t.Fatal("AttrAsOf answered after an unlink since the page")
	}

	// Pages and the refusals of ReadDir.
	page, _, err = s.ReadDirAttrs(ctx, RootIno, "a", 1)
	must(t, err)
	if len(page) != 1 || page[0].Name != "c" {
		t.Fatalf("the page after a: %+v", page)
	}
	if _, _, err := s.ReadDirAttrs(ctx, page[0].Attr.Ino+1000, "", 10); err == nil {
		t.Fatal("ReadDirAttrs of a missing directory")
	}
	a, err := s.Lookup(ctx, RootIno, "a")
	must(t, err)
	if _, _, err := s.ReadDirAttrs(ctx, a.Ino, "", 10); err != ErrNotDir {
		t.Fatalf("ReadDirAttrs of a file: %v", err)
	}
}

// TestOpenHandleAttr: the attributes an open returns are GetAttr's once
// the handle exists, buffered writes of other handles included; a
// directory or a missing node opens no handle.
func TestOpenHandleAttr(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "f", []byte("content"))
	a, err := s.Lookup(ctx, RootIno, "f")
	must(t, err)
	w, err := s.OpenHandle(ctx, a.Ino)
	must(t, err)
	defer w.Release(ctx)
	if _, err := w.WriteAt(ctx, []byte("a longer content than before"), 0); err != nil {
		t.Fatal(err)
	}
	h, got, err := s.OpenHandleAttr(ctx, a.Ino)
	must(t, err)
	defer h.Release(ctx)
	want, err := s.GetAttr(ctx, a.Ino)
	must(t, err)
	if got != want || got.Size != int64(len("a longer content than before")) {
		t.Fatalf("OpenHandleAttr %+v, GetAttr %+v", got, want)
	}
	if _, _, err := s.OpenHandleAttr(ctx, RootIno); err != ErrIsDir {
		t.Fatalf("open of a directory: %v", err)
	}
	if _, _, err := s.OpenHandleAttr(ctx, a.Ino+1000); err == nil {
		t.Fatal("open of a missing node")
	}
}
