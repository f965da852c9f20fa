package vfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wsync/wsync/watermark"
)

func TestAgreed(t *testing.T) {
	a, b, c, d := Segment{1, 11}, Segment{41, 22}, Segment{31, 33}, Segment{61, 44}
	for _, tc := range []struct {
		name     string
		was, now Lineage
		rev      int64
		want     int64
	}{
		{"the same lineage", Lineage{a, b}, Lineage{a, b}, 50, 50},
		{"opened again since", Lineage{a, b}, Lineage{a, b, d}, 50, 50},
		{"opened again before the rev", Lineage{a}, Lineage{a, b}, 50, 40},
		{"another opening after the last segment both hold", Lineage{a, b}, Lineage{a, Segment{46, 55}}, 50, 40},
		{"restored into the rev's segment, behind it", Lineage{a, b}, Lineage{a, b, Segment{46, 55}}, 50, 45},
		{"restored into an earlier segment", Lineage{a, b}, Lineage{a, c}, 50, 30},
		{"restored behind the first segment", Lineage{a, b}, Lineage{Segment{1, 66}}, 50, 0},
		{"another history", Lineage{a, b}, Lineage{Segment{1, 77}, Segment{9, 88}}, 50, 0},
		{"the rev before what was recorded", Lineage{b}, Lineage{b}, 30, 0},
		{"nothing recorded", nil, Lineage{a}, 50, 0},
	} {
		if got := Agreed(tc.was, tc.now, tc.rev); got != tc.want {
			t.Errorf("%s: Agreed(%v, %v, %d) = %d, want %d", tc.name, tc.was, tc.now, tc.rev, got, tc.want)
		}
	}
}

func TestLineageValid(t *testing.T) {
	long := make(Lineage, MaxLineage+1)
	for i := range long {
		long[i] = Segment{int64(i + 1), 1}
	}
	for _, l := range []Lineage{
		{{0, 1}},
		{{1, 0}},
		{{5, 1}, {5, 2}},
		{{5, 1}, {4, 2}},
		{{1<<62 + 1, 1}},
		long,
	} {
		if err := l.Valid(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Valid(%v) = %v, want ErrInvalid", l, err)
		}
	}
	if err := long[:MaxLineage].Valid(); err != nil {
		t.Errorf("a lineage of MaxLineage segments: %v", err)
	}
	for _, b := range [][]byte{{1}, {1, 1}, {2, 1, 1, 1}, {1, 0, 1}, {1, 1, 0}, {0, 0}} {
		if _, err := decodeLineage(b); err == nil {
			t.Errorf("decodeLineage(%v) accepted", b)
		}
	}
	l := Lineage{{1, 5}, {300, 1 << 60}}
	if got, err := decodeLineage(appendLineage(nil, l)); err != nil || fmt.Sprint(got) != fmt.Sprint(l) {
		t.Errorf("lineage round trip: %v, %v", got, err)
	}
}

// Each opening starts a segment at the rev after the store's; one that
// stamped no rev is replaced by the next; the store keeps the last
// MaxLineage.
func TestStoreLineageGrowsWithEachOpening(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	open := func() *Store {
		s, err := Open(ctx, path, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	first := s.Lineage()
	if len(first) != 1 || first[0].From != 1 || first[0].ID == 0 {
		t.Fatalf("a new store's lineage = %v", first)
	}
	must(t, s.Close())
	s = open()
	if l := s.Lineage(); len(l) != 1 || l[0].From != 1 || l[0] == first[0] {
		t.Fatalf("reopened without a write: lineage %v, first was %v", l, first)
	}
	writeFile(t, s, "a", []byte("1"))
	rev := s.CurrentRev()
	must(t, s.Close())
	s = open()
	if l := s.Lineage(); len(l) != 2 || l[1].From != rev+1 {
		t.Fatalf("reopened after rev %d: lineage %v", rev, l)
	}
	must(t, s.Close())
	for i := range MaxLineage + 10 {
		s = open()
		writeFile(t, s, "a", []byte{byte(i)})
		must(t, s.Close())
	}
	s = open()
	defer s.Close()
	l := s.Lineage()
	if len(l) != MaxLineage || l[len(l)-1].From != s.CurrentRev()+1 {
		t.Fatalf("after %d openings: %d segments, last %v at rev %d", MaxLineage+10, len(l), l[len(l)-1], s.CurrentRev())
	}
	if err := l.Valid(); err != nil {
		t.Fatal(err)
	}
}

// A store restored from a copy of itself stamps again revs a peer fetched
// before the restore. MeetPeer, given the lineage it recorded and the
// restored store's, takes the fetch cursor back to the copy's rev and
// drops the bounce run and the merge bases; the push cursors stay (the
// driver reconciles them with what the store says it holds).
func TestMeetPeerFindsARestoredStore(t *testing.T) {
	dir := t.TempDir()
	live, copyDir := filepath.Join(dir, "live"), filepath.Join(dir, "copy")
	path := filepath.Join(live, "store.db")
	open := func() *Store {
		s, err := Open(ctx, path, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c := open()
	for i := range 10 {
		writeFile(t, c, fmt.Sprintf("base%d", i), []byte("x"))
	}
	copied := c.CurrentRev()
	must(t, c.Close())
	must(t, os.CopyFS(copyDir, os.DirFS(live)))

	// The container runs on past the copy; the server meets it and
	// fetches all of it.
	c = open()
	for i := range 20 {
		writeFile(t, c, fmt.Sprintf("later%d", i), []byte("y"))
	}
	srv := newStore(t)
	met, err := srv.MeetPeer(ctx, "c", c.ID(), c.Lineage())
	if err != nil || met.Store || met.Restored {
		t.Fatalf("first meeting: %+v, %v", met, err)
	}
	fetched := c.CurrentRev()
	st := srv.Chunks().NewStage()
	defer st.Release()
	ws := watermark.Set{Push: watermark.At(3), Fetch: watermark.At(fetched), AppliedPush: watermark.At(2)}
	_, err = srv.Apply(ctx, []ChangeEntry{stageEntry(t, st, "later0", []byte("y"))}, ApplyOptions{Source: Upstream, Stage: st, Peer: "c", Watermarks: &ws, Bounce: true})
	must(t, err)
	must(t, srv.Delivered(ctx, "c", ws, []ChangeEntry{stageEntry(t, st, "later0", []byte("y"))}, nil, true))
	must(t, c.Close())

	// Restarted as it was: the same history.
	c = open()
	if met, err := srv.MeetPeer(ctx, "c", c.ID(), c.Lineage()); err != nil || met.Store || met.Restored || met.Fetch != ws.Fetch {
		t.Fatalf("restarted: %+v, %v", met, err)
	}
	must(t, c.Close())

	// Restored from the copy: revs after it are another history's.
	must(t, os.RemoveAll(live))
	must(t, os.CopyFS(live, os.DirFS(copyDir)))
	c = open()
	defer c.Close()
	if c.ID() == "" || c.CurrentRev() != copied {
		t.Fatalf("restored store at rev %d, want %d", c.CurrentRev(), copied)
	}
	for i := range 30 {
		writeFile(t, c, fmt.Sprintf("new%d", i), []byte("z"))
	}
	met, err = srv.MeetPeer(ctx, "c", c.ID(), c.Lineage())
	if err != nil || met.Store || !met.Restored || met.Fetch != watermark.At(copied) {
		t.Fatalf("restored: %+v, %v; want the fetch cursor back at %d", met, err, copied)
	}
	got, err := srv.Watermarks(ctx, "c")
	must(t, err)
	if want := (watermark.Set{Push: ws.Push, Fetch: watermark.At(copied), AppliedPush: ws.AppliedPush}); got != want {
		t.Errorf("watermarks after the restore = %+v, want %+v", got, want)
	}
	if run, _ := srv.Bounce(ctx, "c"); run != (BounceRun{}) {
		t.Errorf("bounce run after the restore = %v", run)
	}
	if n := countBases(t, srv, "c"); n != 0 {
		t.Errorf("%d merge bases kept after the restore", n)
	}
	// Met again: the restored lineage is the one recorded now.
	if met, err := srv.MeetPeer(ctx, "c", c.ID(), c.Lineage()); err != nil || met.Restored || met.Fetch != watermark.At(copied) {
		t.Errorf("met again after the restore: %+v, %v", met, err)
	}
	if _, err := srv.MeetPeer(ctx, "c", c.ID(), Lineage{{5, 1}, {5, 2}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a lineage out of order: %v, want ErrInvalid", err)
	}
}
