package syncwire

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// applyCounter counts the entries handed to the local store's Apply, and
// makes each apply take at least delay (a slow disk).
type applyCounter struct {
	*vfs.Store
	entries atomic.Int64
	delay   time.Duration
}

func (a *applyCounter) Apply(ctx context.Context, es []vfs.ChangeEntry, opts vfs.ApplyOptions) (vfs.ApplyResult, error) {
	a.entries.Add(int64(len(es)))
	if a.delay > 0 {
		time.Sleep(a.delay)
	}
	return a.Store.Apply(ctx, es, opts)
}

// pullInSlices pulls with budget until a pull reports no More, checking
// every slice: each but the last reports More and leaves a fetch cursor
// that resumes exactly, each moves at least one batch. It returns the
// slices' results.
func pullInSlices(t *testing.T, p *pair, budget Budget) []Result {
	t.Helper()
	ctx := testutil.Context(t, 120*time.Second)
	var out []Result
	for {
		res, err := p.drv.PullWith(ctx, PullOptions{Budget: budget})
		if err != nil {
			t.Fatalf("slice %d: %v", len(out), err)
		}
		out = append(out, res)
		if res.Batches == 0 && res.More {
			t.Fatalf("slice %d stopped with More before any batch: %+v", len(out), res)
		}
		if !res.More {
			return out
		}
		if len(out) > 10000 {
			t.Fatal("the slices never end")
		}
	}
}

func sumEntries(rs []Result) (n int) {
	for _, r := range rs {
		n += r.Entries
	}
	return n
}

// checkSlices: the slices together received want entries, each once
// (Apply saw exactly as many: nothing fetched twice, nothing skipped),
// and the pair converged (node_modules left out) with the fetch cursor at
// the container's rev.
func checkSlices(t *testing.T, p *pair, c *applyCounter, rs []Result, want int) {
	t.Helper()
	if got := sumEntries(rs); got != want {
		t.Errorf("slices received %d entries, want %d", got, want)
	}
	if got := c.entries.Load(); got != int64(want) {
		t.Errorf("Apply saw %d entries, want %d (each once)", got, want)
	}
	server, cont := snapshot(t, p.server), snapshot(t, p.cont)
	maps.DeleteFunc(cont, func(path string, _ string) bool { return strings.Contains("/"+path+"/", "/node_modules/") })
	if !maps.Equal(server, cont) {
		t.Errorf("the trees differ after the slices:\nserver    %v\ncontainer %v", server, cont)
	}
	ws, err := p.server.Watermarks(t.Context(), "container")
	if err != nil {
		t.Fatal(err)
	}
	if ws.Fetch != watermark.At(p.cont.CurrentRev()) {
		t.Errorf("fetch cursor after the last slice %v, want the clean drain's %v", ws.Fetch, watermark.At(p.cont.CurrentRev()))
	}
}

func TestBudgetedPullInSlicesLosesNothing(t *testing.T) {
	const batch = 32
	for _, tc := range []struct {
		name   string
		budget Budget
		files  int
		// perSlice is the batches each slice but the last moves (0: not
		// fixed, a wall budget).
		perSlice int
	}{
		{"one entry", Budget{Entries: 1}, 200, 1},
		{"entries across batches", Budget{Entries: batch + 1}, 200, 2},
		{"a budget of exactly the feed", Budget{Entries: 200}, 200, 7},
		{"chunk bytes", Budget{Bytes: 2*batch*1000 + 500}, 200, 3},
		{"a nanosecond of wall time", Budget{Wall: time.Nanosecond}, 200, 1},
		{"negative bounds bound nothing", Budget{Entries: -1, Bytes: -1, Wall: -1}, 200, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, DriverOptions{BatchEntries: batch})
			c := &applyCounter{Store: p.server}
			p.drv.local = c
			write(t, p.cont, "tree/seed", []byte("x"))
			for i := range tc.files - 2 {
				// Distinct content: every file brings 1000 chunk bytes.
				write(t, p.cont, fmt.Sprintf("tree/f%04d", i), randBytes(byte(i), 1000))
			}
			// The feed ends in ignored paths: they never cross, and only
			// the last slice's clean drain moves the cursor past them.
			write(t, p.cont, "tree/node_modules/a", []byte("ignored"))
			write(t, p.cont, "tree/node_modules/b", []byte("ignored"))
			want := tc.files // tree, seed and the files
			rs := pullInSlices(t, p, tc.budget)
			batches := (want + batch - 1) / batch
			if tc.perSlice > 0 {
				if wantSlices := (batches + tc.perSlice - 1) / tc.perSlice; len(rs) != wantSlices {
					t.Errorf("%d slices, want %d (%d batches, %d a slice)", len(rs), wantSlices, batches, tc.perSlice)
				}
				for i, r := range rs[:len(rs)-1] {
					if r.Batches != tc.perSlice {
						t.Errorf("slice %d moved %d batches, want %d", i, r.Batches, tc.perSlice)
					}
				}
			}
			checkSlices(t, p, c, rs, want)
		})
	}
}

// A wall budget on a slow store stops the pull a few batches in, and the
// slices still add up.
func TestWallBudgetStopsASlowPull(t *testing.T) {
	p := newPair(t, DriverOptions{BatchEntries: 16})
	c := &applyCounter{Store: p.server, delay: 20 * time.Millisecond}
	p.drv.local = c
	const n = 639
	populate(t, p.cont, "tree", n) // 40 batches of 16
	rs := pullInSlices(t, p, Budget{Wall: 60 * time.Millisecond})
	if len(rs) < 2 {
		t.Errorf("a 60 ms budget over 40 batches of 20 ms each took %d slice(s)", len(rs))
	}
	checkSlices(t, p, c, rs, n+1)
}

// One rev of 2,002 entries (a directory rename) is cut by the budget
// inside the rev: each slice resumes at its (rev, path) cursor.
func TestBudgetedPullStopsInsideOneRev(t *testing.T) {
	p := newPair(t, DriverOptions{BatchEntries: 100})
	ctx := testutil.Context(t, 120*time.Second)
	const n = 1000
	populate(t, p.cont, "big", n)
	if _, err := p.drv.PullOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.cont.RenamePath(ctx, "big", "moved"); err != nil {
		t.Fatal(err)
	}
	rev := p.cont.CurrentRev()
	c := &applyCounter{Store: p.server}
	p.drv.local = c
	sess := p.client.Current()
	var rs []Result
	for {
		res, err := p.drv.PullWith(ctx, PullOptions{Budget: Budget{Entries: 250}})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, res)
		if !res.More {
			break
		}
		ws, _ := p.server.Watermarks(ctx, "container")
		if ws.Fetch.Rev != rev || !ws.Fetch.Partial {
			t.Fatalf("after slice %d the fetch cursor is %v, want one inside rev %d", len(rs), ws.Fetch, rev)
		}
	}
	if len(rs) != 7 { // 2,002 entries, 300 a slice
		t.Errorf("%d slices, want 7", len(rs))
	}
	if p.client.Current() != sess {
		t.Error("a budgeted pull ended the session: the feed stream was not closed cleanly")
	}
	checkSlices(t, p, c, rs, 2*n+2)
}

func TestProgressAfterEveryBatch(t *testing.T) {
	p := newPair(t, DriverOptions{BatchEntries: 10})
	ctx := testutil.Context(t, 60*time.Second)
	files := func(s *vfs.Store, dir string, seed int) {
		for i := range 95 {
			write(t, s, fmt.Sprintf("%s/f%03d", dir, i), randBytes(byte(seed+i), 2000+seed))
		}
	}
	for _, tc := range []struct {
		op    string
		setup func()
		call  func(*Exchange, context.Context) (Result, error)
	}{
		{"push", func() { files(p.server, "out", 0) }, (*Exchange).Push},
		{"pull", func() { files(p.cont, "in", 100) }, (*Exchange).Pull},
		{"pull", func() { files(p.cont, "more", 50) }, func(x *Exchange, ctx context.Context) (Result, error) {
			// Budgeted: progress stops with the pull.
			return x.PullWith(ctx, PullOptions{Budget: Budget{Entries: 1}})
		}},
	} {
		tc.setup()
		var seen []Result
		var res Result
		err := p.drv.Do(ctx, func(ctx context.Context, x *Exchange) (err error) {
			x.OnProgress(func(op string, total Result) {
				if op != tc.op {
					t.Errorf("progress of a %s says %q", tc.op, op)
				}
				seen = append(seen, total)
			})
			res, err = tc.call(x, ctx)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.op, err)
		}
		if len(seen) != res.Batches || res.Batches == 0 {
			t.Fatalf("%s: %d progress calls for %d batches", tc.op, len(seen), res.Batches)
		}
		for i := 1; i < len(seen); i++ {
			a, b := seen[i-1], seen[i]
			if b.Entries <= a.Entries || b.Batches != a.Batches+1 || b.Chunks < a.Chunks || b.ChunkBytes < a.ChunkBytes {
				t.Errorf("%s: progress went from %+v to %+v", tc.op, a, b)
			}
		}
		last := seen[len(seen)-1]
		if last.Entries != res.Entries || last.Applied != res.Applied || last.Chunks != res.Chunks ||
			last.ChunkBytes != res.ChunkBytes || last.Batches != res.Batches || last.More != res.More {
			t.Errorf("%s: last progress %+v, result %+v", tc.op, last, res)
		}
		if res.ChunkBytes == 0 {
			t.Errorf("%s moved no chunk bytes: %+v", tc.op, res)
		}
	}
}

// A connection cut in the middle of a sliced pull costs at most the batch
// it cut: the slices after it resume at the last committed batch and
// together bring every entry.
func TestCutSlicedPullResumes(t *testing.T) {
	p := newPair(t, DriverOptions{BatchEntries: 50})
	cutter := &applyCutter{Store: p.server, client: p.client, cut: 3}
	p.drv.local = cutter
	ctx := testutil.Context(t, 120*time.Second)
	const n = 400
	populate(t, p.cont, "tree", n)
	budget := PullOptions{Budget: Budget{Entries: 100}}
	res, err := p.drv.PullWith(ctx, budget) // batches 1 and 2
	if err != nil || !res.More || res.Entries != 100 {
		t.Fatalf("first slice: %+v, %v", res, err)
	}
	if _, err := p.drv.PullWith(ctx, budget); err == nil { // batch 3 is cut
		t.Fatal("the cut slice did not fail")
	}
	got := res.Entries
	for more := true; more; {
		res, err := p.drv.PullWith(ctx, budget)
		if err != nil {
			t.Fatal(err)
		}
		got += res.Entries
		more = res.More
	}
	if got != n+1 {
		t.Errorf("the slices moved %d entries, want %d", got, n+1)
	}
	if refetched := cutter.entries.Load() - (n + 1); refetched != 50 {
		t.Errorf("re-fetched %d entries, want the one cut batch of 50", refetched)
	}
	assertSameTree(t, p.server, p.cont)
}
