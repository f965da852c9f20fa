package chunkstore

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// step runs one step of c in a transaction and finishes its sweep.
func step(t testing.TB, c *Collection, db *sql.DB) (GCStats, bool) {
	t.Helper()
	var sw *Sweep
	var more bool
	inTx(t, db, func(tx *sql.Tx) (err error) {
		sw, more, err = c.Step(context.Background(), tx)
		return err
	})
	st, err := sw.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return st, more
}

// TestCollectionStepsAreBounded: a bounded pass deletes at most MaxChunks
// rows and moves at most MaxChunks pack records per step, and ends with
// the dead rows gone and the mostly dead pack compacted away, the live
// chunks intact.
func TestCollectionStepsAreBounded(t *testing.T) {
	const max = 8
	s, db := splitStore(t, 1024, true)
	// 200 records of 60 KB in the current pack (12 MB, past sealMinSize),
	// 40 inline rows and 10 chunk files; then three in four records, all
	// the rows and the files lose their references.
	var keep, drop Manifest
	for i := range 200 {
		m := commitFile(t, s, db, uint64(1000+i), 60_000)
		if i%4 == 0 {
			keep = append(keep, m...)
		} else {
			drop = append(drop, m...)
		}
	}
	drop = append(drop, commitFile(t, s, db, 5000, repeat(500, 40)...)...)
	drop = append(drop, commitFile(t, s, db, 6000, repeat(ChunkSize, 10)...)...)
	dropRefs(t, s, db, drop)

	c := s.NewCollection(GCOptions{MaxChunks: max})
	if err := c.Plan(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	var total GCStats
	steps := 0
	for more := true; more; steps++ {
		var st GCStats
		st, more = step(t, c, db)
		if st.Rows > max || st.Moved > max {
			t.Fatalf("step %d deleted %d rows and moved %d records, more than %d", steps, st.Rows, st.Moved, max)
		}
		total.Rows += st.Rows
		total.Moved += st.Moved
		total.Packs += st.Packs
		total.Files += st.Files
		if steps > 1000 {
			t.Fatal("the pass does not end")
		}
	}
	t.Logf("%d steps: %+v", steps, total)
	if total.Rows != int64(len(drop)) || total.Moved != int64(len(keep)) || total.Packs != 1 || total.Files != 10 {
		t.Errorf("pass = %+v, want %d rows, %d records moved, 1 pack and 10 files", total, len(drop), len(keep))
	}
	if steps < len(drop)/max {
		t.Errorf("%d rows in %d steps", len(drop), steps)
	}
	for i, r := range keep {
		checkContent(t, s, db, Manifest{r}, uint64(1000+4*i))
	}
	if got := stats(t, s, db); got.Chunks != int64(len(keep)) || got.Unreferenced != 0 {
		t.Errorf("after the pass: %+v, want %d chunks", got, len(keep))
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

// TestCollectionGraceAndKeep: rows that lost their last reference, or that
// Has reported present while unreferenced, less than Grace ago survive a
// step, as do the hashes Keep names; without grace they go.
func TestCollectionGraceAndKeep(t *testing.T) {
	s, db := openMemStore(t)
	dropped := commitFile(t, s, db, 1, 100)
	probed := commitFile(t, s, db, 2, 100)
	kept := commitFile(t, s, db, 3, 100)
	dropRefs(t, s, db, append(append(append(Manifest{}, dropped...), probed...), kept...))
	// probed has been unreferenced for long: forget its drop, then probe it.
	s.mu.Lock()
	delete(s.gc.young, probed[0].Hash)
	delete(s.gc.young, kept[0].Hash)
	s.mu.Unlock()
	if got := has(t, s, db, probed[0].Hash); len(got) != 1 {
		t.Fatal("the unreferenced row is not reported present")
	}
	keep := func(h Hash) bool { return h == kept[0].Hash }
	st, _ := step(t, s.NewCollection(GCOptions{MaxChunks: 16, Grace: time.Hour, Keep: keep}), db)
	if st.Rows != 0 || st.Young != 2 {
		t.Fatalf("step with grace = %+v, want 0 rows and 2 young", st)
	}
	st, _ = step(t, s.NewCollection(GCOptions{MaxChunks: 16, Keep: keep}), db)
	if st.Rows != 2 {
		t.Fatalf("step without grace = %+v, want the 2 rows", st)
	}
	if got := has(t, s, db, kept[0].Hash); len(got) != 1 {
		t.Fatal("Keep did not keep its row")
	}
	if d := s.DroppedBytes(); d != 300 {
		t.Errorf("DroppedBytes = %d, want 300", d)
	}
}

func openMemStore(t testing.TB) (*Store, *sql.DB) {
	return newTestStore(t, Options{}), openMemDB(t)
}
