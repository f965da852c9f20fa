package sharedchunks

import (
	"testing"

	"github.com/wsync/wsync/chunkstore"
)

// FuzzParseKey: whatever key a bucket listing returns, parseKey either
// refuses it or returns the one hash whose key it is.
func FuzzParseKey(f *testing.F) {
	h := chunkstore.Sum([]byte("x"))
	for _, k := range []string{Key(h), TrashKey(h), "chunks/", "chunks/ab/", "chunks/zz/" + h.String(), "chunks/" + h.String(), Key(h) + "/", "chunks/AB/" + h.String()} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		for _, prefix := range []string{ChunksPrefix, TrashPrefix} {
			got, ok := parseKey(prefix, key)
			if !ok {
				continue
			}
			if want := keyUnder(prefix, got); want != key {
				t.Fatalf("parseKey(%q, %q) = %s, whose key is %q", prefix, key, got, want)
			}
		}
	})
}

func TestParseKey(t *testing.T) {
	h := chunkstore.Sum([]byte("x"))
	if got, ok := parseKey(ChunksPrefix, Key(h)); !ok || got != h {
		t.Fatalf("parseKey(Key(h)) = %v, %v", got, ok)
	}
	if got, ok := parseKey(TrashPrefix, TrashKey(h)); !ok || got != h {
		t.Fatalf("parseKey(TrashKey(h)) = %v, %v", got, ok)
	}
	for _, bad := range []string{"", "chunks/", TrashKey(h), "chunks/zz/" + h.String(), "chunks/" + h.String(), Key(h) + "x", "chunks/" + h.String()[:2] + "/" + h.String()[:63] + "G"} {
		if _, ok := parseKey(ChunksPrefix, bad); ok {
			t.Errorf("parseKey accepted %q", bad)
		}
	}
}
