package syncwire

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// fakeBackend is an in-memory Backend for transport and codec tests: a
// fixed feed, a chunk map and watermarks. Apply records batches.
type fakeBackend struct {
	mu      sync.Mutex
	id      string
	rev     int64
	feed    []vfs.ChangeEntry
	chunks  map[chunkstore.Hash][]byte
	marks   map[string]watermark.Set
	ignores map[string]string // FeedIgnore by peer
	applied [][]vfs.ChangeEntry
	flushes int
	cs      *chunkstore.Store
	// chunkFn, when set, synthesises chunk bytes (large transfers).
	chunkFn func(h chunkstore.Hash) ([]byte, error)
	reads   atomic.Int64
	quota   vfs.Quota
}

func newFake(id string) *fakeBackend {
	return &fakeBackend{id: id, chunks: map[chunkstore.Hash][]byte{}, marks: map[string]watermark.Set{}}
}

func (f *fakeBackend) addFile(path string, data []byte) vfs.ChangeEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	e := vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: f.rev, Path: path, Mode: 0o644, Mtime: 1e9, Size: int64(len(data))}
	for off := 0; off < len(data); off += chunkstore.ChunkSize {
		c := data[off:min(off+chunkstore.ChunkSize, len(data))]
		h := chunkstore.Sum(c)
		f.chunks[h] = c
		e.Chunks = append(e.Chunks, chunkstore.Ref{Hash: h, Size: uint32(len(c))})
	}
	f.feed = append(f.feed, e)
	return e
}

func (f *fakeBackend) ID() string { return f.id }
func (f *fakeBackend) CurrentRev() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev
}

func (f *fakeBackend) Changes(ctx context.Context, after, through watermark.Cursor, ig vfs.Ignore) iter.Seq2[vfs.ChangeEntry, error] {
	return func(yield func(vfs.ChangeEntry, error) bool) {
		f.mu.Lock()
		feed := slices.Clone(f.feed)
		f.mu.Unlock()
		slices.SortFunc(feed, func(a, b vfs.ChangeEntry) int {
			return cmp.Or(cmp.Compare(a.Rev, b.Rev), strings.Compare(a.Path, b.Path))
		})
		for _, e := range feed {
			if !after.Admits(e.Rev, e.Path) || e.Rev > through.Rev || ig.IgnoresEntry(e) {
				continue
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

func (f *fakeBackend) Apply(ctx context.Context, entries []vfs.ChangeEntry, opts vfs.ApplyOptions) (vfs.ApplyResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, e := range entries {
		for _, r := range e.Chunks {
			if _, ok := f.chunks[r.Hash]; !ok {
				return vfs.ApplyResult{}, &vfs.EntryError{Index: i, Rev: e.Rev, Path: e.Path, Err: chunkstore.ErrUnknownHash}
			}
		}
	}
	f.applied = append(f.applied, entries)
	first := f.rev + 1
	f.rev += int64(len(entries))
	if opts.Watermarks != nil {
		f.marks[opts.Peer] = *opts.Watermarks
	}
	return vfs.ApplyResult{Applied: len(entries), FirstRev: first, LastRev: f.rev, RevBefore: first - 1}, nil
}

func (f *fakeBackend) Has(ctx context.Context, hs []chunkstore.Hash) ([]chunkstore.Hash, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []chunkstore.Hash
	for _, h := range hs {
		if _, ok := f.chunks[h]; ok {
			out = append(out, h)
		}
	}
	return out, nil
}

func (f *fakeBackend) ReadChunks(ctx context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error {
	return eachChunk(func(h chunkstore.Hash) ([]byte, error) { return f.readChunk(ctx, h) })(ctx, hs, each)
}

// eachChunk is a ChunkReader that reads one chunk at a time with read.
func eachChunk(read func(chunkstore.Hash) ([]byte, error)) ChunkReader {
	return func(ctx context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error {
		for _, h := range hs {
			b, err := read(h)
			if err != nil {
				return err
			}
			if err := each(h, b); err != nil {
				return err
			}
		}
		return nil
	}
}

func (f *fakeBackend) readChunk(ctx context.Context, h chunkstore.Hash) ([]byte, error) {
	f.reads.Add(1)
	if f.chunkFn != nil {
		return f.chunkFn(h)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.chunks[h]
	if !ok {
		return nil, fmt.Errorf("chunk %s: %w", h, chunkstore.ErrUnknownHash)
	}
	return b, nil
}

func (f *fakeBackend) Chunks() *chunkstore.Store { return f.cs }

func (f *fakeBackend) Watermarks(ctx context.Context, peer string) (watermark.Set, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.marks[peer], nil
}

func (f *fakeBackend) SetWatermarks(ctx context.Context, peer string, set watermark.Set) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marks[peer] = set
	return nil
}

func (f *fakeBackend) FeedIgnore(ctx context.Context, peer string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ignores[peer], nil
}

func (f *fakeBackend) SetFeedIgnore(ctx context.Context, peer, key string, set watermark.Set) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ignores == nil {
		f.ignores = make(map[string]string)
	}
	f.ignores[peer] = key
	f.marks[peer] = set
	return nil
}

func (f *fakeBackend) Delivered(ctx context.Context, peer string, set watermark.Set, sent []vfs.ChangeEntry, deferred []string, bases bool) error {
	return f.SetWatermarks(ctx, peer, set)
}

func (f *fakeBackend) Bounce(ctx context.Context, peer string) (vfs.BounceRun, error) {
	return vfs.BounceRun{}, nil
}

func (f *fakeBackend) MeetPeer(ctx context.Context, peer, id string, served int64) (vfs.Met, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return vfs.Met{Fetch: f.marks[peer].Fetch}, nil
}

func (f *fakeBackend) Served() int64 { return f.rev }

func (f *fakeBackend) NoteServed(ctx context.Context, rev int64) {}

func (f *fakeBackend) FlushAll(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes++
	return nil
}

func (f *fakeBackend) Quota() vfs.Quota {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.quota
}

func (f *fakeBackend) SetQuota(q vfs.Quota) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quota = q
	return nil
}

func (f *fakeBackend) Usage() vfs.Usage { return vfs.Usage{} }

func (f *fakeBackend) Admit(ctx context.Context, entries []vfs.ChangeEntry, from vfs.Usage) (vfs.Usage, error) {
	return vfs.Usage{}, nil
}

// testConfig has short timers so failure paths finish fast.
func testConfig() rpc.Config {
	return rpc.Config{PingInterval: 200 * time.Millisecond, PingTimeout: 2 * time.Second, CallTimeout: 20 * time.Second}
}

// newClient is a client with the test timers, closed when the test ends.
func newClient(t *testing.T, opts rpc.ClientOptions) *rpc.Client {
	t.Helper()
	opts.Config = testConfig()
	opts.Config.ID = "client-store"
	c := rpc.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func wsClient(t *testing.T, url, token string) *rpc.Client {
	return newClient(t, rpc.ClientOptions{URL: url, Token: token})
}

func session(t testing.TB, c *rpc.Client) *rpc.Session {
	t.Helper()
	s, _, err := c.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
