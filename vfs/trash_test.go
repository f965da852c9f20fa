package vfs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	itestutil "github.com/wsync/wsync/internal/testutil"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// newTrashStore opens a store on disk with a trash and, when gc is set,
// that collection configuration.
func newTrashStore(t testing.TB, o TrashOptions, gc GCOptions) *Store {
	t.Helper()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "store.db"), Options{NoSync: true, Owner: NewAttr{Uid: 1000, Gid: 1000}, Trash: &o, GC: gc})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func trashPaths(t testing.TB, s *Store, path string) []string {
	t.Helper()
	es, err := s.TrashList(ctx, path, 0)
	must(t, err)
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%s %s %s", e.Op, e.Kind, e.Path)
	}
	return out
}

func TestTrashKeepsWhatDeletesAndOverwritesReplace(t *testing.T) {
	s := newTrashStore(t, TrashOptions{}, GCOptions{Grace: -1})
	v1, v2 := pattern(10_000, 1), pattern(20_000, 2)
	writeFile(t, s, "a", v1)
	writeFile(t, s, "a", v2) // overwrite: v1 to the trash
	writeFile(t, s, "a", v2) // same content: nothing to keep
	must(t, s.RemovePath(ctx, "a", false))
	got, want := trashPaths(t, s, ""), []string{"delete file a", "overwrite file a"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("trash = %q, want %q", got, want)
	}
	es, err := s.TrashList(ctx, "a", 0)
	must(t, err)
	if es[0].Origin != OriginAPI || es[0].Size != int64(len(v2)) || es[0].Mode != 0o644 {
		t.Errorf("newest entry = %+v", es[0])
	}
	u, err := s.TrashUsage(ctx)
	must(t, err)
	if u.Entries != 2 || u.Bytes != int64(len(v1)+len(v2)) {
		t.Errorf("usage = %+v, want 2 entries of %d bytes", u, len(v1)+len(v2))
	}

	// The trash holds the chunks: a collection right after the delete
	// (no grace) keeps them.
	_, err = s.RunGC(ctx)
	must(t, err)
	res, err := s.RestoreTrash(ctx, "a", RestoreOptions{})
	must(t, err)
	if res.Restored != 1 {
		t.Errorf("restored %d, want 1", res.Restored)
	}
	if got := readFile(t, s, "a"); !bytes.Equal(got, v2) {
		t.Fatal("restore brought back the wrong version: want the newest")
	}

	// --at the overwrite's time picks v1; the live v2 is in the way.
	at := es[1].TrashedAt
	_, err = s.RestoreTrash(ctx, "a", RestoreOptions{At: at})
	var ce *RestoreConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrExist) || ce.Paths[0] != "/a" {
		t.Fatalf("restore over a live file = %v, want a RestoreConflictError naming /a", err)
	}
	if got := readFile(t, s, "a"); !bytes.Equal(got, v2) {
		t.Fatal("a refused restore changed the live file")
	}
	res, err = s.RestoreTrash(ctx, "a", RestoreOptions{At: at, Force: true})
	must(t, err)
	if res.Replaced != 1 || res.Restored != 1 {
		t.Errorf("forced restore = %+v", res)
	}
	if got := readFile(t, s, "a"); !bytes.Equal(got, v1) {
		t.Fatal("restore --at brought back the wrong version: want v1")
	}
	// The replaced v2 went to the trash, by the restore.
	es, err = s.TrashList(ctx, "a", 1)
	must(t, err)
	if len(es) != 1 || es[0].Origin != OriginRestore || es[0].Size != int64(len(v2)) {
		t.Errorf("after a forced restore the trash's newest = %+v", es)
	}
	// The restore is a change the feed carries.
	if got := feed(t, s, watermark.At(s.CurrentRev()-1), Ignore{}); len(got) != 1 || got[0].Path != "a" {
		t.Errorf("feed after the restore = %v", paths(got))
	}
}

func TestTrashRestoresASubtreeWithModes(t *testing.T) {
	s := newTrashStore(t, TrashOptions{}, GCOptions{Grace: -1})
	must(t, s.MkdirPath(ctx, "src/sub/deep", 0o750, true))
	must(t, s.ChmodPath(ctx, "src/sub", 0o700))
	writeFile(t, s, "src/a.go", pattern(100, 1))
	if _, err := s.WriteFile(ctx, "src/sub/run.sh", pattern(9000, 2), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s, "src/sub/deep/big", pattern(600_000, 3)) // two chunks
	writeFile(t, s, "src/empty", nil)
	must(t, s.SymlinkPath(ctx, "sub/run.sh", "src/link"))
	writeFile(t, s, "other", pattern(10, 4))
	before := tree(t, s)

	// The container's rm -rf src arrives as a pulled batch of deletes,
	// files first (their revs come first), one entry per path.
	var dels []ChangeEntry
	for i, p := range []string{"src/a.go", "src/empty", "src/link", "src/sub/deep/big", "src/sub/run.sh", "src/sub/deep", "src/sub", "src"} {
		dels = append(dels, ChangeEntry{Kind: EntryDelete, Rev: int64(100 + i), Path: p})
	}
	if _, err := s.Apply(ctx, dels, ApplyOptions{Source: Upstream}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "src"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("src after the deletes: %v", err)
	}
	es, err := s.TrashList(ctx, "src", 0)
	must(t, err)
	if len(es) != len(dels) {
		t.Fatalf("trash holds %d entries under src, want %d", len(es), len(dels))
	}
	for _, e := range es {
		if e.Origin != OriginSync || e.Op != TrashDelete {
			t.Errorf("entry %s: origin %q op %q", e.Path, e.Origin, e.Op)
		}
	}
	if got := trashPaths(t, s, "sr"); len(got) != 0 {
		t.Errorf("trash ls sr = %q: a prefix that is no parent matched", got)
	}
	_, err = s.RunGC(ctx)
	must(t, err)

	res, err := s.RestoreTrash(ctx, "src", RestoreOptions{})
	must(t, err)
	if res.Restored != len(dels) {
		t.Errorf("restored %d, want %d", res.Restored, len(dels))
	}
	if d := diffTrees(before, tree(t, s)); d != "" {
		t.Errorf("restored tree differs:\n%s", d)
	}
	if u, _ := s.TrashUsage(ctx); u.Entries != 0 || u.Bytes != 0 {
		t.Errorf("usage after restoring everything = %+v", u)
	}
	// Restoring again: nothing is left to restore.
	if _, err := s.RestoreTrash(ctx, "src", RestoreOptions{}); !errors.Is(err, ErrNotExist) {
		t.Errorf("second restore = %v, want ErrNotExist", err)
	}
}

func TestTrashRestoreOfAFileUnderADeletedDirectoryMakesItsParents(t *testing.T) {
	s := newTrashStore(t, TrashOptions{}, GCOptions{})
	must(t, s.MkdirPath(ctx, "x/y", 0o755, true))
	writeFile(t, s, "x/y/f", pattern(10, 1))
	must(t, s.RemovePath(ctx, "x", true))
	res, err := s.RestoreTrash(ctx, "x/y/f", RestoreOptions{})
	must(t, err)
	if res.Restored != 1 || res.Created != 2 {
		t.Errorf("restore = %+v, want 1 restored and 2 parents made", res)
	}
	if got := readFile(t, s, "x/y/f"); !bytes.Equal(got, pattern(10, 1)) {
		t.Error("wrong content")
	}
	// A file where a restored path needs a directory is in the way.
	must(t, s.RemovePath(ctx, "x", true))
	writeFile(t, s, "x", pattern(3, 9))
	if _, err := s.RestoreTrash(ctx, "x/y", RestoreOptions{}); !errors.Is(err, ErrExist) {
		t.Errorf("restore under a live file = %v, want ErrExist", err)
	}
}

func TestStoreWithoutTrashKeepsNothing(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", pattern(10, 1))
	writeFile(t, s, "a", pattern(10, 2))
	must(t, s.RemovePath(ctx, "a", false))
	if got := trashPaths(t, s, ""); len(got) != 0 {
		t.Errorf("trash of a store without one = %q", got)
	}
	if _, err := s.RestoreTrash(ctx, "a", RestoreOptions{}); !errors.Is(err, ErrNotSupp) {
		t.Errorf("restore = %v, want ErrNotSupp", err)
	}
}

func TestTrashExpiresAndItsChunksAreCollected(t *testing.T) {
	s := newTrashStore(t, TrashOptions{Retention: time.Hour}, GCOptions{Grace: -1})
	writeFile(t, s, "a", pattern(50_000, 1))
	must(t, s.RemovePath(ctx, "a", false))
	if u, err := s.ExpireTrash(ctx, time.Now()); err != nil || u.Entries != 0 {
		t.Fatalf("expiry within the retention = %+v, %v", u, err)
	}
	rep, err := s.RunGC(ctx)
	must(t, err)
	if rep.Rows+rep.Files > 0 {
		t.Fatalf("gc collected %+v while the trash held the chunk", rep.GCStats)
	}
	u, err := s.ExpireTrash(ctx, time.Now().Add(2*time.Hour))
	must(t, err)
	if u.Entries != 1 || u.Bytes != 50_000 {
		t.Errorf("expired %+v, want the one entry", u)
	}
	rep, err = s.RunGC(ctx)
	must(t, err)
	if rep.Rows != 1 {
		t.Errorf("gc after expiry collected %d rows, want 1", rep.Rows)
	}
	c, err := s.Counts(ctx)
	must(t, err)
	if c.Chunks.Chunks != 0 {
		t.Errorf("%d chunks left", c.Chunks.Chunks)
	}
}

func TestTrashEvictsOldestPastItsBounds(t *testing.T) {
	const size = 1000
	s := newTrashStore(t, TrashOptions{MaxBytes: 3 * size, MaxEntries: 4}, GCOptions{Grace: -1})
	for i := range 5 {
		writeFile(t, s, fmt.Sprintf("f%d", i), pattern(size, byte(i)))
		must(t, s.RemovePath(ctx, fmt.Sprintf("f%d", i), false))
	}
	got, want := trashPaths(t, s, ""), []string{"delete file f4", "delete file f3", "delete file f2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("trash = %q, want %q (the byte bound)", got, want)
	}
	// Directories cost no bytes: the entry bound evicts.
	for i := range 3 {
		must(t, s.MkdirPath(ctx, fmt.Sprintf("d%d", i), 0o755, false))
		must(t, s.RemovePath(ctx, fmt.Sprintf("d%d", i), false))
	}
	got, want = trashPaths(t, s, ""), []string{"delete dir d2", "delete dir d1", "delete dir d0", "delete file f4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("trash = %q, want %q (the entry bound)", got, want)
	}
	// A file larger than the bound is not kept.
	writeFile(t, s, "huge", pattern(4*size, 9))
	must(t, s.RemovePath(ctx, "huge", false))
	if got := trashPaths(t, s, "huge"); len(got) != 0 {
		t.Errorf("a file past the byte bound is in the trash: %q", got)
	}
	u, err := s.TrashUsage(ctx)
	must(t, err)
	if u.Bytes > 3*size || u.Entries > 4 {
		t.Errorf("usage %+v past the bounds", u)
	}
	// Evicted entries' chunks are collected.
	_, err = s.RunGC(ctx)
	must(t, err)
	checkRefs(t, s)
}

func TestTrashPurge(t *testing.T) {
	s := newTrashStore(t, TrashOptions{}, GCOptions{Grace: -1})
	must(t, s.MkdirPath(ctx, "a", 0o755, false))
	for _, p := range []string{"a/1", "a/2", "ab", "b"} {
		writeFile(t, s, p, pattern(100, p[0]))
	}
	must(t, s.RemovePath(ctx, "a", true))
	must(t, s.RemovePath(ctx, "ab", false))
	cut := time.Now()
	// b's row must be stamped after cut: wait for the clock, not a time.
	itestutil.WaitFor(t, "the clock to pass cut", time.Second, func() bool { return time.Now().After(cut) })
	must(t, s.RemovePath(ctx, "b", false))
	u, err := s.PurgeTrash(ctx, "a", time.Time{})
	must(t, err)
	if u.Entries != 3 {
		t.Errorf("purge a removed %d entries, want 3 (a, a/1, a/2)", u.Entries)
	}
	if got := trashPaths(t, s, ""); fmt.Sprint(got) != fmt.Sprint([]string{"delete file b", "delete file ab"}) {
		t.Errorf("trash after purge a = %q", got)
	}
	u, err = s.PurgeTrash(ctx, "", cut)
	must(t, err)
	if got := trashPaths(t, s, ""); u.Entries != 1 || fmt.Sprint(got) != fmt.Sprint([]string{"delete file b"}) {
		t.Errorf("purge --older-than removed %d; left %q", u.Entries, got)
	}
	if _, err := s.PurgeTrash(ctx, "../x", time.Time{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("purge of a bad path = %v", err)
	}
}

// checkRefs checks every chunk row's reference count against the
// manifests that name it: live files' and trash rows'.
func checkRefs(t testing.TB, s *Store) {
	t.Helper()
	want := map[chunkstore.Hash]int64{}
	count := func(query string) {
		rows, err := s.r.QueryContext(ctx, query)
		must(t, err)
		defer rows.Close()
		for rows.Next() {
			var mb []byte
			must(t, rows.Scan(&mb))
			m, _, err := chunkstore.DecodeManifest(mb)
			must(t, err)
			for _, r := range m.DataRefs() {
				want[r.Hash]++
			}
		}
		must(t, rows.Err())
	}
	count(`SELECT manifest FROM nodes WHERE kind = 1 AND length(manifest) > 0`)
	count(`SELECT manifest FROM trash WHERE kind = 1 AND length(manifest) > 0`)
	rows, err := s.r.QueryContext(ctx, `SELECT hash, refs FROM chunks`)
	must(t, err)
	defer rows.Close()
	got := map[chunkstore.Hash]int64{}
	for rows.Next() {
		var hb []byte
		var refs int64
		must(t, rows.Scan(&hb, &refs))
		if refs > 0 {
			got[chunkstore.Hash(hb)] = refs
		}
	}
	must(t, rows.Err())
	for h, n := range want {
		if got[h] != n {
			t.Errorf("chunk %s: refs %d, manifests name it %d times", h, got[h], n)
		}
		b, err := s.ReadChunk(ctx, h)
		if err != nil {
			t.Errorf("chunk %s named by a manifest: %v", h, err)
			continue
		}
		if sha256.Sum256(b) != h {
			t.Errorf("chunk %s: bytes do not match", h)
		}
	}
	for h, n := range got {
		if _, ok := want[h]; !ok {
			t.Errorf("chunk %s: refs %d, no manifest names it", h, n)
		}
	}
}

// TestTrashGCNeverFreesAReferencedChunk races writers that trash, restore,
// purge and evict against a collector that runs without pause and without
// grace, on many seeds, and then checks every manifest's chunks (live and
// trashed) against their rows. A trash row that did not hold its chunks,
// or a restore or purge that moved references outside the transaction
// that moves the row, loses chunks here.
func TestTrashGCNeverFreesAReferencedChunk(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { raceTrashGC(t, uint64(seed)) })
	}
}

func raceTrashGC(t *testing.T, seed uint64) {
	s := newTrashStore(t, TrashOptions{MaxBytes: 200_000, MaxEntries: 40}, GCOptions{Grace: -1, SliceChunks: 4})
	const paths, workers, ops = 12, 3, 120
	// A small pool of contents, so that live files and trash rows share
	// chunks; sizes either side of the inline threshold.
	content := func(r *rand.Rand) []byte {
		return pattern([]int{300, 3000, 9000, 40_000}[r.IntN(4)], byte(r.IntN(6)))
	}
	stop := make(chan struct{})
	var gcs atomic.Int64
	var gcErr error
	var gcWG sync.WaitGroup
	gcWG.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.RunGC(ctx); err != nil {
				gcErr = err
				return
			}
			gcs.Add(1)
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range ops {
				p := fmt.Sprintf("d%d/f%d", r.IntN(2), r.IntN(paths))
				var err error
				switch op := r.IntN(10); {
				case op < 4:
					if err = s.MkdirPath(ctx, dirOf(p), 0o755, true); err == nil {
						_, err = s.WriteFile(ctx, p, content(r), 0o644)
					}
				case op < 6:
					err = s.RemovePath(ctx, p, false)
				case op == 6:
					err = s.RemovePath(ctx, dirOf(p), true)
				case op < 9:
					_, err = s.RestoreTrash(ctx, p, RestoreOptions{Force: r.IntN(2) == 0})
				default:
					_, err = s.PurgeTrash(ctx, p, time.Time{})
				}
				if err != nil && !errors.Is(err, ErrNotExist) && !errors.Is(err, ErrExist) && !errors.Is(err, ErrNotDir) {
					errs <- fmt.Errorf("%s: %w", p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	gcWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if gcErr != nil {
		t.Fatal(gcErr)
	}
	if gcs.Load() == 0 {
		t.Fatal("no collection ran during the race")
	}
	_, err := s.RunGC(ctx)
	must(t, err)
	checkRefs(t, s)
	// And everything the trash holds comes back readable.
	if _, err := s.RestoreTrash(ctx, "", RestoreOptions{Force: true}); err != nil && !errors.Is(err, ErrNotExist) {
		t.Fatal(err)
	}
	_, err = s.RunGC(ctx)
	must(t, err)
	checkRefs(t, s)
	tree(t, s) // reads every file
}
