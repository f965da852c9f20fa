package watermark

// Set is the watermarks one store keeps for one peer.
type Set struct {
	// Push is the last own-side cursor the peer has applied (the seed's
	// pushRev, as a cursor so a push can resume inside a rev).
	Push Cursor
	// Fetch is the last peer-side cursor fetched and applied here.
	Fetch Cursor
	// AppliedPush is, on a receiver of pushes, the sender-side cursor applied
	// here. It is echoed on every push and fetch response.
	AppliedPush Cursor
}

// CheckInvariant checks that the peer's echoed applied-push cursor covers our
// push cursor. It returns an *InvariantError wrapping ErrInvariant otherwise.
func CheckInvariant(peer string, ours Set, peerApplied Cursor) error {
	want := At(ours.Push.Rev)
	if ours.Push.Partial {
		want = ours.Push
	}
	if peerApplied.Covers(want) {
		return nil
	}
	return &InvariantError{Peer: peer, Pushed: ours.Push, PeerApplied: peerApplied}
}
