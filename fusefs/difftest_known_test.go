package fusefs_test

import (
	"os"
	"testing"
	"time"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
)

// The divergences TestDiffAgainstTmpfs found and steers around
// (diffKnown), each reduced to what tmpfs does and the mount does not.
// They fail until fixed, so they run only with WSYNC_DIFFTEST_KNOWN=0;
// a fix removes the skip and the diffKnown entry together.

// knownDivergence skips t unless WSYNC_DIFFTEST_KNOWN=0, and mounts.
func knownDivergence(t *testing.T, name string) *fusetest.Mount {
	t.Helper()
	why, ok := diffKnown[name]
	if !ok {
		t.Fatalf("no known divergence %q", name)
	}
	if os.Getenv("WSYNC_DIFFTEST_KNOWN") != "0" {
		t.Skipf("known divergence %s (WSYNC_DIFFTEST_KNOWN=0 runs it): %s", name, why)
	}
	return fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour}})
}

// oldFile makes path a file of data whose mtime is 2001's.
func oldFile(t *testing.T, path string, data []byte) time.Time {
	t.Helper()
	old := time.Unix(1_000_000_000, 0)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return old
}

// TestKnownTruncateOfAPathToTheSameSizeKeepsMtime: truncate(2) of a path
// to its size, after utimes (tmpfs keeps the mtime; the mount marks it, a
// choice: see diffKnown).
func TestKnownTruncateOfAPathToTheSameSizeKeepsMtime(t *testing.T) {
	m := knownDivergence(t, "truncate-marks-mtime")
	p := m.Path("f")
	old := oldFile(t, p, []byte("abc"))
	if err := os.Truncate(p, 3); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(old) {
		t.Errorf("truncate(2) to the same size: mtime %v, want %v kept", fi.ModTime(), old)
	}
}
