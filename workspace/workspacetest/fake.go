package workspacetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
	"github.com/wsync/wsync/workspace"
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
	// Ignore is the workspace's ignore list (nil: the default): Verify
	// compares under it, as the real remote does.
	Ignore []string

	mu        sync.Mutex
	run       RunFunc
	runtime   string
	execSeq   int
	push      watermark.Cursor // server cursor the container has applied
	fetch     watermark.Cursor // container cursor the server has applied
	failPush  []error
	failPull  []error
	calls     []string
	verifyErr error
	closed    bool
}

var _ workspace.Remote = (*Fake)(nil)

// NewFake joins server and container. run nil is Commands.
func NewFake(server, container *vfs.Store, run RunFunc) *Fake {
	if run == nil {
		run = Commands
	}
	return &Fake{Server: server, Container: container, run: run, runtime: "fake-runtime-1"}
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

// Calls returns the calls made so far ("push", "pull", "exec", "verify").
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
	f.closed = true
	f.mu.Unlock()
	return nil
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

// Push copies the server's feed after the push cursor into the container.
func (f *Fake) Push(ctx context.Context) (workspace.SyncReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "push")
	if err := f.fail(&f.failPush); err != nil {
		return workspace.SyncReport{}, err
	}
	start := time.Now()
	rep, err := copyFeed(ctx, f.Server, f.Container, &f.push, &f.fetch, vfs.Ignore{})
	rep.RuntimeID, rep.Duration = f.runtime, time.Since(start)
	return rep, err
}

// Pull copies the container's feed after the fetch cursor into the server.
func (f *Fake) Pull(ctx context.Context, ignore []string) (workspace.SyncReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "pull")
	if err := f.fail(&f.failPull); err != nil {
		return workspace.SyncReport{}, err
	}
	start := time.Now()
	rep, err := copyFeed(ctx, f.Container, f.Server, &f.fetch, &f.push, vfs.NewIgnore(ignore))
	rep.RuntimeID, rep.Duration = f.runtime, time.Since(start)
	return rep, err
}

// copyFeed applies src's feed after *from to dst, 256 entries a batch,
// copying the chunks dst lacks. back is dst's own cursor as seen by src: if
// dst had nothing unsent when the batch landed, back moves past the revs the
// apply stamped, so the entries do not bounce straight back (the seed's
// post-apply pushRev advancement).
//
// This is not the real rule, vfs.BounceRun.Skip: the real driver records
// the stamped revs as the receiver's bounce run in the apply's transaction
// (ApplyOptions.Bounce) and skips them when it sends that store's feed, so
// suppression survives a crash or a lost reply; the fake keeps in-memory
// cursors and compares revs only (a partial back cursor counts as whole).
// The two agree on what the remotetest suite asserts (a quiet pull then
// push, or push then pull, sends nothing back); the fake's sync is to be
// replaced by the real driver over an in-process pipe.
func copyFeed(ctx context.Context, src, dst *vfs.Store, from, back *watermark.Cursor, ig vfs.Ignore) (workspace.SyncReport, error) {
	var rep workspace.SyncReport
	through := watermark.At(src.CurrentRev())
	var batch []vfs.ChangeEntry
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		stage := dst.Chunks().NewStage()
		defer stage.Release()
		for _, e := range batch {
			for _, ref := range e.Chunks {
				have, err := dst.Has(ctx, []chunkstore.Hash{ref.Hash})
				if err != nil {
					return err
				}
				if len(have) == 1 {
					continue
				}
				b, err := src.ReadChunk(ctx, ref.Hash)
				if err != nil {
					return err
				}
				if err := stage.Put(ctx, ref.Hash, b); err != nil {
					return err
				}
				rep.Objects++
				rep.Bytes += int64(len(b))
			}
		}
		quiet := dst.CurrentRev() <= back.Rev
		res, err := dst.Apply(ctx, batch, vfs.ApplyOptions{Source: vfs.Upstream, Stage: stage})
		if err != nil {
			return err
		}
		rep.Entries += res.Applied
		rep.Skipped += res.Skipped
		rep.Batches++
		if quiet {
			*back = watermark.At(dst.CurrentRev())
		}
		last := batch[len(batch)-1]
		*from = watermark.Within(last.Rev, last.Path)
		batch = batch[:0]
		return nil
	}
	for e, err := range src.Changes(ctx, *from, through, ig) {
		if err != nil {
			return rep, err
		}
		batch = append(batch, e)
		if len(batch) == 256 {
			if err := flush(); err != nil {
				return rep, err
			}
		}
	}
	if err := flush(); err != nil {
		return rep, err
	}
	*from = through
	return rep, nil
}

// Exec runs the RunFunc against the container store.
func (f *Fake) Exec(ctx context.Context, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "exec")
	if f.closed {
		f.mu.Unlock()
		return workspace.ExecResult{}, errClosed
	}
	f.execSeq++
	id := fmt.Sprintf("%s:%d", f.runtime, f.execSeq)
	runtime, run := f.runtime, f.run
	f.mu.Unlock()
	start := time.Now()
	res, err := run(ctx, f.Container, spec, out)
	res.ExecID, res.RuntimeID = id, runtime
	if res.Duration == 0 {
		res.Duration = time.Since(start)
	}
	return res, err
}

// Status reports the fake's cursors.
func (f *Fake) Status(ctx context.Context) (workspace.RemoteStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := workspace.RemoteStatus{
		Connected: true,
		State:     "connected",
		RuntimeID: f.runtime,
		Server: workspace.SideStatus{StoreID: f.Server.ID(), CurrentRev: f.Server.CurrentRev(),
			Push: workspace.CursorOf(f.push), Fetch: workspace.CursorOf(f.fetch)},
		Container: workspace.SideStatus{StoreID: f.Container.ID(), RuntimeID: f.runtime, CurrentRev: f.Container.CurrentRev(),
			AppliedPush: workspace.CursorOf(f.push)},
	}
	if f.closed {
		st.Connected, st.State, st.LastError = false, "disconnected", errClosed.Error()
	}
	return st, nil
}

// Verify compares the two trees node by node (type, mode, content, target)
// under the workspace's ignore list; the real remote compares Merkle roots.
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
	ig := vfs.NewIgnore(f.Ignore)
	a, err := tree(ctx, f.Server, ig)
	if err != nil {
		return workspace.VerifyReport{}, err
	}
	b, err := tree(ctx, f.Container, ig)
	if err != nil {
		return workspace.VerifyReport{}, err
	}
	var diff []string
	for p, v := range a {
		if b[p] != v {
			diff = append(diff, "/"+p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			diff = append(diff, "/"+p)
		}
	}
	slices.Sort(diff)
	if len(diff) > 10 {
		diff = diff[:10]
	}
	return workspace.VerifyReport{Converged: len(diff) == 0, Differences: diff, CheckedAt: time.Now().UTC()}, nil
}

// tree maps every path to a description of its node.
func tree(ctx context.Context, s *vfs.Store, ig vfs.Ignore) (map[string]string, error) {
	out := make(map[string]string)
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := s.List(ctx, dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if ig.MatchName(e.Name) {
				continue
			}
			p := e.Name
			if dir != "" {
				p = dir + "/" + e.Name
			}
			desc := fmt.Sprintf("%s %o", e.Kind, e.Mode&0o7777)
			switch e.Kind {
			case vfs.KindFile:
				m, err := s.Manifest(ctx, p)
				if err != nil {
					return err
				}
				for _, r := range m {
					desc += " " + r.Hash.String()
				}
			case vfs.KindSymlink:
				t, err := s.ReadLinkPath(ctx, p)
				if err != nil {
					return err
				}
				desc += " " + t
			case vfs.KindDir:
				if err := walk(p); err != nil {
					return err
				}
			}
			out[p] = desc
		}
		return nil
	}
	return out, walk("")
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

// Remotes is a workspace.RemoteFactory that gives every workspace its own
// Fake, with a container store under Dir.
type Remotes struct {
	Dir string
	Run RunFunc // nil: Commands

	mu    sync.Mutex
	fakes map[string]*Fake
}

// Factory is the workspace.RemoteFactory.
func (r *Remotes) Factory(ws *workspace.Workspace) (workspace.Remote, error) {
	ctx := context.Background()
	server, err := ws.Store(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.Dir, ws.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, err := vfs.Open(ctx, filepath.Join(dir, "container.db"), vfs.Options{NoSync: true})
	if err != nil {
		return nil, err
	}
	f := NewFake(server, c, r.Run)
	f.Ignore = ws.IgnoreList()
	r.mu.Lock()
	if r.fakes == nil {
		r.fakes = make(map[string]*Fake)
	}
	r.fakes[ws.Name()] = f
	r.mu.Unlock()
	return f, nil
}

// Fake returns the fake built for the workspace name (nil before its first
// remote call).
func (r *Remotes) Fake(name string) *Fake {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fakes[name]
}

// Close closes the container stores.
func (r *Remotes) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, f := range r.fakes {
		errs = append(errs, f.Container.Close())
	}
	return errors.Join(errs...)
}

// Signal is a convenience for RunFuncs that end by a signal.
func Signal(sig syscall.Signal) workspace.ExecResult {
	return workspace.ExecResult{Signal: int(sig), ExitCode: 128 + int(sig), Killed: true}
}
