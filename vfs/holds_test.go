package vfs

import (
	"bytes"
	"errors"
	"slices"
	"strings"
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

// An Apply with Held takes over the holds of the chunks its batch names:
// the hold rows go, each hold's reference becomes the first the batch adds
// (a chunk two files name counts two, not three), a held chunk the batch
// only names through an entry that changes nothing gives its hold's
// reference back, and a held chunk no entry names keeps its hold. Nothing
// is probed for a held chunk, and a chunk neither held nor stored still
// fails the batch. After the release every count matches the manifests.
func TestApplyTakesTheHolds(t *testing.T) {
	s := newStore(t)
	a, b, c, d, e := pattern(chunkstore.ChunkSize, 11), pattern(9<<10, 12), pattern(10<<10, 13), pattern(11<<10, 14), pattern(12<<10, 15)
	writeFile(t, s, "same", e) // already there: its entry below changes nothing
	st := s.Chunks().NewStage()
	var refs []chunkstore.Ref
	for _, data := range [][]byte{a, b, c, d, e} {
		r, err := st.PutHashed(ctx, data)
		must(t, err)
		refs = append(refs, r)
	}
	must(t, s.HoldChunks(ctx, st, refs))
	ra, rb, rc, rd, re := refs[0], refs[1], refs[2], refs[3], refs[4]
	if n := refsOf(t, s, re.Hash); n != 2 {
		t.Fatalf("held chunk of an existing file: %d refs, want 2", n)
	}
	same, err := s.Stat(ctx, "same")
	must(t, err)
	file := func(path string, rs ...chunkstore.Ref) ChangeEntry {
		en := ChangeEntry{Kind: EntryFile, Rev: 1, Path: path, Mode: 0o644, Mtime: 1e18, Chunks: rs}
		for _, r := range rs {
			en.Size += int64(r.Size)
		}
		return en
	}
	sameEntry := file("same", re)
	sameEntry.Mode, sameEntry.Mtime = same.Mode, same.Mtime.UnixNano()

	// A chunk nobody has fails the batch, and the holds it would take stay.
	unknown := chunkstore.Ref{Hash: chunkstore.Sum([]byte("never stored")), Size: 12}
	_, err = s.Apply(ctx, []ChangeEntry{file("x", ra), file("y", unknown)}, ApplyOptions{Source: Upstream, Held: true})
	if !errors.Is(err, chunkstore.ErrUnknownHash) {
		t.Fatalf("apply naming an unknown chunk: %v, want ErrUnknownHash", err)
	}
	if held, err := s.HeldChunks(ctx, []chunkstore.Hash{ra.Hash}); err != nil || !held[0] {
		t.Fatalf("after a failed batch held = %v (%v), want the hold kept", held, err)
	}

	res, err := s.Apply(ctx, []ChangeEntry{file("f1", ra, rb), file("f2", rc), file("f3", rc), sameEntry},
		ApplyOptions{Source: Upstream, Held: true})
	must(t, err)
	if res.Applied != 3 || res.Skipped != 1 {
		t.Fatalf("applied %d, skipped %d; want 3 and 1", res.Applied, res.Skipped)
	}
	for _, w := range []struct {
		name string
		r    chunkstore.Ref
		refs int
		held bool
	}{{"a", ra, 1, false}, {"b", rb, 1, false}, {"c (two files)", rc, 2, false}, {"d (named by none)", rd, 1, true}, {"e (entry unchanged)", re, 1, false}} {
		if n := refsOf(t, s, w.r.Hash); n != w.refs {
			t.Errorf("chunk %s: %d refs, want %d", w.name, n, w.refs)
		}
		held, err := s.HeldChunks(ctx, []chunkstore.Hash{w.r.Hash})
		must(t, err)
		if held[0] != w.held {
			t.Errorf("chunk %s: held %v, want %v", w.name, held[0], w.held)
		}
	}
	if got := readFile(t, s, "f1"); !bytes.Equal(got, append(slices.Clone(a), b...)) {
		t.Errorf("f1 reads %d bytes, not its chunks", len(got))
	}
	must(t, s.ReleaseHeldChunks(ctx))
	if n := refsOf(t, s, rd.Hash); n != 0 {
		t.Errorf("released chunk no file names: %d refs, want 0", n)
	}
	checkRefs(t, s)
}

// TestHoldChunksOneStatementABatch: holding chunks writes each batch's
// holds in one statement that skips those held already (no query of the
// holds first), and counts a reference only for the new ones.
func TestHoldChunksOneStatementABatch(t *testing.T) {
	s := newStore(t)
	st := s.Chunks().NewStage()
	var refs []chunkstore.Ref
	for i := range 300 {
		r, err := st.PutHashed(ctx, pattern(100+i, byte(i)))
		must(t, err)
		refs = append(refs, r)
	}
	must(t, s.HoldChunks(ctx, nil, refs[:10])) // held already: skipped below
	stmts := countStatementsOn(t, nil, func() { must(t, s.HoldChunks(ctx, st, refs)) })
	var holds []string
	for _, q := range stmts {
		if strings.Contains(q, "chunk_holds") {
			holds = append(holds, q)
		}
	}
	if len(holds) != 2 {
		t.Errorf("holding 300 chunks ran %d statements on the holds, want 2 (one a batch):\n%s", len(holds), strings.Join(holds, "\n"))
	}
	for _, r := range refs {
		if n := refsOf(t, s, r.Hash); n != 1 {
			t.Fatalf("chunk held: %d refs, want 1", n)
		}
	}
}
