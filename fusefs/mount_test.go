package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/metrics"
	"github.com/wsync/wsync/vfs"
)

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), " "+dir+" ")
}

func TestUnmountBusyThenForce(t *testing.T) {
	fusetest.RequireFUSE(t)
	ctx := context.Background()
	store, err := vfs.Open(ctx, filepath.Join(t.TempDir(), "state.db"), vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dir := t.TempDir()
	srv, err := fusefs.Mount(ctx, dir, store, fusefs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "busy"))
	if err != nil {
		srv.ForceUnmount()
		t.Fatal(err)
	}
	f.WriteString("kept")
	if err := srv.Unmount(); err == nil {
		t.Error("clean unmount succeeded with a file open")
	}
	if !mounted(t, dir) {
		t.Fatal("a failed unmount left no mount")
	}
	if err := srv.ForceUnmount(); err != nil {
		t.Fatalf("force unmount: %v", err)
	}
	if mounted(t, dir) {
		t.Error("still mounted after a forced unmount")
	}
	f.Close() // ENOTCONN now; nothing to check but that it returns
	// The write reached the store before the mount went away: shutdown
	// committed the handle the kernel never released.
	if got, err := store.ReadFile(ctx, "busy"); err != nil || string(got) != "kept" {
		t.Errorf("store has %q, %v", got, err)
	}
	if err := srv.Unmount(); err != nil {
		t.Errorf("second unmount: %v", err)
	}
}

func TestMountRootOwner(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{Owner: &fusefs.Owner{Uid: 1234, Gid: 5678}}})
	if st := stat(t, m.Dir); st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("root owned by %d:%d, want 1234:5678", st.Uid, st.Gid)
	}
	if err := os.Chown(m.Dir, 42, 43); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, m.Dir); st.Uid != 42 || st.Gid != 43 {
		t.Errorf("root owned by %d:%d after chown, want 42:43", st.Uid, st.Gid)
	}
}

func TestMetricsExposed(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	writeFile(t, m.Path("f"), "data")
	readFile(t, m.Path("f"))
	st := m.Server.Stats()
	if st.Ops["create"].Count == 0 || st.Ops["read"].Count == 0 || st.WrittenBytes != 4 || st.Commits == 0 {
		t.Errorf("stats: %+v", st)
	}
	families, err := metrics.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"wsync_fuse_ops_total": false, "wsync_fuse_op_duration_seconds": false,
		"wsync_fuse_dirty_handles": false, "wsync_fuse_open_handles": false, "wsync_fuse_written_bytes_total": false}
	for _, f := range families {
		if _, ok := want[f.GetName()]; ok {
			want[f.GetName()] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("%s not exposed", name)
		}
	}
}

// TestReadOnlyCloseSendsNoFlush: a descriptor opened read-only cannot have
// written, so its open asks the kernel for no FLUSH at its close
// (FOPEN_NOFLUSH): reading a small file costs one round trip less. A
// writable descriptor's close still flushes, and commits what it wrote.
func TestReadOnlyCloseSendsNoFlush(t *testing.T) {
	m := fusetest.NewMount(t, fusetest.Options{})
	p := m.Path("f")
	writeFile(t, p, "hello")
	flushes := func() uint64 { return m.Server.Stats().Ops["flush"].Count }
	before := flushes()
	for range 10 {
		if got := readFile(t, p); got != "hello" {
			t.Fatalf("read %q", got)
		}
	}
	if n := flushes() - before; n != 0 {
		t.Errorf("10 read-only opens and closes sent %d FLUSH requests, want 0", n)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" world"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if flushes() == before {
		t.Error("the close of a writable descriptor sent no FLUSH")
	}
	if got := storeFile(t, m, "f"); got != "hello world" {
		t.Errorf("the store holds %q after the writer's close, want %q", got, "hello world")
	}
}
