package vfs

import (
	"fmt"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"

	"github.com/wsync/wsync/watermark"
)

// TestFeedReplicatesRandomHistories checks the core sync property: applying
// A's feed to an empty B makes B's tree equal A's, and after more operations
// the incremental feed from the saved cursor does it again.
func TestFeedReplicatesRandomHistories(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		a := openStore(t, filepath.Join(dir, "a.db"))
		b := openStore(t, filepath.Join(dir, "b.db"))
		defer a.Close()
		defer b.Close()
		names := []string{"a", "b", "c", "d/e", "d/f", "d/g/h", "x/y/z", "node_modules/m"}
		step := func(rt *rapid.T) {
			p := rapid.SampledFrom(names).Draw(rt, "path")
			q := rapid.SampledFrom(names).Draw(rt, "other")
			switch rapid.IntRange(0, 8).Draw(rt, "op") {
			case 0, 1:
				size := rapid.SampledFrom([]int{0, 1, 100, cs, cs + 1, 2*cs + 3}).Draw(rt, "size")
				a.MkdirPath(ctx, dirOf(p), 0o755, true)
				a.WriteFile(ctx, p, pattern(size, byte(rapid.IntRange(0, 3).Draw(rt, "seed"))), 0o644)
			case 2:
				a.MkdirPath(ctx, p, 0o755, true)
			case 3:
				a.RemovePath(ctx, p, true)
			case 4:
				a.MkdirPath(ctx, dirOf(q), 0o755, true)
				a.RenamePath(ctx, p, q)
			case 5:
				a.MkdirPath(ctx, dirOf(p), 0o755, true)
				a.SymlinkPath(ctx, "target-"+q, p)
			case 6:
				a.MkdirPath(ctx, dirOf(q), 0o755, true)
				a.LinkPath(ctx, p, q)
			case 7:
				a.ChmodPath(ctx, p, uint32(rapid.SampledFrom([]int{0o600, 0o755, 0o644}).Draw(rt, "mode")))
			case 8:
				if ino, err := a.ResolvePath(ctx, p); err == nil {
					if h, err := a.OpenHandle(ctx, ino); err == nil {
						off := int64(rapid.IntRange(0, 2*cs).Draw(rt, "off"))
						h.WriteAt(ctx, []byte("patch"), off)
						if rapid.Bool().Draw(rt, "truncate") {
							h.Truncate(ctx, off/2)
						}
						h.Release(ctx)
					}
				}
			}
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

var _ = fmt.Sprint
