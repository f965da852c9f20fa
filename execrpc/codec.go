package execrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ErrBadMessage reports an exec message that does not decode.
var ErrBadMessage = errors.New("malformed exec message")

// Limits on decoded requests.
const (
	MaxArgs     = 4096
	MaxStrLen   = 128 << 10
	MaxStdin    = 512 << 10 // stdin travels in the request frame
	maxEventLen = 256 << 10
)

// Request starts a command.
type Request struct {
	Argv    []string
	Shell   string
	Cwd     string
	Env     []string
	Stdin   []byte
	Timeout time.Duration
	// User runs the command as Uid:Gid when HasUser.
	HasUser  bool
	Uid, Gid uint32
}

// StreamTag tags an output event.
type StreamTag uint8

const (
	Stdout  StreamTag = 1
	Stderr  StreamTag = 2
	exitTag StreamTag = 3
)

// Exit is how an exec ended.
type Exit struct {
	Code     int
	Signal   syscall.Signal
	Duration time.Duration
	TimedOut bool
	Killed   bool
}

// Event is one piece of output, or the exit (Exit non-nil).
type Event struct {
	Offset int64
	Stream StreamTag
	Data   []byte
	Exit   *Exit
}

type enc struct{ b []byte }

func (e *enc) uv(v uint64)    { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) str(s string)   { e.uv(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte) { e.uv(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) strs(ss []string) {
	e.uv(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadMessage, what)
	}
}

func (d *dec) uv(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) raw(what string, max int) []byte {
	n := d.uv(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail(what + " length")
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) str(what string) string { return string(d.raw(what, MaxStrLen)) }

func (d *dec) strs(what string) []string {
	n := d.uv(what)
	if n > MaxArgs {
		d.fail(what + " count")
		return nil
	}
	var out []string
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, d.str(what))
	}
	return out
}

func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	return d.err
}

// AppendRequest encodes r.
func AppendRequest(b []byte, r Request) []byte {
	e := enc{b}
	e.strs(r.Argv)
	e.str(r.Shell)
	e.str(r.Cwd)
	e.strs(r.Env)
	e.bytes(r.Stdin)
	e.uv(uint64(max(r.Timeout, 0)))
	if r.HasUser {
		e.uv(1)
		e.uv(uint64(r.Uid))
		e.uv(uint64(r.Gid))
	} else {
		e.uv(0)
	}
	return e.b
}

// DecodeRequest decodes and bounds a request.
func DecodeRequest(p []byte) (Request, error) {
	d := dec{b: p}
	var r Request
	r.Argv = d.strs("argv")
	r.Shell = d.str("shell")
	r.Cwd = d.str("cwd")
	r.Env = d.strs("env")
	if in := d.raw("stdin", MaxStdin); len(in) > 0 {
		r.Stdin = append([]byte(nil), in...)
	}
	r.Timeout = time.Duration(d.uv("timeout"))
	switch d.uv("user flag") {
	case 0:
	case 1:
		r.HasUser = true
		uid, gid := d.uv("uid"), d.uv("gid")
		if uid > 1<<32-1 || gid > 1<<32-1 {
			d.fail("uid/gid range")
		}
		r.Uid, r.Gid = uint32(uid), uint32(gid)
	default:
		d.fail("user flag")
	}
	if err := d.done(); err != nil {
		return Request{}, err
	}
	if (len(r.Argv) == 0) == (r.Shell == "") {
		return Request{}, fmt.Errorf("%w: exactly one of argv and shell", ErrBadMessage)
	}
	if r.Timeout < 0 {
		return Request{}, fmt.Errorf("%w: negative timeout", ErrBadMessage)
	}
	return r, nil
}

// AppendEvent encodes one event.
func AppendEvent(b []byte, ev Event) []byte {
	e := enc{b}
	if ev.Exit != nil {
		e.uv(uint64(exitTag))
		e.uv(uint64(ev.Offset))
		x := ev.Exit
		e.uv(uint64(x.Code) & 0xffffffff)
		e.uv(uint64(x.Signal))
		e.uv(uint64(max(x.Duration, 0)))
		var flags uint64
		if x.TimedOut {
			flags |= 1
		}
		if x.Killed {
			flags |= 2
		}
		e.uv(flags)
		return e.b
	}
	e.uv(uint64(ev.Stream))
	e.uv(uint64(ev.Offset))
	e.bytes(ev.Data)
	return e.b
}

// DecodeEvent decodes one event. Data aliases p.
func DecodeEvent(p []byte) (Event, error) {
	d := dec{b: p}
	var ev Event
	tag := d.uv("tag")
	ev.Offset = int64(d.uv("offset"))
	if ev.Offset < 0 {
		d.fail("offset")
	}
	switch tag {
	case uint64(Stdout), uint64(Stderr):
		ev.Stream = StreamTag(tag)
		ev.Data = d.raw("data", maxEventLen)
	case uint64(exitTag):
		code := d.uv("code")
		sig := d.uv("signal")
		dur := d.uv("duration")
		flags := d.uv("flags")
		if code > 0xffffffff || sig > 128 || flags > 3 {
			d.fail("exit fields")
		}
		ev.Exit = &Exit{Code: int(int32(uint32(code))), Signal: syscall.Signal(sig), Duration: time.Duration(dur), TimedOut: flags&1 != 0, Killed: flags&2 != 0}
	default:
		d.fail("tag")
	}
	if err := d.done(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// started is the reply body of Start and Attach.
type started struct {
	ID        string
	RuntimeID string
}

func appendStarted(b []byte, s started) []byte {
	e := enc{b}
	e.str(s.ID)
	e.str(s.RuntimeID)
	return e.b
}

func decodeStarted(p []byte) (started, error) {
	d := dec{b: p}
	s := started{ID: d.str("id"), RuntimeID: d.str("runtime id")}
	return s, d.done()
}

// attachReq resumes an exec's stream from an offset.
type attachReq struct {
	ID   string
	From int64
}

func appendAttach(b []byte, a attachReq) []byte {
	e := enc{b}
	e.str(a.ID)
	e.uv(uint64(max(a.From, 0)))
	return e.b
}

func decodeAttach(p []byte) (attachReq, error) {
	d := dec{b: p}
	a := attachReq{ID: d.str("id"), From: int64(d.uv("from"))}
	if a.From < 0 {
		d.fail("from")
	}
	return a, d.done()
}

type killReq struct {
	ID     string
	Signal syscall.Signal
}

func appendKill(b []byte, k killReq) []byte {
	e := enc{b}
	e.str(k.ID)
	e.uv(uint64(k.Signal))
	return e.b
}

func decodeKill(p []byte) (killReq, error) {
	d := dec{b: p}
	k := killReq{ID: d.str("id")}
	sig := d.uv("signal")
	if sig == 0 || sig > 64 {
		d.fail("signal")
	}
	k.Signal = syscall.Signal(sig)
	return k, d.done()
}
