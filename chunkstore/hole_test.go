package chunkstore

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"reflect"
	"testing"
)

// A hole ref is zeros with no row: reference counting skips it, Has reports
// it present (nothing to fetch), reads fill zeros, and GC never sees it.
func TestHoleRefsAreNotChunks(t *testing.T) {
	ctx := context.Background()
	s, db := splitStore(t, 0, true)
	data := commitFile(t, s, db, 7, ChunkSize)
	m := Manifest(nil).AppendHole(3 * ChunkSize).Append(data[0]).AppendHole(100)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	// One more reference for the data chunk; the holes count nothing and
	// make no row.
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(ctx, tx, m) })
	if got := stats(t, s, db).Chunks; got != 1 {
		t.Fatalf("rows after referencing a sparse manifest = %d, want 1", got)
	}
	if got, want := has(t, s, db, HoleHash, data[0].Hash), []Hash{HoleHash, data[0].Hash}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Has = %v, want %v", got, want)
	}
	for _, r := range m {
		p := bytes.Repeat([]byte{0xff}, ChunkSize+1)
		n, err := s.ReadAt(ctx, db, Ref{r.Hash, min(r.Size, ChunkSize)}, p, 0)
		if n != int(min(r.Size, ChunkSize)) || err != io.EOF {
			t.Fatalf("ReadAt(%v) = %d, %v", r, n, err)
		}
		if r.IsHole() && !IsZero(p[:n]) {
			t.Fatalf("a hole read nonzero bytes")
		}
	}
	// Dropping both manifests' references leaves the chunk collectable;
	// the holes do not make DropRefs fail with ErrUnknownHash.
	dropRefs(t, s, db, m)
	dropRefs(t, s, db, data)
	if got := collect(t, s, db).Rows; got != 1 {
		t.Fatalf("GC collected %d rows, want 1", got)
	}
}
