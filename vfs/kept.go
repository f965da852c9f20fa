package vfs

import (
	"maps"
	"time"
)

// Attributes kept across mutations.
//
// Right after a mutation in a directory (a create, a mkdir, an unlink) the
// kernel asks for the directory's attributes again: it dropped them
// because the directory changed, and its permission checks need them.
// After a create, a file's commit or a SetAttr, it (or the mount's own
// SetAttr, which checks permissions against the current attributes) asks
// for the node's. GetAttr keeps what it read, stamped with the write
// counter (Store.writes) it read it at, and answers from it while the
// counter has not moved: nothing at all was written since, so the row is
// still what was read. A mutation that declares every node row it changes
// (wtx.carries) carries what is kept forward to the counter it ends at:
// the directories whose times it set (a create or an unlink sets its
// parent's mtime and ctime) with those times, and the nodes it names in
// wtx.keep with the attributes it left them (a new node, a committed
// file, a SetAttr), or dropped (an unlinked name's node). Any other write
// leaves everything behind. A stale answer is never given: every write
// moves the counter at its start, nothing kept answers a reader while
// mutations answered from the memo wait in the queue (behind.go; they
// carry what is kept from one to the next as they run), and a miss costs
// nothing but the usual read. What is kept is the rows' attributes;
// GetAttr adds the writes open handles buffer, as it does to a row it
// reads.
//
// For a node a mutation made or committed, the rest of its row (its
// manifest) and its paths are kept too (wtx.keepRow), while both are
// small: the commit of a file right after its create (every file tar, git
// or npm writes) reads neither its row nor its names. A carried mutation
// that names a node in keep drops what was kept of its row unless it
// declares it again; none that carries changes the names of a node it
// does not declare (a create adds one to its new node only, an unlink
// drops its node, a link and a rename of a non-directory change the names
// of the nodes they declare, and a directory's rename, which moves the
// paths of its subtree, carries nothing).
type keptAttrs struct {
	at    uint64
	attrs map[Ino]Attr
	rows  map[Ino]keptRow // only for nodes in attrs
}

// keptRow is what is kept of a node beyond its attributes.
type keptRow struct {
	manifest []byte   // encoded, as the row holds it
	paths    []string // every name's path
}

// maxKept bounds the nodes kept; maxKeptManifest and maxKeptPaths what
// is kept of a row.
const (
	maxKept         = 16
	maxKeptManifest = 1 << 10
	maxKeptPaths    = 4
)

// keepRow declares the manifest and paths of a node the mutation also
// declares with keepNode.
func (t *wtx) keepRow(ino Ino, manifest []byte, paths []string) {
	if len(manifest) > maxKeptManifest || len(paths) > maxKeptPaths || len(paths) == 0 {
		return
	}
	if t.rows == nil {
		t.rows = make(map[Ino]keptRow, 1)
	}
	t.rows[ino] = keptRow{manifest: manifest, paths: paths}
}

// keptNode returns the whole row and the paths of a node kept at the
// start of mutation t.
func (t *wtx) keptNode(ino Ino) (node, []string, bool) {
	p := t.s.keptNow()
	if t.grp == nil || p == nil || p.at != t.before {
		return node{}, nil, false
	}
	r, ok := p.rows[ino]
	if !ok {
		return node{}, nil, false
	}
	return nodeOf(p.attrs[ino], r.manifest), r.paths, true
}

// keepNode declares that the mutation left ino's row with attributes a,
// or, with a nil a, changed or removed it in a way it does not state.
func (t *wtx) keepNode(ino Ino, a *Attr) {
	if t.keep == nil {
		t.keep = make(map[Ino]*Attr, 1)
	}
	t.keep[ino] = a
}

// carryKept carries what is kept forward over t, a mutation whose write
// count started from before and ended at at. Called with the writer held,
// at the end of a successful mutation.
func (s *Store) carryKept(t *wtx, before, at uint64) {
	if !t.carries {
		s.kept.Store(nil)
		return
	}
	prev := s.kept.Load()
	if prev != nil && prev.at == before && !t.changesKept(prev) {
		// Nothing kept changed (an unlink of a node not kept, in a
		// directory not kept): the same maps, which nobody writes once
		// they are published, at the new count.
		s.kept.Store(&keptAttrs{at: at, attrs: prev.attrs, rows: prev.rows})
		return
	}
	p := prev.clone(before)
	p.carry(t, at)
	s.kept.Store(p)
}

// carryQueued is carryKept for a queued mutation of a run (runQueued):
// what is kept is carried in place, in s.running, which only the writer
// reads while the run lasts and the run publishes at its end, instead of
// in a copy published after each mutation. The run's first mutation
// starts it from what is published. Called with the writer held.
func (s *Store) carryQueued(t *wtx, before, at uint64) {
	if !t.carries {
		s.running = nil
		s.kept.Store(nil)
		return
	}
	if s.running == nil || s.running.at != before {
		s.running = s.kept.Load().clone(before)
		// Nothing reads what is kept while mutations are queued
		// (keptAttr); what was published is stale from now on.
		s.kept.Store(nil)
	}
	s.running.carry(t, at)
}

// keptNow is what is kept as a mutation of the writer sees it: a run's
// own (carryQueued) while it lasts, or what is published.
func (s *Store) keptNow() *keptAttrs {
	if s.running != nil {
		return s.running
	}
	return s.kept.Load()
}

// clone returns a copy of p at count before (to carry a mutation over,
// or to keep one more node), when p is kept at before; an empty one
// otherwise.
func (p *keptAttrs) clone(before uint64) *keptAttrs {
	c := &keptAttrs{at: before, attrs: make(map[Ino]Attr, maxKept), rows: make(map[Ino]keptRow)}
	if p != nil && p.at == before {
		maps.Copy(c.attrs, p.attrs)
		maps.Copy(c.rows, p.rows)
	}
	return c
}

// carry carries p, which the caller owns, over t to at: the times of the
// directories t changed, and the nodes it declares.
func (p *keptAttrs) carry(t *wtx, at uint64) {
	for d := range t.dirty {
		if a, ok := p.attrs[d]; ok {
			a.Mtime = time.Unix(0, t.now)
			a.Ctime = a.Mtime
			p.attrs[d] = a
		}
	}
	for ino, a := range t.keep {
		delete(p.rows, ino)
		if a == nil {
			delete(p.attrs, ino)
			continue
		}
		if _, ok := p.attrs[ino]; ok || p.room(t.keep) {
			p.attrs[ino] = *a
			if r, ok := t.rows[ino]; ok {
				p.rows[ino] = r
			}
		}
	}
	p.at = at
}

// changesKept reports whether carrying t over p changes what p keeps.
func (t *wtx) changesKept(p *keptAttrs) bool {
	for ino, a := range t.keep {
		if a != nil {
			return true
		}
		if _, ok := p.attrs[ino]; ok {
			return true
		}
	}
	for d := range t.dirty {
		if _, ok := p.attrs[d]; ok {
			return true
		}
	}
	return false
}

// room makes room for one more node, giving up a node other than those
// of spare, a file before a directory (a checkout that made more than
// maxKept directories would otherwise keep nothing of the files it
// writes next); it reports false if every kept node is in spare.
func (p *keptAttrs) room(spare map[Ino]*Attr) bool {
	if len(p.attrs) < maxKept {
		return true
	}
	for _, dirs := range []bool{false, true} {
		for ino, a := range p.attrs {
			if _, ok := spare[ino]; !ok && (dirs || a.Kind != KindDir) {
				delete(p.attrs, ino)
				delete(p.rows, ino)
				return true
			}
		}
	}
	return false
}

// keptAttr returns a kept node's attributes (its row's) inside mutation t,
// when nothing was written between their keeping and t's start.
func (t *wtx) keptAttr(ino Ino) (Attr, bool) {
	p := t.s.keptNow()
	if t.grp == nil || p == nil || p.at != t.before {
		return Attr{}, false
	}
	a, ok := p.attrs[ino]
	return a, ok
}

// keptAttr returns a kept node's attributes (its row's) while nothing was
// written since they were kept and no mutation answered from the memo
// waits in the queue (the rows are not yet what was answered; the count
// of queued mutations is read first, so one that ran since has carried
// what is kept, or dropped it).
func (s *Store) keptAttr(ino Ino) (Attr, bool) {
	if s.queuedN.Load() > 0 {
		return Attr{}, false
	}
	p := s.kept.Load()
	if p == nil || p.at != s.writes.Load() {
		return Attr{}, false
	}
	a, ok := p.attrs[ino]
	return a, ok
}

// keepAttr keeps the attributes of a node GetAttr read at write count at
// (the counter did not move across the read).
func (s *Store) keepAttr(a Attr, at uint64) {
	if at%2 == 1 {
		return // an odd count: a write was in progress (ReadDirAttrs)
	}
	prev := s.kept.Load()
	p := prev.clone(at)
	if _, ok := p.attrs[a.Ino]; !ok && !p.room(nil) {
		clear(p.attrs)
		clear(p.rows)
	}
	p.attrs[a.Ino] = a
	// A racing keep or mutation wins: this one is only a saving.
	s.kept.CompareAndSwap(prev, p)
}
