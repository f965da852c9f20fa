package chunkstore

import (
	"context"
	"fmt"
	"sync"
)

// Stage holds chunks for an upcoming commit: chunks received from the wire,
// or the full chunks a write handle filled. Everything it holds is pinned
// (GC leaves it alone, Has reports it, reads find it) until Release. Put and
// PutHashed may be called from several goroutines at once.
type Stage struct {
	s *Store

	mu       sync.Mutex
	held     map[Hash]struct{}
	released bool
}

// NewStage returns an empty stage.
func (s *Store) NewStage() *Stage {
	return &Stage{s: s, held: make(map[Hash]struct{})}
}

// Put stages data under h after checking that it hashes to h.
func (st *Stage) Put(ctx context.Context, h Hash, data []byte) error {
	c, err := Check(h, data)
	if err != nil {
		return err
	}
	return st.PutChecked(ctx, c)
}

// Checked is a chunk whose bytes Check found to hash to its hash. Only
// Check makes one, so a receiver can check chunks on one goroutine and
// stage them (PutChecked) on another, each hashed once.
type Checked struct {
	h    Hash
	data []byte
}

// Check checks that data is a chunk's worth of bytes hashing to h.
func Check(h Hash, data []byte) (Checked, error) {
	if err := checkChunk(h, data); err != nil {
		return Checked{}, err
	}
	if got := Sum(data); got != h {
		return Checked{}, fmt.Errorf("put chunk %s: %w (the bytes hash to %s)", h, ErrHashMismatch, got)
	}
	return Checked{h: h, data: data}, nil
}

// Ref is the checked chunk's reference.
func (c Checked) Ref() Ref { return Ref{Hash: c.h, Size: uint32(len(c.data))} }

// PutChecked stages a chunk Check checked, without hashing it again.
func (st *Stage) PutChecked(ctx context.Context, c Checked) error {
	if c.data == nil {
		return fmt.Errorf("put chunk: %w: not checked", ErrEmptyChunk)
	}
	return st.put(ctx, c.h, c.data)
}

// PutHashed stages data under its own hash and returns its Ref; it hashes
// once, for the write path.
func (st *Stage) PutHashed(ctx context.Context, data []byte) (Ref, error) {
	h := Sum(data)
	if err := checkChunk(h, data); err != nil {
		return Ref{}, err
	}
	if err := st.put(ctx, h, data); err != nil {
		return Ref{}, err
	}
	return Ref{Hash: h, Size: uint32(len(data))}, nil
}

func checkChunk(h Hash, data []byte) error {
	switch {
	case len(data) == 0:
		return fmt.Errorf("put chunk %s: %w", h, ErrEmptyChunk)
	case len(data) > ChunkSize:
		return fmt.Errorf("put chunk %s: %w: %d bytes", h, ErrChunkTooLarge, len(data))
	}
	return nil
}

// put pins h for the stage, then makes the bytes available: a copy in
// memory for an inline chunk, a durable file for the others. The pin comes
// first so that a concurrent Sweep.Finish either unlinks the old file before
// we look for it, or sees the pin and keeps it.
func (st *Stage) put(ctx context.Context, h Hash, data []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put chunk %s: %w", h, err)
	}
	s := st.s
	inline := s.inline(len(data))
	var dup []byte
	if inline {
		// Copied outside the locks: the caller may reuse its buffer.
		dup = append([]byte(nil), data...)
	}

	st.mu.Lock()
	if st.released {
		st.mu.Unlock()
		return fmt.Errorf("put chunk %s: %w", h, ErrReleased)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		st.mu.Unlock()
		return fmt.Errorf("put chunk %s: %w", h, ErrClosed)
	}
	p := s.pins[h]
	if p == nil {
		p = &pin{data: dup}
		s.pins[h] = p
	}
	_, had := st.held[h]
	if !had {
		st.held[h] = struct{}{}
		p.n++
	}
	ready := p.data != nil || p.onDisk
	s.mu.Unlock()
	st.mu.Unlock()
	if ready {
		return nil
	}

	if !s.packed(len(data)) {
		if err := s.writeFile(h, data); err != nil {
			if !had {
				st.drop(h)
			}
			return err
		}
		s.mu.Lock()
		p.onDisk = true
		s.mu.Unlock()
		return nil
	}
	loc, err := s.packs.append(s.dir, h, data)
	if err != nil {
		if !had {
			st.drop(h)
		}
		return fmt.Errorf("put chunk %s: %w", h, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.onDisk || s.pins[h] != p {
		// Another Put of the same bytes finished first, or the pin is gone:
		// this copy is dead space from the start.
		s.packs.unpin(loc.pack)
		return nil
	}
	p.loc, p.onDisk = loc, true
	s.rememberLocLocked(h, loc)
	return nil
}

// drop releases the stage's pin of one hash.
func (st *Stage) drop(h Hash) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.held[h]; !ok {
		return
	}
	delete(st.held, h)
	st.s.unpin(h)
}

// Release drops the stage's pins; inline bytes nobody else pins are freed.
// It is idempotent. A transaction that referenced the stage's chunks must
// have committed (or rolled back) before Release.
func (st *Stage) Release() {
	st.mu.Lock()
	if st.released {
		st.mu.Unlock()
		return
	}
	st.released = true
	held := st.held
	st.held = nil
	st.mu.Unlock()

	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	for h := range held {
		st.s.unpinLocked(h)
	}
}

// Len is the number of distinct chunks the stage holds.
func (st *Stage) Len() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.held)
}

func (s *Store) unpin(h Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unpinLocked(h)
}

func (s *Store) unpinLocked(h Hash) {
	p := s.pins[h]
	if p == nil { // the store was closed
		return
	}
	if p.n--; p.n > 0 {
		return
	}
	delete(s.pins, h)
	switch {
	case p.loc.valid():
		// Committed or not, its pack's next recount finds out.
		s.packs.unpin(p.loc.pack)
	case p.data == nil:
		// Committed or not, the next sweep finds out.
		s.released[h] = struct{}{}
	}
}

// pinnedData returns the bytes of a pinned inline chunk, or nil. The slice
// is never written to; callers copy from it.
func (s *Store) pinnedData(h Hash) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pins[h]; p != nil {
		return p.data
	}
	return nil
}
