package execrun_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/internal/testutil"
)

// find is the Info of id in r's list.
func find(t *testing.T, r *execrun.Runner, id string) (execrun.Info, bool) {
	t.Helper()
	for _, info := range r.List() {
		if info.ID == id {
			return info, true
		}
	}
	return execrun.Info{}, false
}

// List shows running and retained execs, oldest first, with their command
// line, working directory, state, exit and log offsets.
func TestListShowsRunningAndFinished(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "src"), 0o755))
	r := newRunner(t, execrun.Options{Root: root})
	done := start(t, r, execrun.Spec{Argv: []string{"sh", "-c", "printf hello; exit 3"}, Cwd: "src"})
	wait(t, done)
	gate, open := io.Pipe()
	defer open.Close()
	live := start(t, r, execrun.Spec{Shell: "read x", Stdin: gate})
	killed := start(t, r, execrun.Spec{Argv: []string{"sleep", "30"}})
	must(t, killed.Kill(syscall.SIGTERM))
	wait(t, killed)

	list := r.List()
	if len(list) != 3 || list[0].ID != done.ID() || list[1].ID != live.ID() || list[2].ID != killed.ID() {
		t.Fatalf("list %+v: want the three execs in start order", list)
	}
	d := list[0]
	if d.State != execrun.StateExited || d.Exit == nil || d.Exit.Code != 3 || d.Ended.IsZero() || d.Ended.Before(d.Started) {
		t.Errorf("finished exec: %+v, want exited with code 3, ended after it started", d)
	}
	if got, want := strings.Join(d.Argv, " "), "sh -c printf hello; exit 3"; got != want || d.Cwd != "src" {
		t.Errorf("argv %q cwd %q, want %q and src", got, d.Cwd, want)
	}
	if d.LogStart != 0 || d.LogEnd != 5 || d.LogCap != execrun.DefaultLogCap || d.Pid == 0 {
		t.Errorf("log [%d, %d) cap %d pid %d, want [0, 5), the default cap and a pid", d.LogStart, d.LogEnd, d.LogCap, d.Pid)
	}
	if l := list[1]; l.State != execrun.StateRunning || l.Exit != nil || !l.Ended.IsZero() || l.Shell != "read x" || l.Cwd != "" {
		t.Errorf("running exec: %+v", l)
	}
	if k := list[2]; k.State != execrun.StateKilled || k.Exit == nil || k.Exit.Signal != syscall.SIGTERM {
		t.Errorf("killed exec: %+v, want killed by SIGTERM", k)
	}
}

// The command line List carries is a bounded summary.
func TestListCutsLongCommandLines(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	argv := []string{"true"}
	for range 100 {
		argv = append(argv, strings.Repeat("x", 1000))
	}
	e := start(t, r, execrun.Spec{Argv: argv})
	wait(t, e)
	info, ok := find(t, r, e.ID())
	if !ok {
		t.Fatal("exec not listed")
	}
	if len(info.Argv) != execrun.MaxInfoArgs || len(info.Argv[1]) != execrun.MaxInfoArgLen || !info.Truncated {
		t.Errorf("%d args, the second of %d bytes, truncated %v: want %d of at most %d, truncated",
			len(info.Argv), len(info.Argv[1]), info.Truncated, execrun.MaxInfoArgs, execrun.MaxInfoArgLen)
	}
}

// A Spec may ask for a smaller output log than the runner's, never a
// larger one.
func TestLogCapPerExec(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{LogCap: 4096})
	e := start(t, r, execrun.Spec{Shell: "yes abcdefghi | head -c 5000", LogCap: 1000})
	wait(t, e)
	info, _ := find(t, r, e.ID())
	if info.LogCap != 1000 || info.LogEnd != 5000 || info.LogStart != 4000 {
		t.Errorf("log [%d, %d) cap %d, want [4000, 5000) cap 1000", info.LogStart, info.LogEnd, info.LogCap)
	}
	for _, c := range []int64{-1, 4097} {
		if _, err := r.Start(testCtx(t), execrun.Spec{Argv: []string{"true"}, LogCap: c}); !errors.Is(err, execrun.ErrBadSpec) {
			t.Errorf("log cap %d: %v, want ErrBadSpec", c, err)
		}
	}
}

// A finished exec is dropped RetainFor after its end, however few are
// retained.
func TestRetainFor(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{RetainFor: 50 * time.Millisecond})
	e := start(t, r, execrun.Spec{Argv: []string{"true"}})
	wait(t, e)
	if _, err := r.Lookup(e.ID()); err != nil {
		t.Fatalf("lookup right after the end: %v", err)
	}
	testutil.WaitFor(t, "the finished exec to expire", 10*time.Second, func() bool {
		_, err := r.Lookup(e.ID())
		return errors.Is(err, execrun.ErrNotFound)
	})
	if _, ok := find(t, r, e.ID()); ok {
		t.Error("an expired exec is still listed")
	}
	if got := r.Stats().Retained; got != 0 {
		t.Errorf("retained = %d, want 0", got)
	}
}

// Attach from FromEnd replays nothing: it gives what comes next and the
// exit.
func TestAttachFromEnd(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	gate, open := io.Pipe()
	e := start(t, r, execrun.Spec{Shell: "echo before; read x; echo after", Stdin: gate})
	first, err := e.Attach(0)
	must(t, err)
	if ev, err := first.Next(testCtx(t)); err != nil || string(ev.Data) != "before\n" {
		t.Fatalf("first event %q, %v", ev.Data, err)
	}
	sub, err := r.Attach(e.ID(), execrun.FromEnd)
	must(t, err)
	if sub.Offset() != 7 {
		t.Errorf("attach from the end starts at %d, want 7", sub.Offset())
	}
	_, err = open.Write([]byte("go\n"))
	must(t, err)
	open.Close()
	res := collect(t, testCtx(t), sub)
	if res.stdout != "after\n" || res.exit.Code != 0 {
		t.Errorf("from the end: %q, %+v; want only \"after\\n\" and exit 0", res.stdout, res.exit)
	}
}
