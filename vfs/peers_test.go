package vfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/wsync/wsync/watermark"
)

// NoteServed keeps the highest rev handed out, never past the store's
// own, across a reopen and against concurrent callers; an older store
// migrated counts all it holds as served.
func TestNoteServedKeepsTheHighest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	s := openStore(t, path)
	if got := s.Served(); got != 0 {
		t.Fatalf("a new store served %d", got)
	}
	for i := range 20 {
		writeFile(t, s, fmt.Sprintf("f%d", i), []byte("x"))
	}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { s.NoteServed(ctx, int64(i%20)) })
	}
	wg.Wait()
	if got := s.Served(); got != 19 {
		t.Fatalf("served %d after 100 callers up to 19", got)
	}
	s.NoteServed(ctx, 5)
	s.NoteServed(ctx, 1000)
	if got, rev := s.Served(), s.CurrentRev(); got != rev {
		t.Fatalf("served %d after a rev past the store's %d", got, rev)
	}
	want := s.Served()
	must(t, s.Close())
	if got := openStore(t, path).Served(); got != want {
		t.Errorf("served %d after a reopen, want %d", got, want)
	}

	// A store from before the record (schema v11), at rev 7.
	old, db := oldSchema(t, 11)
	if _, err := db.Exec(`UPDATE meta SET value = 7 WHERE key = 'rev'`); err != nil {
		t.Fatal(err)
	}
	must(t, db.Close())
	if got := openMigrated(t, old).Served(); got != 7 {
		t.Errorf("a store migrated from v11 at rev 7 served %d", got)
	}
}

// A store restored from a copy of itself stamps again revs a peer fetched
// before the restore. MeetPeer, given what the restored store served,
// takes the fetch cursor back there and drops the bounce run and the
// merge bases; the push cursors stay (the driver reconciles them with
// what the store says it holds). The same store met again as it was
// resets nothing, and writes nothing.
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
	c.NoteServed(ctx, c.CurrentRev())
	copied := c.Served()
	must(t, c.Close())
	must(t, os.CopyFS(copyDir, os.DirFS(live)))

	// The container runs on past the copy; the server meets it and
	// fetches all of it.
	c = open()
	for i := range 20 {
		writeFile(t, c, fmt.Sprintf("later%d", i), []byte("y"))
	}
	srv := newStore(t)
	met, err := srv.MeetPeer(ctx, "c", c.ID(), c.Served())
	if err != nil || met.Store || met.Restored {
		t.Fatalf("first meeting: %+v, %v", met, err)
	}
	c.NoteServed(ctx, c.CurrentRev())
	fetched := c.Served()
	st := srv.Chunks().NewStage()
	defer st.Release()
	ws := watermark.Set{Push: watermark.At(3), Fetch: watermark.At(fetched), AppliedPush: watermark.At(2)}
	_, err = srv.Apply(ctx, []ChangeEntry{stageEntry(t, st, "later0", []byte("y"))}, ApplyOptions{Source: Upstream, Stage: st, Peer: "c", Watermarks: &ws, Bounce: true})
	must(t, err)
	must(t, srv.Delivered(ctx, "c", ws, []ChangeEntry{stageEntry(t, st, "later0", []byte("y"))}, nil, true))
	must(t, c.Close())

	// Restarted as it was: the same history.
	c = open()
	writes := srv.writes.Load()
	if met, err := srv.MeetPeer(ctx, "c", c.ID(), c.Served()); err != nil || met.Store || met.Restored || met.Fetch != ws.Fetch {
		t.Fatalf("restarted: %+v, %v", met, err)
	}
	if srv.writes.Load() != writes {
		t.Error("meeting the same store as it was wrote to the store")
	}
	must(t, c.Close())

	// Restored from the copy: revs after it are another history's.
	must(t, os.RemoveAll(live))
	must(t, os.CopyFS(live, os.DirFS(copyDir)))
	c = open()
	defer c.Close()
	if c.Served() != copied {
		t.Fatalf("restored store served %d, the copy %d", c.Served(), copied)
	}
	for i := range 30 {
		writeFile(t, c, fmt.Sprintf("new%d", i), []byte("z"))
	}
	met, err = srv.MeetPeer(ctx, "c", c.ID(), c.Served())
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
	if met, err := srv.MeetPeer(ctx, "c", c.ID(), c.Served()); err != nil || met.Restored || met.Fetch != watermark.At(copied) {
		t.Errorf("met again after the restore: %+v, %v", met, err)
	}
	// Not known: not checked.
	if met, err := srv.MeetPeer(ctx, "c", c.ID(), -1); err != nil || met.Restored {
		t.Errorf("met without a served rev: %+v, %v", met, err)
	}
}

// A record of a served rev that fails (a full disk) does not fail the
// answer that hands the rev out: it is counted, the store keeps what it
// recorded before (a later meeting refetches more, never less), and the
// next record that succeeds catches up.
func TestNoteServedOnAFullDisk(t *testing.T) {
	s := newStore(t)
	for i := range 5 {
		writeFile(t, s, fmt.Sprintf("f%d", i), []byte("x"))
	}
	s.NoteServed(ctx, 2)
	noteServedHook = func() error { return fmt.Errorf("write meta: %w", syscall.ENOSPC) }
	t.Cleanup(func() { noteServedHook = nil })
	before := writeErrors(t, "served", "ENOSPC")
	s.NoteServed(ctx, s.CurrentRev())
	if got := s.Served(); got != 2 {
		t.Errorf("served %d after a failed record, want the 2 recorded before", got)
	}
	if got := writeErrors(t, "served", "ENOSPC") - before; got != 1 {
		t.Errorf("wsync_vfs_write_errors_total{where=served,errno=ENOSPC} rose by %v, want 1", got)
	}
	noteServedHook = nil
	s.NoteServed(ctx, s.CurrentRev())
	if got, rev := s.Served(), s.CurrentRev(); got != rev {
		t.Errorf("served %d once the record succeeds, want %d", got, rev)
	}
}
