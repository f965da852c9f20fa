package vfs

import (
	"path/filepath"
	"testing"

	"github.com/wsync/wsync/watermark"
	"pgregory.net/rapid"
)

// TestFeedReplicatesRandomHistories checks the core sync property: applying
// A's feed to an empty B makes B's tree equal A's, and after more operations
// the incremental feed from the saved cursor does it again.
func TestFeedReplicatesRandomHistories(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := replicaPair(t)
		defer a.Close()
		defer b.Close()
		names := []string{"a", "b", "c", "d/e", "d/f", "d/g/h", "x/y/z", "node_modules/m"}
		write := func(rt *rapid.T, p, _ string) {
			size := rapid.SampledFrom([]int{0, 1, 100, cs, cs + 1, 2*cs + 3}).Draw(rt, "size")
			a.MkdirPath(ctx, dirOf(p), 0o755, true)
			a.WriteFile(ctx, p, pattern(size, byte(rapid.IntRange(0, 3).Draw(rt, "seed"))), 0o644)
		}
		step := func(rt *rapid.T) {
			randomOp(rt, a, names, write, write,
				func(_ *rapid.T, p, q string) {
					a.MkdirPath(ctx, dirOf(p), 0o755, true)
					a.SymlinkPath(ctx, "target-"+q, p)
				},
				func(rt *rapid.T, p, _ string) {
					a.ChmodPath(ctx, p, uint32(rapid.SampledFrom([]int{0o600, 0o755, 0o644}).Draw(rt, "mode")))
				},
				func(rt *rapid.T, p, _ string) {
					ino, err := a.ResolvePath(ctx, p)
					if err != nil {
						return
					}
					h, err := a.OpenHandle(ctx, ino)
					if err != nil {
						return
					}
					off := int64(rapid.IntRange(0, 2*cs).Draw(rt, "off"))
					h.WriteAt(ctx, []byte("patch"), off)
					if rapid.Bool().Draw(rt, "truncate") {
						h.Truncate(ctx, off/2)
					}
					h.Release(ctx)
				})
		}
		for range rapid.IntRange(1, 25).Draw(rt, "n1") {
			step(rt)
		}
		cur := syncInto(t, a, b, watermark.Cursor{}, Ignore{})
		if d := diffTrees(tree(t, a), tree(t, b)); d != "" {
			rt.Fatalf("after full feed:\n%s", d)
		}
		for range rapid.IntRange(1, 25).Draw(rt, "n2") {
			step(rt)
		}
		syncInto(t, a, b, cur, Ignore{})
		if d := diffTrees(tree(t, a), tree(t, b)); d != "" {
			rt.Fatalf("after incremental feed from %v:\n%s", cur, d)
		}
	})
}

// replicaPair opens the two stores of one run of a property check: a,
// where random operations happen, and b, the peer its feed replicates to.
// The run closes them when it ends.
func replicaPair(t *testing.T) (a, b *Store) {
	dir := t.TempDir()
	return openStore(t, filepath.Join(dir, "a.db")), openStore(t, filepath.Join(dir, "b.db"))
}

// randomOp draws two paths from names and one operation on s to run with
// them: a tree operation every random history has (remove, mkdir -p,
// rename, link; a destination's parents are made first), or one of the
// test's own (a test weights one by passing it twice).
func randomOp(rt *rapid.T, s *Store, names []string, own ...func(rt *rapid.T, p, q string)) {
	p := rapid.SampledFrom(names).Draw(rt, "path")
	q := rapid.SampledFrom(names).Draw(rt, "other")
	ops := append([]func(rt *rapid.T, p, q string){
		func(_ *rapid.T, p, _ string) { s.RemovePath(ctx, p, true) },
		func(_ *rapid.T, p, _ string) { s.MkdirPath(ctx, p, 0o755, true) },
		func(_ *rapid.T, p, q string) {
			s.MkdirPath(ctx, dirOf(q), 0o755, true)
			s.RenamePath(ctx, p, q)
		},
		func(_ *rapid.T, p, q string) {
			s.MkdirPath(ctx, dirOf(q), 0o755, true)
			s.LinkPath(ctx, p, q)
		},
	}, own...)
	ops[rapid.IntRange(0, len(ops)-1).Draw(rt, "op")](rt, p, q)
}
