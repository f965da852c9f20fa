// Package fusetest mounts fusefs for tests. It lives apart from fusefs so
// that the binaries, which link fusefs, do not link the testing package.
package fusetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/vfs"
)

// RequireFUSE skips t when this machine cannot mount (no /dev/fuse, or not
// root), unless WSYNC_REQUIRE_FUSE=1 (set in CI), which makes it a failure:
// a mount test that silently skips in CI tests nothing.
func RequireFUSE(t testing.TB) {
	t.Helper()
	reason := ""
	if _, err := os.Stat("/dev/fuse"); err != nil {
		reason = "/dev/fuse is missing"
	} else if os.Geteuid() != 0 {
		reason = "mounting needs root"
	}
	if reason == "" {
		return
	}
	if os.Getenv("WSYNC_REQUIRE_FUSE") == "1" {
		t.Fatalf("WSYNC_REQUIRE_FUSE=1 but %s", reason)
	}
	t.Skip(reason)
}

// Options configures NewMount.
type Options struct {
	fusefs.Options
	// StoreDir holds the database (default: a t.TempDir()). Point it at
	// tmpfs (/dev/shm) for throughput tests.
	StoreDir string
	// Owner owns the root and applied nodes (vfs.Options.Owner).
	Owner vfs.NewAttr
}

// Mount is a store in a temporary directory, mounted in another.
type Mount struct {
	Store  *vfs.Store
	Server *fusefs.Server
	// Dir is the mount point.
	Dir string
}

// Path joins a workspace path onto the mount point.
func (m *Mount) Path(rel string) string { return filepath.Join(m.Dir, rel) }

// NewMount opens a store and mounts it for the duration of t. Cleanup
// unmounts even when the test failed (a lazy unmount and an aborted
// connection when a clean one is refused, since a leftover mount breaks the
// next run) and closes the store.
func NewMount(t testing.TB, opts Options) *Mount {
	t.Helper()
	RequireFUSE(t)
	storeDir := opts.StoreDir
	if storeDir == "" {
		storeDir = t.TempDir()
	} else {
		d, err := os.MkdirTemp(storeDir, "fusefs-test-")
		if err != nil {
			t.Fatal(err)
		}
		storeDir = d
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	mnt := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := vfs.Open(ctx, filepath.Join(storeDir, "state.db"), vfs.Options{
		Owner:  opts.Owner,
		NoSync: true,
		Logger: opts.Logger,
	})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	srv, err := fusefs.Mount(ctx, mnt, store, opts.Options)
	if err != nil {
		store.Close()
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Logf("clean unmount failed (%v); detaching", err)
			if err := srv.ForceUnmount(); err != nil {
				t.Errorf("force unmount: %v", err)
			}
		}
		if err := store.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return &Mount{Store: store, Server: srv, Dir: mnt}
}
