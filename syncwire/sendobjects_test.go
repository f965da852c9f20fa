package syncwire

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/wsync/wsync/chunkstore"
)

// TestSendObjectsBuildsEachMessageOnce: SendObjects builds every message
// in one buffer it reuses (the count goes in front of the objects at the
// flush; send copies the message into its frame), and takes that buffer
// from a pool, so a call after one that grew it streams 8 MiB of
// incompressible chunks allocating next to nothing, not a copy of every
// message; and the messages hold every object in order, each of them
// decoding to the bytes read.
func TestSendObjectsBuildsEachMessageOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var hs []chunkstore.Hash
	chunks := make(map[chunkstore.Hash][]byte)
	for i := range 128 {
		b := make([]byte, 64<<10-i)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		h := chunkstore.Sum(b)
		hs = append(hs, h)
		chunks[h] = b
	}
	read := func(_ context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error {
		for _, h := range hs {
			if err := each(h, chunks[h]); err != nil {
				return err
			}
		}
		return nil
	}
	var sizes []int
	var got []chunkstore.Hash
	check := func(h chunkstore.Hash, raw int) error { return nil }
	send := func(_ context.Context, p []byte) error {
		sizes = append(sizes, len(p))
		return DecodeObjectsFunc(p, check, func(o Object) error {
			if !bytes.Equal(o.Data, chunks[o.Hash]) {
				t.Fatalf("object %d: wrong bytes", len(got))
			}
			got = append(got, o.Hash)
			return nil
		})
	}
	// Each try: a warm call (the decode's and the compressor's own
	// buffers, and a message buffer grown for the pool), then the measured
	// one. A pool may drop what it holds at any collection, so the fewest
	// bytes of three tries count.
	var err error
	least := uint64(math.MaxUint64)
	for range 3 {
		if err := SendObjects(context.Background(), send, hs[:8], read, nil); err != nil {
			t.Fatal(err)
		}
		sizes, got = nil, nil
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err = SendObjects(context.Background(), send, hs, read, nil)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if len(got) != len(hs) {
		t.Fatalf("%d objects arrived, want %d", len(got), len(hs))
	}
	for i := range hs {
		if got[i] != hs[i] {
			t.Fatalf("object %d out of order", i)
		}
	}
	if len(sizes) < 8 {
		t.Fatalf("%d messages for 8 MiB, want several", len(sizes))
	}
	// The warm call grew a pooled buffer to a message's size: this one
	// takes it and allocates next to nothing.
	if least > 512<<10 {
		t.Errorf("sending %d messages (8 MiB) allocated %d bytes, want under 512 KiB", len(sizes), least)
	}
}

// TestSendObjectsOfOneSmallChunkAllocatesLittle: a pull of one small file
// sends one small chunk; its message buffer starts small rather than at a
// full message's size (zeroing 800 KiB cost such a call about 50 us).
func TestSendObjectsOfOneSmallChunkAllocatesLittle(t *testing.T) {
	data := []byte("one small file's bytes")
	h := chunkstore.Sum(data)
	read := func(_ context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error {
		return each(h, data)
	}
	send := func(context.Context, []byte) error { return nil }
	if err := SendObjects(context.Background(), send, []chunkstore.Hash{h}, read, nil); err != nil {
		t.Fatal(err)
	}
	// The fewest bytes of three tries: other goroutines of the test binary
	// allocate too, and TotalAlloc counts them.
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC() // the pool may be empty: a fresh buffer must be small too
		runtime.ReadMemStats(&before)
		if err := SendObjects(context.Background(), send, []chunkstore.Hash{h}, read, nil); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > 128<<10 {
		t.Errorf("sending one chunk of %d bytes allocated %d bytes, want under 128 KiB", len(data), least)
	}
}
