package vfs

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/wsync/wsync/chunkstore"
)

// TestReadAheadOfADirectorysSmallFiles: once the memo lists a directory
// (as after the mount's READDIRPLUS), reading its files one after another
// through handles that name the directory looks up the rows of the first
// two only: the second starts a read-ahead of the directory's small
// files, one query, and the others read with no chunk query. Every file
// reads its own bytes; a file of two chunks is not read ahead.
func TestReadAheadOfADirectorysSmallFiles(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	must(t, s.MkdirPath(ctx, "d/sub", 0o755, false))
	want := map[string][]byte{}
	for i := range 24 {
		size := 100 + i*150 // inline rows
		if i >= 20 {
			size = 8<<10 + i // pack records
		}
		name := fmt.Sprintf("f%02d", i)
		want[name] = pattern(size, byte(i))
		writeFile(t, s, "d/"+name, want[name])
	}
	want["large"] = pattern(chunkstore.ChunkSize+10, 7)
	writeFile(t, s, "d/large", want["large"])
	d, err := s.Stat(ctx, "d")
	must(t, err)
	if _, _, err := s.ReadDirAttrs(ctx, d.Ino, "", 1000); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte { return readThrough(t, s, d.Ino, name, d.Ino) }
	chunkQueries := func(stmts []string) (n int) {
		for _, q := range stmts {
			if strings.Contains(q, "FROM chunks") {
				n++
			}
		}
		return n
	}
	for _, name := range []string{"f00", "f01"} {
		if got := read(name); !bytes.Equal(got, want[name]) {
			t.Fatalf("%s read wrong bytes", name)
		}
	}
	stmts := countStatementsOn(t, s.rc, func() {
		for i := 2; i < 24; i++ {
			name := fmt.Sprintf("f%02d", i)
			if got := read(name); !bytes.Equal(got, want[name]) {
				t.Errorf("%s read wrong bytes", name)
			}
		}
	})
	if n := chunkQueries(stmts); n != 0 {
		t.Errorf("reading 22 files after the read-ahead ran %d chunk queries, want none:\n%s", n, strings.Join(stmts, "\n"))
	}
	if got := read("large"); !bytes.Equal(got, want["large"]) {
		t.Errorf("large read wrong bytes")
	}
}

// TestReadAheadNeedsTwoFilesInARow: a handle that names no directory
// counts for nothing, and reads alternating between two directories
// start no read-ahead (a reader of one file per directory pays nothing
// for it).
func TestReadAheadNeedsTwoFilesInARow(t *testing.T) {
	s := newStore(t)
	var dirs [2]Ino
	for i, dn := range []string{"a", "b"} {
		must(t, s.MkdirPath(ctx, dn, 0o755, false))
		for j := range 5 {
			writeFile(t, s, fmt.Sprintf("%s/f%d", dn, j), pattern(200+j, byte(j)))
		}
		a, err := s.Stat(ctx, dn)
		must(t, err)
		dirs[i] = a.Ino
		if _, _, err := s.ReadDirAttrs(ctx, a.Ino, "", 100); err != nil {
			t.Fatal(err)
		}
	}
	read := func(dir Ino, name string, hint bool) {
		if hint {
			readThrough(t, s, dir, name, dir)
		} else {
			readThrough(t, s, dir, name, 0)
		}
	}
	runs := func() float64 {
		var m dto.Metric
		must(t, metricAheadRuns.Write(&m))
		return m.GetCounter().GetValue()
	}
	before := runs()
	for j := range 5 {
		read(dirs[0], fmt.Sprintf("f%d", j), false)
	}
	for j := range 5 {
		read(dirs[j%2], fmt.Sprintf("f%d", j), true)
	}
	if got := runs() - before; got != 0 {
		t.Errorf("%v read-aheads, want none", got)
	}
	read(dirs[1], "f0", true) // the loop ended in a: now two files of b in a row
	read(dirs[1], "f1", true)
	if got := runs() - before; got != 1 {
		t.Errorf("%v read-aheads after two files of b in a row, want 1", got)
	}
}

// TestReadAheadOfFilesOfTheSameBytes: a directory of files with the same
// bytes (stubs, licences) reads the one chunk's row ahead once, and every
// file after that reads with no chunk query.
func TestReadAheadOfFilesOfTheSameBytes(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	same := []byte("module.exports = 1\n")
	for i := range 12 {
		writeFile(t, s, fmt.Sprintf("d/f%02d.js", i), same)
	}
	d, err := s.Stat(ctx, "d")
	must(t, err)
	if _, _, err := s.ReadDirAttrs(ctx, d.Ino, "", 100); err != nil {
		t.Fatal(err)
	}
	read := func(i int) {
		t.Helper()
		if p := readThrough(t, s, d.Ino, fmt.Sprintf("f%02d.js", i), d.Ino); !bytes.Equal(p, same) {
			t.Fatalf("f%02d read %q", i, p)
		}
	}
	read(0)
	read(1)
	stmts := countStatementsOn(t, s.rc, func() {
		for i := 2; i < 12; i++ {
			read(i)
		}
	})
	for _, q := range stmts {
		if strings.Contains(q, "FROM chunks") {
			t.Errorf("a read after the read-ahead ran %q", q)
		}
	}
}

// TestReadAheadIsBounded: two files read in a directory of 600 small ones
// make the store read at most aheadFiles rows ahead, in one query.
func TestReadAheadIsBounded(t *testing.T) {
	s := newStore(t)
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	for i := range 600 {
		writeFile(t, s, fmt.Sprintf("d/f%03d", i), pattern(50+i, byte(i)))
	}
	d, err := s.Stat(ctx, "d")
	must(t, err)
	if _, _, err := s.ReadDirAttrs(ctx, d.Ino, "", 1000); err != nil {
		t.Fatal(err)
	}
	rows := func() float64 {
		var m dto.Metric
		must(t, metricAheadRows.Write(&m))
		return m.GetCounter().GetValue()
	}
	before := rows()
	stmts := countStatementsOn(t, s.rc, func() {
		for i := range 2 {
			readThrough(t, s, d.Ino, fmt.Sprintf("f%03d", i), d.Ino)
		}
	})
	batches := 0
	for _, q := range stmts {
		if strings.Contains(q, "FROM chunks WHERE hash IN") {
			batches++
		}
	}
	if got := rows() - before; got > aheadFiles || got < aheadFiles/2 || batches != 1 {
		t.Errorf("two reads read %v rows ahead in %d queries, want at most %d in one", got, batches, aheadFiles)
	}
}

// readThrough reads file name of dir whole through a handle that names
// hint as its directory (0: none), as the mount's open does.
func readThrough(t *testing.T, s *Store, dir Ino, name string, hint Ino) []byte {
	t.Helper()
	a, err := s.Lookup(ctx, dir, name)
	must(t, err)
	h, err := s.OpenHandle(ctx, a.Ino)
	must(t, err)
	defer h.Release(ctx)
	if hint != 0 {
		h.SetDir(hint)
	}
	p := make([]byte, a.Size)
	_, err = h.ReadAt(ctx, p, 0)
	must(t, err)
	return p
}
