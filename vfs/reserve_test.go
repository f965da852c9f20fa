package vfs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/wsync/wsync/internal/testutil"
)

// A disk filled by local writes keeps room for removals: the writes that
// would take the reserve fail with ENOSPC, and then unlinks, an rmdir, a
// truncate and a rename still commit (each failed with ENOSPC when the
// writes had taken the last byte), by path and by inode. (The reserve is
// a cushion, 1/16 of this small disk: a few removals, as a user freeing
// space makes, not an unbounded number.)
func TestFullDiskStillRemoves(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "disk")
	testutil.MountTmpfs(t, dir, 32<<20)
	s, err := Open(ctx, filepath.Join(dir, "store.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	data := pattern(1<<20, 1)
	var full error
	n := 0
	for ; n < 64 && full == nil; n++ {
		data[0], data[1] = byte(n), byte(n>>8)
		_, full = s.WriteFile(ctx, fmt.Sprintf("f%02d", n), data, 0o644)
	}
	if !errors.Is(full, ErrNoSpace) && !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("after %d writes of 1 MiB to a 32 MiB disk: %v, want ENOSPC", n, full)
	}
	must(t, s.RemovePath(ctx, "f00", false))
	must(t, s.RemovePath(ctx, "d", false))
	must(t, s.RenamePath(ctx, "f01", "g01"))
	size := int64(0)
	if _, err := s.SetAttr(ctx, mustStat(t, s, "f02").Ino, SetAttr{Size: &size}); err != nil {
		t.Errorf("truncate on the full disk: %v", err)
	}
	for i := 3; i < 8; i++ {
		if err := s.Unlink(ctx, RootIno, fmt.Sprintf("f%02d", i)); err != nil {
			t.Fatalf("unlink of f%02d on the full disk: %v", i, err)
		}
	}
	must(t, s.Sync(ctx))
}

func mustStat(t *testing.T, s *Store, path string) Attr {
	t.Helper()
	a, err := s.Stat(context.Background(), path)
	must(t, err)
	return a
}
