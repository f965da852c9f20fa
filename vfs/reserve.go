package vfs

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The disk reserve: local writes that take new space (file bytes written
// through the mount or the files API, and new nodes) stop with ErrNoSpace
// while the store's file system has less than the reserve free, and what
// frees space (unlink, rmdir, truncate, rename, a removal's commit) goes on
// using it. Without it a process that filled the disk left nothing for the
// SQLite transaction of an unlink: every rm failed with ENOSPC and the
// workspace stayed stuck until an operator freed space under the state
// directory. A local file system needs no new blocks to unlink; this store
// needs a little, and keeps it back.
//
// Applies from the peer are not held back: a push that deletes must land,
// and one that adds fails with ENOSPC on its own when the disk is full.

// nodeCost is what a new node is counted to take: its rows and index
// entries, about a page's share.
const nodeCost = 512

// maxReserve bounds the reserve; a small file system keeps 1/16 of its size.
const maxReserve = 32 << 20

// reserveFresh is how long one reading of the free space is trusted.
const reserveFresh = 10 * time.Millisecond

type reserve struct {
	mu     sync.Mutex
	path   string // a path on the store's file system; "" for none (memory)
	keep   uint64 // bytes kept back; 0 until the first reading
	free   uint64 // free bytes at the last reading, less what was admitted since
	readAt time.Time
}

// admit takes n new bytes from the free space, or refuses them
// (ErrNoSpace) when they would leave less than the reserve.
func (r *reserve) admit(n int) error {
	if r.path == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.readAt) > reserveFresh || r.free < r.keep+uint64(n) {
		var st unix.Statfs_t
		if err := unix.Statfs(r.path, &st); err != nil {
			return nil // no reading: the write itself will tell
		}
		r.free, r.readAt = st.Bavail*uint64(st.Bsize), time.Now()
		r.keep = min(maxReserve, st.Blocks*uint64(st.Bsize)/16)
	}
	if r.free < r.keep+uint64(n) {
		return fmt.Errorf("%w: %d bytes free, the last %d are kept for removals", ErrNoSpace, r.free, r.keep)
	}
	r.free -= uint64(n)
	return nil
}
