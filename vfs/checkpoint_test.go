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
