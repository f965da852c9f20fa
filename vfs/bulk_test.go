package vfs

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
	"pgregory.net/rapid"
)

// TestBulkApplyWritesWhatEntryByEntryWrites: random batches (new names,
// names that exist, deletes, type changes, a path twice, missing parents,
// conflicts under every policy, local writes between batches) applied to
// two stores, one with bulk creation and one entry by entry, leave the same
// rows in every table (times of now aside) and report the same results.
func TestBulkApplyWritesWhatEntryByEntryWrites(t *testing.T) {
	t.Cleanup(func() { bulkApply = true })
	clock := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	rapid.Check(t, func(rt *rapid.T) {
		dir := t.TempDir()
		bulk, byEntry := openStore(t, filepath.Join(dir, "bulk.db")), openStore(t, filepath.Join(dir, "entry.db"))
		defer bulk.Close()
		defer byEntry.Close()
		names := []string{"a", "b", "d", "d/x", "d/y", "d/e", "d/e/f", "n/m/o", "n/m/p", "s"}
		contents := [][]byte{pattern(10, 1), pattern(300, 2), pattern(5000, 3)}
		policy := rapid.SampledFrom([]ConflictPolicy{"", KeepBoth, ServerWins, ContainerWins}).Draw(rt, "policy")
		conflicts := rapid.Bool().Draw(rt, "conflicts")
		rev := int64(0)
		for range rapid.IntRange(1, 6).Draw(rt, "batches") {
			if rapid.Bool().Draw(rt, "local") {
				p := rapid.SampledFrom(names).Draw(rt, "local path")
				data := rapid.SampledFrom(contents).Draw(rt, "local data")
				for _, s := range []*Store{bulk, byEntry} {
					s.MkdirPath(ctx, dirOf(p), 0o755, true)
					s.WriteFile(ctx, p, data, 0o644)
				}
			}
			var es []ChangeEntry
			for range rapid.IntRange(1, 40).Draw(rt, "entries") {
				rev++
				e := ChangeEntry{Rev: rev, Path: rapid.SampledFrom(names).Draw(rt, "path"),
					Mode: uint32(rapid.SampledFrom([]int{0o644, 0o755, 0o600}).Draw(rt, "mode"))}
				if rapid.Bool().Draw(rt, "fresh") {
					e.Path = fmt.Sprintf("%s/new%d", rapid.SampledFrom([]string{"", "d", "n/m", "q/r"}).Draw(rt, "dir"), rev)
					e.Path = strings.TrimPrefix(e.Path, "/")
				}
				switch rapid.IntRange(0, 5).Draw(rt, "kind") {
				case 0, 1:
					data := rapid.SampledFrom(contents).Draw(rt, "data")
					r := chunkstore.Ref{Hash: chunkstore.Sum(data), Size: uint32(len(data))}
					e.Kind, e.Size, e.Chunks = EntryFile, int64(len(data)), chunkstore.Manifest{r}
					e.Mtime = rapid.SampledFrom([]int64{0, 1_700_000_000_000_000_000}).Draw(rt, "mtime")
				case 2, 3:
					e.Kind = EntryDir
				case 4:
					e.Kind, e.Mode, e.Target = EntrySymlink, 0o777, rapid.SampledFrom([]string{"t1", "t2"}).Draw(rt, "target")
				case 5:
					e.Kind, e.Mode = EntryDelete, 0
				}
				es = append(es, e)
			}
			var results []string
			for i, s := range []*Store{bulk, byEntry} {
				bulkApply = i == 0
				st := s.Chunks().NewStage()
				for _, c := range contents {
					must(t, st.Put(ctx, chunkstore.Sum(c), c))
				}
				opts := ApplyOptions{Source: Upstream, Stage: st}
				if conflicts {
					ws, err := s.Watermarks(ctx, "peer")
					must(t, err)
					ws.Fetch = watermark.At(rev)
					opts.Peer, opts.Watermarks, opts.Bounce = "peer", &ws, true
					opts.Conflicts = &ConflictOptions{Policy: policy, Now: func() time.Time { return clock }}
				}
				res, err := s.Apply(ctx, es, opts)
				st.Release()
				results = append(results, fmt.Sprintf("%+v %v", res, err))
			}
			bulkApply = true
			if results[0] != results[1] {
				rt.Fatalf("results differ:\nbulk:     %s\nby entry: %s", results[0], results[1])
			}
			if a, b := dumpTables(t, bulk), dumpTables(t, byEntry); a != b {
				rt.Fatalf("tables differ:\nbulk:\n%s\nby entry:\n%s", a, b)
			}
		}
	})
}

// dumpTables renders every table Apply writes, with times of now (the
// transaction's clock) shown as "now".
func dumpTables(t *testing.T, s *Store) string {
	t.Helper()
	recent := time.Now().Add(-time.Hour).UnixNano()
	var b strings.Builder
	for _, q := range []string{
		`SELECT ino, kind, mode, uid, gid, nlink, size, mtime, manifest, target, rdev, rev FROM nodes ORDER BY ino`,
		`SELECT parent, name, child FROM dirents ORDER BY parent, name`,
		`SELECT path, rev FROM changes ORDER BY path`,
		`SELECT hash, size, refs FROM chunks ORDER BY hash`,
		`SELECT peer, path, state FROM bases ORDER BY peer, path`,
		`SELECT id, path, peer, side, policy, kind, server, container, copy, copy_side FROM conflicts ORDER BY id`,
		`SELECT peer, push, fetch, applied_push, bounce_from, bounce_to FROM watermarks ORDER BY peer`,
		`SELECT key, value FROM meta WHERE key = 'rev'`,
		`SELECT name, seq FROM sqlite_sequence ORDER BY name`,
	} {
		rows, err := s.w.QueryContext(ctx, q)
		must(t, err)
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			must(t, rows.Scan(ptrs...))
			for i, v := range vals {
				if n, ok := v.(int64); ok && cols[i] == "mtime" && n > recent {
					vals[i] = "now"
				}
			}
			fmt.Fprintln(&b, vals...)
		}
		must(t, rows.Err())
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}
