// Package syncwire is the wire between the two stores of a wsync pair: the
// framing over one WebSocket, the handshake, authentication, multiplexed
// calls with flow-controlled streams, typed errors, the sync RPCs, and the
// push and pull drivers that use them. docs/PROTOCOL.md specifies the bytes
// for anyone writing a compatible peer.
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
// features, the process's RuntimeID, the store id, window and call limit.
// This build speaks version 2 only (hole refs, entry parts, announced
// PushObjects, EBUSY).
// Without a common version both sides fail with ErrVersion naming both
// ranges. Every call has a deadline (the caller's, or Config.CallTimeout)
// that travels to the callee. Pings on an interval detect a silent peer: past
// the grace window the session fails and in-flight calls return
// ErrShutdown. A Client redials on the next call after its session died.
//
// # Errors
//
// Errors cross the wire as a code and a message. The one table in errors.go
// maps codes to sentinels both ways, so errors.Is(err, vfs.ErrNotExist),
// chunkstore.ErrUnknownHash, watermark.ErrInvariant, ErrExecBusy and the rest
// hold on the caller's side exactly as on the callee's.
//
// # Bounds against a hostile peer
//
// Every decoder checks counts against the bytes left before allocating.
// Object streams are checked against what was asked (the FetchObjects
// request, the hashes a PushObjects announces) object by object, before
// decompression, and decoded one object at a time into a buffer of the
// object's declared size (DecodeObjectsFunc): the memory a message costs is
// one chunk, whatever its compression ratio, and a call decodes at most a
// chunk per hash asked. A file entry too long for a frame travels as entry
// parts (EntryDecoder assembles at most one, growing only with what
// arrived, up to chunkstore.MaxManifestChunks). Hole refs
// (chunkstore.HoleHash) are never probed, fetched or pushed; naming one as
// an object is EPROTOCOL.
//
// # Serving and extending
//
// Server serves a Backend (a *vfs.Store) on GET /sync after checking the
// bearer token in constant time: Watermarks, Push, FetchChanges, HasObjects,
// FetchObjects and PushObjects. Other packages add methods (exec with its
// output stream, convergence) with Server.Handle and call them with
// Session.Open; the framing does not change.
//
// # Drivers
//
// Driver implements the sync rules of SPEC section 4 for one local store and
// one peer: PushOnce, PullOnce and Tick (pull, then push) through a FIFO.
// Batches are bounded (BatchEntries entries, BatchMissingBytes of missing
// chunk bytes); chunk hashes are probed first and only the missing bytes
// move, zstd-compressed when that shrinks them; every received chunk is
// hashed before it is staged; a pushed batch applies atomically on the
// receiver with its watermarks; the pull checkpoints its fetch cursor in the
// transaction of each batch, so a cut connection costs at most one batch.
// The receiver's echoed applied-push cursor is checked on every push and
// fetch (watermark.CheckInvariant): a violation resets the affected watermark
// and retries once. On every new session the driver reconciles against the
// peer's watermarks, re-baselining a peer that lost state. Bounce suppression
// keeps entries applied from the peer from travelling back to it: every
// apply of a peer's batch (a pulled batch here, a pushed batch on the
// server) extends the peer's vfs.BounceRun in its own transaction, and the
// feed sent to that peer starts past the run when the peer's cursor covers
// its start (the server's FetchChanges; the driver's push, and its push
// cursor at the end of a pull). A crash between an apply and the next
// watermark write, or a lost Push reply, therefore costs at most the batch
// in flight.
package syncwire
