// Package vfs is the workspace store used on both sides of a wsync pair: the
// authoritative server keeps one per workspace, and computerd keeps one
// behind its FUSE mount. It has no kernel or network code.
//
// # Model
//
// A store is one SQLite database. Nodes (files, directories, symlinks, and
// the local special files below) are rows keyed by inode number; directory entries (parent, name, child) name
// them. The root is inode 1. A rename moves a directory entry; a hardlink is
// a second entry for the same file node. Inode numbers are never reused,
// not even those of creates answered from memory and then lost.
// A file's content is a manifest: its 512 KiB chunks, by sha256, kept by
// package chunkstore (small chunks as rows of the same database, full-size
// chunks as files beside it).
//
// # Revisions and the change feed
//
// Every committed mutation takes the next value of one rev counter and
// stamps it on every node it touched, and records each touched path in the
// changes table: (path, rev of its last touch). A row whose path resolves to
// a live node is a live entry; one that does not is a tombstone. A directory
// rename stamps its whole subtree with one rev and records the old paths as
// tombstones in the same transaction; rm -r records one tombstone per path.
// Local-only state changes without a rev: atime, ownership, xattrs, and
// directory times (the seed keeps parent directory metadata out of sync).
//
// Changes(after, through, ignore) walks the changes index in (rev, path)
// order a page at a time, materialising each path's current state (the
// names of one directory with one query, feed.go), so one
// entry per path comes out however often it was rewritten, every hardlink
// name gets its own entry, and a path rewritten while the feed runs moves
// past through and is delivered by the next feed. Cursors are
// watermark.Cursor values, resumable in the middle of a rev.
//
// A store records the highest rev it handed out as a place in its feed
// (Served, NoteServed; peers.go): every peer's fetch cursor, and every
// push cursor it sent, is at or before it, in the store and in any later
// copy of it. A peer whose cursor is past what the store announces met a
// copy restored behind it (MeetPeer moves the cursor back to the announced
// rev). An applied-push cursor that goes back (setWatermarks) is the
// pusher's store restored: the bounce run kept for it is dropped.
//
// # Ignore patterns
//
// Ignore is a compiled list of gitignore(5) patterns relative to the
// root (ignore.go says which library matches them and how they compose):
// Match(path, isDir) asks about a path and its directories, Excludes about
// one level for walkers that go top down, IgnoresEntry about a change
// entry. The feed leaves ignored entries out (asking each page's
// directories once), Apply with ApplyOptions.Ignore leaves them out and
// keeps a directory that an incoming delete names but the list ignores.
//
// # Apply
//
// Apply takes a batch of entries in one transaction (a savepoint per entry,
// a rev per applied entry). It is idempotent: an entry that already matches
// (content, mode and mtime for files; target for symlinks; mode for
// directories) is skipped and stamps nothing. Missing parents are created;
// a different node type at a path, or a non-directory where a parent
// directory must be, is replaced along with its subtree. Symlinks are never
// followed. A failing entry rolls back the whole batch and comes back as an
// *EntryError. Watermarks can be written in the same transaction, and so can
// the peer's bounce run (BounceRun: the revs the batch stamped hold the
// peer's entries, not to be sent back to it).
//
// # Conflicts and fences
//
// Without options the replacement above is last writer wins. On the server
// a sync peer's batch runs conflict detection (ApplyOptions.Conflicts: the
// rules in conflict.go, the bases in bases.go, the apply's side in
// detect.go): per peer and path the store keeps the merge base, the state
// both last held, and a path both sides changed differently since is a
// conflict, resolved by a ConflictPolicy (keep-both writes the other
// version beside the name) and recorded (Store.Conflicts). On a container a
// sync peer's batch is fenced (ApplyOptions.Fence, fence.go): an entry that
// would replace a local change the peer has not fetched is not applied but
// listed in ApplyResult.Deferred. docs/ARCHITECTURE.md, "Conflicts", has the
// rules.
//
// # Write handles
//
// FUSE writes go through a Handle. All handles of one inode share its open
// state: chunk images being written, chunks hashed and stored in the
// background as the writes fill them (so a long sequential write holds a
// few chunks in memory), and the committed manifest. Reads through a handle
// see buffered bytes; Flush, fsync and the last Release commit the new
// manifest as one rev. A file whose last name is unlinked while open stays
// usable until its last Release.
//
// Files may be sparse. The open state is kept per written chunk and the
// commit walks the committed manifest's refs and the written chunks, so a
// truncate to 1 TiB costs a few hundred hole refs (chunkstore.HoleHash) and
// no hashing; an all-zero chunk image is committed as a hole. Offsets and
// sizes are checked against chunkstore.MaxFileSize before anything is
// allocated: past it is ErrFileTooBig (EFBIG).
//
// # Errors reach the writer
//
// A background chunk store that fails keeps its image dirty and leaves the
// error for the writer: the next WriteAt, Flush or Release returns it once
// (Errno: ENOSPC for a full disk, whether the chunk write or SQLite found
// it; EIO otherwise). A Flush retries every dirty image and succeeds once
// space is free. While stores fail, a write that would hold more than the
// dirty bound of images stores the oldest in the foreground and fails with
// its error, so a full disk costs no memory. FlushAll commits every file it
// can: a file whose commit fails keeps the error for its writer and does
// not fail the call (the pull of the other files goes on).
//
// # Quotas
//
// A store keeps its usage (the logical bytes of its files, its nodes) in
// two counters moved in the same transaction as every mutation, and may
// be given a Quota (SetQuota): a local mutation, or an Apply that asks
// (ApplyOptions.Quota), that would grow a counter past its bound fails
// whole with a *QuotaError (EDQUOT; EFBIG for the max file size). Writes
// through handles reserve their growth when they are made, so racing
// writers never overshoot; Admit checks a batch before its chunks are
// fetched; StatFS reports the quota. quota.go has the rules and why
// bytes are logical sizes.
//
// # Garbage collection
//
// Open collects once, in one transaction. With Options.GC (the daemons
// pass DefaultGC) a goroutine owned by the store runs passes of
// chunkstore.Collection steps while it is open: periodically, and as soon
// as GCOptions.Threshold bytes of chunks lost their last reference. Each
// step is one write transaction of at most SliceChunks chunks, so writers
// wait one step at most; it keeps the committed manifests of open files
// (which an Apply may have replaced under a dirty handle). An in-memory
// database is created with auto_vacuum=INCREMENTAL and a pass ends by
// handing its free pages back in small steps, so memory returns after
// deletes. Close stops the goroutine and waits for it. RunGC runs a pass
// on demand; gc.go has the details.
//
// # Trash
//
// A store opened with Options.Trash (the server's) keeps what deletes and
// overwrites replace: the primitives that remove a name or replace a
// file's content first copy the node's state at that path into a trash
// row (manifest, size, mode, mtime, target, when, why), so Apply, the path
// operations and a forced restore all trash alike, in the transaction
// that deletes. A row holds one chunk reference per chunk of its manifest,
// taken and given back in the transactions that insert and delete it, so
// collection needs no rule of its own: a chunk a row names has refs > 0.
// Rows expire after TrashOptions.Retention (at the start of each
// collection pass), are evicted oldest first past MaxBytes or MaxEntries,
// and are purged by PurgeTrash. RestoreTrash brings back a path and what
// the trash holds below it, the newest version at or before a time, in one
// transaction, as new changes with a rev each; a live node in the way
// fails it (*RestoreConflictError) unless forced. trash.go has the rules;
// docs/ARCHITECTURE.md, "Trash", the argument.
//
// # Kept attributes
//
// GetAttr keeps what it read of a node, valid while the write counter
// (moved at the start and end of every write) stands. A mutation that
// declares every row it changes carries it forward: a create, an unlink
// and a file's commit with the parent times they set, a create, a commit
// and a SetAttr with the node's new attributes (and, for a file just made
// or committed, its manifest and paths, so its next commit reads neither),
// an unlink by dropping its node. kept.go. A peer's watermarks are kept
// the same way (Watermarks, misc.go): an idle sync reads them and writes
// nothing.
//
// # Write-behind
//
// The mount's creates, mkdirs, links, unlinks, rmdirs, SetAttrs without a
// size and file commits are answered from a memo of directory names and
// their nodes' attributes, and queued; a goroutine runs the queue in
// order in the open group, so the SQL overlaps the kernel's next request.
// The inode numbers and revs answered are exact (no other writer runs
// while mutations are queued), every other read and write of the store
// runs the queue first (lookups, stats, opens of small files and listings
// of directories the memo holds whole answer from it), a file's first
// commit folds into its create while that is the last mutation queued (one
// row inserted with the content), a queued create's rows wait in the group
// and go in multi-row statements before any other statement of its
// transaction (pending.go), and a queued mutation that
// fails loses itself and those after it, as a lost group does. behind.go.
//
// # Read-ahead
//
// A handle names the directory its file was opened through (SetDir).
// When a second file of one directory is read right after the first, the
// store hands the chunks of the directory's other one-chunk files, as the
// memo lists them, to chunkstore's Prefetch: the reads that follow find
// them without a row lookup. ahead.go.
//
// Handle.ReadSpan is ReadAt for a reader that copies the bytes itself:
// when the bytes asked for are committed bytes of one full chunk, it
// gives where they lie in the chunk's file (chunkstore's Span), and the
// mount's READ reply is spliced from there.
//
// # A group's bookkeeping
//
// A mutation of a group writes its change rows at the group's commit
// (multi-row upserts; nothing inside a group reads them), and reuses the
// directory paths the group's earlier mutations learnt. Deleting a node
// deletes its xattrs only if the store's set of nodes that may have some
// (xattrinos.go) names it.
//
// # Held chunks
//
// HoldChunks keeps chunks no file names yet (a snapshot's, which converge
// stages straight into the store): a row of chunk_holds each, counted as
// one reference in the transaction that inserts it, so collection needs no
// rule for them either. An Apply with ApplyOptions.Held (the install)
// takes over the holds of the chunks its batch names, in the batch's
// transaction: the hold row goes and its reference is the files' first.
// ReleaseHeldChunks gives back the holds left; it is idempotent (the rows
// are the record of what is held). holds.go.
//
// # Connections
//
// One writer connection (all writes serialise on it) and a pool of
// read-only connections in WAL mode, so reads never wait for the writer. An
// in-memory store (Memory) uses one connection for both.
//
// # Special files
//
// FIFOs, sockets and device nodes (Mknod; KindFifo, KindSocket,
// KindCharDev, KindBlockDev, with a device's number in nodes.rdev) are
// nodes of the store that made them and never sync. Creating, renaming,
// linking, chmod and unlink of one stamp no rev and record no change row;
// a directory rename or removal stamps and records the synced nodes of
// its subtree only. The feed and EntriesAt materialise a path that holds
// one as absent (a delete entry), so `rm f; mkfifo f` syncs as a delete of
// f; ScanTree and Empty skip them, so they stay out of Merkle roots and a
// snapshot installs over them; Stat and List of the path API hide them.
// No row is needed for a special file's own path: it can only take a free
// name or replace a node whose removal is recorded. Apply replaces one at
// an entry's path or in a parent's place like any node of another type,
// removes those under a deleted directory, and skips a delete of a path
// that holds one (it reads as absent already, and it is not the peer's).
//
// # Extended attributes
//
// Only user.* attributes are stored. They are local to each side and never
// cross the wire.
package vfs
