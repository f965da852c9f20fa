package vfs

import (
	"context"
	"slices"
	"testing"

	"github.com/wsync/wsync/chunkstore"
)

func TestScanTreeIsOneConsistentPass(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "a/b", 0o750, true))
	writeFile(t, s, "a/b/f", []byte("hello"))
	must(t, s.SymlinkPath(ctx, "b/f", "a/l"))
	writeFile(t, s, "top", nil)
	type row struct {
		name string
		kind Kind
		mode uint32
	}
	var got []row
	var parents []Ino
	rev, err := s.ScanTree(ctx, func(r *TreeRow) error {
		got = append(got, row{r.Name, r.Kind, r.Mode})
		parents = append(parents, r.Parent)
		if r.Kind == KindFile && r.Name == "f" {
			m, _, err := decodeManifestBytes(r.Manifest)
			if err != nil || m.Size() != 5 || r.Size != 5 {
				t.Errorf("manifest of f: %v, %v (size %d)", m, err, r.Size)
			}
		}
		if r.Kind == KindSymlink && r.Target != "b/f" {
			t.Errorf("target = %q", r.Target)
		}
		return nil
	})
	must(t, err)
	if rev != s.CurrentRev() {
		t.Errorf("scan rev = %d, store rev %d", rev, s.CurrentRev())
	}
	want := []row{{"a", KindDir, 0o750}, {"top", KindFile, 0o644}, {"b", KindDir, 0o750}, {"l", KindSymlink, 0o777}, {"f", KindFile, 0o644}}
	if !slices.Equal(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
	if !slices.IsSorted(parents) {
		t.Errorf("parents not in order: %v", parents)
	}
}

func TestEmptyChangeRevsEntriesAt(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	empty, err := s.Empty(ctx)
	must(t, err)
	if !empty {
		t.Fatal("new store not empty")
	}
	writeFile(t, s, "x", []byte("1"))
	writeFile(t, s, "y", []byte("2"))
	must(t, s.RemovePath(ctx, "y", false))
	empty, err = s.Empty(ctx)
	must(t, err)
	if empty {
		t.Fatal("store with a file reported empty")
	}
	revs, err := s.ChangeRevs(ctx, []string{"x", "y", "never"})
	must(t, err)
	if revs[0] != 1 || revs[1] != 3 || revs[2] != 0 {
		t.Errorf("change revs = %v, want [1 3 0]", revs)
	}
	es, err := s.EntriesAt(ctx, []string{"x", "y", "never"})
	must(t, err)
	if es[0].Kind != EntryFile || es[0].Size != 1 || es[0].Rev != 1 || es[1].Kind != EntryDelete || es[1].Rev != 3 || es[2].Kind != EntryDelete {
		t.Errorf("entries = %+v", es)
	}
	if _, err := s.EntriesAt(ctx, []string{"../x"}); Errno(err) == 0 {
		t.Error("EntriesAt accepted a bad path")
	}
}

func decodeManifestBytes(b []byte) (chunkstore.Manifest, []byte, error) {
	return chunkstore.DecodeManifest(b)
}
