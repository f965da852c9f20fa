package execrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/syncwire/rpc"
)

// MethodList lists the runner's running and retained execs.
const MethodList rpc.Method = 259

// MaxListed bounds the execs a List answer may carry: far more than a
// runner holds (its running limit plus its retention).
const MaxListed = 4096

// Info describes one exec of a List answer (execrun.Info on the wire).
type Info struct {
	ID string
	// Argv and Shell are the runner's summary of the command line;
	// Truncated: it was cut.
	Argv      []string
	Shell     string
	Truncated bool
	// Cwd is relative to the mount root ("" is the root).
	Cwd     string
	Pid     int
	Started time.Time
	Ended   time.Time // zero while it runs
	// State is execrun's: "running", "exited", "killed", "timed_out".
	State string
	Exit  *Exit // nil while it runs
	// LogStart and LogEnd are the offsets the log holds, LogCap its bound.
	LogStart, LogEnd, LogCap int64
}

// States on the wire, in the order of this table (index+1).
var states = []string{execrun.StateRunning, execrun.StateExited, execrun.StateKilled, execrun.StateTimedOut}

// Info flags on the wire.
const (
	infoTruncated = 1 << iota
	infoExit      // an exit follows
)

// maxOffset bounds a decoded log offset, as every rev and offset on the wire.
const maxOffset = 1 << 62

// AppendInfo encodes one exec of a List answer.
func AppendInfo(b []byte, in Info) []byte {
	e := rpc.NewEncoder(b)
	e.PutString(in.ID)
	putStrings(&e, in.Argv)
	e.PutString(in.Shell)
	e.PutString(in.Cwd)
	e.PutUvarint(uint64(max(in.Pid, 0)))
	e.PutVarint(unixNano(in.Started))
	e.PutVarint(unixNano(in.Ended))
	state := 0
	for i, s := range states {
		if s == in.State {
			state = i + 1
		}
	}
	e.PutUvarint(uint64(state))
	e.PutUvarint(uint64(max(in.LogStart, 0)))
	e.PutUvarint(uint64(max(in.LogEnd, 0)))
	e.PutUvarint(uint64(max(in.LogCap, 0)))
	var flags uint64
	if in.Truncated {
		flags |= infoTruncated
	}
	if in.Exit != nil {
		flags |= infoExit
	}
	e.PutUvarint(flags)
	if in.Exit != nil {
		putExit(&e, in.Exit)
	}
	return e.Bytes()
}

// DecodeInfo decodes and bounds one exec of a List answer.
func DecodeInfo(p []byte) (Info, error) {
	d := newDecoder(p)
	var in Info
	in.ID = d.String("id", MaxStrLen)
	in.Argv = readStrings(&d, "argv")
	in.Shell = d.String("shell", MaxStrLen)
	in.Cwd = d.String("cwd", MaxStrLen)
	in.Pid = int(d.Bounded("pid", 1<<31-1))
	in.Started = fromUnixNano(d.Varint())
	in.Ended = fromUnixNano(d.Varint())
	if st := d.Bounded("state", uint64(len(states))); st == 0 {
		d.Fail("no state")
	} else {
		in.State = states[st-1]
	}
	in.LogStart = int64(d.Bounded("log start", maxOffset))
	in.LogEnd = int64(d.Bounded("log end", maxOffset))
	in.LogCap = int64(d.Bounded("log cap", maxOffset))
	flags := d.Bounded("flags", infoTruncated|infoExit)
	in.Truncated = flags&infoTruncated != 0
	if flags&infoExit != 0 {
		in.Exit = readExit(&d)
	}
	if err := d.Done(); err != nil {
		return Info{}, err
	}
	if in.LogStart > in.LogEnd {
		return Info{}, fmt.Errorf("%w: log start %d past its end %d", ErrBadMessage, in.LogStart, in.LogEnd)
	}
	if (in.Exit == nil) != (in.State == execrun.StateRunning) {
		return Info{}, fmt.Errorf("%w: state %s with exit %v", ErrBadMessage, in.State, in.Exit != nil)
	}
	return in, nil
}

// unixNano is t in nanoseconds since the epoch; the zero time is 0.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// infoOf is an execrun.Info on the wire.
func infoOf(x execrun.Info) Info {
	in := Info{ID: x.ID, Argv: x.Argv, Shell: x.Shell, Truncated: x.Truncated, Cwd: x.Cwd, Pid: x.Pid,
		Started: x.Started, Ended: x.Ended, State: x.State, LogStart: x.LogStart, LogEnd: x.LogEnd, LogCap: x.LogCap}
	if st := x.Exit; st != nil {
		in.Exit = &Exit{Code: st.Code, Signal: st.Signal, Duration: st.Duration, TimedOut: st.TimedOut, Killed: st.Killed}
	}
	return in
}

// List asks for the callee's running and retained execs, oldest first, and
// the runtime id they belong to.
func List(ctx context.Context, s *rpc.Session) (runtimeID string, out []Info, err error) {
	o, err := s.Open(ctx, MethodList, nil, false)
	if err != nil {
		return "", nil, fmt.Errorf("exec list: %w", err)
	}
	defer o.Close()
	b, err := o.Reply(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("exec list: %w", err)
	}
	d := newDecoder(b)
	runtimeID = d.String("runtime id", MaxStrLen)
	if err := d.Done(); err != nil {
		return "", nil, fmt.Errorf("exec list: %w", err)
	}
	for {
		p, err := o.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return runtimeID, out, nil
		}
		if err != nil {
			return "", nil, fmt.Errorf("exec list: %w", err)
		}
		if len(out) == MaxListed {
			return "", nil, fmt.Errorf("exec list: %w: more than %d execs", ErrBadMessage, MaxListed)
		}
		in, err := DecodeInfo(p)
		if err != nil {
			return "", nil, fmt.Errorf("exec list: %w", err)
		}
		out = append(out, in)
	}
}

func (h *handler) list(ctx context.Context, c *rpc.Incoming) error {
	if len(c.Body) != 0 {
		return wireErr(fmt.Errorf("list: %w: %d bytes of request", ErrBadMessage, len(c.Body)))
	}
	e := rpc.NewEncoder(nil)
	e.PutString(h.r.RuntimeID())
	if err := c.ReplyStream(e.Bytes()); err != nil {
		return err
	}
	var buf []byte
	for _, x := range h.r.List() {
		buf = AppendInfo(buf[:0], infoOf(x))
		if err := c.Send(ctx, buf); err != nil {
			return err
		}
	}
	return nil
}
