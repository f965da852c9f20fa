package workspacetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wsync/wsync/converge"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/remote"
)

// RunFunc plays a command in the fake container: it may change the
// container store and call out with output. Its result's ExecID and
// RuntimeID are filled in by the Fake.
type RunFunc func(ctx context.Context, container *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error)

// Fake is an in-process stand-in for a computerd session. See the package
// documentation: it is for orchestration tests only.
type Fake struct {
	Server    *vfs.Store
	Container *vfs.Store
	// Ignore is the workspace's patterns when the fake was built (nil: the
	// default): Verify
	// compares under it, as the real remote does.
	Ignore []string

	// The sync is the real one: a syncwire driver on Server and a syncwire
	// server (with the convergence methods) on Container, joined by an
	// in-process pipe.
	srv    *syncwire.Server
	resp   *converge.Responder
	client *rpc.Client
	drv    *syncwire.Driver
	peer   string // the server's name for the container: its runtime's Peer()
	side   string // the container's side in conflict copy names: its runtime's Side()

	execs *execTable    // the container's commands; shared by the Fakes of one container
	gone  chan struct{} // closed by Close: what waits on the session ends

	mu        sync.Mutex
	run       RunFunc
	runtime   string
	failPush  []error
	failPull  []error
	pullGate  chan struct{}
	calls     []string
	verifyErr error
	closed    bool

	// failAttach: the next attaches' injected failures; attachFailed is
	// closed as the last of them is handed out. Under mu.
	failAttach   []error
	attachFailed chan struct{}
}

var (
	_ workspace.Remote   = (*Fake)(nil)
	_ workspace.Repairer = (*Fake)(nil)
)

// NewFake joins server and container as the workspace's default runtime,
// without conflict detection (as workspace/remote.New without
// Options.Conflicts). run nil is Commands. Close releases the session
// between them.
func NewFake(server, container *vfs.Store, run RunFunc) *Fake {
	return NewFakeOf(server, container, workspace.Runtime{}, run)
}

// NewFakeOf joins server and container as the runtime rt: the server store
// keeps the container's watermarks under rt.Peer(), as workspace/remote's.
// It detects no conflicts (Remotes' fakes do, with their workspace's
// options).
func NewFakeOf(server, container *vfs.Store, rt workspace.Runtime, run RunFunc) *Fake {
	return newFake(server, container, rt, nil, run, nil)
}

// newFake is NewFakeOf whose pulls detect conflicts with conflicts (nil:
// none), as the real remote's driver does with its Options.Conflicts.
func newFake(server, container *vfs.Store, rt workspace.Runtime, conflicts *vfs.ConflictOptions, run RunFunc, execs *execTable) *Fake {
	if run == nil {
		run = Commands
	}
	if execs == nil {
		execs = newExecTable()
	}
	f := &Fake{Server: server, Container: container, run: run, runtime: "fake-runtime-1", peer: rt.Peer(), side: rt.Side(), execs: execs, gone: make(chan struct{})}
	f.srv = syncwire.NewServer(container, rpc.ServerOptions{})
	f.resp = converge.Register(f.srv, container, slog.New(slog.DiscardHandler))
	f.client = rpc.NewClient(rpc.ClientOptions{
		Config: rpc.Config{ID: server.ID()},
		Dial: func(context.Context) (rpc.Conn, error) {
			client, _ := f.srv.Pipe()
			return client, nil
		},
	})
	f.drv = syncwire.NewDriver(server, f.peer, f.client, syncwire.DriverOptions{Conflicts: conflicts})
	return f
}

// SetConflictPolicy makes the fake's pulls resolve conflicts by p, as the
// real remote's does.
func (f *Fake) SetConflictPolicy(p vfs.ConflictPolicy) {
	f.drv.SetConflicts(&vfs.ConflictOptions{Policy: p, Side: f.side})
}

// FailPush makes the next push calls fail with errs, one per call, in
// order; a nil entry lets its call through.
func (f *Fake) FailPush(errs ...error) {
	f.mu.Lock()
	f.failPush = append(f.failPush, errs...)
	f.mu.Unlock()
}

// FailPull is FailPush for pulls.
func (f *Fake) FailPull(errs ...error) {
	f.mu.Lock()
	f.failPull = append(f.failPull, errs...)
	f.mu.Unlock()
}

// FailAttach makes the next AttachExec calls fail with errs, one per
// call, in order (a nil entry lets its call through). The channel it
// returns is closed as the last of them is handed out: a test waits on it
// to act while the caller is between tries.
func (f *Fake) FailAttach(errs ...error) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAttach = append(f.failAttach, errs...)
	f.attachFailed = make(chan struct{})
	return f.attachFailed
}

// HoldPulls makes every pull from now on wait (before it starts) until the
// returned release is called; calling release twice is harmless.
func (f *Fake) HoldPulls() (release func()) {
	gate := make(chan struct{})
	f.mu.Lock()
	f.pullGate = gate
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// FailVerify makes Verify return err (ErrNotSupported, say).
func (f *Fake) FailVerify(err error) {
	f.mu.Lock()
	f.verifyErr = err
	f.mu.Unlock()
}

// SetRuntime simulates a computerd restart that kept its store.
func (f *Fake) SetRuntime(id string) {
	f.mu.Lock()
	f.runtime = id
	f.mu.Unlock()
}

// Calls returns the calls made so far ("push", "pull", "exec", "verify", "repair").
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Close ends the fake's session, as the Manager closes a real remote:
// later calls fail as the real remote's do (computerd unavailable), and
// Status reports it disconnected.
func (f *Fake) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.gone)
	f.mu.Unlock()
	return errors.Join(f.client.Close(), f.resp.Close(), f.srv.Close())
}

// errClosed is what a call on a closed Fake returns.
var errClosed = &workspace.PeerError{Code: "ESHUTDOWN", Err: errors.New("fake session closed")}

// fail is the error a call fails with before it starts: the closed session,
// else the next injected failure of q. f.mu is held.
func (f *Fake) fail(q *[]error) error {
	if f.closed {
		return errClosed
	}
	return pop(q)
}

func pop(q *[]error) error {
	if len(*q) == 0 {
		return nil
	}
	err := (*q)[0]
	*q = (*q)[1:]
	return err
}

// Push runs the real push (syncwire.Driver) into the container store,
// telling opts.Progress after each batch (the fake never bootstraps).
func (f *Fake) Push(ctx context.Context, opts workspace.SyncOptions) (workspace.SyncReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "push")
	if err := f.fail(&f.failPush); err != nil {
		return workspace.SyncReport{}, err
	}
	start := time.Now()
	var res syncwire.Result
	err := f.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
		remote.Observe(x, opts.Progress)
		res, err = x.PushWith(ctx, syncwire.PushOptions{Ignore: opts.Ignore})
		return err
	})
	return remote.Report(res, start, f.runtime), err
}

// Pull runs the real pull from the container store with opts (its ignore
// list, budget and progress), as the real remote does.
func (f *Fake) Pull(ctx context.Context, opts workspace.SyncOptions) (workspace.SyncReport, error) {
	f.mu.Lock()
	gate := f.pullGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return workspace.SyncReport{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "pull")
	if err := f.fail(&f.failPull); err != nil {
		return workspace.SyncReport{}, err
	}
	start := time.Now()
	var res syncwire.Result
	err := f.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
		remote.Observe(x, opts.Progress)
		res, err = x.PullWith(ctx, remote.PullOptions(opts))
		return err
	})
	return remote.Report(res, start, f.runtime), err
}

// Exec runs the RunFunc against the container store, as an exec of the
// fake's runner (listed, attachable, killable by id); cancelling ctx
// cancels the RunFunc's context.
func (f *Fake) Exec(ctx context.Context, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "exec")
	if f.closed {
		f.mu.Unlock()
		return workspace.ExecResult{}, errClosed
	}
	runtime, run := f.runtime, f.run
	f.mu.Unlock()
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e, err := f.execs.begin(runtime, spec, cancel)
	if err != nil {
		return workspace.ExecResult{}, err
	}
	res := f.runExec(rctx, e, spec, run, out)
	f.execs.mu.Lock()
	err = e.err
	f.execs.mu.Unlock()
	if err == nil {
		// The container store is the fake's one feed, whatever its
		// runtime: the head is always of the feed the fetch cursor follows.
		res.HasHead, res.Head = true, f.Container.CurrentRev()
	}
	if res.Duration == 0 {
		res.Duration = time.Since(start)
	}
	return res, err
}

// Status reports both stores' watermarks for each other.
func (f *Fake) Status(ctx context.Context) (workspace.RemoteStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sw, err := f.Server.Watermarks(ctx, f.peer)
	if err != nil {
		return workspace.RemoteStatus{}, err
	}
	cw, err := f.Container.Watermarks(ctx, f.Server.ID())
	if err != nil {
		return workspace.RemoteStatus{}, err
	}
	st := workspace.RemoteStatus{
		Connected: true,
		State:     "connected",
		RuntimeID: f.runtime,
		Server: workspace.SideStatus{StoreID: f.Server.ID(), CurrentRev: f.Server.CurrentRev(),
			Push: workspace.CursorOf(sw.Push), Fetch: workspace.CursorOf(sw.Fetch)},
		Container: workspace.SideStatus{StoreID: f.Container.ID(), RuntimeID: f.runtime, CurrentRev: f.Container.CurrentRev(),
			Fetch: workspace.CursorOf(cw.Fetch), AppliedPush: workspace.CursorOf(cw.AppliedPush)},
	}
	if f.closed {
		st.Connected, st.State, st.LastError = false, "disconnected", errClosed.Error()
	}
	return st, nil
}

// Verify is the real verify (converge.Verify, Merkle roots) under the
// workspace's ignore list, in the driver's FIFO.
func (f *Fake) Verify(ctx context.Context) (workspace.VerifyReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "verify")
	if f.closed {
		return workspace.VerifyReport{}, errClosed
	}
	if f.verifyErr != nil {
		return workspace.VerifyReport{}, f.verifyErr
	}
	var rep converge.Report
	err := f.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
		rep, err = converge.Verify(ctx, f.Server, x.Session(), f.Ignore)
		return err
	})
	if err != nil {
		return workspace.VerifyReport{}, err
	}
	return remote.Verdict(rep), nil
}

// Repair is the real repair (converge.Repair) under the workspace's ignore
// list, in the driver's FIFO, telling opts.Progress of the batches it
// moves, as the real remote's.
func (f *Fake) Repair(ctx context.Context, opts workspace.SyncOptions) (workspace.VerifyReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "repair")
	if f.closed {
		return workspace.VerifyReport{}, errClosed
	}
	var rr converge.RepairReport
	err := f.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
		remote.Observe(x, opts.Progress)
		rr, err = converge.Repair(ctx, f.Server, x, converge.RepairOptions{Ignore: f.Ignore})
		return err
	})
	if err != nil {
		return workspace.VerifyReport{}, err
	}
	return remote.Verdict(rr.After), nil
}

// Commands is the default RunFunc: a tiny command language over the
// container store, enough for CLI and API tests. Argv (or Shell split on
// spaces) is one of:
//
//	echo ARGS...         print ARGS to stdout
//	warn ARGS...         print ARGS to stderr
//	write PATH TEXT...   write TEXT to PATH in the container (parents made)
//	cat PATH             print PATH's content
//	rm PATH              remove PATH (recursively)
//	exit N               exit with code N
//	kill N               end as if killed by signal N (exit code 128+N)
//	env                  print spec.Env, one per line, then "cwd=" spec.Cwd
//	sleep S              wait S seconds (a decimal), or until the command is killed
//	flood N              print N MiB of "y" lines, 64 KiB at a time, until cancelled
//
// Steps can be chained with ";" as separate words ("write a x ; exit 3").
// Anything else is exit 127 with "not found" on stderr.
func Commands(ctx context.Context, c *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	words := spec.Argv
	if spec.Shell != "" {
		words = strings.Fields(spec.Shell)
	}
	var res workspace.ExecResult
	if len(spec.Stdin) > 0 {
		out(workspace.ExecEvent{Stream: workspace.Stdout, Data: spec.Stdin})
	}
	for len(words) > 0 {
		cmd := words
		if i := slices.Index(words, ";"); i >= 0 {
			cmd, words = words[:i], words[i+1:]
		} else {
			words = nil
		}
		if len(cmd) == 0 {
			continue
		}
		args := cmd[1:]
		switch cmd[0] {
		case "echo", "warn":
			stream := workspace.Stdout
			if cmd[0] == "warn" {
				stream = workspace.Stderr
			}
			out(workspace.ExecEvent{Stream: stream, Data: []byte(strings.Join(args, " ") + "\n")})
		case "write":
			if len(args) < 1 {
				return res, errors.New("write: no path")
			}
			p, err := vfs.CleanAPIPath(args[0])
			if err != nil {
				return res, err
			}
			if i := strings.LastIndexByte(p, '/'); i > 0 {
				if err := c.MkdirPath(ctx, p[:i], 0o755, true); err != nil {
					return res, err
				}
			}
			if _, err := c.WriteFile(ctx, p, []byte(strings.Join(args[1:], " ")), 0o644); err != nil {
				return res, err
			}
		case "cat":
			p, err := vfs.CleanAPIPath(strings.Join(args, ""))
			if err != nil {
				return res, err
			}
			b, err := c.ReadFile(ctx, p)
			if err != nil {
				out(workspace.ExecEvent{Stream: workspace.Stderr, Data: []byte("cat: " + err.Error() + "\n")})
				res.ExitCode = 1
				return res, nil
			}
			out(workspace.ExecEvent{Stream: workspace.Stdout, Data: b})
		case "rm":
			p, err := vfs.CleanAPIPath(strings.Join(args, ""))
			if err != nil {
				return res, err
			}
			if err := c.RemovePath(ctx, p, true); err != nil {
				return res, err
			}
		case "exit":
			n, _ := strconv.Atoi(strings.Join(args, ""))
			res.ExitCode = n
			return res, nil
		case "kill":
			n, _ := strconv.Atoi(strings.Join(args, ""))
			res.Signal, res.ExitCode, res.Killed = n, 128+n, true
			return res, nil
		case "sleep":
			var secs float64
			fmt.Sscanf(strings.Join(args, ""), "%g", &secs)
			t := time.NewTimer(time.Duration(secs * float64(time.Second)))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return res, ctx.Err()
			}
		case "flood":
			n, _ := strconv.Atoi(strings.Join(args, ""))
			piece := bytes.Repeat([]byte("y\n"), 32<<10)
			for range n * 16 {
				if err := ctx.Err(); err != nil {
					return res, err
				}
				out(workspace.ExecEvent{Stream: workspace.Stdout, Data: piece})
			}
		case "env":
			var b bytes.Buffer
			for _, e := range spec.Env {
				b.WriteString(e + "\n")
			}
			b.WriteString("cwd=" + spec.Cwd + "\n")
			out(workspace.ExecEvent{Stream: workspace.Stdout, Data: b.Bytes()})
		default:
			out(workspace.ExecEvent{Stream: workspace.Stderr, Data: []byte(cmd[0] + ": not found\n")})
			res.ExitCode = 127
			return res, nil
		}
	}
	return res, nil
}

// Remotes is a workspace.RemoteFactory that gives every runtime of every
// workspace its own Fake, with a container store under Dir. A remote built
// again for a runtime (after a conflict policy change, say) is a new Fake
// on the same container store, as a real remote re-dials the same
// computerd.
type Remotes struct {
	Dir string
	Run RunFunc // nil: Commands
	// Runtime is the container runtime id of the Fakes built from now on
	// ("": fake-runtime-1): changed between two remote builds, it plays a
	// computerd that restarted, whose earlier exec ids are lost.
	Runtime string

	mu         sync.Mutex
	fakes      map[string]*Fake      // by workspace, and "/runtime" for an attached runtime
	containers map[string]*vfs.Store // by the same key; Close closes them
	execs      map[string]*execTable // by the same key: each container's commands
}

// Factory is the workspace.RemoteFactory.
func (r *Remotes) Factory(ws *workspace.Workspace, rt workspace.Runtime) (workspace.Remote, error) {
	ctx := context.Background()
	server, err := ws.Store(ctx)
	if err != nil {
		return nil, err
	}
	key, dir := fakeKey(ws.Name(), rt.Name), filepath.Join(r.Dir, ws.Name())
	if key != ws.Name() {
		dir = filepath.Join(dir, "runtimes", rt.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.containers[key]
	if c == nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if c, err = vfs.Open(ctx, filepath.Join(dir, "container.db"), vfs.Options{NoSync: true}); err != nil {
			return nil, err
		}
		if r.containers == nil {
			r.fakes, r.containers, r.execs = make(map[string]*Fake), make(map[string]*vfs.Store), make(map[string]*execTable)
		}
		r.containers[key] = c
	}
	if r.execs[key] == nil {
		r.execs[key] = newExecTable()
	}
	f := newFake(server, c, rt, ws.ConflictOptions(rt), r.Run, r.execs[key])
	if r.Runtime != "" {
		f.runtime = r.Runtime
	}
	f.Ignore, _ = ws.Patterns(ctx)
	r.fakes[key] = f
	return f, nil
}

func fakeKey(ws, runtime string) string {
	if runtime == "" || runtime == workspace.DefaultRuntime {
		return ws
	}
	return ws + "/" + runtime
}

// Fake returns the fake built for the default runtime of the workspace
// name (nil before its first remote call).
func (r *Remotes) Fake(name string) *Fake { return r.FakeOf(name, workspace.DefaultRuntime) }

// FakeOf returns the fake built for the runtime of the workspace ws (nil
// before its first remote call).
func (r *Remotes) FakeOf(ws, runtime string) *Fake {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fakes[fakeKey(ws, runtime)]
}

// Close closes the container stores.
func (r *Remotes) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, t := range r.execs {
		t.killAll()
	}
	for _, c := range r.containers {
		errs = append(errs, c.Close())
	}
	r.containers = nil
	return errors.Join(errs...)
}

// Signal is a convenience for RunFuncs that end by a signal.
func Signal(sig syscall.Signal) workspace.ExecResult {
	return workspace.ExecResult{Signal: int(sig), ExitCode: 128 + int(sig), Killed: true}
}
