package watermark

import (
	"errors"
	"fmt"
)

// ErrBadCursor reports a cursor that cannot be encoded or decoded.
var ErrBadCursor = errors.New("bad cursor")

// ErrInvariant reports that a receiver's applied-push cursor does not cover
// the sender's push cursor: the receiver lost state the sender believes it has.
var ErrInvariant = errors.New("cross-side invariant violated")

// InvariantError carries the two cursors of a violated invariant.
type InvariantError struct {
	Peer        string
	Pushed      Cursor // what the sender believes the peer has applied
	PeerApplied Cursor // what the peer says it has applied
}

func (e *InvariantError) Error() string {
	return fmt.Sprintf("peer %q applied push cursor %s does not cover our push cursor %s: %v",
		e.Peer, e.PeerApplied, e.Pushed, ErrInvariant)
}

func (e *InvariantError) Unwrap() error { return ErrInvariant }
