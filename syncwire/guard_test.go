package syncwire

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

var errTooMany = errors.New("too many deletes")

// limitGuard refuses a pull from limit live deletes on; it counts the
// paths it was asked about.
type limitGuard struct {
	s      *vfs.Store
	limit  int
	asked  map[string]int
	refuse int // the count it refused at
}

func (g *limitGuard) Live(ctx context.Context, paths []string) (int, error) {
	if g.asked == nil {
		g.asked = map[string]int{}
	}
	for _, p := range paths {
		g.asked[p]++
	}
	return g.s.CountLive(ctx, paths)
}

func (g *limitGuard) Refuse(ctx context.Context, deletes int) error {
	if deletes >= g.limit {
		g.refuse = deletes
		return fmt.Errorf("%w: %d", errTooMany, deletes)
	}
	return nil
}

// massDeletePair has a container with old/ files the server has pulled,
// then, in feed order: new files before the deletes (a directory and 20
// files, more than a batch), the deletes of every old file, and files
// after them (a directory and 2 files): 24 creations.
func massDeletePair(t *testing.T, old int) (*pair, *applyCounter, int) {
	t.Helper()
	p := newPair(t, DriverOptions{BatchEntries: 16})
	ctx := testutil.Context(t, 60*time.Second)
	for i := range old {
		write(t, p.cont, fmt.Sprintf("old/f%03d", i), randBytes(byte(i), 100))
	}
	if _, err := p.drv.PullOnce(ctx); err != nil {
		t.Fatal(err)
	}
	c := &applyCounter{Store: p.server}
	p.drv.local = c
	for i := range 20 {
		write(t, p.cont, fmt.Sprintf("new/f%03d", i), randBytes(byte(100+i), 100))
	}
	for i := range old {
		if err := p.cont.RemovePath(ctx, fmt.Sprintf("old/f%03d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		write(t, p.cont, fmt.Sprintf("late/f%03d", i), randBytes(byte(200+i), 100))
	}
	// new/ and late/ are a directory and their files; old/ stays.
	return p, c, 21 + old + 3
}

func TestGuardPausesAMassDeleteBeforeAnyDeletion(t *testing.T) {
	const old = 60
	p, _, _ := massDeletePair(t, old)
	ctx := testutil.Context(t, 60*time.Second)
	before, err := p.server.Watermarks(ctx, "container")
	if err != nil {
		t.Fatal(err)
	}
	g := &limitGuard{s: p.server, limit: 30}
	_, err = p.drv.PullWith(ctx, PullOptions{Guard: g})
	if !errors.Is(err, errTooMany) {
		t.Fatalf("pull = %v, want the guard's refusal", err)
	}
	// 60 deletes less the 24 creations (those applied before the deletes
	// may not all be counted yet: the count errs towards pausing).
	if g.refuse < old-24 || g.refuse > old {
		t.Errorf("refused at %d, want the net count, %d to %d", g.refuse, old-24, old)
	}
	for i := range old {
		if _, err := p.server.Stat(ctx, fmt.Sprintf("old/f%03d", i)); err != nil {
			t.Fatalf("old/f%03d after the paused pull: %v (a deletion was applied)", i, err)
		}
	}
	ws, err := p.server.Watermarks(ctx, "container")
	if err != nil {
		t.Fatal(err)
	}
	if !before.Fetch.Less(ws.Fetch) {
		t.Errorf("fetch cursor %v did not move past the batches before the deletes (from %v)", ws.Fetch, before.Fetch)
	}
	// Confirmed: the same pull without the guard applies everything.
	if _, err := p.drv.PullWith(ctx, PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if server, cont := snapshot(t, p.server), snapshot(t, p.cont); !maps.Equal(server, cont) {
		t.Errorf("trees differ after the confirmed pull:\nserver    %v\ncontainer %v", server, cont)
	}
}

func TestGuardUnderTheLimitAppliesEachEntryOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget Budget
	}{{"one pull", Budget{}}, {"in slices", Budget{Entries: 16}}} {
		t.Run(tc.name, func(t *testing.T) {
			const old = 60
			p, c, want := massDeletePair(t, old)
			ctx := testutil.Context(t, 60*time.Second)
			g := &limitGuard{s: p.server, limit: old + 1}
			var checked GuardState
			for range 1000 {
				res, err := p.drv.PullWith(ctx, PullOptions{Guard: g, Budget: tc.budget, Checked: checked})
				if err != nil {
					t.Fatal(err)
				}
				checked = res.Checked
				if !res.More {
					break
				}
			}
			if checked != (GuardState{}) {
				t.Errorf("guard state after the clean drain = %+v, want zero", checked)
			}
			if got := c.entries.Load(); got != int64(want) {
				t.Errorf("Apply saw %d entries, want %d (each once)", got, want)
			}
			// Every path was asked about once at most: the slices after
			// the look-ahead did not count again.
			for p, n := range g.asked {
				if n > 1 {
					t.Errorf("the guard was asked about %s %d times", p, n)
				}
			}
			if len(g.asked) < old {
				t.Errorf("the guard was asked about %d paths, want at least the %d deletes", len(g.asked), old)
			}
			if server, cont := snapshot(t, p.server), snapshot(t, p.cont); !maps.Equal(server, cont) {
				t.Errorf("trees differ:\nserver    %v\ncontainer %v", server, cont)
			}
			ws, err := p.server.Watermarks(ctx, "container")
			if err != nil {
				t.Fatal(err)
			}
			if ws.Fetch != watermark.At(p.cont.CurrentRev()) {
				t.Errorf("fetch cursor %v, want %v", ws.Fetch, watermark.At(p.cont.CurrentRev()))
			}
		})
	}
}

// Deletes of paths the server never had (a build's temporary files) are
// no deletions: they do not count.
func TestGuardCountsOnlyLiveDeletes(t *testing.T) {
	p := newPair(t, DriverOptions{BatchEntries: 16})
	ctx := testutil.Context(t, 60*time.Second)
	for i := range 100 {
		write(t, p.cont, fmt.Sprintf("tmp/f%03d", i), []byte("x"))
	}
	if err := p.cont.RemovePath(ctx, "tmp", true); err != nil {
		t.Fatal(err)
	}
	g := &limitGuard{s: p.server, limit: 1}
	if _, err := p.drv.PullWith(ctx, PullOptions{Guard: g}); err != nil {
		t.Fatalf("pull of deletes the server never had: %v", err)
	}
}

// A directory renamed in the container is a delete of every old path and
// a create of every new one: nothing is lost, and it does not pause.
func TestGuardWeighsDeletesAgainstCreations(t *testing.T) {
	p := newPair(t, DriverOptions{BatchEntries: 16})
	ctx := testutil.Context(t, 60*time.Second)
	for i := range 60 {
		write(t, p.cont, fmt.Sprintf("big/f%03d", i), randBytes(byte(i), 100))
	}
	if _, err := p.drv.PullOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.cont.RenamePath(ctx, "big", "moved"); err != nil {
		t.Fatal(err)
	}
	g := &limitGuard{s: p.server, limit: 10}
	if _, err := p.drv.PullWith(ctx, PullOptions{Guard: g}); err != nil {
		t.Fatalf("pull of a directory rename: %v", err)
	}
	if server, cont := snapshot(t, p.server), snapshot(t, p.cont); !maps.Equal(server, cont) {
		t.Errorf("trees differ:\nserver    %v\ncontainer %v", server, cont)
	}
	// The same deletes with nothing created pause.
	if err := p.cont.RemovePath(ctx, "moved", true); err != nil {
		t.Fatal(err)
	}
	if _, err := p.drv.PullWith(ctx, PullOptions{Guard: g}); !errors.Is(err, errTooMany) {
		t.Fatalf("pull of the rm -r = %v, want the guard's refusal", err)
	}
}
