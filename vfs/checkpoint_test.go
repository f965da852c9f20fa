package vfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckpointsKeepTheWALBounded: the writer never checkpoints
// (wal_autocheckpoint=0), so without the checkpointer the WAL would hold
// every page written since the store opened. Writing about 100 MiB of
// pages in small commits must leave it a fraction of that.
func TestCheckpointsKeepTheWALBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 4,000 commits")
	}
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "s.db"))
	data := make([]byte, 16<<10) // an inline-sized row's worth of pages per commit
	for i := range 4000 {
		data[0] = byte(i)
		data[1] = byte(i >> 8)
		if _, err := s.WriteFile(ctx, fmt.Sprintf("f%d", i%64), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "s.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("WAL after 4,000 commits: %d KiB", st.Size()>>10)
	if st.Size() > 48<<20 {
		t.Errorf("WAL is %d MiB: checkpoints are not running", st.Size()>>20)
	}
}

// TestExternalCheckpointLeavesTheWAL: with Options.ExternalCheckpoint the
// store never checkpoints (no checkpointer, no backstop), so the WAL
// holds every frame written since it opened, past the backstop's 4,096
// pages; the same commits without the option leave it near the backstop.
func TestExternalCheckpointLeavesTheWAL(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1,500 commits twice")
	}
	wal := func(external bool) int64 {
		dir := t.TempDir()
		s, err := Open(ctx, filepath.Join(dir, "s.db"), Options{NoSync: true, ExternalCheckpoint: external})
		must(t, err)
		defer s.Close()
		if external && s.ckpt != nil {
			t.Error("a checkpointer runs with ExternalCheckpoint")
		}
		data := make([]byte, 16<<10)
		for i := range 1500 {
			data[0], data[1] = byte(i), byte(i>>8)
			if _, err := s.WriteFile(ctx, fmt.Sprintf("f%d", i%64), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		st, err := os.Stat(filepath.Join(dir, "s.db-wal"))
		must(t, err)
		return st.Size()
	}
	own, ext := wal(false), wal(true)
	t.Logf("WAL after 1,500 commits: %d KiB with the store's checkpoints, %d KiB with external ones", own>>10, ext>>10)
	if ext < int64(walBackstop)*4096*5/4 {
		t.Errorf("WAL with ExternalCheckpoint is %d KiB: something checkpointed it", ext>>10)
	}
	if own >= ext {
		t.Errorf("the store's own checkpoints left a WAL as large (%d KiB) as none (%d KiB)", own>>10, ext>>10)
	}
}
