package vfs

import "time"

// Directory attributes kept across mutations.
//
// Right after a mutation in a directory (a create, a mkdir, an unlink) the
// kernel asks for the directory's attributes again: it dropped them
// because the directory changed, and its permission checks need them.
// GetAttr keeps what it read of a directory, stamped with the write
// counter (Store.writes) it read it at, and answers from it while the
// counter has not moved: nothing at all was written since, so the row is
// still what was read. A mutation that changes directory rows only by
// their times (a create or an unlink sets its parent's mtime and ctime; a
// file's commit at close changes no directory) carries what is kept
// forward, with those times, to the counter it ends at; any other write
// leaves it behind. A stale answer is never given: every write moves the
// counter at its start, and a miss costs nothing but the usual read.
type keptAttrs struct {
	at    uint64
	attrs map[Ino]Attr
}

// maxKept bounds the directories kept.
const maxKept = 16

// carryKept carries what is kept forward over t, a mutation whose write
// count started from before and ended at at. Called with the writer held,
// at the end of a successful mutation.
func (s *Store) carryKept(t *wtx, before, at uint64) {
	prev := s.kept.Load()
	if !t.timesOnly || prev == nil || prev.at != before {
		s.kept.Store(nil)
		return
	}
	p := &keptAttrs{at: at, attrs: make(map[Ino]Attr, len(prev.attrs))}
	for ino, a := range prev.attrs {
		if _, ok := t.dirty[ino]; ok {
			a.Mtime = time.Unix(0, t.now)
			a.Ctime = a.Mtime
		}
		p.attrs[ino] = a
	}
	s.kept.Store(p)
}

// keptAttr returns a kept directory's attributes while nothing was
// written since they were kept.
func (s *Store) keptAttr(ino Ino) (Attr, bool) {
	p := s.kept.Load()
	if p == nil || p.at != s.writes.Load() {
		return Attr{}, false
	}
	a, ok := p.attrs[ino]
	return a, ok
}

// keepAttr keeps a directory's attributes GetAttr read at write count at
// (the counter did not move across the read).
func (s *Store) keepAttr(a Attr, at uint64) {
	if a.Kind != KindDir || at%2 == 1 {
		return // an odd count: a write was in progress (ReadDirAttrs)
	}
	prev := s.kept.Load()
	p := &keptAttrs{at: at}
	if prev != nil && prev.at == at && len(prev.attrs) < maxKept {
		p.attrs = make(map[Ino]Attr, len(prev.attrs)+1)
		for ino, b := range prev.attrs {
			p.attrs[ino] = b
		}
	} else {
		p.attrs = make(map[Ino]Attr, 1)
	}
	p.attrs[a.Ino] = a
	// A racing keep or mutation wins: this one is only a saving.
	s.kept.CompareAndSwap(prev, p)
}
