// Package remote is the real workspace.Remote: it drives a computerd over
// one syncwire session (push and pull through syncwire.Driver, commands
// through execrpc) and re-dials after the session dies.
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wsync/wsync/converge"
	"github.com/wsync/wsync/execrpc"
	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// Peer is the name the server's watermarks for its default runtime's
// computerd are kept under (workspace.Runtime.Peer names every runtime's).
const Peer = workspace.DefaultPeer

// Remote drives one computerd of a workspace: one of its runtimes.
type Remote struct {
	store  *vfs.Store
	rt     workspace.Runtime
	ignore func(context.Context) ([]string, error) // the patterns in force: verify and repair compare under them
	client *rpc.Client
	drv    *syncwire.Driver
	log    *slog.Logger

	watch *sessions // NotifySession

	mu      sync.Mutex
	lastErr string

	// probed is the session on which bootstrap found the container's
	// store not empty (or filled it). A store is empty only when its
	// computerd starts without state, which is a new session: Push asks
	// once per session, not before every exec. Used inside the driver's
	// FIFO only.
	probed *rpc.Session

	// pushed is the session the last push ran on. An exec whose exit
	// event comes on it reports the container's head: that session was
	// reconciled, so the fetch cursor follows the feed the head is of.
	pushed atomic.Pointer[rpc.Session]

	// checked is how far the deletes of the pull in progress (in slices)
	// were counted; inside the driver's FIFO only.
	checked syncwire.GuardState
}

var _ workspace.Remote = (*Remote)(nil)

// Factory builds Remotes for the runtimes of a Manager's workspaces.
func Factory(log *slog.Logger) workspace.RemoteFactory {
	if log == nil {
		log = slog.Default()
	}
	return func(ws *workspace.Workspace, rt workspace.Runtime) (workspace.Remote, error) {
		ctx := context.Background()
		store, err := ws.Store(ctx)
		if err != nil {
			return nil, err
		}
		token, err := rt.Token()
		if err != nil {
			return nil, err
		}
		return New(store, Options{Runtime: rt, Token: token, Ignore: ws.Patterns, Conflicts: ws.ConflictOptions(rt),
			Logger: log.With("workspace", ws.Name(), "runtime", rt.Name)}), nil
	}
}

// Options configures New.
type Options struct {
	// Runtime is the computerd to drive: its Endpoint is dialled, its
	// Peer() names the server's watermarks for it, its Side() the side of
	// its conflict copies. The zero Runtime's peer is the default's.
	Runtime workspace.Runtime
	// Token is the computerd's bearer token ("" for none).
	Token string
	// Ignore gives the workspace's patterns in force (Workspace.Patterns)
	// at each verify and repair, which compare both trees under them; nil
	// compares under the default list.
	Ignore func(context.Context) ([]string, error)
	// Conflicts turns on conflict detection in the pulls
	// (syncwire.DriverOptions.Conflicts): Factory gives the workspace's
	// (Workspace.ConflictOptions). Nil: the container's version wins a pull.
	Conflicts *vfs.ConflictOptions
	Logger    *slog.Logger
}

// New builds a Remote for store against the computerd of o.Runtime.
func New(store *vfs.Store, o Options) *Remote {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg := rpc.Config{ID: store.ID(), Logger: log}
	watch := &sessions{}
	c := rpc.NewClient(rpc.ClientOptions{Config: cfg, URL: o.Runtime.Endpoint, Token: o.Token, OnSession: watch.up})
	return &Remote{
		watch:  watch,
		store:  store,
		rt:     o.Runtime,
		ignore: o.Ignore,
		client: c,
		drv:    syncwire.NewDriver(store, o.Runtime.Peer(), c, syncwire.DriverOptions{Logger: log, Conflicts: o.Conflicts}),
		log:    log,
	}
}

// SetConflictPolicy makes the pulls from now on resolve conflicts by p
// (the workspace's policy changed), without ending the session.
func (r *Remote) SetConflictPolicy(p vfs.ConflictPolicy) {
	r.drv.SetConflicts(&vfs.ConflictOptions{Policy: p, Side: r.rt.Side()})
}

// Close ends the session.
func (r *Remote) Close() error {
	err := r.client.Close()
	r.watch.wait()
	return err
}

// note records the last error for Status and tells computerd's failures
// from the server's own (peerError).
func (r *Remote) note(err error) error {
	r.mu.Lock()
	if err != nil {
		r.lastErr = err.Error()
	} else {
		r.lastErr = ""
	}
	r.mu.Unlock()
	return peerError(err)
}

// peerError makes a workspace.PeerError, with its wire code, of what failed
// on computerd's side: its answer (*rpc.RemoteError), the session with it
// (it refused our token, dropped, spoke another protocol), a dial that
// found no one, an exec it lost. The API then reports computerd's refusal
// of the server's token as computerd's, not as the caller's EAUTH, and a
// lost session as computerd unavailable, not as the manager's ErrClosed.
// The server's own failures (its store, the caller's context) pass as they
// are.
func peerError(err error) error {
	var re *rpc.RemoteError
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		return &workspace.PeerError{Code: re.Code.String(), Err: err}
	case errors.Is(err, rpc.ErrAuth), errors.Is(err, rpc.ErrShutdown), errors.Is(err, rpc.ErrProtocol),
		errors.Is(err, rpc.ErrVersion), errors.Is(err, execrun.ErrExecLost):
		return &workspace.PeerError{Code: rpc.CodeOf(err).String(), Err: err}
	case errors.As(err, &ne):
		return &workspace.PeerError{Code: rpc.CodeShutdown.String(), Err: err}
	}
	return err
}

func (r *Remote) runtimeID(ctx context.Context) string {
	s, _, err := r.client.Session(ctx)
	if err != nil {
		return ""
	}
	return s.Peer().RuntimeID.String()
}

// Report is a driver's result as the workspace API reports a sync: the
// entries it applied, the chunks that crossed the wire, the conflicts a
// pull recorded (the first paths named), the entries a push deferred, the
// container's runtime, the time since start.
func Report(res syncwire.Result, start time.Time, runtime string) workspace.SyncReport {
	rep := workspace.SyncReport{
		Entries: res.Applied, Skipped: res.Skipped, Objects: res.Chunks, Bytes: res.ChunkBytes,
		Batches: res.Batches, Rebaselined: res.Resets > 0, RuntimeID: runtime, Duration: time.Since(start),
		Conflicts: len(res.Conflicts), Deferred: res.Deferred, More: res.More,
	}
	for _, c := range res.Conflicts[:min(len(res.Conflicts), workspace.MaxConflictPaths)] {
		rep.ConflictPaths = append(rep.ConflictPaths, "/"+c.Path)
	}
	return rep
}

// Observe makes the transfers of x tell fn (nil: no one) how far they have
// gone after each batch, as a workspace.Progress: Op "push" or "pull",
// Entries the entries moved (applied, skipped or deferred: the report's
// Entries+Skipped+Deferred at the end), Objects and Bytes the chunks that
// crossed the wire and their bytes, Batches.
func Observe(x *syncwire.Exchange, fn func(workspace.Progress)) {
	if fn == nil {
		return
	}
	x.OnProgress(func(op string, res syncwire.Result) {
		fn(workspace.Progress{Op: op, Entries: res.Entries, Objects: res.Chunks, Bytes: res.ChunkBytes, Batches: res.Batches})
	})
}

// PullOptions are a workspace pull's options as the driver takes them:
// its ignore list and budget.
func PullOptions(opts workspace.SyncOptions) syncwire.PullOptions {
	b := opts.Budget
	po := syncwire.PullOptions{Ignore: opts.Ignore, Budget: syncwire.Budget{Entries: b.Entries, Bytes: b.Bytes, Wall: b.Wall}}
	if opts.Guard != nil {
		po.Guard = opts.Guard
	}
	return po
}

// Push sends the server's changes. A container whose store is empty (a
// fresh one, or one restarted with :memory: state) gets the whole tree as a
// verified snapshot first, in the same turn of the driver's FIFO; the push
// then sends whatever came after it. opts.Progress hears the snapshot's
// pages (Op "bootstrap", Total its record count), then the push's batches.
func (r *Remote) Push(ctx context.Context, opts workspace.SyncOptions) (workspace.SyncReport, error) {
	start := time.Now()
	rep := workspace.SyncReport{}
	err := r.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) error {
		boot, booted, err := r.bootstrap(ctx, x, opts.Progress)
		if err != nil {
			return err
		}
		Observe(x, opts.Progress)
		res, err := x.PushWith(ctx, syncwire.PushOptions{Ignore: opts.Ignore})
		rep = Report(res, start, x.Session().Peer().RuntimeID.String())
		if err == nil {
			r.pushed.Store(x.Session())
		}
		if booted {
			rep.Entries += boot.Total
			rep.Objects += boot.Chunks
			rep.Bytes += boot.ChunkBytes
			rep.Batches += boot.Pages
			rep.Rebaselined = true
		}
		return err
	})
	rep.Duration = time.Since(start)
	return rep, r.note(err)
}

// bootstrap sends a snapshot when the container's store is empty and ours
// is not, telling progress (nil: no one) of its pages. It reports whether
// it did; when the container turns out not to be empty, the ordinary push
// carries on.
func (r *Remote) bootstrap(ctx context.Context, x *syncwire.Exchange, progress func(workspace.Progress)) (converge.BootstrapReport, bool, error) {
	if r.store.CurrentRev() == 0 || r.probed == x.Session() {
		return converge.BootstrapReport{}, false, nil
	}
	ps, err := syncwire.NewPeer(x.Session()).Watermarks(ctx)
	if err != nil {
		return converge.BootstrapReport{}, false, nil // the push reports a session error
	}
	if ps.CurrentRev != 0 {
		r.probed = x.Session()
		return converge.BootstrapReport{}, false, nil
	}
	bo := converge.BootstrapOptions{Peer: x.Peer()}
	if progress != nil {
		bo.Progress = func(b converge.BootstrapReport) {
			progress(workspace.Progress{Op: "bootstrap", Entries: b.Staged(), Objects: b.Chunks, Bytes: b.ChunkBytes, Batches: b.Pages, Total: b.Total})
		}
	}
	rep, err := converge.Bootstrap(ctx, r.store, x.Session(), bo)
	if errors.Is(err, converge.ErrNotEmpty) {
		r.probed = x.Session()
		return rep, false, nil
	}
	if err != nil {
		return rep, false, fmt.Errorf("bootstrap: %w", err)
	}
	r.probed = x.Session()
	r.log.Info("bootstrapped an empty container from a snapshot", "records", rep.Total, "chunks", rep.Chunks,
		"page_bytes", rep.PageBytes, "duration", rep.Duration)
	return rep, true, nil
}

// Pull fetches the container's changes, leaving out the paths of
// opts.Ignore, within opts.Budget, telling opts.Progress after each batch.
func (r *Remote) Pull(ctx context.Context, opts workspace.SyncOptions) (workspace.SyncReport, error) {
	start := time.Now()
	var res syncwire.Result
	err := r.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
		Observe(x, opts.Progress)
		po := PullOptions(opts)
		if po.Guard != nil {
			// The slices of one pull count its deletes once (syncwire
			// guard.go); the driver's FIFO serialises r.checked.
			po.Checked = r.checked
		}
		res, err = x.PullWith(ctx, po)
		if po.Guard != nil || !res.More && err == nil {
			r.checked = res.Checked
		}
		return err
	})
	return Report(res, start, r.runtimeID(ctx)), r.note(err)
}

// maxReattach bounds how often one Exec or AttachExec re-attaches after
// lost sessions.
const maxReattach = 5

// execRequest is spec as execrpc carries it: the cwd relative to the
// mount, the user's gid its uid unless given.
func execRequest(spec workspace.ExecSpec) execrpc.Request {
	req := execrpc.Request{
		Argv: spec.Argv, Shell: spec.Shell, Cwd: strings.TrimPrefix(spec.Cwd, "/"),
		Env: spec.Env, Stdin: spec.Stdin, Timeout: spec.Timeout, LogCap: spec.LogCap,
	}
	if spec.User != nil {
		req.HasUser, req.Uid, req.Gid = true, spec.User.Uid, spec.User.Uid
		if spec.User.Gid != nil {
			req.Gid = *spec.User.Gid
		}
	}
	return req
}

// Exec runs a command, re-attaching by id when the session drops. The
// result carries the container's feed head from the exit event only when
// the event came on the session the last push used: after a reconnect the
// container may be another (a restarted computerd with a new store) whose
// revs the fetch cursor does not follow until a sync reconciles them.
func (r *Remote) Exec(ctx context.Context, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	sess, _, err := r.client.Session(ctx)
	if err != nil {
		return workspace.ExecResult{}, r.note(fmt.Errorf("exec: %w", err))
	}
	// The start is not cancelled with ctx: computerd may have started the
	// command by then, and a start that returns the caller's cancellation
	// leaves it running with no id to kill it by. A caller gone meanwhile
	// has it killed at once below.
	st, err := execrpc.Start(context.WithoutCancel(ctx), sess, execRequest(spec))
	if err != nil {
		return workspace.ExecResult{}, r.note(err)
	}
	// Cancelling ctx kills the command (the stream itself must outlive a
	// cancelled ctx long enough to read the exit).
	stop := context.AfterFunc(ctx, func() {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if s, _, err := r.client.Session(kctx); err == nil {
			execrpc.Kill(kctx, s, st.ID, syscall.SIGKILL)
		}
	})
	defer stop()
	return r.follow(context.WithoutCancel(ctx), sess, st, 0, out)
}

// StartExec starts a command and leaves it running: closing its stream
// does not stop it (execrpc).
func (r *Remote) StartExec(ctx context.Context, spec workspace.ExecSpec) (string, error) {
	sess, _, err := r.client.Session(ctx)
	if err != nil {
		return "", r.note(fmt.Errorf("exec: %w", err))
	}
	// Not cancelled with ctx, as Exec's: a detached command computerd
	// started is recorded by its id even when its caller has gone.
	st, err := execrpc.Start(context.WithoutCancel(ctx), sess, execRequest(spec))
	if err != nil {
		return "", r.note(err)
	}
	st.Close()
	return st.ID, r.note(nil)
}

// AttachExec follows exec id from offset from (workspace.ExecFromEnd: the
// end of its output), re-attaching where it stopped when the session
// drops; one that drops before any output came from the end attaches at
// the end again.
func (r *Remote) AttachExec(ctx context.Context, id string, from int64, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	sess, _, err := r.client.Session(ctx)
	if err != nil {
		return workspace.ExecResult{}, r.note(fmt.Errorf("exec %s: attach: %w", id, err))
	}
	st, err := execrpc.Attach(ctx, sess, id, from)
	if err != nil {
		return workspace.ExecResult{}, r.note(err)
	}
	return r.follow(ctx, sess, st, from, out)
}

// follow reads st to the exit event, passing output to out, and
// re-attaches from the next offset (from, until output comes) when the
// session dies. ctx bounds the reading.
func (r *Remote) follow(ctx context.Context, sess *rpc.Session, st *execrpc.Stream, from int64, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	res := workspace.ExecResult{ExecID: st.ID, RuntimeID: st.RuntimeID}
	attempts, exited := 0, false
	for {
		ev, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			st.Close()
			if !exited {
				return res, r.note(fmt.Errorf("exec %s: stream ended without an exit: %w", st.ID, execrun.ErrExecLost))
			}
			return res, r.note(nil)
		}
		if err != nil {
			st.Close()
			if !errors.Is(err, rpc.ErrShutdown) || attempts >= maxReattach || ctx.Err() != nil {
				return res, r.note(err)
			}
			// The session died: re-dial and resume from the next offset.
			attempts++
			r.log.Warn("exec stream lost, re-attaching", "exec", st.ID, "offset", from, "err", err)
			var derr error
			sess, _, derr = r.client.Session(ctx)
			if derr != nil {
				return res, r.note(fmt.Errorf("exec %s: re-attach: %w", st.ID, derr))
			}
			next, aerr := execrpc.Attach(ctx, sess, st.ID, from)
			if aerr != nil {
				return res, r.note(fmt.Errorf("exec %s: re-attach: %w", st.ID, aerr))
			}
			st = next
			continue
		}
		if ev.Exit != nil {
			res.ExitCode, res.Signal = ev.Exit.Code, int(ev.Exit.Signal)
			res.TimedOut, res.Killed, res.Duration = ev.Exit.TimedOut, ev.Exit.Killed, ev.Exit.Duration
			res.OutputBytes = ev.Offset
			if ev.Exit.HasHead && sess == r.pushed.Load() {
				res.HasHead, res.Head = true, ev.Exit.Head
			}
			exited = true
			continue
		}
		stream := workspace.Stdout
		if ev.Stream == execrpc.Stderr {
			stream = workspace.Stderr
		}
		from = ev.Offset + int64(len(ev.Data))
		out(workspace.ExecEvent{Stream: stream, Data: ev.Data, Offset: ev.Offset})
	}
}

// KillExec signals exec id's process group.
func (r *Remote) KillExec(ctx context.Context, id string, sig syscall.Signal) error {
	sess, _, err := r.client.Session(ctx)
	if err != nil {
		return r.note(fmt.Errorf("exec %s: kill: %w", id, err))
	}
	return r.note(execrpc.Kill(ctx, sess, id, sig))
}

// ListExecs lists the runner's running and retained execs.
func (r *Remote) ListExecs(ctx context.Context) (string, []workspace.ExecInfo, error) {
	sess, _, err := r.client.Session(ctx)
	if err != nil {
		return "", nil, r.note(fmt.Errorf("exec list: %w", err))
	}
	rt, list, err := execrpc.List(ctx, sess)
	if err != nil {
		return "", nil, r.note(err)
	}
	out := make([]workspace.ExecInfo, len(list))
	for i, in := range list {
		out[i] = ExecInfoOf(in)
	}
	return rt, out, r.note(nil)
}

// ExecInfoOf is an exec of computerd's list as the workspace shows it: the
// cwd a workspace path, its exit an ExecResult.
func ExecInfoOf(in execrpc.Info) workspace.ExecInfo {
	e := workspace.ExecInfo{
		ExecID: in.ID, RuntimeID: workspace.ExecRuntimeID(in.ID), Argv: in.Argv, Shell: in.Shell, ArgvTruncated: in.Truncated,
		Cwd: "/" + in.Cwd, Started: in.Started, Ended: in.Ended, State: in.State,
		OutputBytes: in.LogEnd, LogStart: in.LogStart, LogCap: in.LogCap,
	}
	if x := in.Exit; x != nil {
		e.Result = &workspace.ExecResult{ExecID: in.ID, RuntimeID: e.RuntimeID, ExitCode: x.Code, Signal: int(x.Signal),
			TimedOut: x.TimedOut, Killed: x.Killed, Duration: x.Duration, OutputBytes: in.LogEnd}
	}
	return e
}

// Status reports both sides' positions; it answers from the server's side
// alone when computerd is unreachable.
func (r *Remote) Status(ctx context.Context) (workspace.RemoteStatus, error) {
	var st workspace.RemoteStatus
	local, err := r.store.Watermarks(ctx, r.rt.Peer())
	if err != nil {
		return st, err
	}
	st.Server = workspace.SideStatus{
		StoreID: r.store.ID(), RuntimeID: rpc.RuntimeID.String(), CurrentRev: r.store.CurrentRev(), Served: r.store.Served(),
		Push: workspace.CursorOf(local.Push), Fetch: workspace.CursorOf(local.Fetch), AppliedPush: workspace.CursorOf(local.AppliedPush),
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sess, _, err := r.client.Session(sctx)
	if err == nil {
		var ps syncwire.PeerState
		if ps, err = syncwire.NewPeer(sess).Watermarks(sctx); err == nil {
			st.Connected, st.State, st.RuntimeID = true, "connected", sess.Peer().RuntimeID.String()
			st.Container = workspace.SideStatus{
				StoreID: ps.StoreID, RuntimeID: sess.Peer().RuntimeID.String(), CurrentRev: ps.CurrentRev, Served: ps.Served,
				Push: workspace.CursorOf(ps.Set.Push), Fetch: workspace.CursorOf(ps.Set.Fetch), AppliedPush: workspace.CursorOf(ps.Set.AppliedPush),
			}
		}
	}
	if err != nil {
		st.State, st.LastError = "disconnected", err.Error()
	} else {
		r.mu.Lock()
		st.LastError = r.lastErr
		r.mu.Unlock()
	}
	return st, nil
}

// Verify compares the server's Merkle root with the container's (one round
// trip when they agree) and, when they differ, walks both trees to name the
// first differing paths. Both trees leave out the workspace's ignore list.
// It runs in the driver's FIFO, so no transfer changes a tree mid-walk.
func (r *Remote) Verify(ctx context.Context) (workspace.VerifyReport, error) {
	var rep converge.Report
	ignore, err := r.patterns(ctx)
	if err == nil {
		err = r.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
			rep, err = converge.Verify(ctx, r.store, x.Session(), ignore)
			return err
		})
	}
	if err != nil {
		return workspace.VerifyReport{}, r.note(fmt.Errorf("verify: %w", err))
	}
	return Verdict(rep), r.note(nil)
}

// Repair is verify --repair: it walks both trees as Verify does, re-sends
// the winning side's entries for every differing path (the server wins
// unless only the container changed the path since the last sync; see
// converge.Repair), and reports the verdict after the repair.
// opts.Progress hears the batches it moves (Op "pull" for what comes from
// the container, "push" for what goes to it).
func (r *Remote) Repair(ctx context.Context, opts workspace.SyncOptions) (workspace.VerifyReport, error) {
	var rr converge.RepairReport
	ignore, err := r.patterns(ctx)
	if err == nil {
		err = r.drv.Do(ctx, func(ctx context.Context, x *syncwire.Exchange) (err error) {
			Observe(x, opts.Progress)
			rr, err = converge.Repair(ctx, r.store, x, converge.RepairOptions{Ignore: ignore})
			return err
		})
	}
	if err != nil {
		return workspace.VerifyReport{}, r.note(fmt.Errorf("repair: %w", err))
	}
	r.log.Info("repaired drift", "paths", len(rr.Before.Differences), "server_wins", rr.LocalWins,
		"container_wins", rr.PeerWins, "pushed", rr.Pushed, "pulled", rr.Pulled, "converged", rr.After.Converged)
	return Verdict(rr.After), r.note(nil)
}

// patterns is the list verify and repair compare under.
func (r *Remote) patterns(ctx context.Context) ([]string, error) {
	if r.ignore == nil {
		return nil, nil
	}
	return r.ignore(ctx)
}

// Verdict is a convergence report as the workspace API shows it.
func Verdict(rep converge.Report) workspace.VerifyReport {
	return workspace.VerifyReport{
		Converged: rep.Converged, ServerRoot: rep.LocalRoot.String(), ContainerRoot: rep.PeerRoot.String(),
		Differences: rep.Paths(), CheckedAt: time.Now(),
	}
}
