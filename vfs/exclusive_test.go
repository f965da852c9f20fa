package vfs

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestExclusiveHoldsTheWriter: a commit attempted while Exclusive's fn
// runs (a path write, and a mount mutation that would open a group) does
// not land before fn returns, and lands after. The window fn watches is
// bounded (100 ms); without the writer held both commits land in it.
func TestExclusiveHoldsTheWriter(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "before", []byte("x"))
	wrote := make(chan error, 2)
	err := s.Exclusive(ctx, func(ctx context.Context) error {
		rev := s.rev.Load()
		go func() {
			_, err := s.WriteFile(context.Background(), "during", []byte("y"), 0o644)
			wrote <- err
		}()
		go func() {
			_, err := s.Create(context.Background(), RootIno, "created", NewAttr{Mode: 0o644})
			wrote <- err
		}()
		deadline := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(deadline) {
			select {
			case err := <-wrote:
				t.Errorf("a mutation returned while Exclusive held the writer (err %v)", err)
				return nil
			default:
			}
			if got := s.rev.Load(); got != rev {
				t.Errorf("rev moved from %d to %d while Exclusive held the writer", rev, got)
				return nil
			}
			time.Sleep(time.Millisecond) // polling a window that must stay quiet
		}
		return nil
	})
	must(t, err)
	for range 2 {
		select {
		case err := <-wrote:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("a mutation did not land after Exclusive returned")
		}
	}
	must(t, s.Sync(ctx))
	if got := readFile(t, s, "during"); string(got) != "y" {
		t.Fatalf("during = %q", got)
	}
}

// TestExclusiveCommitsTheGroupFirst: mutations answered in an open group
// are committed before fn runs, so another connection (litestream's)
// sees them from inside fn.
func TestExclusiveCommitsTheGroupFirst(t *testing.T) {
	s, err := Open(ctx, filepath.Join(t.TempDir(), "s.db"), Options{NoSync: true, GroupWindow: time.Hour})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	s.groupMinFree = 0
	if _, err := s.Mkdir(ctx, RootIno, "grouped", NewAttr{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if !s.grpOpen.Load() {
		t.Fatal("the mkdir did not open a group")
	}
	must(t, s.Exclusive(ctx, func(ctx context.Context) error {
		if s.grpOpen.Load() {
			t.Error("a group is still open inside Exclusive")
		}
		var n int
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM dirents WHERE name = 'grouped'`).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("a reader sees %d entries named grouped inside Exclusive, want 1", n)
		}
		return nil
	}))
}

// TestExclusiveAfterClose refuses to run fn on a closed store.
func TestExclusiveAfterClose(t *testing.T) {
	s, err := Open(ctx, filepath.Join(t.TempDir(), "s.db"), Options{NoSync: true})
	must(t, err)
	must(t, s.Close())
	ran := false
	if err := s.Exclusive(ctx, func(context.Context) error { ran = true; return nil }); err != ErrClosed || ran {
		t.Fatalf("Exclusive on a closed store: %v (ran %v), want ErrClosed", err, ran)
	}
}
