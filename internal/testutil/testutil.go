// Package testutil holds helpers the packages' tests share.
package testutil

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing t when d passes first. Tests
// use it instead of sleeping: it waits on the condition, with a deadline.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Context is a context of t that ends after d: a bound on what a test
// waits for.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// WSServer serves h on a local HTTP server until the test ends and returns
// the WebSocket URL of path on it. At cleanup h is closed before the
// listener, so its sessions end first.
func WSServer(t testing.TB, h interface {
	http.Handler
	Close() error
}, path string) string {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + path
}

// BenchDir is a directory for a benchmark's stores, removed when it ends:
// under WSYNC_BENCH_DIR when set (the medium to measure on, /dev/shm for
// tmpfs, say; pattern as for os.MkdirTemp), else the benchmark's TempDir.
func BenchDir(b *testing.B, pattern string) string {
	if d := os.Getenv("WSYNC_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, pattern)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}
