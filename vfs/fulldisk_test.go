package vfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/wsync/wsync/internal/testutil"
)

// Issue 9 item 4: a background chunk store that failed (a full disk) made
// the open file's every later write and flush fail, while the writer had
// been told success and the file ended empty; FlushAll, which every pull
// runs first, failed for all files. Now the writer gets ENOSPC at a write,
// a flush and a close; nothing written is lost while the file is open;
// other files still commit; and once space is free the same handle
// commits everything.
func TestFullDiskErrorsReachTheWriter(t *testing.T) {
	disk := testutil.Tmpfs(t, 24<<20)
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "store.db"), Options{ChunkDir: filepath.Join(disk, "chunks"), NoSync: true})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	ballast := testutil.Fill(t, disk, 1<<20) // room for about one chunk file

	h := createFile(t, s, "big")
	h2, err := s.OpenHandle(ctx, h.Ino()) // a second descriptor, closed first
	must(t, err)
	// Write 10 full chunks (5 MiB): the first stores fill the disk, and a
	// later write must hear of it.
	var data []byte
	var werr error
	for i := range 10 {
		p := pattern(cs, byte(10+i))
		if _, werr = h.WriteAt(ctx, p, int64(len(data))); werr != nil {
			break
		}
		data = append(data, p...)
	}
	if Errno(werr) != syscall.ENOSPC {
		t.Fatalf("write error = %v (errno %v), want ENOSPC", werr, Errno(werr))
	}
	// The writer's memory stays bounded however long it keeps trying.
	refused := 0
	for i := range 10 {
		p := pattern(cs, byte(30+i))
		if _, err := h.WriteAt(ctx, p, int64(len(data))); err != nil {
			refused++
			continue
		}
		data = append(data, p...)
	}
	if refused == 0 {
		t.Fatal("10 more chunks were accepted on a full disk")
	}
	h.f.mu.Lock()
	held := len(h.f.bufs)
	h.f.mu.Unlock()
	if held > maxDirtyChunks+cap(s.hashSem)+1 {
		t.Fatalf("%d dirty images held while stores fail, bound %d", held, maxDirtyChunks)
	}
	// Flush and close report it too.
	if err := h.Flush(ctx); Errno(err) != syscall.ENOSPC {
		t.Fatalf("flush error = %v, want ENOSPC", err)
	}
	if err := h2.Release(ctx); Errno(err) != syscall.ENOSPC {
		t.Fatalf("close error = %v, want ENOSPC", err)
	}
	// Another file commits (its bytes go into the database, which has
	// room), and FlushAll, which a pull runs first, does not fail for it.
	small := createFile(t, s, "small")
	writeAt(t, small, []byte("unaffected"), 0)
	kept := writeErrors(t, "flushall", "ENOSPC")
	if err := s.FlushAll(ctx); err != nil {
		t.Fatalf("FlushAll = %v with one file failing; the others must still sync", err)
	}
	if got := writeErrors(t, "flushall", "ENOSPC") - kept; got != 1 {
		t.Fatalf("wsync_vfs_write_errors_total{where=flushall,errno=ENOSPC} rose by %v, want 1", got)
	}
	if got := string(readFile(t, s, "small")); got != "unaffected" {
		t.Fatalf("small = %q", got)
	}
	// FlushAll kept big's failure for its writer: one report, at the next
	// write.
	if _, err := h.WriteAt(ctx, []byte{1}, 0); Errno(err) != syscall.ENOSPC {
		t.Fatalf("write after a failed FlushAll = %v, want ENOSPC once", err)
	}

	// Space comes back: the same handle commits every byte it was told
	// were written.
	must(t, os.Remove(ballast))
	must(t, h.Flush(ctx))
	if _, err := h.WriteAt(ctx, []byte("more"), int64(len(data))); err != nil {
		t.Fatalf("write after space came back: %v", err)
	}
	data = append(data, "more"...)
	must(t, h.Release(ctx))
	if got := readFile(t, s, "big"); !bytes.Equal(got, data) {
		t.Fatalf("big has %d bytes, want the %d written (equal prefix %v)", len(got), len(data), bytes.HasPrefix(got, data[:min(len(got), len(data))]))
	}
}

// writeErrors reads wsync_vfs_write_errors_total{where, errno}.
func writeErrors(t testing.TB, where, errno string) float64 {
	t.Helper()
	var m dto.Metric
	must(t, metricWriteErrors.WithLabelValues(where, errno).Write(&m))
	return m.GetCounter().GetValue()
}
