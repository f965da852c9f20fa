package execrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"syscall"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// Methods on the wire, in the range this package owns.
const (
	MethodStart  rpc.Method = 256
	MethodAttach rpc.Method = 257
	MethodKill   rpc.Method = 258
)

// Options configures Register.
type Options struct {
	// BeforeStart runs before every command starts; an error refuses the
	// exec. computerd waits here until the kernel has dropped what the last
	// apply invalidated, so the command sees the pushed bytes.
	BeforeStart func(ctx context.Context) error
	// Head, when set, is read once a command has ended, before its exit
	// event is sent, and the event carries it (Exit.Head): computerd's
	// feed head once everything the command wrote is committed, files
	// still held open by a process it left behind included. An error sends
	// the event without a head, and the caller pulls as it would anyway.
	Head   func(ctx context.Context) (int64, error)
	Logger *slog.Logger
}

// Mux is where Register adds the exec methods: an *rpc.Server, or the
// *syncwire.Server that serves them beside the sync methods.
type Mux interface {
	Handle(m rpc.Method, h rpc.Handler)
}

// Register serves the exec methods on srv with runner r.
func Register(srv Mux, r *execrun.Runner, opts Options) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	h := &handler{r: r, before: opts.BeforeStart, head: opts.Head, log: log.With("component", "execrpc")}
	srv.Handle(MethodStart, h.start)
	srv.Handle(MethodAttach, h.attach)
	srv.Handle(MethodKill, h.kill)
	srv.Handle(MethodList, h.list)
}

type handler struct {
	r      *execrun.Runner
	before func(ctx context.Context) error
	head   func(ctx context.Context) (int64, error)
	log    *slog.Logger
}

// wireErr maps the runner's sentinels that have no code of their own to
// the codes the wire knows (ErrBusy, ErrExecLost and ErrLogTruncated have
// theirs: errors.go).
func wireErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, execrun.ErrNotFound):
		return fmt.Errorf("%w: %v", vfs.ErrNotExist, err)
	case errors.Is(err, execrun.ErrBadCwd), errors.Is(err, execrun.ErrBadSpec), errors.Is(err, ErrBadMessage):
		return fmt.Errorf("%w: %v", vfs.ErrInvalid, err)
	case errors.Is(err, execrun.ErrClosed):
		return fmt.Errorf("%w: %v", rpc.ErrShutdown, err)
	// A command that cannot start: not found, not executable, not a
	// program the kernel runs.
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %v", vfs.ErrNotExist, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %v", vfs.ErrPerm, err)
	case errors.Is(err, syscall.ENOEXEC):
		return fmt.Errorf("%w: %v", vfs.ErrInvalid, err)
	}
	return err
}

func (h *handler) start(ctx context.Context, c *rpc.Incoming) error {
	req, err := DecodeRequest(c.Body)
	if err != nil {
		return wireErr(err)
	}
	spec := execrun.Spec{Argv: req.Argv, Shell: req.Shell, Cwd: req.Cwd, Env: req.Env, Timeout: req.Timeout, LogCap: req.LogCap}
	if req.Stdin != nil {
		spec.Stdin = bytes.NewReader(req.Stdin)
	}
	if req.HasUser {
		spec.User = &execrun.Credential{Uid: req.Uid, Gid: req.Gid}
	}
	if h.before != nil {
		if err := h.before(ctx); err != nil {
			return fmt.Errorf("exec: before start: %w", err)
		}
	}
	// The command outlives the call: a caller that loses its session
	// re-attaches by id.
	ex, err := h.r.Start(context.WithoutCancel(ctx), spec)
	if err != nil {
		return wireErr(err)
	}
	h.log.Debug("exec started", "id", ex.ID(), "pid", ex.Pid())
	return h.stream(ctx, c, ex.ID(), 0)
}

func (h *handler) attach(ctx context.Context, c *rpc.Incoming) error {
	a, err := decodeAttach(c.Body)
	if err != nil {
		return wireErr(err)
	}
	return h.stream(ctx, c, a.ID, a.From)
}

// stream sends the exec's events from offset `from` until its exit. A
// stream that falls behind the exec's bounded log (the caller reads more
// slowly than the command writes) skips to the oldest byte the log still
// holds and goes on: the next event's offset says how much was lost, and
// the exit still comes. Only an attach at an offset already gone is
// ELOG_TRUNCATED: the caller asked for bytes that are not there.
func (h *handler) stream(ctx context.Context, c *rpc.Incoming, id string, from int64) error {
	sub, err := h.r.Attach(id, from)
	if err != nil {
		return wireErr(err)
	}
	if err := c.ReplyStream(appendStarted(nil, started{ID: id, RuntimeID: h.r.RuntimeID()})); err != nil {
		return err
	}
	var buf []byte
	for {
		ev, err := sub.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if errors.Is(err, execrun.ErrLogTruncated) {
			lost := sub.SkipLost()
			h.log.Warn("exec stream fell behind its log: output skipped", "id", id, "bytes", lost)
			continue
		}
		if err != nil {
			return wireErr(err)
		}
		out := Event{Offset: ev.Offset, Stream: StreamTag(ev.Stream), Data: ev.Data}
		if ev.Exit != nil {
			x := ev.Exit
			out.Exit = &Exit{Code: x.Code, Signal: x.Signal, Duration: x.Duration, TimedOut: x.TimedOut, Killed: x.Killed}
			out.Exit.HasHead, out.Exit.Head = h.readHead(ctx, id)
		}
		buf = AppendEvent(buf[:0], out)
		if err := c.Send(ctx, buf); err != nil {
			return err
		}
	}
}

// readHead is the feed head for an exit event; false when there is none
// to send.
func (h *handler) readHead(ctx context.Context, id string) (bool, int64) {
	if h.head == nil {
		return false, 0
	}
	rev, err := h.head(ctx)
	if err != nil {
		h.log.Warn("exit event without the feed head: the caller will pull", "id", id, "err", err)
		return false, 0
	}
	return true, rev
}

func (h *handler) kill(ctx context.Context, c *rpc.Incoming) error {
	k, err := decodeKill(c.Body)
	if err != nil {
		return wireErr(err)
	}
	return wireErr(h.r.Kill(k.ID, k.Signal))
}
