package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Sentinel errors of the wire. Errors from the peer arrive as *RemoteError,
// which unwraps to the sentinel registered for its code, so errors.Is works
// across the wire for these and for every sentinel another package
// registers (RegisterCode).
var (
	// ErrShutdown: the session ended (peer gone, watchdog fired, closed)
	// while the call was in flight.
	ErrShutdown = errors.New("session shut down")
	// ErrProtocol: a malformed, oversized or out-of-order frame or message.
	ErrProtocol = errors.New("protocol error")
	// ErrAuth: the peer refused our credentials.
	ErrAuth = errors.New("authentication failed")
	// ErrVersion: the two sides share no protocol version.
	ErrVersion = errors.New("no common protocol version")
	// ErrUnknownMethod: the peer serves no such method.
	ErrUnknownMethod = errors.New("unknown method")
	// ErrBusy: the peer already serves as many of our calls as it allows
	// (its MaxCalls), or as many handlers as it will run; the call was not
	// started and may be retried. The session stays up.
	ErrBusy = errors.New("peer busy")
	// ErrUnknown: the peer failed with an error that has no code.
	ErrUnknown = errors.New("remote error")
)

// Code is an error code on the wire.
type Code uint16

// The codes of this package. The numbers are part of the protocol
// (docs/PROTOCOL.md); the packages that own other sentinels register
// theirs (syncwire 1..22, execrpc 40..42).
const (
	CodeUnknown       Code = 0
	CodeAuth          Code = 30
	CodeProtocol      Code = 31
	CodeVersion       Code = 32
	CodeShutdown      Code = 33
	CodeUnknownMethod Code = 34
	CodeCanceled      Code = 35
	CodeTimeout       Code = 36
	CodeBusy          Code = 37
)

// codeRow maps one wire code to its sentinel, both ways: encoding picks the
// first row whose sentinel or one of its aliases matches with errors.Is;
// decoding unwraps to the row's sentinel.
type codeRow struct {
	code     Code
	name     string
	sentinel error
	aliases  []error // encode-only: also sent under this code
}

// The registry. Encoding checks, in this order: the wire-level rows (a
// protocol error that wraps a vfs sentinel, a bad path in a frame, is
// still EPROTOCOL), the registered rows in registration order, the
// context rows, then the registered matchers. Registration happens in
// package init; the lock only keeps a late registration (a test) safe.
var (
	regMu sync.RWMutex
	first = []codeRow{
		{CodeAuth, "EAUTH", ErrAuth, nil},
		{CodeProtocol, "EPROTOCOL", ErrProtocol, nil},
		{CodeVersion, "EVERSION", ErrVersion, nil},
		{CodeShutdown, "ESHUTDOWN", ErrShutdown, nil},
		{CodeUnknownMethod, "EUNKNOWN_METHOD", ErrUnknownMethod, nil},
		{CodeBusy, "EBUSY", ErrBusy, nil},
	}
	registered []codeRow
	last       = []codeRow{
		{CodeCanceled, "ECANCELED", context.Canceled, nil},
		{CodeTimeout, "ETIMEDOUT", context.DeadlineExceeded, nil},
		{CodeUnknown, "EUNKNOWN", ErrUnknown, nil},
	}
	matchers []codeMatch
)

type codeMatch struct {
	code  Code
	match func(error) bool
}

// eachRow calls fn on every row in encoding order until it returns true.
// The caller holds regMu.
func eachRow(fn func(*codeRow) bool) {
	for _, rows := range [][]codeRow{first, registered, last} {
		for i := range rows {
			if fn(&rows[i]) {
				return
			}
		}
	}
}

func findRow(code Code) *codeRow {
	var found *codeRow
	eachRow(func(r *codeRow) bool {
		if r.code == code {
			found = r
		}
		return found != nil
	})
	return found
}

// RegisterCode makes sentinel travel as code under name: errors.Is(err,
// sentinel) on the callee's side sends code, and the caller's RemoteError
// unwraps to sentinel. Errors matching one of aliases are also sent as
// code. The package that owns the sentinel calls it from its init; a code
// or name already registered panics.
func RegisterCode(code Code, name string, sentinel error, aliases ...error) {
	regMu.Lock()
	defer regMu.Unlock()
	eachRow(func(r *codeRow) bool {
		if r.code == code || r.name == name {
			panic(fmt.Sprintf("rpc: code %d %s registered twice (have %d %s)", code, name, r.code, r.name))
		}
		return false
	})
	registered = append(registered, codeRow{code: code, name: name, sentinel: sentinel, aliases: aliases})
}

// RegisterAlias also sends errors matching aliases under the registered
// code, at the code's place in the encoding order (vfs.ErrClosed as
// ESHUTDOWN, ahead of every domain code). An unknown code panics.
func RegisterAlias(code Code, aliases ...error) {
	regMu.Lock()
	defer regMu.Unlock()
	r := findRow(code)
	if r == nil {
		panic(fmt.Sprintf("rpc: alias for unregistered code %d", code))
	}
	r.aliases = append(r.aliases[:len(r.aliases):len(r.aliases)], aliases...)
}

// RegisterMatch sends errors for which match holds as code, when no
// sentinel or alias matched: for errors that carry their kind only in a
// message (SQLite's "database or disk is full"). An unknown code panics.
func RegisterMatch(code Code, match func(error) bool) {
	regMu.Lock()
	defer regMu.Unlock()
	if findRow(code) == nil {
		panic(fmt.Sprintf("rpc: matcher for unregistered code %d", code))
	}
	matchers = append(matchers, codeMatch{code: code, match: match})
}

// CodeOf returns the wire code for err (CodeUnknown when none matches).
func CodeOf(err error) Code {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	regMu.RLock()
	defer regMu.RUnlock()
	code, found := CodeUnknown, false
	eachRow(func(r *codeRow) bool {
		if errors.Is(err, r.sentinel) {
			code, found = r.code, true
			return true
		}
		for _, a := range r.aliases {
			if errors.Is(err, a) {
				code, found = r.code, true
				return true
			}
		}
		return false
	})
	if found {
		return code
	}
	for _, m := range matchers {
		if m.match(err) {
			return m.code
		}
	}
	return CodeUnknown
}

// String is the code's symbolic name ("ENOENT").
func (c Code) String() string {
	regMu.RLock()
	defer regMu.RUnlock()
	if r := findRow(c); r != nil {
		return r.name
	}
	return fmt.Sprintf("E%d", uint16(c))
}

func (c Code) sentinel() error {
	regMu.RLock()
	defer regMu.RUnlock()
	if r := findRow(c); r != nil {
		return r.sentinel
	}
	return ErrUnknown
}

// RemoteError is an error the peer reported. It unwraps to the sentinel
// registered for its code, so errors.Is(err, vfs.ErrNotExist) holds for a
// remote ENOENT.
type RemoteError struct {
	Code Code
	Msg  string
}

func (e *RemoteError) Error() string { return "peer: " + e.Code.String() + ": " + e.Msg }
func (e *RemoteError) Unwrap() error { return e.Code.sentinel() }

// maxErrMsg bounds an error message on the wire.
const maxErrMsg = 1024

func errMessage(err error) string {
	msg := err.Error()
	if len(msg) > maxErrMsg {
		msg = msg[:maxErrMsg]
	}
	return msg
}

// protoErr builds an ErrProtocol with context.
func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// ProtocolError builds an ErrProtocol with context ("protocol error: push:
// more than 16384 entries"): for the checks a protocol above this one
// makes on its messages.
func ProtocolError(format string, args ...any) error { return protoErr(format, args...) }
