// Package watermark holds the sync positions both sides of a wsync pair keep.
//
// # Cursors
//
// A Cursor is a resume point in a store's change feed: (Rev, Path). The feed is
// ordered by rev, then by path, so a cursor can stop in the middle of one rev
// (a directory rename stamps its whole subtree with a single rev, and a crash
// must be able to resume inside it). A cursor with no path (Full) means every
// change committed at or before Rev has been offered: it sorts after every
// partial cursor of the same rev. A cursor is not a snapshot handle: the feed
// materialises each path's current state when it streams.
//
// # Watermarks
//
// Each store keeps one Set of watermarks per peer, written in the same
// transaction as the apply they describe:
//
//   - Push: the last own-side cursor the peer has applied (the seed's pushRev).
//   - Fetch: the last peer-side cursor this side has fetched and applied.
//   - AppliedPush: on the receiving side of pushes, the sender's cursor this
//     side has applied; echoed on every push and fetch response.
//
// # The cross-side invariant
//
// After every push and every fetch, the receiver echoes its AppliedPush cursor
// and the driver checks that it covers the driver's own Push cursor
// (CheckInvariant). A violation means the receiver lost state (typically a
// container restarted with an ephemeral store); the driver resets and retries
// once instead of silently carrying on.
package watermark
