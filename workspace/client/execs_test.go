package client_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// The client's exec-by-id calls against the API over the fake: start,
// attach from 0 and from an offset, wait, list, kill; errors keep their
// sentinels, and a bad id fails before any request.
func TestDetachedExecThroughTheClient(t *testing.T) {
	ws, _ := newClient(t)
	ctx := context.Background()
	rep, err := ws.StartExec(ctx, workspace.ExecSpec{Shell: "echo one ; echo two ; write /c.txt client"})
	if err != nil || rep.ExecID == "" {
		t.Fatalf("start: %+v, %v", rep, err)
	}
	var got strings.Builder
	next := int64(0)
	res, err := ws.AttachExec(ctx, rep.ExecID, 0, func(ev workspace.ExecEvent) {
		if ev.Offset != next {
			t.Errorf("event at %d, want %d", ev.Offset, next)
		}
		next += int64(len(ev.Data))
		got.Write(ev.Data)
	})
	if err != nil || got.String() != "one\ntwo\n" || res.OutputBytes != 8 {
		t.Fatalf("attach: %q, %+v, %v", got.String(), res, err)
	}
	got.Reset()
	if _, err := ws.AttachExec(ctx, rep.ExecID, 4, func(ev workspace.ExecEvent) { got.Write(ev.Data) }); err != nil || got.String() != "two\n" {
		t.Errorf("attach from 4: %q, %v", got.String(), err)
	}
	info, err := ws.WaitExec(ctx, rep.ExecID)
	if err != nil || info.State != workspace.ExecStateExited || info.Sync != workspace.SyncComplete {
		t.Fatalf("wait: %+v, %v", info, err)
	}
	if b, err := ws.ReadFile(ctx, "/c.txt"); err != nil || string(b) != "client" {
		t.Errorf("c.txt: %q, %v", b, err)
	}

	long, err := ws.StartExec(ctx, workspace.ExecSpec{Shell: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := ws.Execs(ctx)
	if err != nil || len(list.Execs) != 2 || list.Execs[1].ExecID != long.ExecID || list.Execs[1].State != workspace.ExecStateRunning {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := ws.KillExec(ctx, long.ExecID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if info, err := ws.WaitExec(ctx, long.ExecID); err != nil || info.Result == nil || info.Result.Signal != int(syscall.SIGKILL) {
		t.Errorf("wait after kill: %+v, %v", info, err)
	}
	if _, err := ws.ExecInfo(ctx, workspace.ExecRuntimeID(rep.ExecID)+":77"); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("unknown id: %v, want ErrNotExist", err)
	}
	if _, err := ws.WaitExec(ctx, "gone:1"); !errors.Is(err, workspace.ErrExecLost) {
		t.Errorf("lost id: %v, want ErrExecLost", err)
	}
	if _, err := ws.AttachExec(ctx, "../../etc", 0, nil); !errors.Is(err, workspace.ErrBadExecID) {
		t.Errorf("bad id: %v, want ErrBadExecID", err)
	}
}
