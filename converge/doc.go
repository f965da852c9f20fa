// Package converge proves that the two sides of a wsync pair hold the same
// tree, finds drift that no revision describes (a store restored from an
// old backup, a lost tombstone, a bug, bit rot), repairs it, and bootstraps
// an empty container from a snapshot. It follows seeds 000 and 001: Merkle
// roots compared in one round trip, a top-down hash walk that descends only
// where hashes differ, bounded requests, and staged, verified snapshots.
//
// # Merkle tree
//
// A directory's hash folds its children sorted by name: for each, the
// name, the kind, mode & 07777, and a content hash (sha256 of the file's
// encoded manifest, sha256 of a symlink's target, or the child directory's
// own hash). Mtimes, owners and inode numbers are not part of it: they are
// not synced. Ignored names (vfs.Ignore, gitignore patterns, asked top
// down with each name's path and kind) are left out at every level with
// their subtrees, by the same list on both sides: the initiator sends its
// list with Root and Node. The
// root's hash is the tree's root. Special files (FIFOs, sockets, device
// nodes: vfs.Kind.Special) are local to the store that holds them:
// vfs.Store.ScanTree leaves them out, so they are in no root, never a
// difference, and never in a snapshot (an install leaves them in place).
// A file's content hash covers its manifest encoding with its hole refs,
// as the store writes them (canonical: zero chunks become holes, adjacent
// holes merge).
//
// Trees are computed, not kept: BuildTree reads the store in one SQL pass
// over dirents joined with nodes (vfs.Store.ScanTree, one read
// transaction, so the tree is the store as of one rev) and hashes bottom-up
// in memory. 100,000 files take about 0.2 s; keeping hashes current on
// every write would cost several times a write itself
// (docs/PERFORMANCE.md). The responder caches its tree per ignore list
// until the store's rev moves, so a walk's Node requests are answered from
// the tree its Root came from.
//
// # Verify
//
// Verify asks the peer for its root (MethodRoot). Equal roots: converged,
// one round trip. Otherwise it walks from the root: for a directory whose
// hashes differ it asks for the peer's children (MethodNode, at most
// MaxChildren per page, paged by name), merges them with its own, and
// descends only into directories present on both sides with different
// hashes. Everything else that differs is a Difference. The walk goes level
// by level, the differing directories of a level compared at once (a
// bounded number of Node calls in flight), so its latency is the depth in
// round trips. The cost is the differing directories times their pages,
// not the tree.
//
// Bounds hold on both ends. The responder validates every request (path
// through vfs.ValidatePath, depth at most MaxWalkDepth, page limit
// 1..MaxChildren, ignore list, a byte budget per page); the initiator
// refuses any answer that breaks them (more children than asked, names out
// of order or invalid, unknown kinds, endless pages, more than
// MaxDirChildren for a directory, a walk deeper than MaxWalkDepth) with
// ErrMalformed, which is rpc.ErrProtocol on both sides of the wire.
// The walk descends only where the local tree has a directory too, so a
// hostile peer cannot make it deeper than our own tree.
//
// What a walk keeps is charged before it is kept: each difference costs
// diffOverhead (256) bytes plus its path and names, against a budget of
// the report's limit (MaxDifferences for Verify, RepairOptions.MaxPaths
// for Repair) and MaxDiffBytes, shared by the directories of a level
// compared at once. A directory that finds the budget spent stops paging;
// the walk ends at it (dropping what later directories found, and
// comparing it again if they had taken budget it needed), so the report is
// the first differences in walk order and Truncated. Memory is then
// bounded by the limits, and by a small multiple of the bytes the peer
// sent: before, a peer could make the walk keep about 4x what it sent for
// a whole level before the limit applied.
//
// # Repair
//
// Repair walks as Verify does, without the report bound, then re-sends the
// winning side's entries for each differing path under the usual apply
// rules. The local side (the server, which is authoritative) wins, unless
// the peer changed the path after our fetch cursor (a change not pulled
// yet) and we did not change it after our push cursor (a change not pushed
// yet). "Changed" is the path's row in the changes table, so a delete wins
// like a write. Local wins are pushed as a sync peer's batch (missing
// chunks probed and sent first, the batch applied atomically, our push
// cursor echoed unchanged so the cross-side invariant holds); peer wins
// are fetched (MethodRevs, MethodEntries, FetchObjects) and applied
// locally as upstream. Bounce suppression moves the cursors over the revs
// the repair itself stamped, as the sync driver does. A directory won by a
// side whose peer lacks it travels with its whole subtree; the peer's
// subtree paths come from Node pages, each refused past vfs.MaxPathLen and
// charged against MaxPaths and MaxDiffBytes before it is kept (a larger
// subtree is cut there, parents first, and converges on the next Repair).
// Hole refs (chunkstore.Ref.IsHole) are never probed, fetched or pushed.
// Repair then verifies again.
//
// # Snapshot
//
// Bootstrap sends the whole tree to an empty container as pages of
// length-framed records (one entry each; a file of more than maxPartRefs
// (8192) refs as a head record and continuation records, so no record
// exceeds about 350 KiB however large the file), zstd-compressed, each
// page's missing data chunks sent before it (MethodSnapHave, then
// MethodSnapObjects carrying syncwire's object messages: each chunk raw or
// zstd on its own, protocol version 6; holes are never sent). The
// receiver stages pages in a SQLite database of its own beside the store,
// one transaction per page, so an interrupted snapshot resumes from the
// staged count (MethodSnapBegin answers it). Chunk bytes go straight into
// the store's chunks, hashed and written once, and are held there
// (vfs.Store.HoldChunks: each held chunk counts one reference, so no
// collection takes it, across a restart too) before the objects call
// answers; MethodSnapHave and a page's check of its chunks answer from
// the holds (from the set of holds the receiver took, when it began the
// staging itself and it is at most maxKeptHolds chunks: no query; a
// staging a restarted process resumed asks the store). On
// MethodSnapCommit the receiver rebuilds the Merkle root from the staged
// records (a split file's parts must run in order, head first, to its
// declared count, each ref valid where it stands; its content hash is
// computed as they stream by) and compares it with the root the sender
// declared at begin. The root is folded from each page's records as the
// page stages (rootBuilder), so the commit only finishes the fold; a
// commit whose pages were not all staged by this process (a restart
// resumed the staging) reads the staged records back for it. A
// mismatch discards the staging and leaves the live store untouched. Then
// it installs: the records apply in batches as upstream (the next batch
// read back and decoded while one applies), and then the
// watermarks are set (the snapshot's rev as applied push and fetch
// cursors). Apply is idempotent, so an install cut short runs again on the
// next commit. The store was empty at the begin, but a process in the
// container may write in the mount meanwhile, and such a change is never
// overwritten or deleted: each batch applies behind a fence at the begin's
// rev (vfs.ApplyOptions.Fence, as a push does) and no live path is
// deleted. An install that meets a change of the container's own (an
// entry the fence held back, a rev stamped between the begin and the
// first batch or between two batches) installs everything else, leaves
// the watermarks, and fails the commit as ErrNotEmpty: the server's push
// carries on entry by entry, fenced, and the two versions of a path meet
// in its conflict detection at the next pull. The
// install references the held chunks where they are: each batch takes
// over the holds of the chunks it names in its own transaction
// (vfs.ApplyOptions.Held), so a hold's reference becomes the first file's
// and a batch cut short takes nothing. The holds left (chunks no record
// names) go when the staging does (after the install, or when it is dropped): the
// staging file is removed first and the holds released after, so a crash
// in between leaves holds without a staging, which the next start (or the
// next begin) releases; a release that fails (a full disk) is owed, and
// the next Apply releases the holds. A bootstrap needs the tree's size
// once on disk.
//
// BootstrapOptions.Progress hears the report so far once the receiver has
// answered the begin (the record count known up front, and how many it
// had staged already) and after every page it staged.
//
// A staging must never outlive its use. A begin for another snapshot
// removes the old staging file and starts a new one (emptied tables would
// keep the file at its largest), a refused root or a finished install
// removes it, and the rule for the rest is: the sender bootstraps empty
// stores only, so once the live store holds a tree no begin or commit will
// come for a staging again, and the staging goes, except one whose install
// a dead process left cut short, which is finished instead.
//
//   - Register (computerd starting, before it serves) settles what a dead
//     process left. Verified (the install had begun, so the store holds
//     part of the snapshot): the install finishes from the staging alone
//     (it holds every record, the rev and the peer; the store holds the
//     chunks), the root
//     is checked, the staging removed. The sender's next push then
//     re-sends entries the container already holds, skipped, and no chunk
//     bytes, where removing the staging would make it send them all again.
//     A finish that fails removes the staging, and so does a staging
//     already tried maxLocalResumes (2) times, so a finish that kills the
//     process cannot loop; the push re-baselines then. Not verified: kept
//     beside an empty store (the next bootstrap resumes from the staged
//     count), removed beside a store that holds a tree.
//   - An install that fails in a live process (a full disk, a dropped
//     session) after part of the tree went in removes the staging at once.
//   - While the process lives, the first Apply that is not the install's
//     own (a push, a repair) removes a staging beside a store that holds a
//     tree (vfs.Store.Observe; the check runs in the background).
//
// The staging file therefore holds at most one snapshot, however often
// the process dies, and lasts past its use only while the store is still
// empty or until the next push applies.
//
// # Limits
//
// Every decoder checks counts against their bound and against what the
// remaining bytes could hold, and lengths against their bound and the
// body, before it allocates: MaxChildren and MaxPageBytes a Node page,
// MaxDirChildren a directory, MaxWalkDepth, MaxPaths a Revs or Entries
// call, MaxPageRecords and MaxPageRaw a snapshot page (its zstd frame must
// decode to exactly its declared length), maxPartRefs a record,
// MaxSnapshotRecords a snapshot, MaxDifferences and MaxDiffBytes a walk. A
// call holds at most one decoded page beyond its body, or of an objects
// stream a few batches of checked chunks (checkedBatch, syncwire.MaxHashes
// chunks a call, none twice);
// an install holds two batches of staged records (the one it applies and
// the next, read ahead) plus the one file being put back together (at
// most chunkstore.MaxManifestChunks refs). The
// hostile-peer tests (hostile_test.go) send crafted messages over a real
// session and check the heap against the bytes sent.
//
// # Methods
//
// The container serves the methods (Register on computerd's
// syncwire.Server, range 512..767); the server calls them over its
// session. docs/PROTOCOL.md ("Convergence") has the encodings.
package converge
