package lease_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/s3test"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/lease"
	"github.com/wsync/wsync/objstore"
)

func store(t *testing.T) *objstore.Store {
	t.Helper()
	srv := s3test.Start(t)
	srv.Env(t)
	cfg, err := objstore.ParseURL(srv.URL("leases"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(testutil.Context(t, time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestAcquireHoldRenewRelease(t *testing.T) {
	st := store(t)
	ctx := testutil.Context(t, time.Minute)
	a, err := lease.Acquire(ctx, st, "ws/x/lease", "A", "http://a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a.Generation() != 1 || a.Valid() != nil {
		t.Fatalf("generation %d, valid %v", a.Generation(), a.Valid())
	}
	var held *lease.HeldError
	if _, err := lease.Acquire(ctx, st, "ws/x/lease", "B", "http://b", time.Minute); !errors.As(err, &held) || held.Record.Address != "http://a" {
		t.Fatalf("B's acquire of a held lease: %v", err)
	}
	if err := a.Renew(ctx); err != nil || a.Generation() != 1 {
		t.Fatalf("renew: %v, generation %d", err, a.Generation())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Valid() == nil {
		t.Fatal("a released lease is still valid")
	}
	b, err := lease.Acquire(ctx, st, "ws/x/lease", "B", "http://b", time.Minute)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if b.Generation() != 2 {
		t.Fatalf("generation after a change of holder: %d", b.Generation())
	}
	// The old holder's renewal finds the lease taken.
	if err := a.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renew of a released lease: %v", err)
	}
}

// TestRestartedOwnerTakesItsLeaseBack: the same server id takes its own
// unexpired lease at once, with a new generation (its earlier process is
// gone: one server id is one data directory).
func TestRestartedOwnerTakesItsLeaseBack(t *testing.T) {
	st := store(t)
	ctx := testutil.Context(t, time.Minute)
	a1, err := lease.Acquire(ctx, st, "l", "A", "http://a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := lease.Acquire(ctx, st, "l", "A", "http://a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a2.Generation() != a1.Generation()+1 {
		t.Fatalf("generations %d then %d", a1.Generation(), a2.Generation())
	}
	if err := a1.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the earlier process's renewal: %v", err)
	}
}

// TestExpiredLeaseIsTakenAndTheOldHolderIsFenced: a holder that stops
// renewing (a paused process) finds its lease invalid by its own clock,
// another server takes it after the expiry plus MaxSkew, and the old
// holder's renewal fails.
func TestExpiredLeaseIsTakenAndTheOldHolderIsFenced(t *testing.T) {
	st := store(t)
	ctx := testutil.Context(t, time.Minute)
	ttl := 500 * time.Millisecond
	a, err := lease.Acquire(ctx, st, "l", "A", "http://a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "A's lease to run out by its own clock", 10*time.Second, func() bool { return a.Valid() != nil })
	var b *lease.Lease
	testutil.WaitFor(t, "B to take the expired lease", 10*time.Second, func() bool {
		b, err = lease.Acquire(ctx, st, "l", "B", "http://b", time.Minute)
		var held *lease.HeldError
		if err != nil && !errors.As(err, &held) {
			t.Fatal(err)
		}
		return err == nil
	})
	if b.Generation() != 2 {
		t.Fatalf("B's generation %d", b.Generation())
	}
	if err := a.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("A's renewal after B took over: %v", err)
	}
	if err := a.Release(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("A's release after B took over: %v", err)
	}
	r, _, err := lease.Read(ctx, st, "l")
	if err != nil || r.Owner != "B" || r.Generation != 2 {
		t.Fatalf("record after A's attempts: %+v %v", r, err)
	}
}

// TestOneWinnerAmongRacingServers: 16 servers race for a free lease;
// exactly one gets it, every other learns who.
func TestOneWinnerAmongRacingServers(t *testing.T) {
	st := store(t)
	ctx := testutil.Context(t, time.Minute)
	for round := range 3 {
		key := fmt.Sprintf("race/%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []string
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprint("S", i)
				_, err := lease.Acquire(ctx, st, key, owner, "http://"+owner, time.Minute)
				var held *lease.HeldError
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, owner)
					mu.Unlock()
				case errors.As(err, &held):
				default:
					t.Errorf("acquire: %v", err)
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: winners %v", round, winners)
		}
		r, _, err := lease.Read(ctx, st, key)
		if err != nil || r.Owner != winners[0] {
			t.Fatalf("round %d: record %+v, winner %v, %v", round, r, winners, err)
		}
	}
}

// TestKeepRenewsAndReportsLoss: Keep holds a short lease for several TTLs,
// and calls lost once another holder took it.
func TestKeepRenewsAndReportsLoss(t *testing.T) {
	st := store(t)
	ctx := testutil.Context(t, time.Minute)
	ttl := 600 * time.Millisecond
	a, err := lease.Acquire(ctx, st, "k", "A", "http://a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	go a.Keep(ctx, func(err error) { lost <- err })
	first := a.Record().Expires
	testutil.WaitFor(t, "three renewals", 10*time.Second, func() bool { return a.Record().Expires.After(first.Add(ttl)) })
	if a.Valid() != nil {
		t.Fatal("a kept lease ran out")
	}
	// Another server overwrites the record (as an operator's forced
	// takeover would): the next renewal fails and Keep reports it.
	_, etag, err := lease.Read(ctx, st, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIfMatch(ctx, "k", []byte(`{"owner":"B","generation":9,"expires":"2100-01-01T00:00:00Z"}`), etag); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("lost with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Keep never reported the loss")
	}
	if a.Valid() == nil {
		t.Fatal("a taken lease is still valid")
	}
}
