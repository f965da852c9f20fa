package workspace_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// A pull the quota stops leaves the runtime's pull pending in the quota
// state (not retried on a timer), the container keeps the files, the
// registry keeps the quota, and raising it brings the files in.
func TestPullStoppedByTheQuotaIsPendingUntilRaised(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	_, err := w.Pull(ctx)
	must(t, err)
	if _, err := w.SetQuota(ctx, vfs.Quota{MaxBytes: -1}); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("negative quota: %v, want ErrInvalid", err)
	}
	// The command writes 15 bytes; the quota is lowered to 10 before the
	// pull after it runs (the container had none when it ran).
	fake := h.remotes.Fake("default")
	release := fake.HoldPulls()
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: "write /a.txt hello ; write /b.txt 0123456789", Sync: workspace.SyncDefer}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncDeferred {
		t.Fatalf("sync %q, want deferred", rep.Sync)
	}
	_, err = w.SetQuota(ctx, vfs.Quota{MaxBytes: 10})
	must(t, err)
	release()
	var st workspace.Status
	eventually(t, "the pull stopped by the quota", func() bool {
		st, err = w.Status(ctx)
		return err == nil && st.Pending != nil && st.Pending.State == workspace.PendingQuota
	})
	if !strings.Contains(st.Pending.Error, "quota") {
		t.Errorf("pending error %q, want the quota's", st.Pending.Error)
	}
	if st.Quota == nil || st.Quota.MaxBytes != 10 || st.Quota.Used.Bytes != 0 {
		t.Fatalf("status quota %+v", st.Quota)
	}
	if got := containerFile(t, fake, "b.txt"); got != "0123456789" {
		t.Fatalf("the container lost b.txt: %q", got)
	}
	if got := fake.Container.Quota(); got.MaxBytes != 10 {
		t.Errorf("the container's store has quota %+v, want the workspace's", got)
	}
	// A push is fenced while the pull is owed: the container keeps its files.
	if _, err := w.Push(ctx); !errors.Is(err, workspace.ErrPendingPull) || !errors.Is(err, vfs.ErrQuota) {
		t.Errorf("push with a pull the quota stopped: %v, want ErrPendingPull and ErrQuota", err)
	}

	// The registry keeps the quota across a restart.
	must(t, h.m.Close())
	h.m = h.open(t)
	w = h.ws(t, "default")
	if got := w.Info().Quota; got.MaxBytes != 10 {
		t.Fatalf("quota after a restart %+v, want max bytes 10", got)
	}
	_, err = w.SetQuota(ctx, vfs.Quota{MaxBytes: 1000})
	must(t, err)
	eventually(t, "the pull after raising the quota", func() bool {
		st, err := w.Status(ctx)
		return err == nil && st.Pending == nil
	})
	if got := read(t, w, "/a.txt"); got != "hello" {
		t.Errorf("a.txt %q after the quota was raised", got)
	}
	if got := read(t, w, "/b.txt"); got != "0123456789" {
		t.Errorf("b.txt %q after the quota was raised", got)
	}
}
