package chunkstore

import (
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wsync/wsync/internal/testutil"
)

// crashDirEnv turns the test binary into the crashing child: the value is
// the directory holding its database and chunks.
const crashDirEnv = "WSYNC_CHUNKSTORE_CRASH_DIR"

// The child's chunks, derived from fixed seeds so the parent can check them.
var (
	crashCommittedSizes = []int{ChunkSize, ChunkSize, 5000, 100}
	crashStagedSizes    = []int{ChunkSize, ChunkSize, ChunkSize, 80 << 10, 300}
)

const (
	crashCommittedSeed = 500
	crashStagedSeed    = 600
)

func crashManifest(seed uint64, sizes []int) Manifest {
	m := make(Manifest, len(sizes))
	for i, n := range sizes {
		b := chunkBytes(seed+uint64(i), n)
		m[i] = Ref{Hash: Sum(b), Size: uint32(n)}
	}
	return m
}

func TestCrashBetweenChunkBytesAndCommitLeavesOnlyCollectableOrphans(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(t, dir)
		return
	}
	dir := t.TempDir()
	// The child blocks reading stdin until it is killed.
	child := testutil.StartChild(t, t.Name(), crashDirEnv+"="+dir)
	child.ReadUntil(t, "staging", func(line string) bool { return line == "staged" })
	// SIGKILL: no deferred cleanup, no Close, an open write transaction.
	child.Kill(t)

	db := openFileDB(t, filepath.Join(dir, "state.db"))
	s := newTestStore(t, Options{Dir: filepath.Join(dir, "chunks")})
	committed := crashManifest(crashCommittedSeed, crashCommittedSizes)
	staged := crashManifest(crashStagedSeed, crashStagedSizes)

	checkContent(t, s, db, committed, crashCommittedSeed)
	if got, want := has(t, s, db, append(hashes(committed), hashes(staged)...)...), hashes(committed); !slices.Equal(got, want) {
		t.Fatalf("Has after the crash = %v, want only the committed chunks %v", got, want)
	}
	inline, fileBytes := layoutBytes(s, crashCommittedSizes...)
	committedFiles := int(countFileChunks(s, crashCommittedSizes...))
	stagedFiles := int(countFileChunks(s, crashStagedSizes...))
	if got, want := stats(t, s, db), (Stats{Chunks: int64(len(committed)), InlineBytes: inline, FileBytes: fileBytes}); got != want {
		t.Fatalf("stats after the crash = %+v, want %+v", got, want)
	}
	files, err := s.scanDir()
	if err != nil {
		t.Fatal(err)
	}
	var chunkFiles, temps int
	for _, f := range files {
		if f.temp {
			temps++
		} else {
			chunkFiles++
		}
	}
	if chunkFiles != committedFiles+stagedFiles || temps != 1 {
		t.Fatalf("after the crash: %d chunk files and %d temp files, want %d and 1", chunkFiles, temps, committedFiles+stagedFiles)
	}

	gc := collect(t, s, db)
	if got, want := gc.Files, int64(stagedFiles+1); got != want {
		t.Fatalf("GC after reopen unlinked %d files, want %d (the staged chunks and the temp file)", got, want)
	}
	files, err = s.scanDir()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(files), committedFiles; got != want {
		t.Fatalf("files after GC = %d, want %d (the committed file chunks)", got, want)
	}
	checkContent(t, s, db, committed, crashCommittedSeed)
}

// crashChild commits one file's chunks, stages another's (their files are
// written and fsynced), opens the transaction that would reference them,
// leaves a half-written temp file as an interrupted Put would, and waits to
// be killed.
func crashChild(t *testing.T, dir string) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "state.db")))
	if err != nil {
		t.Fatal(err)
	}
	if err := Schema(ctx, db); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Dir: filepath.Join(dir, "chunks")})
	if err != nil {
		t.Fatal(err)
	}

	st := s.NewStage()
	for i, n := range crashCommittedSizes {
		if _, err := st.PutHashed(ctx, chunkBytes(crashCommittedSeed+uint64(i), n)); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddRefs(ctx, tx, crashManifest(crashCommittedSeed, crashCommittedSizes)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	st.Release()

	st = s.NewStage()
	for i, n := range crashStagedSizes {
		if _, err := st.PutHashed(ctx, chunkBytes(crashStagedSeed+uint64(i), n)); err != nil {
			t.Fatal(err)
		}
	}
	if tx, err = db.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRefs(ctx, tx, crashManifest(crashStagedSeed, crashStagedSizes)); err != nil {
		t.Fatal(err)
	}
	h := Sum([]byte("interrupted write"))
	if err := os.MkdirAll(filepath.Dir(s.filePath(h)), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(filepath.Dir(s.filePath(h)), tempPrefix+h.String()+"-*")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("half a chunk")

	os.Stdout.WriteString("staged\n")
	io.Copy(io.Discard, os.Stdin) // until killed
	t.Fatal("the parent closed stdin instead of killing the child")
}
