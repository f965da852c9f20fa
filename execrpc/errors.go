package execrpc

import (
	"errors"

	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/syncwire/rpc"
)

// ErrBadMessage reports an exec message that does not decode. It travels
// as vfs.ErrInvalid's code (server.go's wireErr).
var ErrBadMessage = errors.New("malformed exec message")

// The wire codes of the exec sentinels (docs/PROTOCOL.md).
const (
	CodeExecBusy     rpc.Code = 40
	CodeExecLost     rpc.Code = 41
	CodeLogTruncated rpc.Code = 42
)

// init registers execrun's sentinels as wire codes, so errors.Is(err,
// execrun.ErrBusy) holds on the caller's side of a refused exec. The other
// exec errors travel under vfs's codes (wireErr), which syncwire registers:
// both ends link it (computerd serves exec beside sync).
func init() {
	rpc.RegisterCode(CodeExecBusy, "EEXEC_BUSY", execrun.ErrBusy)
	rpc.RegisterCode(CodeExecLost, "EEXEC_LOST", execrun.ErrExecLost)
	rpc.RegisterCode(CodeLogTruncated, "ELOG_TRUNCATED", execrun.ErrLogTruncated)
}
