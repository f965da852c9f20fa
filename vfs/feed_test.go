package vfs

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/wsync/wsync/watermark"
)

func TestFeedCoalescesRewrites(t *testing.T) {
	s := newStore(t)
	for i := range 5 {
		writeFile(t, s, "f", []byte(fmt.Sprint("version ", i)))
	}
	es := feed(t, s, watermark.Cursor{}, Ignore{})
	if len(es) != 1 || es[0].Path != "f" || es[0].Rev != s.CurrentRev() {
		t.Fatalf("five rewrites gave %v, want one entry at the last rev", paths(es))
	}
}

func TestFeedDeleteThenRecreateIsOneLiveEntry(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "f", []byte("a"))
	must(t, s.RemovePath(ctx, "f", false))
	writeFile(t, s, "f", []byte("b"))
	es := feed(t, s, watermark.Cursor{}, Ignore{})
	if got := paths(es); !slices.Equal(got, []string{"file:f"}) {
		t.Errorf("feed = %v, want one live file entry", got)
	}
}

func TestFeedOrderAndTombstones(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "b", []byte("b"))
	writeFile(t, s, "a", []byte("a"))
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	must(t, s.RemovePath(ctx, "b", false))
	es := feed(t, s, watermark.Cursor{}, Ignore{})
	if got := paths(es); !slices.Equal(got, []string{"file:a", "dir:d", "delete:b"}) {
		t.Errorf("feed = %v", got)
	}
	for i := 1; i < len(es); i++ {
		if !watermark.Within(es[i-1].Rev, es[i-1].Path).Less(watermark.Within(es[i].Rev, es[i].Path)) {
			t.Errorf("entries out of (rev, path) order at %d", i)
		}
	}
}

func TestFeedThroughBoundsAndResume(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "1", nil)
	mid := s.CurrentRev()
	writeFile(t, s, "2", nil)
	var got []string
	for e, err := range s.Changes(ctx, watermark.Cursor{}, watermark.At(mid), Ignore{}) {
		must(t, err)
		got = append(got, e.Path)
	}
	if !slices.Equal(got, []string{"1"}) {
		t.Errorf("through %d = %v", mid, got)
	}
	if got := paths(feed(t, s, watermark.At(mid), Ignore{})); !slices.Equal(got, []string{"file:2"}) {
		t.Errorf("after %d = %v", mid, got)
	}
}

func TestFeedResumesWithinOneRev(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	for i := range 600 {
		writeFile(t, s, fmt.Sprintf("d/f%04d", i), []byte{byte(i)})
	}
	start := s.CurrentRev()
	must(t, s.RenamePath(ctx, "d", "e"))
	es := feed(t, s, watermark.At(start), Ignore{})
	// 601 new paths and 601 tombstones, all at one rev.
	if len(es) != 1202 {
		t.Fatalf("rename feed has %d entries, want 1202", len(es))
	}
	for _, e := range es {
		if e.Rev != start+1 {
			t.Fatalf("entry %s at rev %d, want every entry at rev %d", e.Path, e.Rev, start+1)
		}
	}
	// Resume from the middle of the rev.
	cut := es[700]
	rest := feed(t, s, watermark.Within(cut.Rev, cut.Path), Ignore{})
	if len(rest) != len(es)-701 || rest[0].Path != es[701].Path {
		t.Errorf("resume after %q gave %d entries starting %q, want %d starting %q", cut.Path, len(rest), rest[0].Path, len(es)-701, es[701].Path)
	}
}

func TestFeedIgnoreFiltersWholeSegments(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "node_modules/x", 0o755, true))
	writeFile(t, s, "node_modules/x/index.js", nil)
	must(t, s.MkdirPath(ctx, "src/node_modules", 0o755, true))
	writeFile(t, s, "node_modules2", nil)
	writeFile(t, s, "src/a.go", nil)
	got := paths(feed(t, s, watermark.Cursor{}, NewIgnore(nil)))
	want := []string{"dir:src", "file:node_modules2", "file:src/a.go"}
	if !slices.Equal(got, want) {
		t.Errorf("default ignore feed = %v, want %v", got, want)
	}
	if got := feed(t, s, watermark.Cursor{}, NewIgnore([]string{})); len(got) != 7 {
		t.Errorf("empty ignore list gave %d entries, want all 7", len(got))
	}
	if got := paths(feed(t, s, watermark.Cursor{}, NewIgnore([]string{"src"}))); slices.Contains(got, "file:src/a.go") || !slices.Contains(got, "file:node_modules/x/index.js") {
		t.Errorf("a caller's list must replace the default: %v", got)
	}
}

func TestFeedIgnoredEntriesStillAdvance(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "node_modules", 0o755, false))
	for i := range 300 {
		writeFile(t, s, fmt.Sprintf("node_modules/%03d", i), nil)
	}
	writeFile(t, s, "last", nil)
	got := paths(feed(t, s, watermark.Cursor{}, NewIgnore(nil)))
	if !slices.Equal(got, []string{"file:last"}) {
		t.Errorf("feed past 301 ignored rows = %v", got)
	}
}

func TestFeedEmitsEveryHardlinkName(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", []byte("x"))
	must(t, s.LinkPath(ctx, "a", "b"))
	start := s.CurrentRev()
	ino, _ := s.ResolvePath(ctx, "a")
	h, err := s.OpenHandle(ctx, ino)
	must(t, err)
	_, err = h.WriteAt(ctx, []byte("y"), 0)
	must(t, err)
	must(t, h.Release(ctx))
	if got := paths(feed(t, s, watermark.At(start), Ignore{})); !slices.Equal(got, []string{"file:a", "file:b"}) {
		t.Errorf("write through one name = %v, want an entry per name", got)
	}
	start = s.CurrentRev()
	must(t, s.RenamePath(ctx, "b", "c"))
	if got := paths(feed(t, s, watermark.At(start), Ignore{})); !slices.Equal(got, []string{"delete:b", "file:c"}) {
		t.Errorf("renamed hardlink = %v, want the new name and a tombstone", got)
	}
}

func TestFeedDropsPathRewrittenWhileStreaming(t *testing.T) {
	s := newStore(t)
	for i := range 300 {
		writeFile(t, s, fmt.Sprintf("f%03d", i), nil)
	}
	through := watermark.At(s.CurrentRev())
	var got []ChangeEntry
	for e, err := range s.Changes(ctx, watermark.Cursor{}, through, Ignore{}) {
		must(t, err)
		got = append(got, e)
		if len(got) == 1 {
			// f299 is on the second page: rewrite it before that page is read.
			writeFile(t, s, "f299", []byte("new"))
		}
	}
	for _, e := range got {
		if e.Path == "f299" {
			t.Fatalf("f299 delivered at rev %d although rewritten past through", e.Rev)
		}
	}
	again := feed(t, s, through, Ignore{})
	if len(again) != 1 || again[0].Path != "f299" || again[0].Size != 3 {
		t.Errorf("redelivery under a later cursor = %v", paths(again))
	}
}

func TestDirectoryRenameOfTenThousandIsOneRev(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 files")
	}
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "big", 0o755, false))
	src := s.Chunks().NewStage()
	_ = src
	dir, _ := s.ResolvePath(ctx, "big")
	for i := range 10000 {
		_, err := s.Create(ctx, dir, fmt.Sprintf("f%05d", i), NewAttr{Mode: 0o644})
		must(t, err)
	}
	src.Release()
	start := s.CurrentRev()
	must(t, s.RenamePath(ctx, "big", "moved"))
	if s.CurrentRev() != start+1 {
		t.Fatalf("rename of 10,000 entries took %d revs", s.CurrentRev()-start)
	}
	es := feed(t, s, watermark.At(start), Ignore{})
	if len(es) != 20002 {
		t.Fatalf("rename feed = %d entries, want 20002", len(es))
	}
	cut := es[12345]
	rest := feed(t, s, watermark.Within(cut.Rev, cut.Path), Ignore{})
	if len(rest) != 20002-12346 {
		t.Errorf("mid-rev resume gave %d entries, want %d", len(rest), 20002-12346)
	}
	// Tombstones for every old path.
	dels := 0
	for _, e := range es {
		if e.Kind == EntryDelete {
			dels++
		}
	}
	if dels != 10001 {
		t.Errorf("tombstones = %d, want 10001", dels)
	}
}

func TestRmRecordsOneTombstonePerPath(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "a/b/c", 0o755, true))
	writeFile(t, s, "a/b/c/f", nil)
	writeFile(t, s, "a/g", nil)
	start := s.CurrentRev()
	must(t, s.RemovePath(ctx, "a", true))
	got := paths(feed(t, s, watermark.At(start), Ignore{}))
	want := []string{"delete:a", "delete:a/b", "delete:a/b/c", "delete:a/b/c/f", "delete:a/g"}
	if !slices.Equal(got, want) {
		t.Errorf("rm -r feed = %v, want %v", got, want)
	}
	if s.CurrentRev() != start+1 {
		t.Errorf("rm -r took %d revs", s.CurrentRev()-start)
	}
	if err := s.RemovePath(ctx, "nope", true); !errors.Is(err, ErrNotExist) {
		t.Errorf("rm of a missing path: %v", err)
	}
}

// TestFeedLooksUpNamesPerDirectory: the feed materialises a page's paths
// with one query per directory (and one per directory it has not resolved),
// not one per path, and gives every path what resolving it alone gives: a
// file's chunks, a symlink's target, a directory, a delete for a path
// removed, for a special file (local) and for a path below a file.
func TestFeedLooksUpNamesPerDirectory(t *testing.T) {
	s := newStore(t)
	for _, d := range []string{"a", "b", "c"} {
		must(t, s.MkdirPath(ctx, d, 0o755, false))
		for i := range 200 {
			writeFile(t, s, fmt.Sprintf("%s/f%03d", d, i), pattern(100+i, byte(i)))
		}
	}
	must(t, s.SymlinkPath(ctx, "a/f001", "b/link"))
	c, err := s.Stat(ctx, "c")
	must(t, err)
	_, err = s.Mknod(ctx, c.Ino, "fifo", KindFifo, 0, NewAttr{Mode: 0o644})
	must(t, err)
	must(t, s.RemovePath(ctx, "a/f007", false))
	// a/f009 is a file: a change row below it reads as a delete; so does
	// one naming the fifo (a special file makes no change row of its own).
	_, err = s.w.ExecContext(ctx, `INSERT INTO changes(path, rev) VALUES ('a/f009/x', ?), ('c/fifo', ?)`, s.CurrentRev(), s.CurrentRev())
	must(t, err)

	var got []ChangeEntry
	stmts := countStatementsOn(t, s.rc, func() { got = feed(t, s, watermark.Cursor{}, Ignore{}) })
	if len(got) != 606 {
		t.Fatalf("feed has %d entries", len(got))
	}
	pages := (len(got) + feedPage - 1) / feedPage
	// Per page: the change rows, at most three directories and three IN lists.
	if len(stmts) > pages*7 {
		t.Errorf("a feed of %d entries (%d pages) ran %d statements, want at most %d", len(got), pages, len(stmts), pages*7)
	}
	var ps []string
	for _, e := range got {
		ps = append(ps, e.Path)
	}
	want, err := s.EntriesAt(ctx, ps)
	must(t, err)
	for i := range got {
		w := want[i]
		w.Rev = got[i].Rev
		if fmt.Sprint(got[i]) != fmt.Sprint(w) {
			t.Errorf("feed entry %d:\n got  %+v\n want %+v", i, got[i], w)
		}
	}
	byPath := map[string]ChangeEntry{}
	for _, e := range got {
		byPath[e.Path] = e
	}
	for p, kind := range map[string]EntryKind{"a/f007": EntryDelete, "c/fifo": EntryDelete, "a/f009/x": EntryDelete, "b/link": EntrySymlink, "c": EntryDir, "c/f199": EntryFile} {
		if byPath[p].Kind != kind {
			t.Errorf("%s: kind %v, want %v", p, byPath[p].Kind, kind)
		}
	}
	if byPath["b/link"].Target != "a/f001" || byPath["c/f199"].Size != 299 {
		t.Errorf("link %+v, file %+v", byPath["b/link"], byPath["c/f199"])
	}
}
