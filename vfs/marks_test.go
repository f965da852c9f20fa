package vfs

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/watermark"
)

// TestWatermarksKeptUntilAWrite: a read of a peer's watermarks with
// nothing written since the last read runs no statement, and every kind
// of write that changes them (SetWatermarks, an Apply carrying them, a
// meeting with another store) shows in the next read.
func TestWatermarksKeptUntilAWrite(t *testing.T) {
	s := newStore(t)
	read := func(peer string) watermark.Set {
		t.Helper()
		got, err := s.Watermarks(ctx, peer)
		must(t, err)
		return got
	}
	set := watermark.Set{Push: watermark.Within(4, "a/b"), Fetch: watermark.At(7), AppliedPush: watermark.At(2)}
	must(t, s.SetWatermarks(ctx, "p", set))
	if got := read("p"); got != set {
		t.Fatalf("after set = %+v, want %+v", got, set)
	}
	if q := countStatementsOn(t, nil, func() {
		if got := read("p"); got != set {
			t.Errorf("kept = %+v, want %+v", got, set)
		}
	}); len(q) != 0 {
		t.Errorf("a read with nothing written since ran %q", q)
	}
	// An unknown peer is kept as none too.
	if got := read("other"); got != (watermark.Set{}) {
		t.Errorf("unknown peer = %+v", got)
	}
	if q := countStatementsOn(t, nil, func() { read("other"); read("p") }); len(q) != 0 {
		t.Errorf("reads of two peers with nothing written since ran %q", q)
	}

	// A write of anything else moves the counter: read again, same value.
	writeFile(t, s, "f", []byte("x"))
	if q := countStatementsOn(t, nil, func() {
		if got := read("p"); got != set {
			t.Errorf("after an unrelated write = %+v, want %+v", got, set)
		}
	}); len(q) == 0 {
		t.Error("a read after a write ran no statement")
	}

	set.Fetch = watermark.At(9)
	must(t, s.SetWatermarks(ctx, "p", set))
	if got := read("p"); got != set {
		t.Errorf("after a second set = %+v, want %+v", got, set)
	}

	st := s.Chunks().NewStage()
	defer st.Release()
	ws := set
	ws.Fetch = watermark.Within(12, "g")
	_, err := s.Apply(ctx, []ChangeEntry{stageEntry(t, st, "g", []byte("1"))}, ApplyOptions{Source: Upstream, Stage: st, Peer: "p", Watermarks: &ws})
	must(t, err)
	if got := read("p"); got != ws {
		t.Errorf("after an apply = %+v, want %+v", got, ws)
	}

	if _, err := s.MeetPeer(ctx, "p", "store-a", -1); err != nil {
		t.Fatal(err)
	}
	read("p")
	met, err := s.MeetPeer(ctx, "p", "store-b", -1)
	if err != nil || !met.Store {
		t.Fatalf("another store: %+v, %v", met, err)
	}
	if got, want := read("p"), (watermark.Set{Push: ws.Push, AppliedPush: ws.AppliedPush}); got != want {
		t.Errorf("after meeting another store = %+v, want %+v", got, want)
	}
}

// TestWatermarksReadYourWrites: readers racing a writer never see a
// cursor older than one whose write returned before their read began,
// and see the last one once the writer is done.
func TestWatermarksReadYourWrites(t *testing.T) {
	s, err := Open(ctx, t.TempDir()+"/s.db", Options{NoSync: true, GroupWindow: time.Hour})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	const writes = 300
	var done sync.WaitGroup
	var last sync.Map // peer -> int64, the last rev whose write returned
	errs := make(chan error, 16)
	peers := []string{"p", "q"}
	for _, peer := range peers {
		last.Store(peer, int64(0))
	}
	stop := make(chan struct{})
	for r := range 6 {
		done.Go(func() {
			peer := peers[r%len(peers)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor, _ := last.Load(peer)
				got, err := s.Watermarks(ctx, peer)
				if err != nil {
					errs <- err
					return
				}
				if got.Fetch.Rev < floor.(int64) {
					errs <- fmt.Errorf("%s: read fetch %d after the write of %d returned", peer, got.Fetch.Rev, floor)
					return
				}
			}
		})
	}
	// Mount mutations in open groups beside the writes move the counter
	// too, and commit at the reads.
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	for i := 1; i <= writes; i++ {
		peer := peers[i%len(peers)]
		must(t, s.SetWatermarks(ctx, peer, watermark.Set{Fetch: watermark.At(int64(i))}))
		last.Store(peer, int64(i))
		if i%7 == 0 {
			_, err := s.Create(ctx, d.Ino, fmt.Sprint("f", i), NewAttr{Mode: 0o644})
			must(t, err)
		}
	}
	close(stop)
	done.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, peer := range peers {
		want, _ := last.Load(peer)
		if got, _ := s.Watermarks(ctx, peer); got.Fetch.Rev != want.(int64) || want.(int64) < writes-1 {
			t.Errorf("%s at the end: fetch %d, want %d", peer, got.Fetch.Rev, want)
		}
	}
}
