package fusefs

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/vfs"
)

// notifier is the part of *fuse.Server the invalidator drives: the kernel's
// dentry and inode invalidation. Node ids are vfs inode numbers
// (fs.Options.ExternalNodeID).
type notifier interface {
	EntryNotify(parent uint64, name string) fuse.Status
	InodeNotify(node uint64, off int64, length int64) fuse.Status
}

type entryKey struct {
	parent vfs.Ino
	name   string
}

// invalidator carries vfs.Invalidations from the store's Observe callback to
// the kernel. The callback runs right after an Apply commits and must not
// block or call back into the store, and a notification must not be sent
// from inside a FUSE operation (the kernel may hold the very locks the
// notification needs), so the callback only records what to invalidate and
// one goroutine owned by the Server delivers it.
//
// Pending work is coalesced: an entry or inode named twice before delivery
// is invalidated once. A node the commit made is not invalidated, nor are
// entries in it: the kernel cannot hold what did not exist before the
// commit (only the new node's own entry in an older directory, which may
// be a negative one, is). The pending set is bounded; when it overflows it is
// replaced by one sweep of every entry and inode go-fuse knows the kernel
// holds, which costs the kernel re-lookups but loses nothing. A loss of
// mutations answered to the kernel (vfs.Invalidation.All) sweeps too.
type invalidator struct {
	n    notifier
	root *fs.Inode
	max  int
	m    *metrics
	log  *slog.Logger

	mu      sync.Mutex
	entries map[entryKey]struct{}
	inodes  map[vfs.Ino]struct{}
	sweep   bool
	stopped bool
	// queued counts Observe calls; done the calls whose invalidations have
	// all been delivered. progress is closed (and replaced) whenever done
	// moves, to wake waiters.
	queued, done uint64
	progress     chan struct{}
	wake         chan struct{}
}

func newInvalidator(n notifier, root *fs.Inode, max int, m *metrics, log *slog.Logger) *invalidator {
	return &invalidator{
		n:        n,
		root:     root,
		max:      max,
		m:        m,
		log:      log,
		entries:  make(map[entryKey]struct{}),
		inodes:   make(map[vfs.Ino]struct{}),
		progress: make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}
}

// enqueue is the vfs.Store.Observe callback. It never blocks.
func (v *invalidator) enqueue(invs []vfs.Invalidation) {
	v.mu.Lock()
	if v.stopped {
		v.mu.Unlock()
		return
	}
	v.queued++
	if slices.ContainsFunc(invs, func(in vfs.Invalidation) bool { return in.All }) {
		// Mutations answered to the kernel were lost: the store cannot
		// name what they touched, so everything the kernel holds goes.
		v.sweep = true
		clear(v.entries)
		clear(v.inodes)
	}
	if !v.sweep {
		// Nodes the commit made: the kernel holds neither them nor an
		// entry in them (vfs.Invalidation.New), so a subtree that came
		// whole costs the entry of its top and its parent's attributes.
		var made map[vfs.Ino]struct{}
		for _, in := range invs {
			if in.New {
				if made == nil {
					made = make(map[vfs.Ino]struct{})
				}
				made[in.Ino] = struct{}{}
			}
		}
		for _, in := range invs {
			if _, ok := made[in.Ino]; in.Ino != 0 && !ok {
				v.inodes[in.Ino] = struct{}{}
			}
			if _, ok := made[in.Parent]; in.Parent != 0 && !ok {
				v.entries[entryKey{in.Parent, in.Name}] = struct{}{}
				// The parent's size, mtime and nlink moved too.
				v.inodes[in.Parent] = struct{}{}
			}
		}
		if len(v.entries)+len(v.inodes) > v.max {
			v.sweep = true
			clear(v.entries)
			clear(v.inodes)
		}
	}
	v.mu.Unlock()
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// run delivers pending invalidations until ctx ends; then it marks the
// invalidator stopped and releases every waiter.
func (v *invalidator) run(ctx context.Context) {
	defer func() {
		v.mu.Lock()
		v.stopped = true
		v.done = v.queued
		close(v.progress)
		v.progress = make(chan struct{})
		v.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-v.wake:
		}
		v.deliverPending()
	}
}

// deliverPending takes everything queued so far and delivers it.
func (v *invalidator) deliverPending() {
	v.mu.Lock()
	target := v.queued
	entries, inodes, sweep := v.entries, v.inodes, v.sweep
	v.entries = make(map[entryKey]struct{}, len(entries))
	v.inodes = make(map[vfs.Ino]struct{}, len(inodes))
	v.sweep = false
	v.mu.Unlock()

	if sweep {
		v.sweepAll()
	}
	// Entries first: once a dentry is gone the kernel looks the name up
	// afresh, and the inode invalidations then drop attributes and pages of
	// nodes it keeps through other names or open files.
	for k := range entries {
		v.note(v.n.EntryNotify(uint64(k.parent), k.name), false)
	}
	for ino := range inodes {
		// Offset 0, length 0: attributes and every cached page.
		v.note(v.n.InodeNotify(uint64(ino), 0, 0), true)
	}

	v.mu.Lock()
	if target > v.done {
		v.done = target
		close(v.progress)
		v.progress = make(chan struct{})
	}
	v.mu.Unlock()
}

// sweepAll invalidates every entry and inode of go-fuse's tree, which holds
// at least what the kernel holds.
func (v *invalidator) sweepAll() {
	v.m.sweep()
	stack := []*fs.Inode{v.root}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		parent := dir.StableAttr().Ino
		v.note(v.n.InodeNotify(parent, 0, 0), true)
		for name, child := range dir.Children() {
			v.note(v.n.EntryNotify(parent, name), false)
			if child.IsDir() {
				stack = append(stack, child)
			} else {
				v.note(v.n.InodeNotify(child.StableAttr().Ino, 0, 0), true)
			}
		}
	}
}

// note counts one notification. ENOENT means the kernel does not hold the
// node or entry, which is the common case and nothing to report.
func (v *invalidator) note(st fuse.Status, inode bool) {
	v.m.invalidation(inode, st.Ok())
	if !st.Ok() && st != fuse.ENOENT {
		v.log.Debug("invalidation refused", "inode", inode, "status", st)
	}
}

// wait returns once everything queued before the call has been delivered,
// or the invalidator stopped, or ctx ended.
func (v *invalidator) wait(ctx context.Context) error {
	v.mu.Lock()
	target := v.queued
	for v.done < target && !v.stopped {
		ch := v.progress
		v.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		v.mu.Lock()
	}
	v.mu.Unlock()
	return nil
}
