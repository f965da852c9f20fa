// Package computertest starts computerd daemons for tests. It lives apart
// from computer so that the binaries do not link the testing package.
package computertest

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/vfs"
)

// Start starts a computerd for the duration of t with its mount and state
// in temporary directories, listening on a loopback port. Cleanup shuts it
// down and, should that fail, detaches the mount so a leftover never breaks
// the next run.
func Start(t testing.TB, cfg computer.Config) *computer.Daemon {
	t.Helper()
	fusetest.RequireFUSE(t)
	if cfg.Mount == "" {
		cfg.Mount = filepath.Join(t.TempDir(), "workspace")
	}
	if cfg.State == "" {
		cfg.State = filepath.Join(t.TempDir(), "state.db")
	}
	if cfg.Listener == nil && cfg.Listen == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listener = ln
	}
	if cfg.State != vfs.Memory {
		cfg.NoSync = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := computer.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("computerd shutdown: %v", err)
		}
		// A mount left behind breaks the next run. When the shutdown
		// unmounted, this fails with EINVAL (not a mount point).
		syscall.Unmount(cfg.Mount, syscall.MNT_DETACH)
	})
	return d
}
