package vfs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// stageEntry builds a file entry for data, staging its chunks in st.
func stageEntry(t testing.TB, st *chunkstore.Stage, path string, data []byte) ChangeEntry {
	t.Helper()
	e := ChangeEntry{Kind: EntryFile, Rev: 1, Path: path, Mode: 0o644, Mtime: 1e18, Size: int64(len(data))}
	for off := 0; off < len(data); off += cs {
		ref, err := st.PutHashed(ctx, data[off:min(off+cs, len(data))])
		must(t, err)
		e.Chunks = append(e.Chunks, ref)
	}
	return e
}

func apply(t testing.TB, s *Store, st *chunkstore.Stage, es ...ChangeEntry) ApplyResult {
	t.Helper()
	res, err := s.Apply(ctx, es, ApplyOptions{Source: Upstream, Stage: st})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestApplyCreatesMissingParents(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	defer st.Release()
	apply(t, s, st, stageEntry(t, st, "a/b/c/f.txt", []byte("hi")))
	if got := string(readFile(t, s, "a/b/c/f.txt")); got != "hi" {
		t.Errorf("content = %q", got)
	}
	a, _ := s.Stat(ctx, "a/b")
	if a.Kind != KindDir || a.Uid != 1000 {
		t.Errorf("created parent = %+v, want a dir owned by the store owner", a)
	}
}

func TestApplyReplacesSymlinkedParent(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "real", 0o755, false))
	must(t, s.SymlinkPath(ctx, "real", "link"))
	st := s.Chunks().NewStage()
	defer st.Release()
	apply(t, s, st, stageEntry(t, st, "link/f", []byte("x")))
	if a, _ := s.Stat(ctx, "link"); a.Kind != KindDir {
		t.Errorf("link is %v after an entry below it, want a real directory", a.Kind)
	}
	if es, _ := s.List(ctx, "real"); len(es) != 0 {
		t.Errorf("apply wrote through a symlink into real/: %v", es)
	}
}

func TestApplyRejectsBadChunkWindowsAndKeepsFile(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "f", []byte("original"))
	st := s.Chunks().NewStage()
	defer st.Release()
	good := stageEntry(t, st, "f", pattern(2*cs, 9))
	ragged := good
	ragged.Chunks = chunkstore.Manifest{{Hash: good.Chunks[0].Hash, Size: 100}, good.Chunks[1]}
	ragged.Size = ragged.Chunks.Size()
	oversized := good
	oversized.Chunks = chunkstore.Manifest{{Hash: good.Chunks[0].Hash, Size: cs + 1}}
	oversized.Size = cs + 1
	wrongSize := good
	wrongSize.Size++
	for name, e := range map[string]ChangeEntry{"ragged": ragged, "oversized": oversized, "wrong size": wrongSize} {
		_, err := s.Apply(ctx, []ChangeEntry{e}, ApplyOptions{Source: Upstream, Stage: st})
		var ee *EntryError
		if !errors.As(err, &ee) || ee.Path != "f" || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want an EntryError naming f", name, err)
		}
		if got := string(readFile(t, s, "f")); got != "original" {
			t.Errorf("%s: file changed to %q", name, got)
		}
	}
}

func TestApplyTypeChangeReplaces(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	defer st.Release()
	// A deep local subtree where upstream has a file.
	must(t, s.MkdirPath(ctx, "p/q/r", 0o755, true))
	writeFile(t, s, "p/q/r/deep", []byte("local"))
	apply(t, s, st, stageEntry(t, st, "p", []byte("now a file")))
	if got := string(readFile(t, s, "p")); got != "now a file" {
		t.Fatalf("p = %q", got)
	}
	// File to directory.
	apply(t, s, st, ChangeEntry{Kind: EntryDir, Rev: 2, Path: "p", Mode: 0o700})
	if a, _ := s.Stat(ctx, "p"); a.Kind != KindDir || a.Mode != 0o700 {
		t.Fatalf("p = %+v, want dir 0700", a)
	}
	// Directory to symlink, and symlink to file.
	apply(t, s, st, ChangeEntry{Kind: EntrySymlink, Rev: 3, Path: "p", Target: "elsewhere"})
	if tg, err := s.ReadLinkPath(ctx, "p"); err != nil || tg != "elsewhere" {
		t.Fatalf("p target = %q, %v", tg, err)
	}
	apply(t, s, st, stageEntry(t, st, "p", []byte("file again")))
	if got := string(readFile(t, s, "p")); got != "file again" {
		t.Fatalf("p = %q", got)
	}
	// Nothing is left of the replaced subtree.
	if _, err := s.Stat(ctx, "p/q"); err == nil {
		t.Error("replaced subtree survives")
	}
}

func TestApplyKeepsHardlinkSiblings(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", []byte("shared"))
	must(t, s.LinkPath(ctx, "a", "b"))
	st := s.Chunks().NewStage()
	defer st.Release()
	apply(t, s, st, stageEntry(t, st, "a", []byte("new for a")))
	if got := string(readFile(t, s, "b")); got != "shared" {
		t.Errorf("sibling b = %q, want its own content kept", got)
	}
	if got := string(readFile(t, s, "a")); got != "new for a" {
		t.Errorf("a = %q", got)
	}
}

func TestApplyDeletes(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d/e", 0o755, true))
	writeFile(t, s, "d/e/f", nil)
	res := apply(t, s, nil,
		ChangeEntry{Kind: EntryDelete, Rev: 5, Path: "d"},
		ChangeEntry{Kind: EntryDelete, Rev: 5, Path: "never/existed"})
	if res.Applied != 1 || res.Skipped != 1 {
		t.Errorf("result = %+v", res)
	}
	if _, err := s.Stat(ctx, "d"); !errors.Is(err, ErrNotExist) {
		t.Errorf("d after delete: %v", err)
	}
	if _, err := s.Stat(ctx, "never"); !errors.Is(err, ErrNotExist) {
		t.Errorf("a delete created parents: %v", err)
	}
}

func TestReapplyIsNoop(t *testing.T) {
	a, b := newStore(t), newStore(t)
	must(t, a.MkdirPath(ctx, "x/y", 0o755, true))
	writeFile(t, a, "x/y/f", pattern(cs+5, 1))
	must(t, a.SymlinkPath(ctx, "f", "x/l"))
	syncInto(t, a, b, watermark.Cursor{}, Ignore{})
	rev := b.CurrentRev()
	syncInto(t, a, b, watermark.Cursor{}, Ignore{})
	if b.CurrentRev() != rev {
		t.Errorf("re-applying the same feed stamped %d new revs", b.CurrentRev()-rev)
	}
	if d := diffTrees(tree(t, a), tree(t, b)); d != "" {
		t.Errorf("trees differ:\n%s", d)
	}
}

func TestBatchWithOneBadEntryAppliesNothing(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	defer st.Release()
	good := stageEntry(t, st, "good", []byte("g"))
	var missing chunkstore.Hash
	missing[0] = 1
	bad := ChangeEntry{Kind: EntryFile, Rev: 2, Path: "bad", Mode: 0o644, Size: 10, Chunks: chunkstore.Manifest{{Hash: missing, Size: 10}}}
	rev := s.CurrentRev()
	_, err := s.Apply(ctx, []ChangeEntry{good, {Kind: EntryDir, Path: "d", Mode: 0o755}, bad}, ApplyOptions{Source: Upstream, Stage: st})
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Index != 2 || !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Fatalf("err = %v, want EntryError at index 2 wrapping ErrUnknownHash", err)
	}
	if s.CurrentRev() != rev {
		t.Errorf("failed batch moved rev %d -> %d", rev, s.CurrentRev())
	}
	if _, err := s.Stat(ctx, "good"); !errors.Is(err, ErrNotExist) {
		t.Errorf("entry before the failure survived the rollback: %v", err)
	}
	// A path escaping the root is refused before anything runs.
	_, err = s.Apply(ctx, []ChangeEntry{{Kind: EntryDir, Path: "../etc", Mode: 0o755}}, ApplyOptions{Source: Upstream})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("'..' entry: err = %v", err)
	}
}

func TestApplyWritesWatermarksInSameTransaction(t *testing.T) {
	s := newStore(t)
	set := watermark.Set{AppliedPush: watermark.At(9), Fetch: watermark.Within(3, "x")}
	_, err := s.Apply(ctx, []ChangeEntry{{Kind: EntryDir, Path: "d", Mode: 0o755}}, ApplyOptions{Source: Upstream, Peer: "server", Watermarks: &set})
	must(t, err)
	got, err := s.Watermarks(ctx, "server")
	must(t, err)
	if got != set {
		t.Errorf("watermarks = %+v, want %+v", got, set)
	}
	// A failed batch leaves them alone.
	set2 := watermark.Set{AppliedPush: watermark.At(99)}
	_, err = s.Apply(ctx, []ChangeEntry{{Kind: EntryFile, Path: "f", Size: 1, Chunks: chunkstore.Manifest{{Hash: chunkstore.Sum([]byte("x")), Size: 1}}}}, ApplyOptions{Source: Upstream, Peer: "server", Watermarks: &set2})
	if err == nil {
		t.Fatal("batch with an unknown chunk applied")
	}
	if got, _ := s.Watermarks(ctx, "server"); got != set {
		t.Errorf("failed batch changed watermarks to %+v", got)
	}
}

func TestWatermarksPersistAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir+"/s.db")
	set := watermark.Set{Push: watermark.Within(4, "a/b"), Fetch: watermark.At(7), AppliedPush: watermark.At(2)}
	must(t, s.SetWatermarks(ctx, "peer", set))
	must(t, s.Close())
	s2 := openStore(t, dir+"/s.db")
	got, err := s2.Watermarks(ctx, "peer")
	must(t, err)
	if got != set {
		t.Errorf("after reopen = %+v, want %+v", got, set)
	}
	if z, _ := s2.Watermarks(ctx, "other"); z != (watermark.Set{}) {
		t.Errorf("unknown peer = %+v", z)
	}
}

func TestChunksDedupAndGC(t *testing.T) {
	s := newStore(t)
	data := pattern(2*cs, 7)
	writeFile(t, s, "a", data)
	writeFile(t, s, "b", data)
	st1, err := s.Chunks().Stats(ctx, s.r)
	must(t, err)
	if st1.Chunks != 2 {
		t.Errorf("two paths with the same 2 chunks stored %d chunks", st1.Chunks)
	}
	writeFile(t, s, "a", []byte("small"))
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Chunks().Stats(ctx, s.r); st.Chunks != 3 {
		t.Errorf("after overwriting a (b still shares): %d chunks, want 3", st.Chunks)
	}
	must(t, s.RemovePath(ctx, "b", false))
	gc, err := s.GC(ctx)
	must(t, err)
	if st, _ := s.Chunks().Stats(ctx, s.r); st.Chunks != 1 || gc.Rows != 2 {
		t.Errorf("after deleting b: %d chunks (gc removed %d), want 1", st.Chunks, gc.Rows)
	}
	if !bytes.Equal(readFile(t, s, "a"), []byte("small")) {
		t.Error("surviving file damaged by gc")
	}
}

// TestApplyBatchSeesItsOwnChanges: entries later in a batch see what
// earlier ones did to the same names (the batch's presence probe is kept
// current), including a path that appears twice and a name freed by a
// delete.
func TestApplyBatchSeesItsOwnChanges(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	writeFile(t, s, "d/old", []byte("old"))
	st := s.Chunks().NewStage()
	defer st.Release()
	es := []ChangeEntry{
		stageEntry(t, st, "d/a", []byte("one")),
		stageEntry(t, st, "d/a", []byte("two")),
		{Kind: EntryDelete, Rev: 2, Path: "d/old"},
		stageEntry(t, st, "d/old", []byte("new old")),
		{Kind: EntryDir, Rev: 3, Path: "n", Mode: 0o755},
		stageEntry(t, st, "n/f", []byte("f")),
		stageEntry(t, st, "n/f", []byte("f2")),
	}
	apply(t, s, st, es...)
	for p, want := range map[string]string{"d/a": "two", "d/old": "new old", "n/f": "f2"} {
		if got := string(readFile(t, s, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	// And a rename in another transaction leaves nothing stale behind.
	must(t, s.RenamePath(ctx, "d/a", "d/b"))
	apply(t, s, st, stageEntry(t, st, "d/a", []byte("three")))
	if got := string(readFile(t, s, "d/a")); got != "three" {
		t.Errorf("d/a after rename and apply = %q", got)
	}
}
