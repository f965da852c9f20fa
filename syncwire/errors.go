package syncwire

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Sentinel errors of the wire. Errors from the peer arrive as *RemoteError,
// which unwraps to the sentinel of its code, so errors.Is works across the
// wire for these and for the vfs, chunkstore and watermark sentinels listed
// in the code table.
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
	// ErrExecBusy: the exec slot is taken.
	ErrExecBusy = errors.New("exec busy")
	// ErrExecLost: the exec's process state was lost.
	ErrExecLost = errors.New("exec lost")
	// ErrLogTruncated: the requested output offset is no longer retained.
	ErrLogTruncated = errors.New("log truncated")
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

// The wire codes. The numbers are part of the protocol (docs/PROTOCOL.md).
const (
	CodeUnknown       Code = 0
	CodeNotExist      Code = 1
	CodeExist         Code = 2
	CodeNotDir        Code = 3
	CodeIsDir         Code = 4
	CodeNotEmpty      Code = 5
	CodeInvalid       Code = 6
	CodePerm          Code = 7
	CodeNameTooLong   Code = 8
	CodeNoSpace       Code = 9
	CodeFileTooBig    Code = 10
	CodeUnknownHash   Code = 20
	CodeHashMismatch  Code = 21
	CodeInvariant     Code = 22
	CodeAuth          Code = 30
	CodeProtocol      Code = 31
	CodeVersion       Code = 32
	CodeShutdown      Code = 33
	CodeUnknownMethod Code = 34
	CodeCanceled      Code = 35
	CodeTimeout       Code = 36
	CodeBusy          Code = 37
	CodeExecBusy      Code = 40
	CodeExecLost      Code = 41
	CodeLogTruncated  Code = 42
)

// codes is the one mapping table between wire codes and Go errors, used in
// both directions. Encoding picks the first row whose sentinel (or one of its
// aliases) matches with errors.Is; decoding unwraps to the row's sentinel.
var codes = []struct {
	code     Code
	name     string
	sentinel error
	aliases  []error // encode-only: also sent under this code
}{
	// Wire-level sentinels come first: a protocol error that wraps a vfs
	// sentinel (a bad path in a frame) is still a protocol error.
	{CodeAuth, "EAUTH", ErrAuth, nil},
	{CodeProtocol, "EPROTOCOL", ErrProtocol, nil},
	{CodeVersion, "EVERSION", ErrVersion, nil},
	{CodeShutdown, "ESHUTDOWN", ErrShutdown, []error{vfs.ErrClosed}},
	{CodeUnknownMethod, "EUNKNOWN_METHOD", ErrUnknownMethod, nil},
	{CodeBusy, "EBUSY", ErrBusy, nil},
	{CodeUnknownHash, "EUNKNOWN_HASH", chunkstore.ErrUnknownHash, nil},
	{CodeHashMismatch, "EHASH_MISMATCH", chunkstore.ErrHashMismatch, nil},
	{CodeInvariant, "EINVARIANT", watermark.ErrInvariant, nil},
	{CodeExecBusy, "EEXEC_BUSY", ErrExecBusy, nil},
	{CodeExecLost, "EEXEC_LOST", ErrExecLost, nil},
	{CodeLogTruncated, "ELOG_TRUNCATED", ErrLogTruncated, nil},
	{CodeNotExist, "ENOENT", vfs.ErrNotExist, nil},
	{CodeExist, "EEXIST", vfs.ErrExist, nil},
	{CodeNotDir, "ENOTDIR", vfs.ErrNotDir, nil},
	{CodeIsDir, "EISDIR", vfs.ErrIsDir, nil},
	{CodeNotEmpty, "ENOTEMPTY", vfs.ErrNotEmpty, nil},
	{CodeNameTooLong, "ENAMETOOLONG", vfs.ErrNameTooLong, nil},
	{CodeInvalid, "EINVAL", vfs.ErrInvalid, []error{chunkstore.ErrBadManifest, chunkstore.ErrBadHash, chunkstore.ErrChunkTooLarge, watermark.ErrBadCursor}},
	{CodePerm, "EPERM", vfs.ErrPerm, nil},
	{CodeNoSpace, "ENOSPC", vfs.ErrNoSpace, []error{syscall.ENOSPC, syscall.EDQUOT}},
	{CodeFileTooBig, "EFBIG", vfs.ErrFileTooBig, nil},
	{CodeCanceled, "ECANCELED", context.Canceled, nil},
	{CodeTimeout, "ETIMEDOUT", context.DeadlineExceeded, nil},
	{CodeUnknown, "EUNKNOWN", ErrUnknown, nil},
}

// CodeOf returns the wire code for err (CodeUnknown when none matches).
func CodeOf(err error) Code {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	for _, row := range codes {
		if errors.Is(err, row.sentinel) {
			return row.code
		}
		for _, a := range row.aliases {
			if errors.Is(err, a) {
				return row.code
			}
		}
	}
	if vfs.Errno(err) == syscall.ENOSPC {
		// SQLite's "database or disk is full", which carries no errno.
		return CodeNoSpace
	}
	return CodeUnknown
}

// String is the code's symbolic name ("ENOENT").
func (c Code) String() string {
	for _, row := range codes {
		if row.code == c {
			return row.name
		}
	}
	return fmt.Sprintf("E%d", uint16(c))
}

func (c Code) sentinel() error {
	for _, row := range codes {
		if row.code == c {
			return row.sentinel
		}
	}
	return ErrUnknown
}

// RemoteError is an error the peer reported. It unwraps to the sentinel of
// its code, so errors.Is(err, vfs.ErrNotExist) holds for a remote ENOENT.
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
