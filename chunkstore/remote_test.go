package chunkstore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// memRemote is a Remote in memory: the unit tests' stand-in for
// sharedchunks (which runs against a real S3 server in vfs and cluster
// tests).
type memRemote struct {
	mu   sync.Mutex
	objs map[Hash][]byte
	gets int
	puts int
	has  int
	down bool // every call fails as an unreachable store's would
}

func newMemRemote() *memRemote { return &memRemote{objs: map[Hash][]byte{}} }

func (m *memRemote) Has(_ context.Context, h Hash) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.has++
	_, ok := m.objs[h]
	return ok, nil
}

func (m *memRemote) Put(_ context.Context, h Hash, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[h] = append([]byte(nil), data...)
	m.puts++
	return nil
}

func (m *memRemote) Get(_ context.Context, h Hash, size int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errors.New("dial tcp 127.0.0.1:9: connection refused")
	}
	m.gets++
	d, ok := m.objs[h]
	if !ok {
		return nil, ErrRemoteMissing
	}
	return append([]byte(nil), d...), nil
}

func remoteStore(t *testing.T, dir string, r Remote) (*Store, *sql.DB) {
	t.Helper()
	db := openFileDB(t, filepath.Join(dir, "state.db"))
	return newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), NoSync: true, Remote: r}), db
}

func owedHashes(t *testing.T, s *Store, db *sql.DB) map[Hash]bool {
	t.Helper()
	owed, err := s.Owed(context.Background(), db, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[Hash]bool{}
	for _, c := range owed {
		out[c.Ref.Hash] = true
	}
	return out
}

func uploadAll(t *testing.T, s *Store, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	owed, err := s.Owed(ctx, db, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var hs []Hash
	for _, c := range owed {
		if err := s.Upload(ctx, db, c.Ref, c.Verify); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, c.Ref.Hash)
	}
	inTx(t, db, func(tx *sql.Tx) error { return s.MarkUploaded(ctx, tx, hs) })
}

// TestRemoteOwedLifecycle: non-inline chunks are owed from their first
// reference, uploaded once, no longer owed, owed again when referenced
// after they had no reference (the remote may have dropped them), and
// never when inline.
func TestRemoteOwedLifecycle(t *testing.T) {
	r := newMemRemote()
	s, db := remoteStore(t, t.TempDir(), r)
	ctx := context.Background()
	m := commitFile(t, s, db, 1, 100, 100<<10, ChunkSize) // inline, pack, file
	owed := owedHashes(t, s, db)
	if len(owed) != 2 || owed[m[0].Hash] || !owed[m[1].Hash] || !owed[m[2].Hash] {
		t.Fatalf("owed after the first reference: %v", owed)
	}
	if n, err := s.OwedCount(ctx, db); err != nil || n != 2 {
		t.Fatalf("OwedCount %d %v", n, err)
	}
	uploadAll(t, s, db)
	if len(owedHashes(t, s, db)) != 0 || len(r.objs) != 2 {
		t.Fatalf("after the upload: owed %v, remote holds %d", owedHashes(t, s, db), len(r.objs))
	}
	// A second reference while one stands owes nothing.
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(ctx, tx, m) })
	if got := owedHashes(t, s, db); len(got) != 0 {
		t.Fatalf("owed after a second reference: %v", got)
	}
	// Every reference dropped, then one added again: owed a check.
	dropRefs(t, s, db, m)
	dropRefs(t, s, db, m)
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(ctx, tx, m[1:2]) })
	if got := owedHashes(t, s, db); len(got) != 1 || !got[m[1].Hash] {
		t.Fatalf("owed after a reference came back: %v", got)
	}
	if owed, _ := s.Owed(ctx, db, 0, 10); len(owed) != 1 || !owed[0].Verify {
		t.Fatalf("a chunk referenced again is owed %+v, want a check", owed)
	}
	// Reowe owes every referenced chunk the remote is said to hold.
	inTx(t, db, func(tx *sql.Tx) error { return s.AddRefs(ctx, tx, m[2:3]) })
	uploadAll(t, s, db)
	var n int64
	inTx(t, db, func(tx *sql.Tx) error {
		var err error
		n, err = s.Reowe(ctx, tx)
		return err
	})
	if n != 2 {
		t.Fatalf("Reowe: %d rows, want 2", n)
	}
	// An upload of a large chunk the remote has sends nothing.
	r.puts = 0
	uploadAll(t, s, db)
	if r.puts != 0 {
		t.Fatalf("%d chunks the remote has sent again", r.puts)
	}
	// A small new one is sent without asking first.
	commitFile(t, s, db, 9, 10<<10)
	r.has = 0
	uploadAll(t, s, db)
	if r.puts != 1 || r.has != 0 || len(r.objs) != 3 {
		t.Fatalf("a small chunk's upload: %d puts, %d probes", r.puts, r.has)
	}
	// A check of chunks the remote has (a restart) asks about each, small
	// ones too, and sends none.
	inTx(t, db, func(tx *sql.Tx) error { _, err := s.Reowe(ctx, tx); return err })
	r.puts, r.has = 0, 0
	uploadAll(t, s, db)
	if r.puts != 0 || r.has != 3 {
		t.Fatalf("a check of 3 chunks the remote has: %d puts, %d probes", r.puts, r.has)
	}
}

// TestDetachedStoreReadsFromRemote: a database moved to a machine without
// its chunk files (a replica restored elsewhere) reads each chunk from
// the remote once, checked, then locally; Has counts the remote's chunks
// present; a chunk the remote lost is an error, not zeros.
func TestDetachedStoreReadsFromRemote(t *testing.T) {
	r := newMemRemote()
	dir := t.TempDir()
	s, db := remoteStore(t, dir, r)
	ctx := context.Background()
	m := commitFile(t, s, db, 2, 100<<10, ChunkSize, 200<<10)
	uploadAll(t, s, db)
	want := make([][]byte, len(m))
	for i := range m {
		var err error
		if want[i], err = s.Get(ctx, db, m[i].Hash); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if err := os.RemoveAll(filepath.Join(dir, "chunks")); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), NoSync: true, Remote: r})
	var n int64
	inTx(t, db, func(tx *sql.Tx) error {
		var err error
		n, err = s2.Detach(ctx, tx)
		return err
	})
	if n != 3 {
		t.Fatalf("Detach: %d rows", n)
	}
	have, err := s2.Has(ctx, db, []Hash{m[0].Hash, m[1].Hash, m[2].Hash})
	if err != nil || len(have) != 3 {
		t.Fatalf("Has on a detached store: %v %v", have, err)
	}
	// Owed a check (a restart), they still count as present.
	inTx(t, db, func(tx *sql.Tx) error { _, err := s2.Reowe(ctx, tx); return err })
	if have, err := s2.Has(ctx, db, []Hash{m[0].Hash, m[1].Hash, m[2].Hash}); err != nil || len(have) != 3 {
		t.Fatalf("Has on a detached store owed a check: %v %v", have, err)
	}
	// An unreachable remote is said so (callers may retry), not taken for
	// a lost chunk.
	r.down = true
	if _, err := s2.Get(ctx, db, m[0].Hash); !errors.Is(err, ErrRemoteUnavailable) || errors.Is(err, ErrRemoteMissing) {
		t.Fatalf("Get with the remote down: %v", err)
	}
	r.down = false
	for round := range 2 {
		for i := range m {
			got, err := s2.Get(ctx, db, m[i].Hash)
			if err != nil || string(got) != string(want[i]) {
				t.Fatalf("round %d chunk %d: %v", round, i, err)
			}
			p := make([]byte, 10)
			if _, err := s2.ReadAt(ctx, db, m[i], p, 5); err != nil || string(p) != string(want[i][5:15]) {
				t.Fatalf("ReadAt chunk %d: %v", i, err)
			}
		}
	}
	if r.gets != 3 {
		t.Fatalf("the remote was asked %d times for 3 chunks read twice", r.gets)
	}
	// Bytes the remote serves wrong are refused.
	bad := commitFile(t, s2, db, 3, 300<<10)
	uploadAll(t, s2, db)
	r.objs[bad[0].Hash] = make([]byte, bad[0].Size)
	s2.Close()
	if err := os.RemoveAll(filepath.Join(dir, "chunks")); err != nil {
		t.Fatal(err)
	}
	s3 := newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), NoSync: true, Remote: r})
	inTx(t, db, func(tx *sql.Tx) error { _, err := s3.Detach(ctx, tx); return err })
	if _, err := s3.Get(ctx, db, bad[0].Hash); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of bytes the remote corrupted: %v", err)
	}
	delete(r.objs, bad[0].Hash)
	if _, err := s3.Get(ctx, db, bad[0].Hash); !errors.Is(err, ErrRemoteMissing) {
		t.Fatalf("Get of a chunk the remote lost: %v", err)
	}
}

// blockingRemote answers Get only once released.
type blockingRemote struct {
	*memRemote
	release chan struct{}
}

func (b *blockingRemote) Get(ctx context.Context, h Hash, size int) ([]byte, error) {
	<-b.release
	return b.memRemote.Get(ctx, h, size)
}

// TestFetchSharedBeyondACancelledReader: readers of one missing chunk
// share one fetch; the first reader giving up (its context cancelled)
// neither fails the fetch for the others nor waits for it.
func TestFetchSharedBeyondACancelledReader(t *testing.T) {
	mem := newMemRemote()
	dir := t.TempDir()
	s, db := remoteStore(t, dir, mem)
	ctx := context.Background()
	m := commitFile(t, s, db, 4, 100<<10)
	uploadAll(t, s, db)
	s.Close()
	if err := os.RemoveAll(filepath.Join(dir, "chunks")); err != nil {
		t.Fatal(err)
	}
	br := &blockingRemote{memRemote: mem, release: make(chan struct{})}
	s2 := newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), NoSync: true, Remote: br})
	inTx(t, db, func(tx *sql.Tx) error { _, err := s2.Detach(ctx, tx); return err })

	first, cancel := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() {
		_, err := s2.Get(first, db, m[0].Hash)
		firstDone <- err
	}()
	secondDone := make(chan error, 1)
	go func() {
		_, err := s2.Get(ctx, db, m[0].Hash)
		secondDone <- err
	}()
	cancel()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled reader: %v", err)
	}
	close(br.release)
	if err := <-secondDone; err != nil {
		t.Fatalf("the other reader after the first gave up: %v", err)
	}
	if mem.gets != 1 {
		t.Fatalf("%d fetches for one chunk", mem.gets)
	}
}
