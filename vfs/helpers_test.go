package vfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wsync/wsync/watermark"
)

func newStore(t testing.TB) *Store {
	t.Helper()
	return openStore(t, filepath.Join(t.TempDir(), "store.db"))
}

func openStore(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, Options{NoSync: true, Owner: NewAttr{Uid: 1000, Gid: 1000}})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, s *Store, path string, data []byte) {
	t.Helper()
	if _, err := s.WriteFile(context.Background(), path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, s *Store, path string) []byte {
	t.Helper()
	b, err := s.ReadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pattern returns n deterministic bytes that differ by seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// feed drains s's changes after `after` through now.
func feed(t testing.TB, s *Store, after watermark.Cursor, ig Ignore) []ChangeEntry {
	t.Helper()
	var out []ChangeEntry
	for e, err := range s.Changes(context.Background(), after, watermark.At(s.CurrentRev()), ig) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func paths(es []ChangeEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Kind.String() + ":" + e.Path
	}
	return out
}

// tree describes every live path: type, mode, content hash or target.
func tree(t testing.TB, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		es, err := s.List(context.Background(), dir)
		if err != nil {
			t.Fatalf("list %q: %v", dir, err)
		}
		for _, e := range es {
			p := joinPath(dir, e.Name)
			a, err := s.Stat(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			switch e.Kind {
			case KindDir:
				out[p] = fmt.Sprintf("dir %o", a.Mode)
				walk(p)
			case KindSymlink:
				target, err := s.ReadLinkPath(context.Background(), p)
				if err != nil {
					t.Fatal(err)
				}
				out[p] = "symlink " + target
			case KindFile:
				sum := sha256.Sum256(readFile(t, s, p))
				out[p] = fmt.Sprintf("file %o %d %s", a.Mode, a.Size, hex.EncodeToString(sum[:8]))
			}
		}
	}
	walk("")
	return out
}

func diffTrees(a, b map[string]string) string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		if a[k] != b[k] {
			fmt.Fprintf(&sb, "%s: %q vs %q\n", k, a[k], b[k])
		}
	}
	return sb.String()
}

// sync copies s's feed after `after` into dst as a peer would, chunks
// included, and returns the cursor it reached.
func syncInto(t testing.TB, src, dst *Store, after watermark.Cursor, ig Ignore) watermark.Cursor {
	t.Helper()
	ctx := context.Background()
	through := watermark.At(src.CurrentRev())
	var batch []ChangeEntry
	flush := func() {
		if len(batch) == 0 {
			return
		}
		stage := dst.Chunks().NewStage()
		defer stage.Release()
		for _, e := range batch {
			for _, r := range e.Chunks.DataRefs() {
				b, err := src.ReadChunk(ctx, r.Hash)
				if err != nil {
					t.Fatal(err)
				}
				if err := stage.Put(ctx, r.Hash, b); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := dst.Apply(ctx, batch, ApplyOptions{Source: Upstream, Stage: stage}); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for e, err := range src.Changes(ctx, after, through, ig) {
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, e)
		if len(batch) == 256 {
			flush()
		}
	}
	flush()
	return through
}
