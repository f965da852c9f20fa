package converge

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/vfs"
)

// The seed corpus lives in testdata/fuzz/<Target>; WSYNC_WRITE_CORPUS=1
// go test -run TestWriteFuzzCorpus ./converge regenerates it from the
// seeds below.

func seedPages() [][]byte {
	return [][]byte{
		appendNodePage(nil, nodePage{}),
		appendNodePage(nil, nodePage{More: true, Children: []Child{{Name: "a", Kind: vfs.KindDir, Mode: 0o755, Hash: Hash{1}}}}),
		appendNodePage(nil, nodePage{Children: []Child{{Name: "a", Kind: vfs.KindFile, Mode: 0o644}, {Name: "b", Kind: vfs.KindSymlink, Mode: 0o777}}}),
		{0x01, 0x01, 0x01, 'a', 0x09, 0x00},
	}
}

func seedEntries() []vfs.ChangeEntry {
	c := []byte("fuzz content")
	return []vfs.ChangeEntry{
		{Kind: vfs.EntryDir, Rev: 1, Path: "d", Mode: 0o755},
		{Kind: vfs.EntryFile, Rev: 2, Path: "d/f", Mode: 0o644, Size: int64(len(c)), Chunks: chunkstore.Manifest{ref(c)}},
		{Kind: vfs.EntrySymlink, Rev: 3, Path: "d/l", Mode: 0o777, Target: "f"},
		{Kind: vfs.EntryFile, Rev: 4, Path: "empty", Mode: 0o600},
	}
}

func seedRecords() [][]byte {
	var raw []byte
	for _, e := range seedEntries() {
		raw, _ = appendRecord(raw, snapRecord{Tag: recEntry, Entry: e})
	}
	one, _ := appendRecord(nil, snapRecord{Tag: recEntry, Entry: seedEntries()[1]})
	// A file of five refs split in parts of two: a head and two
	// continuations, one of them with a hole.
	c := []byte("fuzz content")
	big := vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: 5, Path: "big", Mode: 0o644, Chunks: chunkstore.Manifest{
		{Hash: chunkstore.Sum(c), Size: chunkstore.ChunkSize}, {Hash: chunkstore.Sum(c), Size: chunkstore.ChunkSize},
		{Size: 3 * chunkstore.ChunkSize}, {Hash: chunkstore.Sum(c), Size: chunkstore.ChunkSize}, {Hash: chunkstore.Sum(c), Size: 12}}}
	big.Size = big.Chunks.Size()
	var split []byte
	parts := splitEntry(big, 2)
	for _, p := range parts {
		split, _ = appendRecord(split, p)
	}
	return [][]byte{append([]byte{4}, raw...), append([]byte{1}, one...), {1, 3, 1, 2, 3}, append([]byte{byte(len(parts))}, split...),
		{1, 3, recRefs, 1, 0}, {1, 4, recHead, 0xff, 0x7f}}
}

func seedPageBodies() [][]byte {
	var raw []byte
	for _, e := range seedEntries() {
		raw, _ = appendRecord(raw, snapRecord{Tag: recEntry, Entry: e})
	}
	return [][]byte{zenc().EncodeAll(raw, uvarints(7, 4, uint64(len(raw)))), {0, 1, 5, 0x28, 0xb5, 0x2f, 0xfd}}
}

func seedObjects() [][]byte {
	a, b := []byte("object one"), []byte("object two, a little longer")
	return [][]byte{
		syncwire.AppendObjects(nil, []syncwire.Object{{Hash: chunkstore.Sum(a), Data: a}, {Hash: chunkstore.Sum(b), Data: b}}),
		syncwire.AppendObjects(nil, []syncwire.Object{{Hash: chunkstore.Hash{1}, Data: a}}),
		{0x05, 1, 2, 3},
	}
}

func seedRequests() [][]byte {
	return [][]byte{
		appendNodeRequest(nil, nodeRequest{Path: "", Limit: 1024}),
		appendNodeRequest(nil, nodeRequest{Path: "src/a", After: "m", Limit: 3, Ignore: []string{"node_modules"}}),
		appendNodeRequest(nil, nodeRequest{Path: "../x", Limit: 1, Ignore: []string{}}),
		appendNodeRequest(nil, nodeRequest{Path: "web", Limit: 8, Ignore: []string{"dist/", "*.log", "!keep.log", "**/.cache/"}}),
	}
}

func FuzzDecodeNodePage(f *testing.F) {
	for _, s := range seedPages() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pg, err := decodeNodePage(b, "", MaxChildren)
		if err != nil {
			return
		}
		enc := appendNodePage(nil, pg)
		pg2, err := decodeNodePage(enc, "", MaxChildren)
		if err != nil || !slices.Equal(pg.Children, pg2.Children) || pg.More != pg2.More {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeNodeRequest(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeNodeRequest(b)
		if err != nil {
			return
		}
		if q.Path != "" {
			if err := vfs.ValidatePath(q.Path); err != nil {
				t.Fatalf("accepted path %q: %v", q.Path, err)
			}
		}
		q2, err := decodeNodeRequest(appendNodeRequest(nil, q))
		if err != nil || q2.Path != q.Path || q2.After != q.After || q2.Limit != q.Limit || !slices.Equal(q2.Ignore, q.Ignore) {
			t.Fatalf("re-decode %+v: %+v, %v", q, q2, err)
		}
	})
}

func FuzzDecodeRecords(f *testing.F) {
	for _, s := range seedRecords() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		recs, err := DecodeRecords(b[1:], int(b[0]))
		if err != nil {
			return
		}
		for _, r := range recs {
			if n := len(r.refs()); n > maxPartRefs {
				t.Fatalf("accepted a record of %d refs", n)
			}
			switch r.Tag {
			case recEntry, recHead:
				if err := r.Entry.Validate(); err != nil || r.Entry.Kind == vfs.EntryDelete {
					t.Fatalf("accepted entry %+v: %v", r.Entry, err)
				}
				if r.Tag == recHead && (r.Entry.Kind != vfs.EntryFile || r.Refs <= len(r.Entry.Chunks) || r.Refs > chunkstore.MaxManifestChunks) {
					t.Fatalf("accepted head of %d refs for %d", len(r.Entry.Chunks), r.Refs)
				}
			case recRefs:
				if len(r.More) == 0 {
					t.Fatal("accepted an empty continuation")
				}
			default:
				t.Fatalf("accepted tag %d", r.Tag)
			}
			rec, err := appendRecord(nil, r)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeRecords(rec, 1)
			if err != nil || back[0].Tag != r.Tag || back[0].Entry.Path != r.Entry.Path || back[0].Refs != r.Refs || !slices.Equal(back[0].refs(), r.refs()) {
				t.Fatalf("re-decode %+v: %v", r, err)
			}
		}
	})
}

func FuzzDecodePage(f *testing.F) {
	for _, s := range seedPageBodies() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, es, err := DecodePage(b)
		if err == nil && len(es) > MaxPageRecords {
			t.Fatalf("%d records", len(es))
		}
	})
}

func FuzzDecodeObjects(f *testing.F) {
	for _, s := range seedObjects() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		objs := newSnapObjects()
		err := objs.decode(b, func(cs []chunkstore.Checked) error {
			size := 0
			for _, c := range cs {
				r := c.Ref()
				if r.Size == 0 || r.Size > chunkstore.ChunkSize {
					t.Fatalf("accepted chunk %s of %d bytes", r.Hash, r.Size)
				}
				size += int(r.Size)
			}
			if size > checkedBatch+chunkstore.ChunkSize {
				t.Fatalf("a batch of %d bytes", size)
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, chunkstore.ErrHashMismatch) {
			t.Fatalf("decode failed with an untyped error: %v", err)
		}
	})
}

func seedPaths() [][]byte {
	return [][]byte{appendPaths(nil, []string{"a", "d/b"}), appendPaths(nil, nil), {0x80, 0x08}, {2, 1, 'a', 2, '.', '.'}}
}

func FuzzDecodePaths(f *testing.F) {
	for _, s := range seedPaths() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		paths, err := decodePaths(b)
		if err != nil {
			return
		}
		if len(paths) > MaxPaths {
			t.Fatalf("%d paths", len(paths))
		}
		for _, p := range paths {
			if err := vfs.ValidatePath(p); err != nil {
				t.Fatalf("accepted path %q: %v", p, err)
			}
		}
	})
}

func seedRevs() [][]byte {
	return [][]byte{appendRevs(nil, []int64{1, 1 << 40}), appendRevs(nil, nil), {3, 1}}
}

func FuzzDecodeRevs(f *testing.F) {
	for _, s := range seedRevs() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		n := int(b[0]) * 8
		revs, err := decodeRevs(b[1:], n)
		if err == nil && len(revs) != n {
			t.Fatalf("%d revs for %d paths", len(revs), n)
		}
	})
}

func seedRootInfos() [][]byte {
	return [][]byte{appendRootInfo(nil, rootInfo{Root: Hash{1}, Rev: 7, Names: 3}), make([]byte, 31)}
}

func FuzzDecodeRootInfo(f *testing.F) {
	for _, s := range seedRootInfos() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ri, err := decodeRootInfo(b)
		if err != nil {
			return
		}
		if got, err := decodeRootInfo(appendRootInfo(nil, ri)); err != nil || got != ri {
			t.Fatalf("re-decode %+v: %+v, %v", ri, got, err)
		}
	})
}

func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("WSYNC_WRITE_CORPUS") == "" {
		t.Skip("set WSYNC_WRITE_CORPUS=1 to rewrite testdata/fuzz")
	}
	for target, seeds := range map[string][][]byte{
		"FuzzDecodeNodePage": seedPages(), "FuzzDecodeNodeRequest": seedRequests(), "FuzzDecodeRecords": seedRecords(),
		"FuzzDecodePage": seedPageBodies(), "FuzzDecodeObjects": seedObjects(),
		"FuzzDecodePaths": seedPaths(), "FuzzDecodeRevs": seedRevs(), "FuzzDecodeRootInfo": seedRootInfos(),
	} {
		dir := filepath.Join("testdata", "fuzz", target)
		must(t, os.MkdirAll(dir, 0o755))
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%d", i)), []byte(body), 0o644))
		}
	}
}

// Every decoder's failure is ErrMalformed, whichever field it stops at.
func TestDecodersFailWithErrMalformed(t *testing.T) {
	tests := map[string]func() error{
		"root info truncated hash": func() error { _, err := decodeRootInfo(make([]byte, 31)); return err },
		"node request bad path": func() error {
			_, err := decodeNodeRequest(appendNodeRequest(nil, nodeRequest{Path: "../x", Limit: 1}))
			return err
		},
		"node request bad ignore": func() error {
			_, err := decodeNodeRequest(appendNodeRequest(nil, nodeRequest{Limit: 1, Ignore: []string{"a/[b"}}))
			return err
		},
		"node request ignore flag": func() error { _, err := decodeNodeRequest([]byte{0, 0, 1, 2}); return err },
		"node page bad uvarint":    func() error { _, err := decodeNodePage([]byte{0, 0x80}, "", MaxChildren); return err },
		"paths trailing bytes":     func() error { _, err := decodePaths(append(appendPaths(nil, []string{"a"}), 0)); return err },
		"revs past the message":    func() error { _, err := decodeRevs([]byte{2, 1}, 2); return err },
		"records length past body": func() error { _, err := DecodeRecords([]byte{5, 1}, 1); return err },
		"page header truncated":    func() error { _, _, err := DecodePage([]byte{0, 1}); return err },
		"objects header truncated": func() error {
			return newSnapObjects().decode([]byte{0x80}, func([]chunkstore.Checked) error { return nil })
		},
	}
	for name, decode := range tests {
		t.Run(name, func(t *testing.T) {
			if err := decode(); !errors.Is(err, ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
		})
	}
}
