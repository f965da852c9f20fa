package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory and unmounts it in
// t.Cleanup: a real small disk for the full-disk tests.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	MountTmpfs(t, dir, size)
	return dir
}

// MountTmpfs mounts a tmpfs of size bytes on dir (made if missing) and
// unmounts it in t.Cleanup, detaching it if it is still busy: cleanups run
// last-registered first, so one registered before the daemons using dir
// start runs after they stop. Mounting needs root; without it the test is
// skipped, or fails under WSYNC_REQUIRE_FUSE=1 (CI runs as root for the
// FUSE tests anyway).
func MountTmpfs(t testing.TB, dir string, size int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("WSYNC_REQUIRE_FUSE") == "1" {
			t.Fatal("WSYNC_REQUIRE_FUSE=1 but mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Logf("unmount tmpfs %s: %v; detaching", dir, err)
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
}

// Fill writes a ballast file into dir until the file system is full and
// then gives back keep bytes (rounded to pages), so that dir has about
// keep bytes free. Removing the returned path frees the rest.
func Fill(t testing.TB, dir string, keep int64) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 0xa5
	}
	var n int64
	for {
		k, err := f.Write(buf)
		n += int64(k)
		if err != nil {
			break
		}
	}
	if err := f.Truncate(max(n-keep, 0)); err != nil {
		t.Fatal(err)
	}
	return path
}
