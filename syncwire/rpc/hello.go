package rpc

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
)

// ProtocolName opens every HELLO.
const ProtocolName = "wsync"

// The protocol versions this build speaks. Version 2 (issue 9): hole refs
// in manifests, long file entries split into entry parts, PushObjects
// announcing its hashes, and the EBUSY answer to a call over the limit.
// Version 3 (issue 11): a push carries the sender's fetch cursor as a
// fence and its answer the entries the fence held back; a version 2
// receiver would overwrite changes the server has not pulled. Version 4
// (issue 12): an exec's exit event may carry the container's feed head, so
// the caller skips the pull after a command that changed nothing; a
// version 3 caller would refuse that event, and one version spoken keeps
// the event's encoding free of a version switch, so 4 was the only one
// spoken. Version 5 (issue 14): ignore lists are gitignore patterns, in
// order, each up to vfs.MaxIgnorePatternLen bytes; a version 4 peer would
// read "*.log" as a literal name and filter its feed and Merkle tree by
// other rules than ours without saying so, so 5 is the only one spoken.
// Version 6 (issue 12): a snapshot's SnapObjects call carries the object
// messages of FetchObjects (each chunk raw or zstd on its own) instead of
// one zstd frame per message, which cost the sender an encode of every
// incompressible byte and the receiver a decode and a copy; a version 5
// receiver would refuse every such message, so 6 is the only one spoken.
// Version 7: a Watermarks reply carries the highest rev the store handed
// out as a place in its feed, which lets the driver tell a store restored
// behind its fetch cursor from the store it fetched; a version 6 caller
// refuses the reply's trailing bytes, so 7 is the only one spoken.
const (
	ProtocolMinVersion = 7
	ProtocolMaxVersion = 7
)

// RuntimeID identifies this process start in every handshake.
var RuntimeID = uuid.New()

// Hello is one side's handshake: the first frame each way.
type Hello struct {
	Protocol               string
	MinVersion, MaxVersion uint32
	Features               []string
	RuntimeID              uuid.UUID
	// ID is opaque to this package: the layer above names the side with it
	// (syncwire sends the store id, and keys the caller's watermarks by it).
	ID string
	// Window is the stream credit this side grants each stream it receives.
	Window uint32
	// MaxCalls is how many of the other side's calls this side serves at once.
	MaxCalls uint32
	// Version is the negotiated version (set locally after the exchange; not
	// on the wire).
	Version uint32
}

// Has reports whether the hello advertises feature f.
func (h Hello) Has(f string) bool { return slices.Contains(h.Features, f) }

const (
	maxFeatures   = 64
	maxFeatureLen = 64
	maxHelloID    = 256
	maxCallsLimit = 4096
)

// AppendHello appends the HELLO payload.
func AppendHello(b []byte, h Hello) []byte {
	e := NewEncoder(b)
	e.PutString(h.Protocol)
	e.PutUvarint(uint64(h.MinVersion))
	e.PutUvarint(uint64(h.MaxVersion))
	e.PutUvarint(uint64(len(h.Features)))
	for _, f := range h.Features {
		e.PutString(f)
	}
	e.PutFixed(h.RuntimeID[:])
	e.PutString(h.ID)
	e.PutUvarint(uint64(h.Window))
	e.PutUvarint(uint64(h.MaxCalls))
	return e.Bytes()
}

// DecodeHello decodes and checks a HELLO payload. Bytes after the known
// fields are ignored: later versions may append fields.
func DecodeHello(p []byte) (Hello, error) {
	d := NewDecoder(p)
	var h Hello
	h.Protocol = d.String("protocol", 16)
	if d.Err() == nil && h.Protocol != ProtocolName {
		return Hello{}, protoErr("peer speaks %q, not %q", h.Protocol, ProtocolName)
	}
	h.MinVersion = uint32(d.Bounded("min version", 1<<31))
	h.MaxVersion = uint32(d.Bounded("max version", 1<<31))
	n := d.Count("features", maxFeatures, 1)
	for range n {
		h.Features = append(h.Features, d.UTF8("feature", maxFeatureLen))
	}
	copy(h.RuntimeID[:], d.Fixed(16))
	h.ID = d.UTF8("id", maxHelloID)
	h.Window = uint32(d.Bounded("window", maxWindow))
	h.MaxCalls = uint32(d.Bounded("max calls", maxCallsLimit))
	if err := d.Err(); err != nil {
		return Hello{}, err
	}
	switch {
	case h.MinVersion == 0 || h.MinVersion > h.MaxVersion:
		return Hello{}, protoErr("version range %d..%d", h.MinVersion, h.MaxVersion)
	case h.Window < minWindow:
		return Hello{}, protoErr("window %d below one frame (%d)", h.Window, minWindow)
	case h.MaxCalls == 0:
		return Hello{}, protoErr("max calls 0")
	}
	return h, nil
}

// negotiate picks the highest version both ranges hold.
func negotiate(ours, theirs Hello) (uint32, error) {
	lo, hi := max(ours.MinVersion, theirs.MinVersion), min(ours.MaxVersion, theirs.MaxVersion)
	if lo > hi {
		return 0, fmt.Errorf("%w: we speak %d..%d, peer speaks %d..%d",
			ErrVersion, ours.MinVersion, ours.MaxVersion, theirs.MinVersion, theirs.MaxVersion)
	}
	return hi, nil
}

// Handshake exchanges HELLOs: both sides send theirs at once and read the
// peer's, so neither waits on the other. No common version fails both
// sides with ErrVersion naming both ranges, and closes the connection.
func (s *Session) Handshake(ctx context.Context) error {
	s.local = Hello{
		Protocol:   ProtocolName,
		MinVersion: s.cfg.MinVersion,
		MaxVersion: s.cfg.MaxVersion,
		Features:   s.cfg.Features,
		RuntimeID:  RuntimeID,
		ID:         s.cfg.ID,
		Window:     uint32(s.cfg.Window),
		MaxCalls:   uint32(s.cfg.MaxCalls),
	}
	hb, err := AppendFrame(nil, Frame{Type: FrameHello, Payload: AppendHello(nil, s.local)})
	if err != nil {
		return err
	}
	werr := make(chan error, 1)
	go func() { werr <- s.conn.WriteMessage(ctx, hb) }()
	peer, err := s.readHello(ctx)
	if err == nil {
		err = <-werr
	}
	if err == nil {
		s.local.Version, err = negotiate(s.local, peer)
	}
	if err != nil {
		s.fail(err)
		return err
	}
	s.peer = peer
	s.peer.Version = s.local.Version
	s.slots = make(chan struct{}, peer.MaxCalls)
	s.stats.bytesOut.Add(int64(len(hb)))
	return nil
}

func (s *Session) readHello(ctx context.Context) (Hello, error) {
	b, err := s.conn.ReadMessage(ctx)
	if err != nil {
		return Hello{}, fmt.Errorf("handshake: %w", err)
	}
	s.stats.bytesIn.Add(int64(len(b)))
	f, err := DecodeFrame(b)
	if err != nil {
		return Hello{}, fmt.Errorf("handshake: %w", err)
	}
	if f.Type != FrameHello {
		return Hello{}, protoErr("handshake: first frame is %s, not HELLO", f.Type)
	}
	h, err := DecodeHello(f.Payload)
	if err != nil {
		return Hello{}, fmt.Errorf("handshake: %w", err)
	}
	return h, nil
}
