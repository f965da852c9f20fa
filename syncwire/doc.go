// Package syncwire is the sync protocol between the two stores of a wsync
// pair, carried on an rpc session (syncwire/rpc): the sync messages and
// their codecs, the server side over a Backend, the client side (Peer), and
// the push and pull drivers that use them. docs/PROTOCOL.md specifies the
// bytes for anyone writing a compatible peer.
//
// # Methods
//
// The sync methods take the numbers below 256 (FirstExtensionMethod):
// Watermarks, Push, FetchChanges, HasObjects, FetchObjects and PushObjects.
// The handshake's id is the store id: the server keys the watermarks it
// keeps for a caller by it, so a client must announce its store's id
// (rpc.Config.ID; the Driver checks it).
//
// # Errors
//
// The store sentinels cross the wire under the codes this package
// registers with rpc (errors.go): vfs's (ENOENT, EEXIST, ..., EFBIG),
// chunkstore's (EUNKNOWN_HASH, EHASH_MISMATCH, and the malformed-input
// ones as EINVAL) and watermark's (EINVARIANT, a bad cursor as EINVAL), so
// errors.Is(err, vfs.ErrNotExist) holds on the caller's side. A SQLite
// "disk full" without an errno travels as ENOSPC, vfs.ErrClosed as
// ESHUTDOWN.
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
// # Serving and calling
//
// Server serves a Backend (a *vfs.Store) on an rpc.Server, at GET /sync:
// the six sync methods, with the stages PushObjects fills kept per session
// for the Push that follows and released when the session ends. Other
// packages add their methods (exec with its output stream, convergence)
// with Server.Handle and call them with rpc.Session.Open. Peer makes the
// sync calls on a session, splitting long hash lists into requests of
// MaxHashes and checking every object stream against what was asked.
//
// # Drivers and the two shipping paths
//
// Driver implements the sync rules for one local store and one peer. Every
// transfer between the two stores runs in one FIFO (internal/fifo) as an
// Exchange: a turn on a live session, whose first transfer on a new session
// reconciles the watermarks with the peer's (re-baselining a peer that lost
// state, that is another store than the one they were kept for, or that
// served less of its feed than our fetch cursor covers (restored from an
// older copy):
// Backend.MeetPeer; a snapshot bootstrap, which sets them itself, comes
// before it).
// PushOnce, PullOnce and Tick (pull, then push) are exchanges;
// Do runs any other one (convergence repair, snapshot bootstrap, verify),
// so nothing overtakes or interleaves with a push or a pull.
//
// An Exchange has two shipping paths, written once. The send path (Push
// over the local feed, Send over entries a repair chose) cuts batches of at
// most BatchEntries entries and BatchMissingBytes of missing chunk bytes,
// probes the peer for their chunks (Missing: the have/missing rule), sends
// only the missing ones, zstd-compressed when that shrinks them, then the
// entries, which the peer applies atomically with its watermarks. The
// receive path (Pull over the peer's feed, Receive over entries a repair
// fetched) probes the local store, fetches the missing chunks (the next
// batch's fetch overlapping this one's apply), hashes every chunk before
// it is staged, and applies each batch atomically; the pull checkpoints its
// fetch cursor in each batch's transaction, so a cut connection costs at
// most one batch. The peer's echoed applied-push cursor is checked on every
// push and fetch (watermark.CheckInvariant): a violation resets the
// affected watermark and retries once.
//
// The driver hands the local store's quota to the peer (SetQuota, on
// every session and after a change) and holds it on the receive path: a
// batch the quota has no room for stops the receive before it is fetched
// (quota.go).
//
// A pull may take a Budget (PullOptions): it stops after the first batch
// that reaches a bound, without the clean drain's cursor, and reports
// Result.More; the fetch cursor the batches left resumes the next pull
// exactly. Exchange.OnProgress hears every batch either path commits,
// with the transfer's totals so far. A pull may also take a DeleteGuard
// (guard.go): before the first batch that deletes a live local path is
// fetched, the rest of the feed is read and its live deletes counted, and
// a pull the guard refuses ends there with nothing of its deletions
// applied.
//
// Bounce suppression keeps entries applied from the peer from travelling
// back to it: every apply of a peer's batch (a received batch here, a
// pushed batch on the server) extends the peer's vfs.BounceRun in its own
// transaction, and the feed sent to that peer starts past the run when the
// peer's cursor covers its start (vfs.BounceRun.Skip, the one place the rule
// is written: the server's FetchChanges, the send path's push cursor and
// fetch cursor, and the receive path's push cursor when it ends). A crash
// between an apply and the next watermark write, or a lost Push reply,
// therefore costs at most the batch in flight.
//
// Conflicts (protocol 3). Every push batch carries the sender's fetch
// cursor as a fence: the receiving store does not apply an entry over a
// change of its own the sender has not fetched, and answers it as deferred
// (vfs.ApplyOptions.Fence); the send path re-stamps the deferred paths in
// the transaction that records the batch (Backend.Delivered), so they go
// again after the next pull. A driver with DriverOptions.Conflicts (the
// server's) detects conflicts in the receive path's applies against the
// merge bases it keeps per path, written by the same two transactions
// (vfs.ApplyOptions.Conflicts); Result.Conflicts lists what it recorded.
package syncwire
