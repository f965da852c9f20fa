package replica

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
)

var ctx = context.Background()

// TestRoundTrip: files written through a vfs store, Flush, a restore
// elsewhere: the restored copy opens with vfs and reads every file back.
func TestRoundTrip(t *testing.T) {
	_, st := bucket(t)
	path := filepath.Join(t.TempDir(), "store.db")
	s := openVFS(t, path)
	r := start(t, Options{DBPath: path, Store: st, Prefix: "workspaces/w/db", Generation: 1, Gate: gateOf(s)})
	writeFiles(t, s, 0, 300)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if lag := r.Lag(); lag != 0 {
		t.Errorf("lag after Flush = %v, want 0", lag)
	}
	got, g := restore(t, st, "workspaces/w/db", 1)
	if g != 1 {
		t.Errorf("restored generation %d, want 1", g)
	}
	if checkFiles(t, got, 300) {
		t.Error("the restored copy has a file that was never written")
	}
	if ks := keys(t, st, "workspaces/w/db/"+GenerationDir(1)+"/"); len(ks) == 0 {
		t.Error("nothing under the generation's prefix")
	}
	st1 := r.Status()
	if st1.Generation != 1 || st1.TXID == 0 || st1.TXID != st1.LocalTXID || st1.LastError != nil || st1.Ships == 0 {
		t.Errorf("status after Flush: %+v", st1)
	}
}

// TestManyCommitsEqualTheSource: with vfs's checkpoints off, many
// commits shipped every 20 ms while litestream checkpoints (each 1,000
// WAL pages, so the WAL restarts many times): the restored database
// holds exactly the source's rows.
func TestManyCommitsEqualTheSource(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of commits")
	}
	_, st := bucket(t)
	path := filepath.Join(t.TempDir(), "store.db")
	s := openVFS(t, path)
	r := start(t, Options{DBPath: path, Store: st, Prefix: "db", Generation: 3, Interval: 20 * time.Millisecond, Gate: gateOf(s)})
	data := make([]byte, 12<<10) // inline: three pages a commit
	for i := range 3000 {
		data[0], data[1] = byte(i), byte(i>>8)
		if _, err := s.WriteFile(ctx, fileName(i%500), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if i%200 == 0 {
			if err := s.RemovePath(ctx, fileName(i%500), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("WAL after 3,000 commits: %d KiB (about 36 MiB of frames were written)", fi.Size()>>10)
	if fi.Size() > 24<<20 {
		t.Errorf("WAL is %d MiB: litestream did not checkpoint", fi.Size()>>20)
	}
	want := dump(t, path)
	got, _ := restore(t, st, "db", 3)
	if g := dump(t, got); !slices.Equal(g, want) {
		t.Fatalf("restored database differs from the source: %d rows, want %d", len(g), len(want))
	}
}

// TestGenerations: each owner writes its own generation's prefix; a
// restore takes the newest generation at or below the one asked for,
// skips a newer one that holds nothing restorable, and refuses to
// overwrite a database.
func TestGenerations(t *testing.T) {
	_, st := bucket(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "store.db")
	s := openVFS(t, path)
	r1 := start(t, Options{DBPath: path, Store: st, Prefix: "ws/db", Generation: 1, Gate: gateOf(s)})
	writeFiles(t, s, 0, 10)
	if err := r1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, 10, 20)
	r2 := start(t, Options{DBPath: path, Store: st, Prefix: "ws/db", Generation: 2, Gate: gateOf(s)})
	if err := r2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, s, 20, 30)
	if err := r2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Generation 12 began but left nothing restorable (an owner that died
	// before its first ship; a stray key stands for what it left).
	if _, err := st.Put(ctx, "ws/db/"+GenerationDir(12)+"/stray", []byte("x")); err != nil {
		t.Fatal(err)
	}
	gens, err := Generations(ctx, st, "ws/db")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gens, []int64{12, 2, 1}) {
		t.Errorf("generations %v, want [12 2 1] (newest first, numeric order)", gens)
	}

	p, g := restore(t, st, "ws/db", 100)
	if g != 2 {
		t.Errorf("restore up to 100 took generation %d, want 2 (12 is empty)", g)
	}
	if checkFiles(t, p, 30) {
		t.Error("generation 2 has a file past 30")
	}
	p, g = restore(t, st, "ws/db", 1)
	if g != 1 {
		t.Errorf("restore up to 1 took generation %d", g)
	}
	if checkFiles(t, p, 10) {
		t.Error("generation 1 has files written after its owner closed")
	}
	if _, err := Restore(ctx, st, "ws/db", 0, filepath.Join(t.TempDir(), "x.db")); !errors.Is(err, ErrNoReplica) {
		t.Errorf("restore up to 0: %v, want ErrNoReplica", err)
	}
	if _, err := Restore(ctx, st, "nothing/here", 5, filepath.Join(t.TempDir(), "x.db")); !errors.Is(err, ErrNoReplica) {
		t.Errorf("restore of an empty prefix: %v, want ErrNoReplica", err)
	}
	existing := filepath.Join(t.TempDir(), "exists.db")
	if err := os.WriteFile(existing, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, st, "ws/db", 2, existing); !errors.Is(err, os.ErrExist) {
		t.Errorf("restore over an existing file: %v, want os.ErrExist", err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "mine" {
		t.Errorf("the existing file was changed: %q", b)
	}
}

// TestFence: once Fence refuses, a ship fails with ErrFenced, nothing new
// appears under the generation's prefix, and the replicator never counts
// as caught up again.
func TestFence(t *testing.T) {
	_, st := bucket(t)
	path := filepath.Join(t.TempDir(), "store.db")
	s := openVFS(t, path)
	var lost atomic.Bool
	errLost := errors.New("lease lost to generation 8")
	fence := func() error {
		if lost.Load() {
			return errLost
		}
		return nil
	}
	r := start(t, Options{DBPath: path, Store: st, Prefix: "f/db", Generation: 7, Gate: gateOf(s), Fence: fence})
	writeFiles(t, s, 0, 20)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before := keys(t, st, "f/db/")
	lost.Store(true)
	writeFiles(t, s, 20, 40)
	err := r.Flush(ctx)
	if !errors.Is(err, ErrFenced) || !errors.Is(err, errLost) {
		t.Fatalf("flush after the fence: %v, want ErrFenced and the fence's error", err)
	}
	t.Logf("fenced flush: %v", err)
	st1 := r.Status()
	if !st1.Fenced || st1.LastError == nil {
		t.Errorf("status after the fence: %+v", st1)
	}
	lag := r.Lag()
	testutil.WaitFor(t, "lag to grow while fenced", 10*time.Second, func() bool { return r.Lag() > lag })
	if err := r.Close(ctx); !errors.Is(err, ErrFenced) {
		t.Errorf("close after the fence: %v, want ErrFenced", err)
	}
	if after := keys(t, st, "f/db/"); !slices.Equal(after, before) {
		t.Errorf("keys changed after the fence:\nbefore %v\nafter  %v", before, after)
	}
	p, _ := restore(t, st, "f/db", 7)
	if checkFiles(t, p, 20) {
		t.Error("the bucket has a file written after the fence")
	}
}

// TestOutage: while the bucket hangs (SIGSTOP) local commits go on at
// local speed and the lag grows; after it returns replication catches up
// by itself, the lag returns to 0 and a restore has every commit. Then
// the same with the bucket refusing connections (stopped, restarted).
func TestOutage(t *testing.T) {
	srv, st := bucket(t)
	path := filepath.Join(t.TempDir(), "store.db")
	s := openVFS(t, path)
	r := start(t, Options{DBPath: path, Store: st, Prefix: "o/db", Generation: 1, Gate: gateOf(s), ShipTimeout: 2 * time.Second})
	writeFiles(t, s, 0, 10)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n := 10
	for _, outage := range []struct {
		name       string
		down, back func()
	}{
		{"hang", srv.Pause, srv.Resume},
		{"refuse", srv.Stop, srv.Restart},
	} {
		failed := r.Status().Failures
		outage.down()
		t0 := time.Now()
		var slowest time.Duration
		for i := n; i < n+50; i++ {
			c0 := time.Now()
			writeFiles(t, s, i, i+1)
			slowest = max(slowest, time.Since(c0))
		}
		commits := time.Since(t0)
		n += 50
		testutil.WaitFor(t, "lag past 1s and a failed ship during the outage", 20*time.Second, func() bool {
			return r.Lag() > time.Second && r.Status().Failures > failed
		})
		t.Logf("%s: 50 commits in %v (slowest %v) while the bucket was down; lag %v", outage.name, commits, slowest, r.Lag())
		if slowest > 500*time.Millisecond {
			t.Errorf("%s: a local commit took %v while the bucket was down", outage.name, slowest)
		}
		if st := r.Status(); st.LastError == nil {
			t.Errorf("%s: status during the outage: %+v", outage.name, st)
		}
		outage.back()
		testutil.WaitFor(t, "lag back to 0", 60*time.Second, func() bool { return r.Lag() == 0 })
		t.Logf("%s: caught up %v after the bucket returned", outage.name, time.Since(t0))
		p, _ := restore(t, st, "o/db", 1)
		if checkFiles(t, p, n) {
			t.Errorf("%s: restored copy has a file past %d", outage.name, n)
		}
	}
}

// TestCloseFlushes: Close ships what was committed; the bucket has it
// without a Flush.
func TestCloseFlushes(t *testing.T) {
	_, st := bucket(t)
	path := filepath.Join(t.TempDir(), "store.db")
	s := openVFS(t, path)
	r, err := Start(ctx, Options{DBPath: path, Store: st, Prefix: "c/db", Generation: 4, Interval: time.Hour, Gate: gateOf(s)})
	if err != nil {
		t.Fatal(err)
	}
	// The first ship runs at Start; everything after it waits for Close.
	testutil.WaitFor(t, "the first ship", 20*time.Second, func() bool { return r.Status().Ships > 0 })
	writeFiles(t, s, 0, 40)
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p, _ := restore(t, st, "c/db", 4)
	if checkFiles(t, p, 40) {
		t.Error("restored copy has a file past 40")
	}
}

// TestGateCoversWhatShips: nothing committed after the last gate reaches
// the bucket. Commits go on while the gate starts refusing; uploads are
// then driven directly for a while (litestream's own monitors, were they
// on, would copy the WAL meanwhile: 1 s by default): the bucket must
// still hold exactly the state the last gate saw.
func TestGateCoversWhatShips(t *testing.T) {
	_, st := bucket(t)
	path := filepath.Join(t.TempDir(), "store.db")
	s := openVFS(t, path)
	var refuse atomic.Bool
	var lastRev atomic.Int64
	probe := openProbeForTest(t, path)
	gate := func(ctx context.Context, ship func(context.Context) error) error {
		if refuse.Load() {
			return errors.New("gate closed by the test")
		}
		return s.Exclusive(ctx, func(ctx context.Context) error {
			if err := ship(ctx); err != nil {
				return err
			}
			lastRev.Store(probe())
			return nil
		})
	}
	r := start(t, Options{DBPath: path, Store: st, Prefix: "g/db", Generation: 1, Interval: 10 * time.Millisecond, Gate: gate})
	stop := make(chan struct{})
	wrote := make(chan int)
	go func() {
		i := 0
		for {
			select {
			case <-stop:
				wrote <- i
				return
			default:
			}
			if _, err := s.WriteFile(ctx, fileName(i), fileData(i), 0o644); err != nil {
				t.Error(err)
			}
			i++
		}
	}()
	testutil.WaitFor(t, "ships while committing", 20*time.Second, func() bool { return r.Status().Ships > 5 })
	refuse.Store(true)
	// Let any ship in flight finish, then note what the gate last saw.
	r.shipMu.Lock()
	//lint:ignore SA2001 taking the lock is the point: a ship in flight has ended
	r.shipMu.Unlock()
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := r.rep.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // a window for a stray copy of the WAL to appear
	}
	close(stop)
	n := <-wrote
	want := lastRev.Load()
	if final := probe(); final <= want {
		t.Fatalf("the writer (%d commits) ended at rev %d, not past the last gate's rev %d", n, final, want)
	}
	p, _ := restore(t, st, "g/db", 1)
	if got := revOf(t, p); got != want {
		t.Fatalf("the bucket holds rev %d; the last gate saw rev %d (the writer reached %d)", got, want, n)
	}
}
