package vfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	itestutil "github.com/wsync/wsync/internal/testutil"
)

// TestGroupsOnAFullDisk checks the two halves of the full-disk rule of
// the group commit (docs/ARCHITECTURE.md "Durability"). Below the free
// space a group needs, every mutation commits before it returns, so a full
// disk fails the mutation itself with ENOSPC. And a group that could not
// commit anyway (the disk filled after it opened) loses only its own
// mutations, is counted, and reaches the writer at the next Sync; the store
// goes on once space is free.
func TestGroupsOnAFullDisk(t *testing.T) {
	t.Run("below the floor, mutations commit one by one", func(t *testing.T) {
		disk := itestutil.Tmpfs(t, 8<<20)
		s, err := Open(context.Background(), filepath.Join(disk, "s.db"), Options{NoSync: true})
		must(t, err)
		t.Cleanup(func() { s.Close() })
		if _, err := s.Create(ctx, RootIno, "a", NewAttr{Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if s.grpOpen.Load() {
			t.Fatal("a group opened on a disk with less than the floor free")
		}
		itestutil.Fill(t, disk, 0)
		var ferr error
		for i := 0; i < 1000 && ferr == nil; i++ {
			_, ferr = s.Mkdir(ctx, RootIno, fmt.Sprintf("d%04d-with-a-long-name-to-fill-pages", i), NewAttr{Mode: 0o755})
		}
		if Errno(ferr) != syscall.ENOSPC {
			t.Fatalf("mutation on a full disk: %v (errno %v), want ENOSPC", ferr, Errno(ferr))
		}
	})
	t.Run("a group that cannot commit is reported by Sync", func(t *testing.T) {
		disk := itestutil.Tmpfs(t, 8<<20)
		s, err := Open(context.Background(), filepath.Join(disk, "s.db"), Options{NoSync: true, GroupWindow: 1 << 40})
		must(t, err)
		t.Cleanup(func() { s.Close() })
		s.groupMinFree = 0 // a group opens whatever is free
		s.room.path = ""   // and no disk reserve holds its creates back (reserve.go)
		_, err = s.Mkdir(ctx, RootIno, "kept", NewAttr{Mode: 0o755})
		must(t, err)
		must(t, s.Sync(ctx))
		// Fold the WAL into the database and cut it to nothing: a WAL
		// that was checkpointed but kept its length would take the
		// group's frames without allocating, and the commit would succeed.
		// The store's checkpointer may hold the WAL for a moment: retry.
		itestutil.WaitFor(t, "a truncating WAL checkpoint", 10*time.Second, func() bool {
			var busy, logFrames, done int
			must(t, s.w.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &done))
			return busy == 0
		})
		ballast := itestutil.Fill(t, disk, 0)
		failures := groupFailures(t)
		answered := 0
		for i := range 200 {
			if _, err := s.Mkdir(ctx, RootIno, fmt.Sprintf("lost%04d-with-a-long-name-to-fill-pages", i), NewAttr{Mode: 0o755}); err != nil {
				break
			}
			answered++
		}
		// Answered mutations wait in the open group, or in the queue of
		// those answered from memory that join it when they run.
		if answered == 0 || !s.grpOpen.Load() && s.queuedN.Load() == 0 {
			t.Fatalf("%d mutations answered, group open %v: the test needs an open group", answered, s.grpOpen.Load())
		}
		if err := s.Sync(ctx); err == nil {
			t.Fatal("Sync committed a group on a full disk")
		}
		if got := groupFailures(t) - failures; got != 1 {
			t.Errorf("group failures counted: %v, want 1", got)
		}
		must(t, s.Sync(ctx)) // reported once
		must(t, os.Remove(ballast))
		// The store goes on: what was committed is there, the lost group
		// is not, and new mutations commit.
		if _, err := s.Lookup(ctx, RootIno, "kept"); err != nil {
			t.Errorf("kept: %v", err)
		}
		if _, err := s.Lookup(ctx, RootIno, "lost0000-with-a-long-name-to-fill-pages"); err == nil {
			t.Error("a mutation of the failed group survived")
		}
		_, err = s.Mkdir(ctx, RootIno, "after", NewAttr{Mode: 0o755})
		must(t, err)
		must(t, s.Sync(ctx))
	})
}

func groupFailures(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	must(t, metricGroupFailures.Write(&m))
	return m.GetCounter().GetValue()
}

// A lost group moves the write counter as a write does, by two: what was
// read inside it is stale, and a listing read afterwards can still vouch
// for its attributes (an odd count would mean a write in progress for
// good, and no READDIRPLUS page would ever be trusted again).
func TestLostGroupKeepsTheCounterEven(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "f", []byte("x"))
	must(t, s.Sync(ctx))
	_, before, err := s.ReadDirAttrs(ctx, RootIno, "", 10)
	must(t, err)
	s.wmu.Lock()
	_ = s.groupFailed(1, errors.New("the disk filled"))
	s.wmu.Unlock()
	s.Sync(ctx) // returns the failure
	page, gen, err := s.ReadDirAttrs(ctx, RootIno, "", 10)
	must(t, err)
	if gen == 0 || gen == before {
		t.Fatalf("listing after a lost group: gen %d (was %d), want a new, usable one", gen, before)
	}
	if _, ok := s.AttrAsOf(page[0].Attr, gen); !ok {
		t.Fatal("a listing read after a lost group cannot vouch for its attributes")
	}
}
