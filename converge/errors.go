package converge

import (
	"fmt"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// Sentinel errors. Each wraps a sentinel the wire has a code for, so
// errors.Is holds on the other side of a session too (there the error is a
// *rpc.RemoteError that unwraps to the wrapped sentinel).
var (
	// ErrMalformed: a message, page or record that does not decode, or a
	// peer's answer that breaks a bound (too many children, names out of
	// order, a walk deeper than MaxWalkDepth). It is rpc.ErrProtocol.
	ErrMalformed = fmt.Errorf("convergence: %w", rpc.ErrProtocol)
	// ErrRootMismatch: a snapshot whose staged records do not hash to the
	// root the sender declared. It is chunkstore.ErrHashMismatch.
	ErrRootMismatch = fmt.Errorf("snapshot root: %w", chunkstore.ErrHashMismatch)
	// ErrNotEmpty: a snapshot offered to a store that already holds a tree.
	// It is vfs.ErrNotEmpty.
	ErrNotEmpty = fmt.Errorf("snapshot target: %w", vfs.ErrNotEmpty)
	// ErrBadRequest: a request outside the responder's bounds (a bad path,
	// a page limit over MaxChildren). It is vfs.ErrInvalid.
	ErrBadRequest = fmt.Errorf("convergence request: %w", vfs.ErrInvalid)
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}
