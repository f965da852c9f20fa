// Package fusefs serves a vfs.Store as a FUSE file system, with go-fuse's fs
// package: computerd mounts the container's store at /workspace with it, and
// the commands of every user in the container work there as on a local disk.
//
//	srv, err := fusefs.Mount(ctx, "/workspace", store, fusefs.Options{Owner: &fusefs.Owner{Uid: 1000, Gid: 1000}})
//	...
//	defer srv.Unmount()
//
// # Node model
//
// One Node type stands for every vfs inode (file, directory, symlink,
// special file); the store decides what an operation means for each kind. The FUSE node id is
// the vfs inode number (fs.Options.ExternalNodeID) with one generation for
// the mount's life, since the store never reuses an inode number: inode
// numbers are stable, a hardlink is the same node under two names, and an
// invalidation can name the kernel's node without any table of ours.
// Directories list in name order, a store page (256 entries) at a time, with
// "." and ".." first; a listing interleaved with unlinks (rm -rf) neither
// skips nor repeats. An entry's offset is a cookie of its handle's, and
// seekdir to one resumes after the name given with it, so a telldir place
// survives other processes' unlinks before it.
//
// # Handles and commit points
//
// Every open of a file is a vfs.Handle. The store shares one open state
// among the handles of an inode, so descriptors see each other's writes.
// Writes go into the handle, which hashes and stores each 512 KiB chunk in
// the background as it fills, so a long write holds a few chunks of memory.
// The store commits the manifest as one rev on flush (every close(2) of a
// writable descriptor: a read-only open asks the kernel for no FLUSH,
// FOPEN_NOFLUSH, since nothing is written through it), fsync and the last
// release; truncation and fallocate commit at once.
// copy_file_range(2) (cp) is done inside the daemon in one request. A
// READ of at least 64 KiB of one full chunk's committed bytes is answered
// from the chunk's file (vfs.Handle.ReadSpan): go-fuse splices the reply
// from it, so the bytes do not pass through the daemon's memory; every
// other READ replies with a vector of bytes the store read. The mount's
// read-ahead (its bdi's read_ahead_kb) is set to Options.MaxReadAhead, so a
// sequential read comes in READs of up to 1 MiB (best effort: sysfs may be
// read-only). Because
// close commits, a file is in the change feed when its writer has closed it,
// even though the kernel's RELEASE comes later. For files still open by
// running processes, the flush rule applies: vfs.Store.FlushAll (or
// Server.Flush) before a feed is answered.
//
// Errors reach the process: a chunk the store could not write (a full
// disk) is reported at the next write, fsync or close (FLUSH) as ENOSPC, or
// EIO, never as success; the bytes stay buffered and a later fsync or close
// commits them once space is free. A write, truncate or fallocate past
// chunkstore.MaxFileSize (4 TiB) is EFBIG; a truncate or fallocate that
// grows a file adds a hole, stored as nothing. toErrno is the one errno
// mapping.
//
// A file unlinked while open keeps working until its last release. mmap
// works through the kernel page cache: shared writable mappings are written
// back as ordinary WRITE requests, which is what git and SQLite need.
// Writeback caching (FUSE_WRITEBACK_CACHE) is off on purpose: with it the
// kernel trusts its own idea of a file's size and mtime and would not take
// the ones an upstream apply sets.
//
// # Caching and invalidation
//
// The kernel caches entries and attributes (Options.EntryTimeout and
// AttrTimeout, 1s by default) and file pages: an open keeps the page cache
// (FOPEN_KEEP_CACHE) when the node's rev is the one seen at the previous
// open or after our own last commit, which the kernel watched go by. Failed
// lookups are cached too (Options.NegativeTimeout, by default the entry
// timeout): an apply invalidates every name it creates, parents included.
// A listing (READDIRPLUS) gives the kernel each entry's attributes from
// the page query that listed it, while nothing was written to the store
// since (vfs.Store.AttrAsOf); otherwise each entry is looked up afresh.
//
// An upstream apply changes the store behind the kernel's back, so the
// Server observes the store (vfs.Store.Observe) and invalidates what each
// apply touched: the (parent, name) entries, the parents' attributes, and
// the nodes' attributes and pages; not the nodes the apply's commit made,
// nor the entries in directories it made (vfs.Invalidation.New: no kernel
// can hold them). The Observe callback runs right after the
// commit and only records the work in a coalescing queue; one goroutine the
// Server owns sends the notifications, never under a store lock and never
// from inside a FUSE request (a notification can wait on kernel locks that
// a request in flight holds). Past Options.InvalidationQueue pending items
// the queue collapses into one sweep of every entry and node go-fuse knows
// the kernel holds; so does a loss of mutations answered to the kernel (a
// failed group on a full disk, vfs.Invalidation.All), whose entries the
// store cannot name. Server.WaitInvalidated returns when everything observed
// before it is delivered: a sync driver calls it between applying a push and
// running a command, so the command sees the new bytes at once whatever the
// timeouts.
//
// # Ownership and permissions
//
// The mount uses allow_other (every user of the container) and
// default_permissions (the kernel checks access from the mode and owner we
// report, and clears setuid/setgid as on a local disk). A node created
// through the mount belongs to the calling process's uid and gid; in a
// setgid directory it takes the directory's group, and a new directory stays
// setgid. Nodes that arrive by apply, and the root, belong to the store's
// owner (vfs.Options.Owner); Options.Owner overrides the root's. SETATTR is
// checked again here with simple POSIX rules: chmod by the owner or root
// (anyone may clear setuid/setgid, which is how the kernel strips them on a
// write), chown to another uid by root only, chgrp by the owner or root (the
// kernel has checked group membership), explicit utimens times by the owner
// or root. FUSE requests carry no supplementary groups, so those rules use
// the primary gid.
//
// # Special files
//
// mkfifo, mknod and bind(2) of a Unix socket make nodes of the store's
// special kinds (vfs.Store.Mknod). The kernel serves a FIFO's bytes and a
// socket's connections itself from the inode it holds; we keep the node,
// so type, mode, owner and times, rename, hardlinks and unlink work as on
// a local disk, and a socket stays reachable through a rename or an
// invalidation because a lookup returns the same node id. The mount is
// nodev: mknod of a device by root succeeds and opening it fails with
// EACCES, as on a nodev tmpfs. Special files are local to the container:
// they never reach the change feed or the Merkle scan (see package vfs).
//
// # Locks
//
// flock(2) and fcntl(2) locks are kept by the kernel (go-fuse's EnableLocks
// is off), so they work between the processes of the container, not across
// machines, which is all a workspace needs (SQLite, git, package managers).
//
// # Errors
//
// Every error becomes an errno in one function (toErrno), through
// vfs.Errno.
//
// # What is not supported
//
//   - RENAME_EXCHANGE and RENAME_WHITEOUT (EINVAL); O_TMPFILE (EOPNOTSUPP).
//   - Device nodes can be made but not opened (nodev, EACCES); FIFOs and
//     sockets are never synced.
//   - fallocate other than mode 0 (extends the file) and
//     FALLOC_FL_KEEP_SIZE (a no-op): punching and collapsing holes are
//     EOPNOTSUPP. SEEK_DATA/SEEK_HOLE work by 512 KiB chunk: a chunk
//     with any stored bytes is data.
//   - Extended attributes outside user.* (EOPNOTSUPP to set, ENODATA to
//     get); POSIX ACLs. A node's user.* names fit one listxattr (64 KiB)
//     and its values total 256 KiB: past either, setxattr is ENOSPC.
//   - Times before 1677 or after 2262 (the store's int64 nanoseconds) are
//     clamped to the nearest it holds.
//   - A directory removed while a process has it open (or as its cwd) is
//     gone at once: fstat on it fails.
//   - Pages a process dirtied through a shared mapping reach the store when
//     the kernel writes them back (msync, munmap, close), not before; the
//     flush rule cannot see them earlier.
package fusefs
