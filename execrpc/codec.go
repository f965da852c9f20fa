package execrpc

import (
	"fmt"
	"syscall"
	"time"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/syncwire/rpc"
)

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
	// LogCap bounds the exec's output log (0: the runner's cap, which is
	// also the most it may ask for). It travels only when set, so a
	// request without one is what a computerd from before it decodes.
	LogCap int64
}

// maxLogCap bounds a decoded log cap (the runner refuses more than its own).
const maxLogCap = 1 << 40

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
	// HasHead: Head is the callee's feed head (its store's rev) read after
	// the command ended, once every file still open was committed (see
	// Options.Head). A caller that has fetched through it knows the
	// command changed nothing it has not pulled.
	HasHead bool
	Head    int64
}

// Exit flags on the wire.
const (
	exitTimedOut = 1 << iota
	exitKilled
	exitHead // a rev follows: Exit.Head
)

// maxHead bounds a decoded head, as every rev on the wire.
const maxHead = 1 << 62

// Event is one piece of output, or the exit (Exit non-nil).
type Event struct {
	Offset int64
	Stream StreamTag
	Data   []byte
	Exit   *Exit
}

// newDecoder reads p; its failures are ErrBadMessage.
func newDecoder(p []byte) rpc.Decoder {
	return rpc.NewDecoderFunc(p, func(msg string) error { return fmt.Errorf("%w: %s", ErrBadMessage, msg) })
}

// putStrings appends a count and the strings (argv, env).
func putStrings(e *rpc.Encoder, ss []string) {
	e.PutUvarint(uint64(len(ss)))
	for _, s := range ss {
		e.PutString(s)
	}
}

// readStrings reads what putStrings wrote: at most MaxArgs strings of at
// most MaxStrLen bytes; none is nil.
func readStrings(d *rpc.Decoder, what string) []string {
	n := d.Count(what+" count", MaxArgs, 1)
	var out []string
	for range n {
		out = append(out, d.String(what, MaxStrLen))
	}
	return out
}

// AppendRequest encodes r.
func AppendRequest(b []byte, r Request) []byte {
	e := rpc.NewEncoder(b)
	putStrings(&e, r.Argv)
	e.PutString(r.Shell)
	e.PutString(r.Cwd)
	putStrings(&e, r.Env)
	e.PutBytes(r.Stdin)
	e.PutUvarint(uint64(max(r.Timeout, 0)))
	if r.HasUser {
		e.PutUvarint(1)
		e.PutUvarint(uint64(r.Uid))
		e.PutUvarint(uint64(r.Gid))
	} else {
		e.PutUvarint(0)
	}
	if r.LogCap > 0 {
		e.PutUvarint(uint64(r.LogCap))
	}
	return e.Bytes()
}

// DecodeRequest decodes and bounds a request.
func DecodeRequest(p []byte) (Request, error) {
	d := newDecoder(p)
	var r Request
	r.Argv = readStrings(&d, "argv")
	r.Shell = d.String("shell", MaxStrLen)
	r.Cwd = d.String("cwd", MaxStrLen)
	r.Env = readStrings(&d, "env")
	if in := d.Bytes("stdin", MaxStdin); len(in) > 0 {
		r.Stdin = append([]byte(nil), in...)
	}
	r.Timeout = time.Duration(d.Uvarint())
	switch d.Uvarint() {
	case 0:
	case 1:
		r.HasUser = true
		r.Uid = uint32(d.Bounded("uid", 1<<32-1))
		r.Gid = uint32(d.Bounded("gid", 1<<32-1))
	default:
		d.Fail("user flag")
	}
	if d.Err() == nil && d.Len() > 0 {
		if r.LogCap = int64(d.Bounded("log cap", maxLogCap)); r.LogCap == 0 {
			d.Fail("log cap 0 sent")
		}
	}
	if err := d.Done(); err != nil {
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
	e := rpc.NewEncoder(b)
	if ev.Exit != nil {
		e.PutUvarint(uint64(exitTag))
		e.PutUvarint(uint64(ev.Offset))
		putExit(&e, ev.Exit)
		return e.Bytes()
	}
	e.PutUvarint(uint64(ev.Stream))
	e.PutUvarint(uint64(ev.Offset))
	e.PutBytes(ev.Data)
	return e.Bytes()
}

// DecodeEvent decodes one event. Data aliases p.
func DecodeEvent(p []byte) (Event, error) {
	d := newDecoder(p)
	var ev Event
	tag := d.Uvarint()
	ev.Offset = int64(d.Uvarint())
	if ev.Offset < 0 {
		d.Fail("offset %d", ev.Offset)
	}
	switch tag {
	case uint64(Stdout), uint64(Stderr):
		ev.Stream = StreamTag(tag)
		ev.Data = d.Bytes("data", maxEventLen)
	case uint64(exitTag):
		ev.Exit = readExit(&d)
	default:
		d.Fail("tag %d", tag)
	}
	if err := d.Done(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// putExit appends an exit: code, signal, duration, flags, then the head
// with flag exitHead.
func putExit(e *rpc.Encoder, x *Exit) {
	e.PutUvarint(uint64(x.Code) & 0xffffffff)
	e.PutUvarint(uint64(x.Signal))
	e.PutUvarint(uint64(max(x.Duration, 0)))
	var flags uint64
	if x.TimedOut {
		flags |= exitTimedOut
	}
	if x.Killed {
		flags |= exitKilled
	}
	if x.HasHead {
		flags |= exitHead
	}
	e.PutUvarint(flags)
	if x.HasHead {
		e.PutUvarint(uint64(max(x.Head, 0)))
	}
}

// readExit reads what putExit wrote.
func readExit(d *rpc.Decoder) *Exit {
	code := d.Bounded("code", 0xffffffff)
	sig := d.Bounded("signal", 128)
	dur := time.Duration(d.Uvarint())
	if dur < 0 {
		d.Fail("duration %d", dur)
	}
	flags := d.Bounded("flags", exitTimedOut|exitKilled|exitHead)
	x := &Exit{Code: int(int32(uint32(code))), Signal: syscall.Signal(sig), Duration: dur,
		TimedOut: flags&exitTimedOut != 0, Killed: flags&exitKilled != 0, HasHead: flags&exitHead != 0}
	if x.HasHead {
		x.Head = int64(d.Bounded("head", maxHead))
	}
	return x
}

// started is the reply body of Start and Attach.
type started struct {
	ID        string
	RuntimeID string
}

func appendStarted(b []byte, s started) []byte {
	e := rpc.NewEncoder(b)
	e.PutString(s.ID)
	e.PutString(s.RuntimeID)
	return e.Bytes()
}

func decodeStarted(p []byte) (started, error) {
	d := newDecoder(p)
	s := started{ID: d.String("id", MaxStrLen), RuntimeID: d.String("runtime id", MaxStrLen)}
	return s, d.Done()
}

// attachReq resumes an exec's stream from an offset, or from the end of
// its output when From is FromEnd.
type attachReq struct {
	ID   string
	From int64
}

// FromEnd, as Attach's offset, is the end of the exec's output when the
// callee attaches: no replay, the output to come and the exit.
const FromEnd = execrun.FromEnd

// Attach flags, after the offset; absent is none (what a computerd from
// before them reads).
const attachFromEnd = 1

func appendAttach(b []byte, a attachReq) []byte {
	e := rpc.NewEncoder(b)
	e.PutString(a.ID)
	if a.From == FromEnd {
		e.PutUvarint(0)
		e.PutUvarint(attachFromEnd)
		return e.Bytes()
	}
	e.PutUvarint(uint64(max(a.From, 0)))
	return e.Bytes()
}

func decodeAttach(p []byte) (attachReq, error) {
	d := newDecoder(p)
	a := attachReq{ID: d.String("id", MaxStrLen), From: int64(d.Uvarint())}
	if a.From < 0 {
		d.Fail("from %d", a.From)
	}
	if d.Err() == nil && d.Len() > 0 {
		switch flags := d.Uvarint(); {
		case flags != attachFromEnd:
			d.Fail("attach flags %d", flags)
		case a.From != 0:
			d.Fail("from %d with the end flag", a.From)
		default:
			a.From = FromEnd
		}
	}
	if err := d.Done(); err != nil {
		return attachReq{}, err
	}
	return a, nil
}

type killReq struct {
	ID     string
	Signal syscall.Signal
}

func appendKill(b []byte, k killReq) []byte {
	e := rpc.NewEncoder(b)
	e.PutString(k.ID)
	e.PutUvarint(uint64(k.Signal))
	return e.Bytes()
}

func decodeKill(p []byte) (killReq, error) {
	d := newDecoder(p)
	k := killReq{ID: d.String("id", MaxStrLen)}
	sig := d.Uvarint()
	if sig == 0 || sig > 64 {
		d.Fail("signal %d", sig)
	}
	k.Signal = syscall.Signal(sig)
	return k, d.Done()
}
