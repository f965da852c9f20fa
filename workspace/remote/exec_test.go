package remote_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/remote"
)

// countingRemote counts the pulls of the real remote it wraps: a pull
// that is not made is a round trip to computerd that does not happen.
type countingRemote struct {
	*remote.Remote
	pulls atomic.Int64
}

func (c *countingRemote) Pull(ctx context.Context, opts workspace.SyncOptions) (workspace.SyncReport, error) {
	c.pulls.Add(1)
	return c.Remote.Pull(ctx, opts)
}

// The exec bracket against a real computerd (its FUSE mount, commands run
// by its runner) skips the pull after a command only when the container
// changed nothing: every kind of write through the mount is pulled, a
// command that only reads makes no pull, and a write still held in a file
// a process left behind keeps open is pulled too (the exit event's head is
// read after committing open files).
func TestExecSkipsThePullOnlyWhenTheContainerChangedNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := computertest.Start(t, computer.Config{Token: "token"})
	var rem *countingRemote
	w := openDefault(ctx, t, d, "token", func(ws *workspace.Workspace, rt workspace.Runtime) (workspace.Remote, error) {
		r, err := remote.Factory(slog.New(slog.DiscardHandler))(ws, rt)
		if err != nil {
			return nil, err
		}
		rem = &countingRemote{Remote: r.(*remote.Remote)}
		return rem, nil
	})
	server, err := w.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Pull(ctx); err != nil { // the first push after a start pulls first
		t.Fatal(err)
	}

	// run runs script in the container and reports whether the bracket
	// pulled.
	run := func(t *testing.T, script string, env ...string) bool {
		t.Helper()
		before := rem.pulls.Load()
		rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: script, Env: env}, nil)
		if err != nil || rep.ExitCode != 0 || rep.Sync != workspace.SyncComplete {
			t.Fatalf("exec %q: %+v, %v", script, rep, err)
		}
		return rem.pulls.Load() > before
	}
	file := func(t *testing.T, p string) (string, uint32) {
		t.Helper()
		b, err := server.ReadFile(ctx, p)
		if err != nil {
			t.Fatalf("server %s: %v", p, err)
		}
		a, err := server.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), a.Mode & 0o7777
	}

	if !run(t, "echo one > f") {
		t.Error("a command that wrote a file made no pull")
	}
	if got, _ := file(t, "f"); got != "one\n" {
		t.Errorf("server f = %q, want the command's write", got)
	}
	for _, script := range []string{"true", "cat f >/dev/null", "ls -la >/dev/null; stat f >/dev/null"} {
		if run(t, script) {
			t.Errorf("%q changed nothing and made a pull", script)
		}
	}
	if !run(t, "chmod 600 f") {
		t.Error("a chmod made no pull")
	}
	if _, mode := file(t, "f"); mode != 0o600 {
		t.Errorf("server f mode %o after chmod 600", mode)
	}
	if !run(t, "mkdir -p d && mv f d/g") {
		t.Error("a mkdir and a rename made no pull")
	}
	if got, _ := file(t, "d/g"); got != "one\n" {
		t.Errorf("server d/g = %q", got)
	}
	if !run(t, "rm d/g") {
		t.Error("a delete made no pull")
	}
	if _, err := server.ReadFile(ctx, "d/g"); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("server d/g after rm: %v", err)
	}

	// A process the command leaves behind (out of its process group, so it
	// outlives the exec) appends to a file and keeps it open: its write is
	// in no commit of the file until computerd commits open files. The
	// fifo, outside the mount, tells the command the write is done; the
	// file is never closed before the exit, so no FLUSH commits it.
	if !run(t, "echo a > log") {
		t.Fatal("the write of log made no pull")
	}
	tmp := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(tmp, "ready"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killAndWait(t, filepath.Join(tmp, "pid")) })
	leaveBehind := `setsid sh -c 'echo $$ > "$T/pid"; exec >>log; echo b; exec 2>"$T/ready"; exec sleep 60' </dev/null >/dev/null 2>&1 &
: < "$T/ready"`
	if !run(t, leaveBehind, "T="+tmp) {
		t.Error("a write held in a file a process left behind keeps open made no pull")
	}
	if got, _ := file(t, "log"); got != "a\nb\n" {
		t.Errorf("server log = %q, want the write still held open (%q)", got, "a\nb\n")
	}
}

// killAndWait kills the process whose pid is in file and waits until it has
// exited (its pidfd is readable). The kernel releases its file on the mount
// asynchronously, so computerd's unmount may still find the mount busy and
// detach it.
func killAndWait(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return // it never started
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Errorf("pid file: %v", err)
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone already
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		t.Errorf("kill %d: %v", pid, err)
		return
	}
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000); err != nil {
		t.Errorf("wait for %d: %v", pid, err)
	}
}

// An exit event's head is reported only when it came on the session the
// last push used: before any push the session was never reconciled, and
// the fetch cursor may follow another container's feed.
func TestExecReportsTheHeadOnlyOnThePushedSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, _, r := newRemote(ctx, t)
	discard := func(workspace.ExecEvent) {}

	res, err := r.Exec(ctx, workspace.ExecSpec{Argv: []string{"true"}}, discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.HasHead {
		t.Errorf("exec before any push reported head %d", res.Head)
	}
	if _, err := r.Push(ctx, workspace.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = r.Exec(ctx, workspace.ExecSpec{Shell: "echo x > f"}, discard)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Head, d.Store().CurrentRev(); !res.HasHead || got != want {
		t.Errorf("exec after a push: head %d (reported %v), want the container's rev %d", got, res.HasHead, want)
	}
}
