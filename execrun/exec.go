package execrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// readSize bounds one output event: one read from a pipe.
	readSize = 32 << 10
	// drainGrace is how long output is still read once the group is gone.
	// Only a process that left the group (setsid) can still hold the pipes;
	// what it writes later is dropped.
	drainGrace = 250 * time.Millisecond
	// groupBudget bounds the wait for a SIGKILLed group to disappear.
	groupBudget = 5 * time.Second
)

// ExitStatus is how an exec ended.
type ExitStatus struct {
	// Code is the exit code, or 128+n when the leader was killed by signal n.
	Code int
	// Signal is the signal that killed the leader, 0 if it exited.
	Signal syscall.Signal
	// Duration runs from the start to the leader's exit.
	Duration time.Duration
	// TimedOut: the timeout expired and the runner terminated the group.
	TimedOut bool
	// Killed: Kill or Shutdown signalled the group before the leader exited.
	Killed bool
}

func (s ExitStatus) String() string {
	var b bytes.Buffer
	if s.Signal != 0 {
		fmt.Fprintf(&b, "signal %d (%v)", int(s.Signal), s.Signal)
	} else {
		fmt.Fprintf(&b, "exit %d", s.Code)
	}
	if s.TimedOut {
		b.WriteString(", timed out")
	}
	if s.Killed {
		b.WriteString(", killed")
	}
	return b.String()
}

// Exec is one started command. Its methods are safe for concurrent use.
type Exec struct {
	r    *Runner
	id   string
	seq  uint64
	pid  int // also the process group id
	log  *slog.Logger
	done chan struct{}
	// listed is closed once Start has registered the exec, which must come
	// before retiring it.
	listed chan struct{}
	info   Info      // what List shows of the command: id, command line, cwd, log cap
	begin  time.Time // the fork; set before Start returns
	ended  time.Time // the leader's exit; set before the exec is retired

	mu           sync.Mutex
	leaderExited bool        // reaped or about to be: the group is no longer ours to signal
	timedOut     bool        // the timeout terminated the group
	killed       bool        // Kill or Shutdown signalled the group
	timer        *time.Timer // timeout
	grace        *time.Timer // SIGTERM sent, SIGKILL pending
	out          outputLog
	wake         chan struct{} // closed on new output or exit
	exit         *ExitStatus   // set once, after the group is gone and output drained
	size         int64         // retained log bytes, fixed at exit
}

// ID is the exec's id: "<runtime id>:<sequence>".
func (e *Exec) ID() string { return e.id }

// Pid is the leader's pid, which is also the process group id.
func (e *Exec) Pid() int { return e.pid }

// FromEnd, as Attach's offset, is the end of the output when Attach is
// called: no replay, only what comes next and the exit.
const FromEnd int64 = -1

// Attach returns a Subscription reading events from offset from: 0 replays
// everything retained, the end of the output (or FromEnd) gives only what
// comes next.
func (e *Exec) Attach(from int64) (*Subscription, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if from == FromEnd {
		from = e.out.end
	}
	if from < 0 || from > e.out.end {
		return nil, fmt.Errorf("exec %s: offset %d outside [0, %d]: %w", e.id, from, e.out.end, ErrBadSpec)
	}
	if from < e.out.start {
		return nil, &TruncatedError{ID: e.id, Offset: from, Start: e.out.start}
	}
	return &Subscription{e: e, off: from}, nil
}

// Kill sends sig to the exec's whole process group. Killing an exec whose
// leader has already exited does nothing: the runner is removing what is left
// of the group with SIGKILL.
func (e *Exec) Kill(sig syscall.Signal) error {
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("exec %s: signal %d: %w", e.id, int(sig), ErrBadSpec)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leaderExited {
		return nil
	}
	e.killed = true
	if err := signalGroup(e.pid, sig); err != nil {
		return fmt.Errorf("kill exec %s: %w", e.id, err)
	}
	return nil
}

// Wait blocks until the exec has ended and its group is gone.
func (e *Exec) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case <-e.done:
		return *e.exit, nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

func (e *Exec) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// terminate sends the group SIGTERM and, if the leader outlives the grace,
// SIGKILL.
func (e *Exec) terminate(timedOut bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leaderExited {
		return
	}
	if timedOut {
		e.timedOut = true
	} else {
		e.killed = true
	}
	if e.grace != nil {
		return
	}
	e.signal(syscall.SIGTERM)
	e.grace = time.AfterFunc(e.r.opts.KillGrace, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.leaderExited {
			e.signal(syscall.SIGKILL)
		}
	})
}

// signal signals the group on the runner's behalf; e.mu is held and the
// leader not reaped.
func (e *Exec) signal(sig syscall.Signal) {
	if err := signalGroup(e.pid, sig); err != nil {
		e.log.Warn("signal exec group", "signal", sig, "err", err)
	}
}

func (e *Exec) output(s Stream, data []byte) {
	e.mu.Lock()
	e.out.append(s, data)
	e.wakeLocked()
	e.mu.Unlock()
}

func (e *Exec) wakeLocked() {
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
}

// How a command starts. Go forks with vfork: until the child has called
// execve, the forking thread is stuck in a raw system call that the runtime
// cannot stop, so a garbage collection that begins meanwhile waits for it.
// If the child's chdir (or the execve of a binary) needs the FUSE mount that
// this very process serves, the child waits for the mount's goroutines,
// which the collector has stopped: the process deadlocks (seen in end-to-end
// runs under load). So the child never touches the mount before execve.
//
// The direct start: the forking thread, locked to run's goroutine, leaves the
// process's shared working directory (unshare CLONE_FS) and moves into the
// command's directory itself, an ordinary system call the collector and the
// mount's goroutines carry on through; the child inherits that directory and
// execs the binary at once. The thread is never given back to the runtime:
// it ends with run's goroutine. This needs a binary (and the interpreter its
// #! line names) off the mount, and no credential switch, since the move
// must be refused when the command's user could not make it.
//
// Otherwise, or where unshare is refused (a seccomp profile), the shim
// starts outside the mount and a shell makes the move after execve, in a
// process of its own, at the price of a second execve:
//
//	/bin/sh -c 'cd -- "$1" || exit 126; shift; exec "$@"' wsync-exec DIR ARGV...
const shimShell = "/bin/sh"

const shimScript = `cd -- "$1" || exit 126; shift; exec "$@"`

// launch sets cmd's path, arguments and directory to start c with, from
// run's locked thread. tainted: the thread left the shared working
// directory and must end with the goroutine instead of returning to the
// runtime.
func (e *Exec) launch(cmd *exec.Cmd, c *command) (tainted bool) {
	cmd.Path, cmd.Args = c.path, c.argv
	if c.cred == nil && !e.r.reachesMount(c.path) && !e.r.noUnshare.Load() {
		err := enterDir(c.dir)
		if err == nil {
			return true
		}
		var de *dirError
		if errors.As(err, &de) {
			tainted = true // unshared: the move itself failed, the shim reports it
		} else {
			e.r.noUnshare.Store(true)
			e.r.log.Warn("cannot unshare the working directory; commands start through the shim shell", "err", err)
		}
	}
	if _, err := os.Stat(shimShell); err != nil {
		cmd.Dir = c.dir
		return tainted
	}
	argv := append([]string{"sh", "-c", shimScript, "wsync-exec", c.dir}, c.argv...)
	if !strings.ContainsRune(c.argv[0], '/') {
		// The shell looks the name up in the same PATH; the resolved path
		// keeps the lookup the runner already made (and its errors).
		argv[5] = c.path
	}
	cmd.Path, cmd.Args, cmd.Dir = shimShell, argv, "/"
	return tainted
}

// reachesMount reports whether the execve of path may read the mount before
// the vfork child is gone: the binary, or the interpreter its #! line names,
// lies on the mount's file system (a relative interpreter is looked up from
// the command's directory, in it). What cannot be checked counts as yes.
func (r *Runner) reachesMount(path string) bool {
	if !r.hasMountDev {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	if r.onMount(f.Stat()) {
		return true
	}
	var head [256]byte
	n, _ := io.ReadFull(f, head[:])
	line, ok := bytes.CutPrefix(head[:n], []byte("#!"))
	if !ok {
		return false
	}
	line, _, _ = bytes.Cut(line, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 || !filepath.IsAbs(fields[0]) {
		return true
	}
	return r.onMount(os.Stat(fields[0]))
}

// onMount reports whether fi, from a stat that returned err, is on the
// mount's file system, or cannot tell.
func (r *Runner) onMount(fi os.FileInfo, err error) bool {
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Dev == r.mountDev
}

// start forks the command and hands the rest of its life to run.
func (e *Exec) start(c *command, stdin io.Reader) (err error) {
	var files []*os.File // every pipe end, closed on failure
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w
	}
	outR, outW := pipe()
	errR, errW := pipe()
	var inR, inW *os.File
	switch f := stdin.(type) {
	case nil:
	case *os.File:
		inR = f
	default:
		inR, inW = pipe()
	}
	if err != nil {
		closeAll(files)
		return fmt.Errorf("start %s: %w", c.argv[0], err)
	}
	cmd := &exec.Cmd{
		Env:    c.env,
		Stdout: outW,
		Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: c.cred,
		},
	}
	if inR != nil {
		cmd.Stdin = inR
	}
	started := make(chan error, 1)
	go e.run(cmd, c, started, outR, errR, inW)
	if err = <-started; err != nil {
		closeAll(files)
		return fmt.Errorf("start %s: %w", c.argv[0], err)
	}
	// The child has its ends; ours would keep the pipes open past its exit.
	outW.Close()
	errW.Close()
	if inW != nil {
		inR.Close()
		go func() {
			io.Copy(inW, stdin) // a short copy only means the process stopped reading
			inW.Close()
		}()
	}
	return nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// run owns the process from fork to reaping. It forks on a locked OS thread
// and keeps that thread until the leader exits, because Pdeathsig fires when
// the forking thread (not the process) dies; a thread launch moved into the
// command's directory is kept until the goroutine ends, which ends it too.
func (e *Exec) run(cmd *exec.Cmd, c *command, started chan<- error, outR, errR, inW *os.File) {
	runtime.LockOSThread()
	tainted := e.launch(cmd, c)
	release := func() {
		if !tainted {
			runtime.UnlockOSThread()
		}
	}
	begin := time.Now()
	e.begin = begin
	if err := cmd.Start(); err != nil {
		release()
		started <- err
		return
	}
	e.pid = cmd.Process.Pid
	e.log = e.log.With("pid", e.pid)
	e.mu.Lock()
	e.timer = time.AfterFunc(c.timeout, func() { e.terminate(true) })
	e.mu.Unlock()
	started <- nil

	var readers sync.WaitGroup
	readers.Go(func() { e.pump(outR, Stdout) })
	readers.Go(func() { e.pump(errR, Stderr) })

	werr := waitExited(e.pid)
	release()
	duration := time.Since(begin)
	e.ended = begin.Add(duration)
	e.mu.Lock()
	e.leaderExited = true
	e.timer.Stop()
	if e.grace != nil {
		e.grace.Stop()
	}
	// No orphans: whatever the leader left in its group goes with it. The
	// leader is still a zombie here, so the group id is still this exec's.
	e.signal(syscall.SIGKILL)
	e.mu.Unlock()

	cmd.Wait() // the status is in ProcessState
	st := ExitStatus{Code: -1, Duration: duration}
	if ps := cmd.ProcessState; ps != nil {
		ws := ps.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			st.Signal = ws.Signal()
			st.Code = 128 + int(st.Signal)
		} else {
			st.Code = ws.ExitStatus()
		}
	} else {
		e.log.Error("exec leader vanished", "err", werr)
	}
	if err := clearGroup(e.pid, groupBudget); err != nil {
		e.log.Warn("exec group outlived SIGKILL", "err", err, "budget", groupBudget)
	}

	deadline := time.Now().Add(drainGrace)
	outR.SetReadDeadline(deadline)
	errR.SetReadDeadline(deadline)
	readers.Wait()
	outR.Close()
	errR.Close()
	if inW != nil {
		inW.Close()
	}
	<-e.listed
	e.finish(st)
}

// pump copies one pipe into the log until EOF or the drain deadline.
func (e *Exec) pump(f *os.File, s Stream) {
	buf := make([]byte, readSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			e.output(s, bytes.Clone(buf[:n]))
		}
		if err != nil {
			return
		}
	}
}

// finish publishes the end of the exec. The runner's counters and slot are
// updated first, so whoever sees the exit (Wait or a subscriber) may start
// the next exec at once.
func (e *Exec) finish(st ExitStatus) {
	e.mu.Lock()
	st.TimedOut, st.Killed = e.timedOut, e.killed // final: the leader is reaped
	e.size = e.out.end - e.out.start
	e.mu.Unlock()
	e.r.retire(e, st)
	e.mu.Lock()
	e.exit = &st
	e.wakeLocked()
	e.mu.Unlock()
	close(e.done)
	e.log.Info("exec finished", "status", st.String(), "duration", st.Duration, "output_bytes", e.out.end)
	e.r.wg.Done()
}
