package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/s3test"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/lease"
	"github.com/wsync/wsync/objstore"
	"github.com/wsync/wsync/replica"
	"github.com/wsync/wsync/sharedchunks"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// gcGrace is the tests' collector grace: well above the second the
// bucket's timestamps may be rounded to, short enough for several
// collections per test.
const gcGrace = 2 * time.Second

func openBucket(t *testing.T, srv *s3test.Server, prefix string) *objstore.Store {
	t.Helper()
	cfg, err := objstore.ParseURL(srv.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(testutil.Context(t, time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newTestCluster(t *testing.T, st *objstore.Store, id string) *Cluster {
	t.Helper()
	c, err := New(Options{Store: st, ServerID: id, Address: "http://" + id, LeaseTTL: 10 * time.Second,
		ReplicateEvery: 50 * time.Millisecond, ChunkGCEvery: -1, ChunkGCGrace: gcGrace,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// served is one workspace a test cluster owns, with its open store.
type served struct {
	name  string
	store *vfs.Store
	close io.Closer
}

func (w *served) shutdown() {
	w.close.Close()
	w.store.Close()
}

func create(t *testing.T, c *Cluster, name string) *served {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	dir := filepath.Join(t.TempDir(), name)
	if err := c.Create(ctx, name, dir, func(error) {}); err != nil {
		t.Fatal(err)
	}
	return open(t, c, name, dir)
}

func open(t *testing.T, c *Cluster, name, dir string) *served {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	opts := vfs.Options{NoSync: true, GroupWindow: -1, Logger: slog.New(slog.DiscardHandler)}
	c.StoreOptions(name, &opts)
	s, err := vfs.Open(ctx, filepath.Join(dir, "store.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.Opened(ctx, name, s)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	w := &served{name: name, store: s, close: cl}
	t.Cleanup(w.shutdown)
	return w
}

// caughtUp waits until the bucket holds every commit of w and every chunk
// they name.
func caughtUp(t *testing.T, c *Cluster, w *served) {
	t.Helper()
	testutil.WaitFor(t, "replication of "+w.name, 30*time.Second, func() bool {
		st := c.Status(w.name)
		return st != nil && st.LagSeconds == 0 && st.OwedUploads == 0 && st.ReplicaError == ""
	})
}

// restoredFiles restores w's newest replica on a "machine" of its own
// (a fresh directory, no chunk bytes) and reads every file through the
// bucket's chunks.
func restoredFiles(t *testing.T, st *objstore.Store, name string) map[string][]byte {
	t.Helper()
	ctx := testutil.Context(t, time.Minute)
	path := filepath.Join(t.TempDir(), "store.db")
	if _, err := restore(ctx, st, replicaPrefix(name), 1<<62, path); err != nil {
		t.Fatal(err)
	}
	s, err := vfs.Open(ctx, path, vfs.Options{NoSync: true, ChunkRemote: sharedchunks.New(st), DetachChunks: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ents, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := s.ReadFile(ctx, e.Name)
		if err != nil {
			t.Fatalf("restored %s/%s: %v", name, e.Name, err)
		}
		out[e.Name] = b
	}
	return out
}

// contents is the pool writers draw from: shared across workspaces so
// that they name the same chunks, every size outside the database
// (4 KiB) and some of several chunks.
func contents() [][]byte {
	sizes := []int{5 << 10, 40 << 10, 200 << 10, 600 << 10, 1100 << 10}
	var out [][]byte
	for i := range 10 {
		b := make([]byte, sizes[i%len(sizes)])
		r := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		out = append(out, b)
	}
	return out
}

// TestCollectorUnderConcurrentWrites: two servers each own a workspace
// and write, overwrite and delete files of shared content while both try
// to collect the bucket's chunks (one at a time, under the collector's
// lease) with a grace of a few seconds. After the writers stop and the
// collector ran past the grace again, each workspace restored from the
// bucket alone reads back exactly what its owner last wrote, and the
// collector did delete chunks (it had work). Randomized; WSYNC_GC_SEEDS
// runs more seeds.
func TestCollectorUnderConcurrentWrites(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	seeds := 2
	if n, err := strconv.Atoi(os.Getenv("WSYNC_GC_SEEDS")); err == nil && n > 0 {
		seeds = n
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			collectorSeed(t, srv, uint64(seed))
		})
	}
}

func collectorSeed(t *testing.T, srv *s3test.Server, seed uint64) {
	st := openBucket(t, srv, fmt.Sprintf("gc%d", seed))
	a, b := newTestCluster(t, st, "server-a"), newTestCluster(t, st, "server-b")
	ws := []*served{create(t, a, "wa"), create(t, b, "wb")}
	owners := []*Cluster{a, b}
	pool := contents()
	want := []map[string]int{{}, {}}
	ctx := testutil.Context(t, 2*time.Minute)

	stop := make(chan struct{})
	var collectors sync.WaitGroup
	var mu sync.Mutex
	var total sharedchunks.Report
	var runs int
	tally := func(rep sharedchunks.Report) {
		mu.Lock()
		defer mu.Unlock()
		runs++
		total.Trashed += rep.Trashed
		total.Restored += rep.Restored
		total.Purged += rep.Purged
	}
	for _, c := range owners {
		collectors.Add(1)
		go func() {
			defer collectors.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rep, err := c.CollectChunks(ctx)
				var held *lease.HeldError
				switch {
				case errors.As(err, &held):
				case err != nil:
					if ctx.Err() == nil {
						t.Errorf("collect: %v", err)
					}
					return
				default:
					tally(rep)
				}
			}
		}()
	}

	var writers sync.WaitGroup
	deadline := time.Now().Add(3 * gcGrace)
	for i, w := range ws {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			for n := 0; time.Now().Before(deadline); n++ {
				path := fmt.Sprintf("f%d", r.IntN(8))
				switch op := r.IntN(10); {
				case op < 6:
					k := r.IntN(len(pool))
					if _, err := w.store.WriteFile(ctx, path, pool[k], 0o644); err != nil {
						t.Errorf("%s write %s: %v", w.name, path, err)
						return
					}
					want[i][path] = k
				case op < 9:
					err := w.store.RemovePath(ctx, path, false)
					if err != nil && !errors.Is(err, vfs.ErrNotExist) {
						t.Errorf("%s remove %s: %v", w.name, path, err)
						return
					}
					delete(want[i], path)
				default:
					// Local collection: rows without references go, so a
					// later reference makes a new row.
					if _, err := w.store.GC(ctx); err != nil {
						t.Errorf("%s gc: %v", w.name, err)
						return
					}
				}
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond) // spread writes over the collections
				}
			}
		}()
	}
	writers.Wait()
	// Garbage the final collections find however the writers' timing
	// went (on a loaded machine every content of the pool can stay
	// referenced by a name or a trash row to the end): a chunk no other
	// file names, uploaded, then unreferenced everywhere.
	garbage := bytes.Repeat([]byte{0xa5}, 6<<10)
	if _, err := ws[0].store.WriteFile(ctx, "garbage", garbage, 0o644); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, owners[0], ws[0])
	if _, err := st.Head(ctx, sharedchunks.Key(chunkstore.Sum(garbage))); err != nil {
		t.Fatalf("the garbage chunk was not uploaded: %v", err)
	}
	if err := ws[0].store.RemovePath(ctx, "garbage", false); err != nil {
		t.Fatal(err)
	}
	if _, err := ws[0].store.PurgeTrash(ctx, "", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ws[0].store.GC(ctx); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		caughtUp(t, owners[i], w)
	}
	// Collections past the grace after the last write: garbage goes to
	// the trash, then out of it.
	for range 2 {
		begin := time.Now()
		testutil.WaitFor(t, "the grace to pass", 10*time.Second, func() bool { return time.Since(begin) > gcGrace+time.Second })
		rep, err := a.CollectChunks(ctx)
		for errors.As(err, new(*lease.HeldError)) {
			rep, err = a.CollectChunks(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("final run %+v", rep)
		tally(rep)
	}
	close(stop)
	collectors.Wait()
	t.Logf("seed %d: %d collections, %+v", seed, runs, total)
	if total.Purged == 0 {
		t.Errorf("the collector deleted nothing: the test did not exercise it")
	}
	for _, key := range []string{sharedchunks.Key(chunkstore.Sum(garbage)), sharedchunks.TrashKey(chunkstore.Sum(garbage))} {
		if _, err := st.Head(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("the unreferenced chunk's %s is still in the bucket (%v)", key, err)
		}
	}
	for i, w := range ws {
		got := restoredFiles(t, st, w.name)
		if len(got) != len(want[i]) {
			t.Errorf("%s restored %d files, want %d", w.name, len(got), len(want[i]))
		}
		for path, k := range want[i] {
			if !bytes.Equal(got[path], pool[k]) {
				t.Errorf("%s/%s restored wrong (%d bytes, want content %d)", w.name, path, len(got[path]), k)
			}
		}
	}
}

// flush ships w's store to the bucket now.
func flush(t *testing.T, c *Cluster, w *served) {
	t.Helper()
	o := c.get(w.name)
	o.mu.Lock()
	rep := o.rep.(*replica.Replicator)
	o.mu.Unlock()
	if err := rep.Flush(testutil.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorSparesChunkOnItsWayToTheReplica plays the race the grace
// exists for, step by step: a workspace names again a chunk no replica
// names, finds it in the bucket (old) and does not send it; the collector,
// whose marks cannot see that commit yet, sets the chunk aside; a second
// collection still before the commit ships must keep it in the trash; once
// the commit ships, the next collection puts it back, and a store restored
// from the bucket reads it.
func TestCollectorSparesChunkOnItsWayToTheReplica(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	st := openBucket(t, srv, "race")
	c, err := New(Options{Store: st, ServerID: "server-a", Address: "http://a", LeaseTTL: 10 * time.Second,
		ReplicateEvery: time.Hour, ChunkGCEvery: -1, ChunkGCGrace: gcGrace, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	w := create(t, c, "wa")
	ctx := testutil.Context(t, time.Minute)
	data := contents()[2] // one 200 KiB chunk
	hash := chunkstore.Sum(data)
	key := sharedchunks.Key(hash)
	exists := func(key string) bool {
		_, err := st.Head(ctx, key)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	collect := func() sharedchunks.Report {
		t.Helper()
		rep, err := c.CollectChunks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	if _, err := w.store.WriteFile(ctx, "first", data, 0o644); err != nil {
		t.Fatal(err)
	}
	flush(t, c, w)
	if !exists(key) {
		t.Fatal("the shipped chunk is not in the bucket")
	}
	must(t, w.store.RemovePath(ctx, "first", false))
	flush(t, c, w) // no replica names the chunk now
	old := time.Now().Add(-2 * gcGrace)
	must(t, os.Chtimes(filepath.Join(srv.Root, srv.Bucket, "race", key), old, old))

	// Named again; the upload finds the bytes in the bucket and sends
	// nothing.
	if _, err := w.store.WriteFile(ctx, "second", data, 0o644); err != nil {
		t.Fatal(err)
	}
	verified, err := w.store.UploadOwed(ctx)
	if err != nil || len(verified) != 1 || verified[0].Hash != hash {
		t.Fatalf("UploadOwed: %v %v", verified, err)
	}
	if obj, err := st.Head(ctx, key); err != nil || obj.Modified.After(old.Add(time.Second)) {
		t.Fatalf("the upload rewrote the chunk (%v, %v)", obj.Modified, err)
	}
	// The collector cannot see the commit naming it: set aside, and kept
	// in the trash by a second run.
	if rep := collect(); rep.Trashed != 1 || exists(key) || !exists(sharedchunks.TrashKey(hash)) {
		t.Fatalf("first collection: %+v", rep)
	}
	if rep := collect(); rep.Purged != 0 || !exists(sharedchunks.TrashKey(hash)) {
		t.Fatalf("a collection before the commit shipped deleted the chunk: %+v", rep)
	}
	flush(t, c, w)
	if rep := collect(); rep.Restored != 1 || !exists(key) || exists(sharedchunks.TrashKey(hash)) {
		t.Fatalf("collection after the commit shipped: %+v", rep)
	}
	got := restoredFiles(t, st, "wa")
	if !bytes.Equal(got["second"], data) || len(got) != 1 {
		t.Fatalf("restored: %d files, second %d bytes", len(got), len(got["second"]))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCollectorPrunesOldGenerations: once a newer owner's generation holds
// the workspace, a collection deletes the older generation's replica, and
// the workspace still restores from the bucket with its files.
func TestCollectorPrunesOldGenerations(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	st := openBucket(t, srv, "gens")
	a, b := newTestCluster(t, st, "server-a"), newTestCluster(t, st, "server-b")
	ctx := testutil.Context(t, time.Minute)
	w := create(t, a, "wa")
	data := contents()[3]
	if _, err := w.store.WriteFile(ctx, "f", data, 0o644); err != nil {
		t.Fatal(err)
	}
	flush(t, a, w)
	w.shutdown()
	must(t, a.Close(ctx)) // hands the lease back
	count := func(gen int64) int {
		n := 0
		for _, err := range st.List(ctx, replicaPrefix("wa")+"/"+replica.GenerationDir(gen)+"/") {
			must(t, err)
			n++
		}
		return n
	}
	if count(1) == 0 {
		t.Fatal("generation 1 has no replica")
	}

	dir := filepath.Join(t.TempDir(), "wa")
	if _, err := b.Claim(ctx, "wa", dir, func(error) {}); err != nil {
		t.Fatal(err)
	}
	wb := open(t, b, "wa", dir)
	flush(t, b, wb)
	if got, err := wb.store.ReadFile(ctx, "f"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("B's f after the claim: %v", err)
	}
	rep, err := b.CollectChunks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Marked != 2 { // 600 KiB: two chunks
		t.Fatalf("marks: %+v", rep)
	}
	if n := count(1); n != 0 {
		t.Fatalf("generation 1 still has %d objects", n)
	}
	if count(2) == 0 {
		t.Fatal("generation 2 was pruned")
	}
	if got := restoredFiles(t, st, "wa"); !bytes.Equal(got["f"], data) {
		t.Fatal("the workspace no longer restores after the prune")
	}
}

// TestConcurrentClaimsHaveOneWinner: servers racing to claim a workspace
// whose owner left get one owner; every other claim names it.
func TestConcurrentClaimsHaveOneWinner(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	st := openBucket(t, srv, "race-claims")
	ctx := testutil.Context(t, time.Minute)
	first := newTestCluster(t, st, "server-0")
	w := create(t, first, "wa")
	if _, err := w.store.WriteFile(ctx, "f", contents()[1], 0o644); err != nil {
		t.Fatal(err)
	}
	flush(t, first, w)
	w.shutdown()
	must(t, first.Close(ctx))

	const servers = 4
	var wg sync.WaitGroup
	results := make([]error, servers)
	clusters := make([]*Cluster, servers)
	dirs := make([]string, servers)
	for i := range servers {
		clusters[i] = newTestCluster(t, st, fmt.Sprintf("server-%d", i+1))
		dirs[i] = filepath.Join(t.TempDir(), "wa")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = clusters[i].Claim(ctx, "wa", dirs[i], func(error) {})
		}()
	}
	wg.Wait()
	winners := 0
	for i, err := range results {
		var no *workspace.NotOwnerError
		switch {
		case err == nil:
			winners++
			won := open(t, clusters[i], "wa", dirs[i])
			if got, err := won.store.ReadFile(ctx, "f"); err != nil || !bytes.Equal(got, contents()[1]) {
				t.Errorf("the winner's f: %v", err)
			}
		case errors.As(err, &no):
			if no.Owner == fmt.Sprintf("server-%d", i+1) || no.Owner == "" {
				t.Errorf("server-%d was told the owner is %q", i+1, no.Owner)
			}
		default:
			t.Errorf("server-%d: %v", i+1, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d servers claimed the workspace: %v", winners, results)
	}
}
