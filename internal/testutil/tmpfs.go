package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory and unmounts it in
// t.Cleanup: a real small disk for the full-disk tests. Mounting needs
// root; without it the test is skipped, or fails under
// WSYNC_REQUIRE_FUSE=1 (CI runs as root for the FUSE tests anyway).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("WSYNC_REQUIRE_FUSE") == "1" {
			t.Fatal("WSYNC_REQUIRE_FUSE=1 but mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
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
	return dir
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
