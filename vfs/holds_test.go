package vfs

import (
	"errors"
	"testing"

	"github.com/wsync/wsync/chunkstore"
)

// refsOf reads a chunk row's reference count (-1: no row).
func refsOf(t *testing.T, s *Store, h chunkstore.Hash) int {
	t.Helper()
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT refs FROM chunks WHERE hash = ?`, h[:]).Scan(&n); err != nil {
		return -1
	}
	return n
}

// A hold counts one reference however often the chunk is held, a file
// referencing a held chunk counts its own, and a release gives back the
// hold's alone (twice is the same as once).
func TestHoldChunks(t *testing.T) {
	s := newStore(t)
	data := pattern(8<<10, 3)
	st := s.Chunks().NewStage()
	r, err := st.PutHashed(ctx, data)
	must(t, err)
	must(t, s.HoldChunks(ctx, st, []chunkstore.Ref{r, r}))
	if n := refsOf(t, s, r.Hash); n != 1 {
		t.Fatalf("held chunk: %d refs, want 1", n)
	}
	must(t, s.HoldChunks(ctx, nil, []chunkstore.Ref{r}))
	if n := refsOf(t, s, r.Hash); n != 1 {
		t.Fatalf("chunk held twice: %d refs, want 1", n)
	}
	held, err := s.HeldChunks(ctx, []chunkstore.Hash{r.Hash, chunkstore.Sum([]byte("x"))})
	must(t, err)
	if !held[0] || held[1] {
		t.Fatalf("held = %v, want [true false]", held)
	}
	writeFile(t, s, "f", data)
	if n := refsOf(t, s, r.Hash); n != 2 {
		t.Fatalf("held chunk a file references: %d refs, want 2", n)
	}
	must(t, s.ReleaseHeldChunks(ctx))
	must(t, s.ReleaseHeldChunks(ctx))
	if n := refsOf(t, s, r.Hash); n != 1 {
		t.Fatalf("released chunk a file references: %d refs, want 1", n)
	}
	if held, err := s.HeldChunks(ctx, []chunkstore.Hash{r.Hash}); err != nil || held[0] {
		t.Fatalf("after the release held = %v (%v)", held, err)
	}
}

// A chunk neither the stage nor the store has is refused, and nothing of
// the call is held.
func TestHoldUnknownChunk(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	good, err := st.PutHashed(ctx, pattern(8<<10, 4))
	must(t, err)
	unknown := chunkstore.Ref{Hash: chunkstore.Sum([]byte("never stored")), Size: 12}
	if err := s.HoldChunks(ctx, st, []chunkstore.Ref{good, unknown}); !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Fatalf("hold of an unknown chunk: err = %v, want ErrUnknownHash", err)
	}
	held, err := s.HeldChunks(ctx, []chunkstore.Hash{good.Hash, unknown.Hash})
	must(t, err)
	if held[0] || held[1] {
		t.Fatalf("after a refused hold held = %v", held)
	}
}
