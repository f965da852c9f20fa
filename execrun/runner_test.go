package execrun_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/execrun"
)

// newRunner returns a Runner over a fresh root (unless opts names one) that
// is shut down when the test ends.
func newRunner(t *testing.T, opts execrun.Options) *execrun.Runner {
	t.Helper()
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	r, err := execrun.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return r
}

// testCtx bounds every wait of a test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type result struct {
	stdout, stderr string
	exit           execrun.ExitStatus
	events         []execrun.Event
}

// collect reads sub to its end, checking that offsets are contiguous and the
// exit event comes last.
func collect(t *testing.T, ctx context.Context, sub *execrun.Subscription) result {
	t.Helper()
	var res result
	var out, errb bytes.Buffer
	next := sub.Offset()
	for {
		ev, err := sub.Next(ctx)
		if err == io.EOF {
			if res.events == nil || res.events[len(res.events)-1].Exit == nil {
				t.Fatal("EOF before the exit event")
			}
			break
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if ev.Offset != next {
			t.Fatalf("event at offset %d, want %d", ev.Offset, next)
		}
		next += int64(len(ev.Data))
		res.events = append(res.events, ev)
		switch {
		case ev.Exit != nil:
			res.exit = *ev.Exit
		case ev.Stream == execrun.Stdout:
			out.Write(ev.Data)
		case ev.Stream == execrun.Stderr:
			errb.Write(ev.Data)
		default:
			t.Fatalf("event with stream %v", ev.Stream)
		}
	}
	res.stdout, res.stderr = out.String(), errb.String()
	return res
}

// run starts s, attaches from 0 and reads everything.
func run(t *testing.T, r *execrun.Runner, s execrun.Spec) result {
	t.Helper()
	ctx := testCtx(t)
	e, err := r.Start(ctx, s)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	sub, err := e.Attach(0)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	return collect(t, ctx, sub)
}

// start starts spec on r.
func start(t *testing.T, r *execrun.Runner, spec execrun.Spec) *execrun.Exec {
	t.Helper()
	e, err := r.Start(testCtx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func wait(t *testing.T, e *execrun.Exec) execrun.ExitStatus {
	t.Helper()
	st, err := e.Wait(testCtx(t))
	if err != nil {
		t.Fatalf("wait %s: %v", e.ID(), err)
	}
	return st
}

// assertGroupGone checks that no process, zombies included, is left in the
// process group pgid.
func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if err := unix.Kill(-pgid, 0); err != unix.ESRCH {
		t.Errorf("kill(-%d, 0) = %v, want ESRCH", pgid, err)
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:])) // state ppid pgrp ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			t.Errorf("process %s (state %s) is still in group %d", p, f[0], pgid)
		}
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	for _, tc := range []struct {
		name string
		spec execrun.Spec
		want int
	}{
		{"true", execrun.Spec{Argv: []string{"true"}}, 0},
		{"false", execrun.Spec{Argv: []string{"false"}}, 1},
		{"shell exit 3", execrun.Spec{Shell: "exit 3"}, 3},
	} {
		res := run(t, r, tc.spec)
		if got := res.exit; got.Code != tc.want || got.Signal != 0 || got.TimedOut || got.Killed {
			t.Errorf("%s: exit %+v, want code %d", tc.name, got, tc.want)
		}
	}
	if got, want := r.Stats().Finished, uint64(3); got != want {
		t.Errorf("finished = %d, want %d", got, want)
	}
}

func TestExecID(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	if _, err := uuid.Parse(r.RuntimeID()); err != nil {
		t.Errorf("runtime id %q: %v", r.RuntimeID(), err)
	}
	e := start(t, r, execrun.Spec{Argv: []string{"true"}})
	if got, want := e.ID(), r.RuntimeID()+":1"; got != want {
		t.Errorf("id = %q, want %q", got, want)
	}
	wait(t, e)
}

func TestStderrSeparate(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	res := run(t, r, execrun.Spec{Shell: "echo out; echo err >&2; echo out2"})
	if got, want := res.stdout, "out\nout2\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := res.stderr, "err\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
}

func TestEnv(t *testing.T) {
	t.Setenv("WSYNC_EXECRUN_SECRET", "leaked")
	r := newRunner(t, execrun.Options{})
	res := run(t, r, execrun.Spec{
		Shell: `echo "$FOO|$HOME|$PATH|${WSYNC_EXECRUN_SECRET-unset}|$PWD"`,
		Env:   []string{"FOO=bar", "FOO=baz"},
	})
	want := "baz|/root|" + os.Getenv("PATH") + "|unset|" + r.Root() + "\n"
	if os.Geteuid() != 0 {
		home, _ := os.UserHomeDir()
		want = strings.Replace(want, "/root", home, 1)
	}
	if res.stdout != want {
		t.Errorf("stdout = %q, want %q", res.stdout, want)
	}
}

func TestStdin(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	res := run(t, r, execrun.Spec{Argv: []string{"cat"}, Stdin: strings.NewReader("hello\nworld\n")})
	if got, want := res.stdout, "hello\nworld\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	res = run(t, r, execrun.Spec{Argv: []string{"cat"}})
	if res.stdout != "" || res.exit.Code != 0 {
		t.Errorf("cat without stdin: %q, %v", res.stdout, res.exit)
	}
}

func TestOutputStreamsLive(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	ctx := testCtx(t)
	pr, pw := io.Pipe()
	e, err := r.Start(ctx, execrun.Spec{Shell: `echo ready; read line; echo "got $line"`, Stdin: pr})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.Attach(0)
	if err != nil {
		t.Fatal(err)
	}
	readUntil := func(want string) {
		t.Helper()
		var got []byte
		for !bytes.Contains(got, []byte(want)) {
			ev, err := sub.Next(ctx)
			if err != nil || ev.Exit != nil {
				t.Fatalf("waiting for %q, got %q then %v %v", want, got, ev.Exit, err)
			}
			got = append(got, ev.Data...)
		}
	}
	readUntil("ready\n") // while the command still waits for its stdin
	if _, err := pw.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("got x\n")
	pw.Close()
	if st := wait(t, e); st.Code != 0 {
		t.Errorf("exit %v", st)
	}
}

func TestCwd(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o644))
	must(t, os.Symlink("/", filepath.Join(root, "escape")))
	must(t, os.Symlink("sub", filepath.Join(root, "inner")))
	r := newRunner(t, execrun.Options{Root: root})
	real := r.Root()

	for _, tc := range []struct{ cwd, want string }{
		{"", real},
		{"sub", real + "/sub"},
		{root + "/sub", real + "/sub"},
		{"inner", real + "/sub"},
		{"sub/../sub/", real + "/sub"},
	} {
		res := run(t, r, execrun.Spec{Argv: []string{"pwd", "-P"}, Cwd: tc.cwd})
		if got := strings.TrimSpace(res.stdout); got != tc.want {
			t.Errorf("cwd %q: pwd = %q, want %q", tc.cwd, got, tc.want)
		}
	}
	for _, cwd := range []string{"..", "/", "/etc", "sub/../..", "../" + filepath.Base(root) + "x",
		"escape", "escape/etc", "missing", "file"} {
		_, err := r.Start(testCtx(t), execrun.Spec{Argv: []string{"true"}, Cwd: cwd})
		if !errors.Is(err, execrun.ErrBadCwd) || !errors.Is(err, os.ErrInvalid) {
			t.Errorf("cwd %q: err = %v, want ErrBadCwd (an invalid argument)", cwd, err)
		}
	}
	if got := r.Stats().Started; got != 5 {
		t.Errorf("started = %d, want 5 (refused cwds start nothing)", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestBadSpec(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	for _, tc := range []struct {
		name string
		spec execrun.Spec
	}{
		{"no command", execrun.Spec{}},
		{"argv and shell", execrun.Spec{Argv: []string{"true"}, Shell: "true"}},
		{"empty argv0", execrun.Spec{Argv: []string{""}}},
		{"NUL in argument", execrun.Spec{Argv: []string{"echo", "a\x00b"}}},
		{"env without =", execrun.Spec{Argv: []string{"true"}, Env: []string{"NOEQ"}}},
		{"env without key", execrun.Spec{Argv: []string{"true"}, Env: []string{"=x"}}},
		{"negative timeout", execrun.Spec{Argv: []string{"true"}, Timeout: -time.Second}},
		{"timeout above max", execrun.Spec{Argv: []string{"true"}, Timeout: 2 * execrun.DefaultMaxTimeout}},
	} {
		if _, err := r.Start(testCtx(t), tc.spec); !errors.Is(err, execrun.ErrBadSpec) {
			t.Errorf("%s: err = %v, want ErrBadSpec", tc.name, err)
		}
	}
	_, err := r.Start(testCtx(t), execrun.Spec{Argv: []string{"wsync-no-such-command"}})
	if !errors.Is(err, exec.ErrNotFound) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing command: err = %v, want exec.ErrNotFound", err)
	}
	if st := r.Stats(); st.Started != 0 || st.Running != 0 {
		t.Errorf("stats after refusals: %+v", st)
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{KillGrace: 200 * time.Millisecond})
	for _, tc := range []struct {
		name    string
		shell   string
		timeout time.Duration
		signal  syscall.Signal
	}{
		{"SIGTERM", "sleep 100 & sleep 100", 300 * time.Millisecond, syscall.SIGTERM},
		// The whole group ignores SIGTERM: SIGKILL after the grace. The
		// longer timeout lets sh set its trap first.
		{"SIGKILL after grace", `trap "" TERM; sleep 100 & sleep 100`, time.Second, syscall.SIGKILL},
	} {
		e := start(t, r, execrun.Spec{Shell: tc.shell, Timeout: tc.timeout})
		st := wait(t, e)
		if !st.TimedOut || st.Killed || st.Signal != tc.signal || st.Code != 128+int(tc.signal) {
			t.Errorf("%s: exit %+v, want timed out by %v", tc.name, st, tc.signal)
		}
		assertGroupGone(t, e.Pid())
	}
	if got := r.Stats().TimedOut; got != 2 {
		t.Errorf("timed out = %d, want 2", got)
	}
}

func TestNoOrphansAfterExit(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	// The leader exits at once; its background child holds stdout open.
	e := start(t, r, execrun.Spec{Shell: "sleep 100 & echo started"})
	if st := wait(t, e); st.Code != 0 || st.Killed || st.TimedOut {
		t.Errorf("exit %+v, want 0", st)
	}
	assertGroupGone(t, e.Pid())
	res := collect(t, testCtx(t), mustAttach(t, r, e.ID(), 0))
	if res.stdout != "started\n" {
		t.Errorf("stdout = %q", res.stdout)
	}
}

func mustAttach(t *testing.T, r *execrun.Runner, id string, from int64) *execrun.Subscription {
	t.Helper()
	sub, err := r.Attach(id, from)
	if err != nil {
		t.Fatalf("attach %s at %d: %v", id, from, err)
	}
	return sub
}

func TestKillSignal(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	e := start(t, r, execrun.Spec{Shell: "sleep 100 & sleep 100"})
	if err := r.Kill(e.ID(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	st := wait(t, e)
	if got, want := st, (execrun.ExitStatus{Code: 128 + 10, Signal: syscall.SIGUSR1, Killed: true, Duration: st.Duration}); got != want {
		t.Errorf("exit %+v, want %+v", got, want)
	}
	assertGroupGone(t, e.Pid())
	if err := r.Kill(e.ID(), syscall.SIGKILL); err != nil {
		t.Errorf("kill after exit: %v, want nil", err)
	}
	if err := r.Kill(e.ID(), 0); !errors.Is(err, execrun.ErrBadSpec) {
		t.Errorf("kill with signal 0: %v, want ErrBadSpec", err)
	}
	if got := r.Stats().Killed; got != 1 {
		t.Errorf("killed = %d, want 1", got)
	}
}

func TestReattachReplay(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	e, err := r.Start(testCtx(t), execrun.Spec{
		Shell: "for i in 1 2 3; do echo out$i; echo err$i >&2; done; exit 5",
	})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, e)

	all := collect(t, testCtx(t), mustAttach(t, r, e.ID(), 0))
	if all.stdout != "out1\nout2\nout3\n" || all.stderr != "err1\nerr2\nerr3\n" || all.exit.Code != 5 {
		t.Fatalf("replay: stdout %q stderr %q exit %v", all.stdout, all.stderr, all.exit)
	}
	// From the second event on: the same events, minus the first.
	from := all.events[1].Offset
	rest := collect(t, testCtx(t), mustAttach(t, r, e.ID(), from))
	if got, want := len(rest.events), len(all.events)-1; got != want {
		t.Errorf("replay from %d: %d events, want %d", from, got, want)
	}
	// From the end: only the exit event.
	end := all.events[len(all.events)-1].Offset
	tail := collect(t, testCtx(t), mustAttach(t, r, e.ID(), end))
	if len(tail.events) != 1 || tail.exit.Code != 5 {
		t.Errorf("replay from the end: %+v", tail.events)
	}
	if _, err := r.Attach(e.ID(), end+1); !errors.Is(err, execrun.ErrBadSpec) {
		t.Errorf("attach past the end: %v, want ErrBadSpec", err)
	}
}

func TestLogTruncated(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{LogCap: 1000})
	gate, open := io.Pipe()
	e := start(t, r, execrun.Spec{Shell: "read go; yes abcdefghi | head -c 5000", Stdin: gate})
	live, err := e.Attach(0) // attached before any output, never read
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	open.Close()
	wait(t, e)

	var te *execrun.TruncatedError
	if _, err := r.Attach(e.ID(), 0); !errors.As(err, &te) || !errors.Is(err, execrun.ErrLogTruncated) {
		t.Fatalf("attach at 0: %v, want ErrLogTruncated", err)
	}
	if got, want := te.Start, int64(4000); got != want {
		t.Errorf("log start = %d, want %d", got, want)
	}
	if _, err := live.Next(testCtx(t)); !errors.Is(err, execrun.ErrLogTruncated) {
		t.Errorf("reader left behind: %v, want ErrLogTruncated", err)
	}
	res := collect(t, testCtx(t), mustAttach(t, r, e.ID(), te.Start))
	if got, want := res.stdout, strings.Repeat("abcdefghi\n", 100); got != want {
		t.Errorf("retained tail = %q..., want the last 1000 bytes", got[:min(len(got), 20)])
	}
}

func TestExecLost(t *testing.T) {
	t.Parallel()
	r1 := newRunner(t, execrun.Options{})
	e, err := r1.Start(testCtx(t), execrun.Spec{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, e)
	r2 := newRunner(t, execrun.Options{Root: r1.Root()}) // a restarted daemon
	if _, err := r2.Attach(e.ID(), 0); !errors.Is(err, execrun.ErrExecLost) {
		t.Errorf("attach old id: %v, want ErrExecLost", err)
	}
	if err := r2.Kill(e.ID(), syscall.SIGTERM); !errors.Is(err, execrun.ErrExecLost) {
		t.Errorf("kill old id: %v, want ErrExecLost", err)
	}
	for _, id := range []string{r2.RuntimeID() + ":99", "garbage", r2.RuntimeID() + ":x"} {
		if _, err := r2.Lookup(id); !errors.Is(err, execrun.ErrNotFound) {
			t.Errorf("lookup %q: %v, want ErrNotFound", id, err)
		}
	}
}

func TestBusy(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{MaxRunning: 1})
	e := start(t, r, execrun.Spec{Argv: []string{"sleep", "100"}})
	if _, err := r.Start(testCtx(t), execrun.Spec{Argv: []string{"true"}}); !errors.Is(err, execrun.ErrBusy) {
		t.Fatalf("second start: %v, want ErrBusy", err)
	}
	if st := r.Stats(); st.Busy != 1 || st.Running != 1 {
		t.Errorf("stats %+v, want 1 busy rejection and 1 running", st)
	}
	must(t, e.Kill(syscall.SIGKILL))
	wait(t, e)
	if res := run(t, r, execrun.Spec{Argv: []string{"true"}}); res.exit.Code != 0 {
		t.Errorf("start after the slot freed: %v", res.exit)
	}
}

func TestLargeOutputSlowSubscriber(t *testing.T) {
	t.Parallel()
	const size = 10_000_000
	r := newRunner(t, execrun.Options{LogCap: 16 << 20})
	e := start(t, r, execrun.Spec{Shell: "yes 0123456789abcde | head -c " + strconv.Itoa(size)})
	sub, err := e.Attach(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	first, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The subscriber stops reading; the command must still run to its end.
	if st := wait(t, e); st.Code != 0 {
		t.Fatalf("exit %v", st)
	}
	got := append([]byte(nil), first.Data...)
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Exit != nil {
			break
		}
		got = append(got, ev.Data...)
	}
	want := bytes.Repeat([]byte("0123456789abcde\n"), size/16)
	if !bytes.Equal(got, want) {
		t.Errorf("got %d bytes, want %d, equal=%v", len(got), len(want), bytes.Equal(got, want))
	}
}

func TestShutdownKillsRunning(t *testing.T) {
	t.Parallel()
	r, err := execrun.New(execrun.Options{Root: t.TempDir(), KillGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var execs []*execrun.Exec
	for _, shell := range []string{"sleep 100 & sleep 100", `trap "" TERM; sleep 100 & sleep 100`} {
		e := start(t, r, execrun.Spec{Shell: shell})
		execs = append(execs, e)
	}
	if err := r.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, e := range execs {
		st := wait(t, e)
		if !st.Killed || st.Signal == 0 {
			t.Errorf("%s: exit %+v, want killed by a signal", e.ID(), st)
		}
		assertGroupGone(t, e.Pid())
		collect(t, testCtx(t), mustAttach(t, r, e.ID(), 0)) // still replayable
	}
	if _, err := r.Start(testCtx(t), execrun.Spec{Argv: []string{"true"}}); !errors.Is(err, execrun.ErrClosed) {
		t.Errorf("start after shutdown: %v, want ErrClosed", err)
	}
	if st := r.Stats(); st.Killed != 2 || st.Running != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{Retain: 2})
	var ids []string
	for range 3 {
		e := start(t, r, execrun.Spec{Argv: []string{"true"}})
		wait(t, e)
		ids = append(ids, e.ID())
	}
	if _, err := r.Lookup(ids[0]); !errors.Is(err, execrun.ErrNotFound) {
		t.Errorf("oldest exec: %v, want evicted", err)
	}
	for _, id := range ids[1:] {
		if _, err := r.Lookup(id); err != nil {
			t.Errorf("lookup %s: %v", id, err)
		}
	}
	if got := r.Stats().Retained; got != 2 {
		t.Errorf("retained = %d, want 2", got)
	}
}

func TestUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to change credentials")
	}
	root := t.TempDir()
	must(t, os.Chmod(filepath.Dir(root), 0o755)) // reachable by nobody
	must(t, os.Chmod(root, 0o755))
	r := newRunner(t, execrun.Options{Root: root})
	res := run(t, r, execrun.Spec{
		Shell: "id -u; id -g; id -G",
		User:  &execrun.Credential{Uid: 65534, Gid: 65534},
	})
	if got, want := res.stdout, "65534\n65534\n65534\n"; got != want {
		t.Errorf("ids = %q, want %q (stderr %q)", got, want, res.stderr)
	}
}

// TestUserCannotEnterDirectory: a command run as another user starts in its
// directory only if that user may enter it; the runner's own right to is
// not enough.
func TestUserCannotEnterDirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to change credentials")
	}
	root := t.TempDir()
	must(t, os.Chmod(filepath.Dir(root), 0o755))
	must(t, os.Chmod(root, 0o755))
	must(t, os.Mkdir(filepath.Join(root, "private"), 0o700))
	r := newRunner(t, execrun.Options{Root: root})
	res := run(t, r, execrun.Spec{Argv: []string{"true"}, Cwd: "private", User: &execrun.Credential{Uid: 65534, Gid: 65534}})
	if res.exit.Code != 126 {
		t.Errorf("exit %v, want 126 (nobody cannot enter a 0700 directory of root's); stderr %q", res.exit, res.stderr)
	}
}

// TestArgv0AsGiven: a command sees the argv[0] it was given, as from a
// shell, not the path it was found at.
func TestArgv0AsGiven(t *testing.T) {
	t.Parallel()
	r := newRunner(t, execrun.Options{})
	res := run(t, r, execrun.Spec{Argv: []string{"sh", "-c", `printf %s "$0"`}})
	if got, want := res.stdout, "sh"; got != want {
		t.Errorf("$0 = %q, want %q", got, want)
	}
}

// TestCwdIsPerCommand: concurrent commands each start in their own
// directory, and the daemon's working directory does not move.
func TestCwdIsPerCommand(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	before, err := os.Getwd()
	must(t, err)
	r := newRunner(t, execrun.Options{Root: root})
	const n = 8
	var execs []*execrun.Exec
	for i := range n {
		dir := "d" + strconv.Itoa(i)
		must(t, os.Mkdir(filepath.Join(root, dir), 0o755))
		execs = append(execs, start(t, r, execrun.Spec{Argv: []string{"pwd", "-P"}, Cwd: dir}))
	}
	for i, e := range execs {
		sub, err := e.Attach(0)
		must(t, err)
		res := collect(t, testCtx(t), sub)
		if got, want := strings.TrimSpace(res.stdout), filepath.Join(r.Root(), "d"+strconv.Itoa(i)); got != want {
			t.Errorf("exec %d: pwd = %q, want %q", i, got, want)
		}
	}
	if after, err := os.Getwd(); err != nil || after != before {
		t.Errorf("daemon cwd = %q (%v), want %q", after, err, before)
	}
}

// BenchmarkTrue is the runner's share of a push/exec/pull round trip of
// `true`: start, run, reap, exit event.
func BenchmarkTrue(b *testing.B) {
	r, err := execrun.New(execrun.Options{Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	ctx := context.Background()
	for b.Loop() {
		e, err := r.Start(ctx, execrun.Spec{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrueOSExec is the floor BenchmarkTrue is compared with.
func BenchmarkTrueOSExec(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
