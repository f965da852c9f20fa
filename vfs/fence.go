package vfs

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wsync/wsync/watermark"
)

// The fence (ApplyOptions.Fence) is the container's half of "nothing is
// silently overwritten": a push from the server never replaces a local
// change the server has not fetched. Such an entry waits (it is listed in
// ApplyResult.Deferred; the server stamps it again), the server's next pull
// brings the local change, and the server's conflict detection settles the
// path.

// maxFenced bounds the local changes a fence lists; with more, it holds
// every entry that would change something.
const maxFenced = 1 << 16

// fenceSet is an Apply batch's fence: the paths with local changes after
// since, sorted.
type fenceSet struct {
	since watermark.Cursor
	run   BounceRun
	all   bool // more than maxFenced: treat every path as changed
	paths []string
}

// loadFence lists the local changes after since, leaving out the revs of
// run (the peer's own entries).
func (t *wtx) loadFence(since watermark.Cursor, run BounceRun) (*fenceSet, error) {
	type span struct{ lo, hi int64 } // revs in [lo, hi]
	spans := []span{{since.Rev, 1<<63 - 1}}
	if run.To > run.From && run.To >= since.Rev {
		spans = []span{{since.Rev, run.From}, {run.To + 1, 1<<63 - 1}}
	}
	f := &fenceSet{since: since, run: run}
	for _, sp := range spans {
		if sp.hi < sp.lo {
			continue
		}
		rows, err := t.tx.QueryContext(t.ctx, `SELECT path, rev FROM changes WHERE rev >= ? AND rev <= ? LIMIT ?`, sp.lo, sp.hi, maxFenced+1)
		if err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
		type row struct {
			path string
			rev  int64
		}
		rs, err := scanRows(rows, func(r *sql.Rows, x *row) error { return r.Scan(&x.path, &x.rev) })
		if err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
		for _, r := range rs {
			if since.Admits(r.rev, r.path) {
				f.paths = append(f.paths, r.path)
			}
		}
		if len(f.paths) > maxFenced {
			return &fenceSet{since: since, run: run, all: true}, nil
		}
	}
	slices.Sort(f.paths)
	return f, nil
}

func (f *fenceSet) has(path string) bool {
	if f.all {
		return true
	}
	_, ok := slices.BinarySearch(f.paths, path)
	return ok
}

// hasUnder reports whether a path below dir has a local change.
func (f *fenceSet) hasUnder(dir string) bool {
	if f.all {
		return true
	}
	i, _ := slices.BinarySearch(f.paths, dir+"/")
	return i < len(f.paths) && strings.HasPrefix(f.paths[i], dir+"/")
}

// quiet reports whether the fence holds no local change: fenced then
// reads nothing.
func (f *fenceSet) quiet() bool { return !f.all && len(f.paths) == 0 }

// fenced reports whether the fence holds e back: its path has a local
// change to another state, a non-directory ancestor has one (the apply
// would replace it by a directory), or it would remove a directory with a
// live node below it that has one. It only reads, so a held entry leaves
// nothing behind.
func (t *wtx) fenced(e *ChangeEntry) (bool, error) {
	f := t.fence
	if f.quiet() {
		return false, nil // no local change since the peer's last fetch
	}
	var ancestors []string
	for a := dirOf(e.Path); a != ""; a = dirOf(a) {
		if f.has(a) {
			ancestors = append(ancestors, a)
		}
	}
	self, below := f.has(e.Path), f.hasUnder(e.Path)
	if !self && !below && len(ancestors) == 0 {
		return false, nil
	}
	cur, err := resolve(t.ctx, t.tx, e.Path)
	if err != nil && !errors.Is(err, ErrNotExist) && !errors.Is(err, ErrNotDir) {
		return false, err
	}
	ours := absent
	if err == nil {
		ours = nodeState(&cur)
	}
	in := entryState(e)
	if bytes.Equal(ours.key(), in.key()) {
		return false, nil // nothing to replace
	}
	if self {
		return true, nil
	}
	for _, a := range ancestors {
		n, err := resolve(t.ctx, t.tx, a)
		switch {
		case err == nil && n.kind != KindDir:
			return true, nil
		case err == nil, errors.Is(err, ErrNotExist), errors.Is(err, ErrNotDir):
		default:
			return false, err
		}
	}
	if !below || !ours.isDir() || in.isDir() {
		return false, nil
	}
	// The entry would remove our directory: held only for a live node
	// below it with a local change (a local delete below it is no loss).
	return t.changedUnder(cur.ino, e.Path, f.since, f.run)
}
