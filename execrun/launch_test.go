package execrun

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/wsync/wsync/internal/testutil"
)

// TestReachesMount: which executables the runner starts through the shim,
// with the root a file system of its own as computerd's mount is. Here a
// tmpfs stands in for the FUSE mount.
func TestReachesMount(t *testing.T) {
	root := filepath.Join(t.TempDir(), "mnt")
	testutil.MountTmpfs(t, root, 16<<20)
	outside := t.TempDir()
	r, err := New(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, "/bin/true", filepath.Join(root, "true"))
	script := func(dir, name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/bin/true", false},
		{filepath.Join(root, "true"), true},
		{script(root, "in.sh", "#!/bin/sh\ntrue\n"), true},
		{script(outside, "plain.sh", "#!/bin/sh\ntrue\n"), false},
		{script(outside, "spaced.sh", "#! /bin/sh -e\ntrue\n"), false},
		{script(outside, "interp-in-mount.sh", "#!"+filepath.Join(root, "true")+"\n"), true},
		{script(outside, "relative-interp.sh", "#!sub/sh\n"), true},
		{script(outside, "missing-interp.sh", "#!/nonexistent/sh\n"), true},
		{filepath.Join(outside, "missing"), true},
	} {
		if got := r.reachesMount(tc.path); got != tc.want {
			t.Errorf("reachesMount(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}

	plain, err := New(Options{Root: outside})
	if err != nil {
		t.Fatal(err)
	}
	if plain.reachesMount(filepath.Join(outside, "plain.sh")) {
		t.Errorf("a root that is no mount point has no mount to reach")
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
