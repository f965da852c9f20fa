package sharedchunks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/s3test"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/objstore"
	"github.com/wsync/wsync/sharedchunks"
)

type bucket struct {
	srv    *s3test.Server
	prefix string
	st     *objstore.Store
	chunks *sharedchunks.Store
}

func newBucket(t *testing.T) *bucket {
	t.Helper()
	srv := s3test.Start(t)
	srv.Env(t)
	cfg, err := objstore.ParseURL(srv.URL("p"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(testutil.Context(t, time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bucket{srv: srv, prefix: "p", st: st, chunks: sharedchunks.New(st)}
}

// age sets an object's modification time d into the past, through the
// server's POSIX directory (versitygw reports a file's mtime).
func (b *bucket) age(t *testing.T, key string, d time.Duration) {
	t.Helper()
	p := filepath.Join(b.srv.Root, b.srv.Bucket, b.prefix, key)
	when := time.Now().Add(-d)
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
	obj, err := b.st.Head(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(obj.Modified) < d-time.Minute {
		t.Fatalf("aging %s: the server reports %v", key, obj.Modified)
	}
}

func (b *bucket) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := b.st.Head(context.Background(), key)
	if errors.Is(err, objstore.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func chunk(i int) ([]byte, chunkstore.Hash) {
	data := bytes.Repeat([]byte(fmt.Sprintf("chunk %d;", i)), 1000)
	return data, chunkstore.Sum(data)
}

func TestRoundTrip(t *testing.T) {
	b := newBucket(t)
	ctx := testutil.Context(t, time.Minute)
	data, h := chunk(1)
	if ok, err := b.chunks.Has(ctx, h); err != nil || ok {
		t.Fatalf("Has before Put: %v %v", ok, err)
	}
	if _, err := b.chunks.Get(ctx, h, len(data)); !errors.Is(err, chunkstore.ErrRemoteMissing) {
		t.Fatalf("Get of a chunk never put: %v", err)
	}
	if err := b.chunks.Put(ctx, h, data); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.chunks.Has(ctx, h); err != nil || !ok {
		t.Fatalf("Has after Put: %v %v", ok, err)
	}
	got, err := b.chunks.Get(ctx, h, len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %v, %d bytes", err, len(got))
	}
	if !b.exists(t, "chunks/"+h.String()[:2]+"/"+h.String()) {
		t.Fatal("the chunk is not under chunks/<h[:2]>/<h>")
	}
	// A size the caller cannot be owed is refused before any request.
	if _, err := b.chunks.Get(ctx, h, chunkstore.ChunkSize+1); !errors.Is(err, objstore.ErrInvalid) {
		t.Fatalf("Get of an oversized chunk: %v", err)
	}
	if _, err := b.chunks.Get(ctx, h, -1); !errors.Is(err, objstore.ErrInvalid) {
		t.Fatalf("Get of a negative size: %v", err)
	}
	// An object larger than the size asked for is not read into memory.
	if _, err := b.chunks.Get(ctx, h, len(data)-1); !errors.Is(err, objstore.ErrInvalid) || !errors.Is(err, chunkstore.ErrCorrupt) {
		t.Fatalf("Get of a short size: %v", err)
	}
	if err := b.chunks.Put(ctx, h, make([]byte, chunkstore.ChunkSize+1)); !errors.Is(err, objstore.ErrInvalid) {
		t.Fatalf("Put of an oversized chunk: %v", err)
	}
}

// TestCollect: unreferenced objects older than the grace go to the trash,
// younger or referenced ones stay; a read finds trashed bytes and puts them
// back; a referenced trash object is put back by the next run; one left
// unreferenced for the grace is deleted.
func TestCollect(t *testing.T) {
	b := newBucket(t)
	ctx := testutil.Context(t, time.Minute)
	const grace = time.Hour
	data := map[int][]byte{}
	hash := map[int]chunkstore.Hash{}
	for i := range 6 {
		data[i], hash[i] = chunk(i)
		if err := b.chunks.Put(ctx, hash[i], data[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 1, 3, 4, 5} {
		b.age(t, sharedchunks.Key(hash[i]), 2*grace)
	}
	marks := sharedchunks.Marks{hash[0]: {}}
	collect := func() sharedchunks.Report {
		t.Helper()
		rep, err := b.chunks.Collect(ctx, sharedchunks.CollectOptions{Grace: grace, Marks: func(context.Context) (sharedchunks.Marks, error) { return marks, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := collect()
	// 0: referenced; 2: young; 1, 3, 4, 5: set aside.
	if rep.Trashed != 4 || rep.Live != 2 || rep.Purged != 0 || rep.Restored != 0 {
		t.Fatalf("first run: %+v", rep)
	}
	for i, want := range []bool{true, false, true, false, false, false} {
		if got := b.exists(t, sharedchunks.Key(hash[i])); got != want {
			t.Errorf("chunk %d in chunks/: %v, want %v", i, got, want)
		}
		if got := b.exists(t, sharedchunks.TrashKey(hash[i])); got == want {
			t.Errorf("chunk %d in the trash: %v, want %v", i, got, want)
		}
	}
	// A reader of a trashed chunk gets its bytes and puts them back.
	got, err := b.chunks.Get(ctx, hash[1], len(data[1]))
	if err != nil || !bytes.Equal(got, data[1]) {
		t.Fatalf("Get of a trashed chunk: %v", err)
	}
	if !b.exists(t, sharedchunks.Key(hash[1])) {
		t.Fatal("the read did not put the chunk back")
	}
	// 3 is referenced again (a commit naming it reached a replica): put
	// back. 4 stays unreferenced past the grace in the trash: deleted. 5
	// was set aside just now: kept in the trash.
	marks[hash[3]] = struct{}{}
	b.age(t, sharedchunks.TrashKey(hash[4]), 2*grace)
	rep = collect()
	if rep.Restored != 1 || rep.Purged != 1 {
		t.Fatalf("second run: %+v", rep)
	}
	if !b.exists(t, sharedchunks.Key(hash[3])) || b.exists(t, sharedchunks.TrashKey(hash[3])) {
		t.Fatal("the referenced chunk 3 was not put back")
	}
	if b.exists(t, sharedchunks.TrashKey(hash[4])) || b.exists(t, sharedchunks.Key(hash[4])) {
		t.Fatal("chunk 4 outlived its grace in the trash")
	}
	if !b.exists(t, sharedchunks.TrashKey(hash[5])) {
		t.Fatal("chunk 5 left the trash before its grace")
	}
	if _, err := b.chunks.Get(ctx, hash[4], len(data[4])); !errors.Is(err, chunkstore.ErrRemoteMissing) {
		t.Fatalf("Get of a purged chunk: %v", err)
	}
}

// TestCollectFenced: a collector whose lease is gone writes nothing.
func TestCollectFenced(t *testing.T) {
	b := newBucket(t)
	ctx := testutil.Context(t, time.Minute)
	data, h := chunk(7)
	if err := b.chunks.Put(ctx, h, data); err != nil {
		t.Fatal(err)
	}
	b.age(t, sharedchunks.Key(h), 2*time.Hour)
	lost := errors.New("lease lost")
	_, err := b.chunks.Collect(ctx, sharedchunks.CollectOptions{
		Marks: func(context.Context) (sharedchunks.Marks, error) { return nil, nil },
		Fence: func() error { return lost },
	})
	if !errors.Is(err, lost) {
		t.Fatalf("Collect under a lost lease: %v", err)
	}
	if !b.exists(t, sharedchunks.Key(h)) || b.exists(t, sharedchunks.TrashKey(h)) {
		t.Fatal("a fenced collector moved a chunk")
	}
}

// TestFencedWritesNothing: a store fenced by a lost lease writes no chunk,
// not even one it puts back from the trash, and still reads.
func TestFencedWritesNothing(t *testing.T) {
	b := newBucket(t)
	ctx := testutil.Context(t, time.Minute)
	lost := errors.New("lease lost")
	fenced := b.chunks.Fenced(func() error { return lost })
	data, h := chunk(8)
	if err := fenced.Put(ctx, h, data); !errors.Is(err, lost) || b.exists(t, sharedchunks.Key(h)) {
		t.Fatalf("a fenced Put: %v", err)
	}
	// Bytes only in the trash: read, not put back.
	if _, err := b.st.Put(ctx, sharedchunks.TrashKey(h), data); err != nil {
		t.Fatal(err)
	}
	got, err := fenced.Get(ctx, h, len(data))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a fenced Get from the trash: %v", err)
	}
	if b.exists(t, sharedchunks.Key(h)) {
		t.Fatal("a fenced reader put a chunk back")
	}
	if ok, err := fenced.Has(ctx, h); err != nil || ok {
		t.Fatalf("Has: %v %v", ok, err)
	}
}
