package syncwire

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
)

func TestQuotaCodecBounds(t *testing.T) {
	q := vfs.Quota{MaxBytes: 10 << 30, MaxEntries: 5, MaxFileSize: 1 << 30}
	b, err := appendQuota(nil, q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeQuota(b)
	if err != nil || got != q {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, q)
	}
	for _, bad := range []vfs.Quota{{MaxBytes: vfs.MaxQuotaBytes + 1}, {MaxEntries: vfs.MaxQuotaEntries + 1}, {MaxFileSize: vfs.MaxQuotaBytes}} {
		b, _ := appendQuota(nil, bad)
		if _, err := DecodeQuota(b); err == nil {
			t.Errorf("decoded %+v past the bounds", bad)
		}
	}
	if _, err := DecodeQuota(append(b, 0)); err == nil {
		t.Error("decoded a quota with trailing bytes")
	}
}

// A pull that would take the server past its quota stops before the batch
// that crosses it, fetching nothing of it; the container keeps everything,
// learns the quota, and the pull completes once the quota is raised.
func TestPullStopsBeforeTheBatchThatCrossesTheQuota(t *testing.T) {
	const batch = 16
	p := newPair(t, DriverOptions{BatchEntries: batch})
	// 1000-byte files, distinct content: batch k (k from 1) holds 16 files.
	for i := range 100 {
		write(t, p.cont, fmt.Sprintf("f%03d", i), randBytes(byte(i), 1000))
	}
	want := snapshot(t, p.cont)
	quota := vfs.Quota{MaxBytes: 40*1000 + 500, MaxEntries: 1000}
	if err := p.server.SetQuota(quota); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, 60*time.Second)
	res, err := p.drv.PullOnce(ctx)
	var qe *vfs.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, vfs.ErrQuota) || qe.Limit != vfs.LimitBytes {
		t.Fatalf("pull over the quota: err = %v, want a bytes QuotaError", err)
	}
	// Two whole batches (32 files) fit; the third would take 48,000 bytes.
	if got := p.server.Usage(); got.Bytes != 32*1000 || res.Batches != 2 || res.Entries != 32 {
		t.Errorf("server usage %+v after %d batches (%d entries), want 32000 bytes in 2 batches", got, res.Batches, res.Entries)
	}
	if res.ChunkBytes != 32*1000 {
		t.Errorf("fetched %d chunk bytes, want 32000: the batch over the quota must not be fetched", res.ChunkBytes)
	}
	if got := snapshot(t, p.cont); !maps.Equal(got, want) {
		t.Error("the container lost files to a pull stopped by the quota")
	}
	if got := p.cont.Quota(); got != quota {
		t.Errorf("the container's store has quota %+v, want the server's %+v", got, quota)
	}
	// Again: still stopped, nothing new, nothing lost.
	if _, err := p.drv.PullOnce(ctx); !errors.Is(err, vfs.ErrQuota) {
		t.Fatalf("second pull: err = %v, want ErrQuota", err)
	}
	// Raised: the pull resumes where it stopped, and the container hears
	// the new quota on the next transfer.
	quota.MaxBytes = 1 << 20
	if err := p.server.SetQuota(quota); err != nil {
		t.Fatal(err)
	}
	res, err = p.drv.PullOnce(ctx)
	if err != nil {
		t.Fatalf("pull after raising the quota: %v", err)
	}
	if res.Entries != 100-32 {
		t.Errorf("resumed pull received %d entries, want %d", res.Entries, 100-32)
	}
	if got := snapshot(t, p.server); !maps.Equal(got, want) {
		t.Error("the trees differ after the resumed pull")
	}
	if got := p.cont.Quota(); got != quota {
		t.Errorf("the container's store has quota %+v, want the raised %+v", got, quota)
	}
}

// An entries quota stops a pull the same way, and a max file size refuses
// the batch that holds the large file.
func TestPullQuotaEntriesAndFileSize(t *testing.T) {
	p := newPair(t, DriverOptions{BatchEntries: 4})
	for i := range 10 {
		write(t, p.cont, fmt.Sprintf("f%d", i), randBytes(byte(i), 10))
	}
	write(t, p.cont, "big", randBytes(99, 101))
	if err := p.server.SetQuota(vfs.Quota{MaxEntries: 9}); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, 60*time.Second)
	_, err := p.drv.PullOnce(ctx)
	var qe *vfs.QuotaError
	if !errors.As(err, &qe) || qe.Limit != vfs.LimitEntries {
		t.Fatalf("pull over max entries: err = %v, want an entries QuotaError", err)
	}
	if got := p.server.Usage().Entries; got != 8 {
		t.Errorf("server holds %d entries, want 8 (two batches)", got)
	}
	if err := p.server.SetQuota(vfs.Quota{MaxFileSize: 100}); err != nil {
		t.Fatal(err)
	}
	_, err = p.drv.PullOnce(ctx)
	if !errors.As(err, &qe) || qe.Limit != vfs.LimitFileSize {
		t.Fatalf("pull of a file over the max file size: err = %v, want a file size QuotaError", err)
	}
}
