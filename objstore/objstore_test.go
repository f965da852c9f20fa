package objstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/s3test"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/objstore"
)

func open(t *testing.T, prefix string) *objstore.Store {
	t.Helper()
	srv := s3test.Start(t)
	srv.Env(t)
	cfg, err := objstore.ParseURL(srv.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	s, err := objstore.Open(testutil.Context(t, time.Minute), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseURL(t *testing.T) {
	c, err := objstore.ParseURL("s3://b/some/prefix/?endpoint=http://127.0.0.1:7070&region=eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Bucket != "b" || c.Prefix != "some/prefix" || c.Endpoint != "http://127.0.0.1:7070" || c.Region != "eu-west-1" || !c.PathStyle {
		t.Fatalf("parsed %+v", c)
	}
	if c, err := objstore.ParseURL("s3://b"); err != nil || c.Region != "us-east-1" || c.PathStyle {
		t.Fatalf("bare bucket: %+v %v", c, err)
	}
	for _, bad := range []string{"", "http://b/p", "s3:///p", "s3://k:s@b/p", "s3://b/a/../c", "s3://b/p?endpoint=ftp://x", "s3://b/p?bogus=1", "s3://b/p?path-style=maybe"} {
		if _, err := objstore.ParseURL(bad); !errors.Is(err, objstore.ErrInvalid) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestRoundTripAndConditionalWrites(t *testing.T) {
	s := open(t, "p")
	ctx := testutil.Context(t, time.Minute)
	if err := s.CheckConditional(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "a/missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := s.Head(ctx, "a/missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("head missing: %v", err)
	}
	etag, err := s.PutIfAbsent(ctx, "a/x", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfAbsent(ctx, "a/x", []byte("two")); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("second create: %v", err)
	}
	b, o, err := s.Get(ctx, "a/x")
	if err != nil || string(b) != "one" || o.ETag != etag || o.Size != 3 {
		t.Fatalf("get: %q %+v %v", b, o, err)
	}
	etag2, err := s.PutIfMatch(ctx, "a/x", []byte("three"), etag)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfMatch(ctx, "a/x", []byte("four"), etag); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("stale if-match: %v", err)
	}
	if b, _, _ := s.Get(ctx, "a/x"); string(b) != "three" {
		t.Fatalf("after a lost if-match the object holds %q", b)
	}
	for i := range 3 {
		if _, err := s.Put(ctx, fmt.Sprintf("a/y/%d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for o, err := range s.List(ctx, "a/") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	if fmt.Sprint(keys) != "[a/x a/y/0 a/y/1 a/y/2]" {
		t.Fatalf("list: %v", keys)
	}
	if err := s.Delete(ctx, "a/x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/x"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.PutIfMatch(ctx, "a/x", []byte("five"), etag2); err == nil {
		t.Fatal("if-match on a deleted object succeeded")
	}
	for _, bad := range []string{"", "a//b", "../x", "a/./b", "a\x00b"} {
		if _, err := s.Put(ctx, bad, nil); !errors.Is(err, objstore.ErrInvalid) {
			t.Errorf("put %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestConditionalCreateHasOneWinner: of 32 concurrent creates of one key,
// exactly one succeeds; the property a lease is built on.
func TestConditionalCreateHasOneWinner(t *testing.T) {
	s := open(t, "race")
	ctx := testutil.Context(t, time.Minute)
	for round := range 5 {
		key := fmt.Sprintf("lease/%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, lost := 0, 0
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.PutIfAbsent(ctx, key, []byte(fmt.Sprint(i)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, objstore.ErrPrecondition):
					lost++
				default:
					t.Errorf("create: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || lost != 31 {
			t.Fatalf("round %d: %d winners, %d losers", round, wins, lost)
		}
	}
}
