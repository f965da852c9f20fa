package vfs

import (
	"errors"
	"testing"

	"github.com/wsync/wsync/watermark"
)

func TestBounceRunRule(t *testing.T) {
	r := BounceRun{}.Extend(10, 20)
	if r != (BounceRun{10, 20}) {
		t.Fatalf("first run = %v", r)
	}
	if r = r.Extend(20, 25); r != (BounceRun{10, 25}) {
		t.Errorf("contiguous apply: run = %v, want (10, 25]", r)
	}
	if r2 := r.Extend(25, 25); r2 != r {
		t.Errorf("an apply that stamped nothing changed the run to %v", r2)
	}
	if r2 := r.Extend(26, 30); r2 != (BounceRun{26, 30}) {
		t.Errorf("apply after a local rev: run = %v, want a new run (26, 30]", r2)
	}
	for _, c := range []struct{ in, want watermark.Cursor }{
		{watermark.At(9), watermark.At(9)},                     // a rev before the run not held: no skip
		{watermark.Within(10, "x"), watermark.Within(10, "x")}, // inside rev 10: not all of it held
		{watermark.At(10), watermark.At(25)},
		{watermark.Within(17, "p"), watermark.At(25)},
		{watermark.At(25), watermark.At(25)},
		{watermark.At(40), watermark.At(40)}, // never backwards
	} {
		if got := r.Skip(c.in); got != c.want {
			t.Errorf("Skip(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := (BounceRun{}).Skip(watermark.At(0)); got != watermark.At(0) {
		t.Errorf("empty run moved a cursor to %v", got)
	}
}

// Apply with Bounce records its stamped revs in the same transaction; a
// push cursor lowered below the stored one (a re-baseline) forgets them.
func TestApplyRecordsBounceRun(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	defer st.Release()
	ws := watermark.Set{Push: watermark.At(s.CurrentRev())}
	if _, err := s.Apply(ctx, []ChangeEntry{stageEntry(t, st, "a", []byte("1"))}, ApplyOptions{Source: Upstream, Stage: st, Bounce: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bounce without watermarks: %v, want ErrInvalid", err)
	}
	opts := ApplyOptions{Source: Upstream, Stage: st, Peer: "p", Watermarks: &ws, Bounce: true}
	r1, err := s.Apply(ctx, []ChangeEntry{stageEntry(t, st, "a", []byte("1")), stageEntry(t, st, "b", []byte("2"))}, opts)
	must(t, err)
	r2, err := s.Apply(ctx, []ChangeEntry{stageEntry(t, st, "c", []byte("3"))}, opts)
	must(t, err)
	run, err := s.Bounce(ctx, "p")
	must(t, err)
	if want := (BounceRun{r1.RevBefore, r2.LastRev}); run != want || run.To <= run.From {
		t.Errorf("run = %v, want %v", run, want)
	}
	if got := run.Skip(ws.Push); got != watermark.At(s.CurrentRev()) {
		t.Errorf("push cursor %v skips to %v, want the current rev %d", ws.Push, got, s.CurrentRev())
	}
	if other, _ := s.Bounce(ctx, "q"); other != (BounceRun{}) {
		t.Errorf("another peer's run = %v", other)
	}
	// Raising the push cursor keeps the run; lowering it forgets it.
	ws.Push = watermark.At(r2.LastRev)
	must(t, s.SetWatermarks(ctx, "p", ws))
	if got, _ := s.Bounce(ctx, "p"); got != run {
		t.Errorf("after raising push: run = %v, want %v", got, run)
	}
	ws.Push = watermark.At(0)
	must(t, s.SetWatermarks(ctx, "p", ws))
	if got, _ := s.Bounce(ctx, "p"); got != (BounceRun{}) {
		t.Errorf("after lowering push: run = %v, want none", got)
	}
}

// MeetPeer: the first store met under a name is recorded as it is, and so
// is one met again; another store behind the name takes the fetch cursor
// and the bounce run back to the start and drops the merge bases, in one
// transaction, keeping the push cursors, which the driver reconciles with
// what the new store says it holds.
func TestMeetPeerResetsWhatDescribedAnotherStore(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	defer st.Release()
	if met, err := s.MeetPeer(ctx, "p", "store-a", -1); err != nil || met.Store || met.Restored {
		t.Fatalf("first meeting: %+v, %v", met, err)
	}
	ws := watermark.Set{Push: watermark.At(7), Fetch: watermark.At(40), AppliedPush: watermark.At(5)}
	opts := ApplyOptions{Source: Upstream, Stage: st, Peer: "p", Watermarks: &ws, Bounce: true}
	_, err := s.Apply(ctx, []ChangeEntry{stageEntry(t, st, "a", []byte("1"))}, opts)
	must(t, err)
	must(t, s.Delivered(ctx, "p", ws, []ChangeEntry{stageEntry(t, st, "a", []byte("1"))}, nil, true))
	if n := countBases(t, s, "p"); n == 0 {
		t.Fatal("no merge base kept for p")
	}
	if met, err := s.MeetPeer(ctx, "p", "store-a", -1); err != nil || met.Store || met.Restored || met.Fetch != ws.Fetch {
		t.Fatalf("the same store again: %+v, %v", met, err)
	}
	if got, _ := s.Watermarks(ctx, "p"); got != ws {
		t.Fatalf("the same store again changed the watermarks to %+v", got)
	}
	met, err := s.MeetPeer(ctx, "p", "store-b", -1)
	if err != nil || !met.Store || met.Fetch != (watermark.Cursor{}) {
		t.Fatalf("another store: %+v, %v", met, err)
	}
	got, err := s.Watermarks(ctx, "p")
	must(t, err)
	if want := (watermark.Set{Push: ws.Push, AppliedPush: ws.AppliedPush}); got != want {
		t.Errorf("watermarks after another store = %+v, want %+v", got, want)
	}
	if run, _ := s.Bounce(ctx, "p"); run != (BounceRun{}) {
		t.Errorf("bounce run after another store = %v", run)
	}
	if n := countBases(t, s, "p"); n != 0 {
		t.Errorf("%d merge bases kept after another store", n)
	}
	if met, err := s.MeetPeer(ctx, "q", "store-c", -1); err != nil || met.Store || met.Restored {
		t.Errorf("a new name: %+v, %v", met, err)
	}
	if _, err := s.MeetPeer(ctx, "q", "", -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("an empty store id: %v, want ErrInvalid", err)
	}
}

func countBases(t *testing.T, s *Store, peer string) int {
	t.Helper()
	var n int
	must(t, s.committed().QueryRowContext(ctx, `SELECT count(*) FROM bases WHERE peer = ?`, peer).Scan(&n))
	return n
}

// An applied-push cursor lowered below the stored one is the peer's feed
// going back (it lost the record of pushes we applied, or was restored):
// the bounce run kept for it goes, so its pulls fetch back the entries it
// may no longer have; the merge bases stay (they describe what we hold).
// One moving forward keeps the run.
func TestAppliedPushGoingBackForgetsTheBounceRun(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	defer st.Release()
	ws := watermark.Set{Fetch: watermark.At(9), AppliedPush: watermark.At(9)}
	_, err := s.Apply(ctx, []ChangeEntry{stageEntry(t, st, "a", []byte("1"))}, ApplyOptions{Source: Upstream, Stage: st, Peer: "p", Watermarks: &ws, Bounce: true})
	must(t, err)
	run, _ := s.Bounce(ctx, "p")
	if run == (BounceRun{}) {
		t.Fatal("no bounce run after an apply of the peer's entry")
	}
	ws.AppliedPush = watermark.At(12)
	must(t, s.SetWatermarks(ctx, "p", ws))
	if got, _ := s.Bounce(ctx, "p"); got != run {
		t.Fatalf("bounce run after the applied-push cursor moved forward = %v, want %v", got, run)
	}
	ws.AppliedPush = watermark.At(4)
	must(t, s.SetWatermarks(ctx, "p", ws))
	if got, _ := s.Bounce(ctx, "p"); got != (BounceRun{}) {
		t.Errorf("bounce run after the applied-push cursor went back = %v, want none", got)
	}
	if got, _ := s.Watermarks(ctx, "p"); got != ws {
		t.Errorf("watermarks = %+v, want %+v", got, ws)
	}
}
