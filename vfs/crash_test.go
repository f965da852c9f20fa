package vfs

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/wsync/wsync/internal/testutil"
)

const crashEnv = "WSYNC_VFS_CRASH_DB"

// blockingReader yields n bytes of pattern, says "staged" on stdout once it
// has handed them all over, then blocks forever: the writer has stored the
// chunk bytes but not committed the transaction that names them.
type blockingReader struct {
	data []byte
	off  int
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if r.off == len(r.data) {
		fmt.Println("staged")
		select {}
	}
	n := copy(p, r.data[r.off:])
	r.off += n
	return n, nil
}

func crashCommitted(i int) []byte { return pattern(cs+i*1000, byte(10+i)) }

func TestCrashBetweenChunkBytesAndCommit(t *testing.T) {
	if db := os.Getenv(crashEnv); db != "" {
		s, err := Open(ctx, db, Options{})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(1)
		}
		for i := range 3 {
			if _, err := s.WriteFile(ctx, fmt.Sprintf("committed%d", i), crashCommitted(i), 0o644); err != nil {
				fmt.Println("write:", err)
				os.Exit(1)
			}
		}
		// Four full chunks of new bytes, then block before the commit.
		s.WriteFileFrom(ctx, "uncommitted", &blockingReader{data: pattern(4*cs+1, 99)}, 0o644)
		return
	}
	db := filepath.Join(t.TempDir(), "store.db")
	child := testutil.StartChild(t, "TestCrashBetweenChunkBytesAndCommit", crashEnv+"="+db)
	child.ReadUntil(t, "staging", func(line string) bool { return line == "staged" })
	before := countChunkFiles(t, db+".chunks")
	child.Kill(t) // SIGKILL

	// Committed files: 3 full chunks (one each) + 3 inline tails.
	// Uncommitted: 4 full chunks + 1 small tail (inline, memory only).
	if before != 3+4 {
		t.Fatalf("chunk files before the crash = %d, want 7", before)
	}
	s := openStore(t, db)
	for i := range 3 {
		if got := readFile(t, s, fmt.Sprintf("committed%d", i)); !bytes.Equal(got, crashCommitted(i)) {
			t.Errorf("committed%d damaged by the crash", i)
		}
	}
	if _, err := s.Stat(ctx, "uncommitted"); err == nil {
		t.Error("the uncommitted file exists")
	}
	if after := countChunkFiles(t, db+".chunks"); after != 3 {
		t.Errorf("chunk files after reopen = %d, want the 3 committed ones (orphans collected)", after)
	}
}

func countChunkFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && len(d.Name()) == 64 {
			n++
		}
		return nil
	})
	must(t, err)
	return n
}
