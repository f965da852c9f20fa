// Package rpc is the wire under every wsync protocol: framing over one
// WebSocket, the handshake, bearer authentication, multiplexed calls with
// flow-controlled streams, and typed errors. It knows no store, file or
// command: syncwire carries the sync protocol on it, execrpc commands and
// converge the Merkle walk and snapshots, each in its own method range.
// docs/PROTOCOL.md specifies the bytes for anyone writing a compatible peer.
//
// # Sessions
//
// A Session is one connection. Each WebSocket binary message is one frame
// (type, flags, call id, payload; at most MaxFrameSize). Either side may open
// calls; the dialing side uses odd ids, the accepting side even ones. A call
// carries a request body and optionally a request stream, and is answered by
// a reply body and optionally a response stream, or by a typed error. Streams
// run under credit-based flow control: each receiver starts every stream
// with Window bytes of credit and grants more as its consumer reads, so a
// slow consumer bounds its producer's memory to one window and never stalls
// the session's other calls (an exec's output cannot block a fetch).
//
// Both sides count call slots the same way: the caller holds one from its
// CALL until it reads the final frame or writes its CANCEL, the callee from
// the CALL until just before it writes its final frame or reads the CANCEL.
// A call beyond the callee's MaxCalls (or while 2*MaxCalls cancelled calls
// still have handlers stopping) is answered ErrBusy (EBUSY), and the
// session stays up.
//
// The first frame each way is a HELLO: protocol name, version range,
// features, the process's RuntimeID, the side's id (opaque here: syncwire
// sends the store id), window and call limit. This build speaks version 2
// only (hole refs, entry parts, announced PushObjects, EBUSY). Without a
// common version both sides fail with ErrVersion naming both ranges. Every
// call has a deadline (the caller's, or Config.CallTimeout) that travels to
// the callee. Pings on an interval detect a silent peer: past the grace
// window the session fails and in-flight calls return ErrShutdown. A Client
// redials on the next call after its session died.
//
// # Serving
//
// Server accepts sessions on HTTP upgrades, after checking the bearer token
// in constant time (a refusal is an opaque 401), or on any Conn. Protocols
// register their methods with Server.Handle; a method's number names it on
// the wire, and the ranges are fixed: sync below 256, exec 256..511,
// convergence 512..767. A protocol that keeps state per session releases it
// in Server.OnSessionEnd, which runs once every handler of the session has
// returned.
//
// # Errors
//
// Errors cross the wire as a code and a message. The package that owns a
// sentinel registers its code once, from its init (RegisterCode: vfs's,
// chunkstore's and watermark's in syncwire, execrun's in execrpc), and the
// one registry maps codes to sentinels both ways: the caller's RemoteError
// unwraps to the registered sentinel, so errors.Is(err, vfs.ErrNotExist)
// holds on the caller's side exactly as on the callee's. Encoding picks the
// first match in a fixed order: this package's wire-level codes (a protocol
// error that wraps an invalid-path sentinel is still EPROTOCOL), then the
// registered codes in registration order, then ECANCELED and ETIMEDOUT,
// then the matchers (RegisterMatch) for errors that carry their kind only
// in a message. A code or name registered twice panics.
//
// # Codec toolkit
//
// Encoder and Decoder are the primitives of docs/PROTOCOL.md (uvarints,
// zigzag varints, bytes, length-prefixed strings and byte strings, fixed
// fields) for every protocol's messages. The Decoder's first failure sticks
// (later reads return zero values) and is checked once at the end with
// Done, which also refuses trailing bytes; counts are bounded by a limit and
// by the bytes left (Count), so no message can make a decoder allocate more
// than it could hold. Failures wrap ErrProtocol, or the error a protocol's
// own constructor builds (NewDecoderFunc).
package rpc
