package vfs

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/wsync/wsync/chunkstore"
)

// mapRemote is a chunkstore.Remote in memory (the real one, an S3 bucket,
// runs in the cluster and sharedchunks tests).
type mapRemote struct {
	mu   sync.Mutex
	objs map[chunkstore.Hash][]byte
}

func (m *mapRemote) Has(_ context.Context, h chunkstore.Hash) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.objs[h]
	return ok, nil
}

func (m *mapRemote) Put(_ context.Context, h chunkstore.Hash, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[h] = append([]byte(nil), data...)
	return nil
}

func (m *mapRemote) Get(_ context.Context, h chunkstore.Hash, _ int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.objs[h]; ok {
		return d, nil
	}
	return nil, chunkstore.ErrRemoteMissing
}

// TestUploadOwedPassesLostBytes: a chunk whose local bytes are gone and
// which the remote never had is reported and no longer owed, so the
// uploads (and the replication waiting on them) go on; the others are
// uploaded.
func TestUploadOwedPassesLostBytes(t *testing.T) {
	r := &mapRemote{objs: map[chunkstore.Hash][]byte{}}
	dir := t.TempDir()
	s, err := Open(ctx, filepath.Join(dir, "store.db"), Options{NoSync: true, ChunkRemote: r})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	writeFile(t, s, "lost", pattern(chunkstore.ChunkSize, 1))
	writeFile(t, s, "kept", pattern(chunkstore.ChunkSize, 2))
	if n, err := s.OwedUploads(ctx); err != nil || n != 2 {
		t.Fatalf("owed: %d %v", n, err)
	}
	m, err := s.Manifest(ctx, "lost")
	must(t, err)
	h := m[0].Hash.String()
	must(t, os.Remove(filepath.Join(dir, "store.db.chunks", h[:2], h)))

	done, err := s.UploadOwed(ctx)
	if err != nil || len(done) != 2 {
		t.Fatalf("UploadOwed: %v %v", done, err)
	}
	if n, err := s.OwedUploads(ctx); err != nil || n != 0 {
		t.Fatalf("owed after: %d %v", n, err)
	}
	if len(r.objs) != 1 {
		t.Fatalf("the remote holds %d chunks, want the one with bytes", len(r.objs))
	}
}
