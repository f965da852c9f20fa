package workspacetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// FakeLogCap is the fake runner's output log cap: the most a spec may ask
// for, and what it gets when it asks for none (computerd's default).
const FakeLogCap = 8 << 20

// execTable is the fake container's command runner: the execs of one
// container store, running and finished, each with its bounded output
// log. The Fakes built for one container (Remotes) share it, as the
// remotes of one computerd share its runner.
type execTable struct {
	mu    sync.Mutex
	seq   int
	execs map[string]*fakeExec
}

type fakeExec struct {
	info   workspace.ExecInfo
	events []workspace.ExecEvent // the log, oldest first
	start  int64                 // offset of the log's first byte
	end    int64
	cap    int64
	res    *workspace.ExecResult
	err    error // the RunFunc's: the command's fate is unknown
	kill   syscall.Signal
	cancel context.CancelFunc
	wake   chan struct{} // closed on output or the end
}

func newExecTable() *execTable { return &execTable{execs: make(map[string]*fakeExec)} }

// peerErr is a failure of the fake container, as the real remote reports
// computerd's: a PeerError with the wire code.
func peerErr(code, format string, a ...any) error {
	return &workspace.PeerError{Code: code, Err: fmt.Errorf(format, a...)}
}

// begin registers a command of runtime and returns its exec; cancel kills it.
func (t *execTable) begin(runtime string, spec workspace.ExecSpec, cancel context.CancelFunc) (*fakeExec, error) {
	logCap := spec.LogCap
	switch {
	case logCap == 0:
		logCap = FakeLogCap
	case logCap > FakeLogCap:
		return nil, peerErr("EINVAL", "log cap %d above the maximum %d: %w", logCap, FakeLogCap, vfs.ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	id := fmt.Sprintf("%s:%d", runtime, t.seq)
	cwd, _ := vfs.CleanAPIPath(spec.Cwd)
	argv := slices.Clone(spec.Argv)
	e := &fakeExec{cap: logCap, cancel: cancel, wake: make(chan struct{}), info: workspace.ExecInfo{
		ExecID: id, RuntimeID: runtime, Argv: argv, Shell: spec.Shell, Cwd: "/" + cwd,
		Started: time.Now().UTC(), State: workspace.ExecStateRunning, LogCap: logCap,
	}}
	t.execs[id] = e
	return e, nil
}

// output appends to e's log, dropping its oldest events beyond the cap.
func (t *execTable) output(e *fakeExec, ev workspace.ExecEvent) workspace.ExecEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	ev.Data, ev.Offset = slices.Clone(ev.Data), e.end
	e.events = append(e.events, ev)
	e.end += int64(len(ev.Data))
	for e.end-e.start > e.cap && len(e.events) > 0 {
		e.start += int64(len(e.events[0].Data))
		e.events = e.events[1:]
	}
	t.wakeLocked(e)
	return ev
}

func (t *execTable) wakeLocked(e *fakeExec) {
	close(e.wake)
	e.wake = make(chan struct{})
}

// finish records how e ended: res, or err (its fate unknown); a kill
// turns the end into the signal's.
func (t *execTable) finish(e *fakeExec, res workspace.ExecResult, err error) workspace.ExecResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.kill != 0 {
		res, err = Signal(e.kill), nil
	}
	res.ExecID, res.RuntimeID = e.info.ExecID, e.info.RuntimeID
	res.Duration = max(res.Duration, time.Since(e.info.Started))
	res.OutputBytes = e.end
	e.res, e.err = &res, err
	e.info.Ended = time.Now().UTC()
	e.info.State = workspace.ExecStateOf(res)
	t.wakeLocked(e)
	return res
}

// lookup finds id for a caller of the container runtime current.
func (t *execTable) lookup(id, current string) (*fakeExec, error) {
	if rt := workspace.ExecRuntimeID(id); rt != current {
		return nil, peerErr("EEXEC_LOST", "exec %s: runtime is now %s: %w", id, current, workspace.ErrExecLost)
	}
	t.mu.Lock()
	e := t.execs[id]
	t.mu.Unlock()
	if e == nil {
		return nil, peerErr("ENOENT", "exec %s: no such exec: %w", id, vfs.ErrNotExist)
	}
	return e, nil
}

// attach follows e's log from offset from, as the real runner does.
// It ends with errClosed when gone closes (the session ended), as the
// real remote's stream does.
func (t *execTable) attach(ctx context.Context, gone <-chan struct{}, e *fakeExec, from int64, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	t.mu.Lock()
	if from == workspace.ExecFromEnd {
		from = e.end
	}
	switch {
	case from < 0 || from > e.end:
		t.mu.Unlock()
		return workspace.ExecResult{}, peerErr("EINVAL", "exec %s: offset %d outside [0, %d]: %w", e.info.ExecID, from, e.end, vfs.ErrInvalid)
	case from < e.start:
		t.mu.Unlock()
		return workspace.ExecResult{}, peerErr("ELOG_TRUNCATED", "exec %s: offset %d, log starts at %d: %w", e.info.ExecID, from, e.start, workspace.ErrLogTruncated)
	}
	t.mu.Unlock()
	for {
		t.mu.Lock()
		if from < e.start {
			t.mu.Unlock()
			return workspace.ExecResult{}, peerErr("ELOG_TRUNCATED", "exec %s: offset %d, log starts at %d: %w", e.info.ExecID, from, e.start, workspace.ErrLogTruncated)
		}
		var next []workspace.ExecEvent
		for _, ev := range e.events {
			if end := ev.Offset + int64(len(ev.Data)); end > from {
				cut := from - ev.Offset
				next = append(next, workspace.ExecEvent{Stream: ev.Stream, Data: ev.Data[max(cut, 0):], Offset: max(ev.Offset, from)})
			}
		}
		res, err, wake := e.res, e.err, e.wake
		t.mu.Unlock()
		for _, ev := range next {
			out(ev)
			from = ev.Offset + int64(len(ev.Data))
		}
		if len(next) > 0 {
			continue
		}
		if res != nil {
			return *res, err
		}
		select {
		case <-wake:
		case <-gone:
			return workspace.ExecResult{}, errClosed
		case <-ctx.Done():
			return workspace.ExecResult{}, ctx.Err()
		}
	}
}

// list describes every exec of the runtime current, oldest first.
func (t *execTable) list(current string) []workspace.ExecInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []workspace.ExecInfo
	for _, e := range t.execs {
		if e.info.RuntimeID != current {
			continue
		}
		info := e.info
		info.Argv = slices.Clone(info.Argv)
		info.OutputBytes, info.LogStart = e.end, e.start
		if e.res != nil {
			res := *e.res
			info.Result = &res
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b workspace.ExecInfo) int {
		return strings.Compare(fmt.Sprintf("%020d", seqOf(a.ExecID)), fmt.Sprintf("%020d", seqOf(b.ExecID)))
	})
	return out
}

func seqOf(id string) int {
	var n int
	fmt.Sscanf(id[strings.LastIndexByte(id, ':')+1:], "%d", &n)
	return n
}

// run plays e with the fake's RunFunc; ctx ends when the command is killed.
func (f *Fake) runExec(ctx context.Context, e *fakeExec, spec workspace.ExecSpec, run RunFunc, out func(workspace.ExecEvent)) workspace.ExecResult {
	res, err := run(ctx, f.Container, spec, func(ev workspace.ExecEvent) {
		ev = f.execs.output(e, ev)
		if out != nil {
			out(ev)
		}
	})
	return f.execs.finish(e, res, err)
}

// StartExec starts the RunFunc in a goroutine of its own, as a command
// computerd runs outlives its call; KillExec cancels its context.
func (f *Fake) StartExec(ctx context.Context, spec workspace.ExecSpec) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "start")
	if f.closed {
		f.mu.Unlock()
		return "", errClosed
	}
	runtime, run := f.runtime, f.run
	f.mu.Unlock()
	rctx, cancel := context.WithCancel(context.Background())
	e, err := f.execs.begin(runtime, spec, cancel)
	if err != nil {
		cancel()
		return "", err
	}
	go func() {
		defer cancel()
		f.runExec(rctx, e, spec, run, nil)
	}()
	return e.info.ExecID, nil
}

// AttachExec follows an exec of the fake's current runtime.
func (f *Fake) AttachExec(ctx context.Context, id string, from int64, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
	if err := f.injectedAttachFailure(); err != nil {
		return workspace.ExecResult{}, err
	}
	runtime, err := f.current()
	if err != nil {
		return workspace.ExecResult{}, err
	}
	e, err := f.execs.lookup(id, runtime)
	if err != nil {
		return workspace.ExecResult{}, err
	}
	return f.execs.attach(ctx, f.gone, e, from, out)
}

// injectedAttachFailure pops the next failure FailAttach queued, closing
// its channel when it was the last.
func (f *Fake) injectedAttachFailure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failAttach) == 0 {
		return nil
	}
	err := pop(&f.failAttach)
	if len(f.failAttach) == 0 {
		close(f.attachFailed)
	}
	return err
}

// KillExec ends an exec of the fake's current runtime as if sig killed it.
func (f *Fake) KillExec(ctx context.Context, id string, sig syscall.Signal) error {
	runtime, err := f.current()
	if err != nil {
		return err
	}
	e, err := f.execs.lookup(id, runtime)
	if err != nil {
		return err
	}
	f.execs.mu.Lock()
	if e.res == nil {
		e.kill = sig
	}
	f.execs.mu.Unlock()
	e.cancel()
	return nil
}

// ListExecs lists the execs of the fake's current runtime.
func (f *Fake) ListExecs(ctx context.Context) (string, []workspace.ExecInfo, error) {
	runtime, err := f.current()
	if err != nil {
		return "", nil, err
	}
	return runtime, f.execs.list(runtime), nil
}

// current is the fake container's runtime, or the closed session's error.
func (f *Fake) current() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return "", errClosed
	}
	return f.runtime, nil
}

// killAll ends every command still running, as a container that goes away
// takes them with it.
func (t *execTable) killAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.execs {
		if e.res == nil {
			e.kill = syscall.SIGKILL
			e.cancel()
		}
	}
}
