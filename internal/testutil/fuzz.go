package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// AddSeeds adds each seed to f's corpus.
func AddSeeds(f *testing.F, seeds [][]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
}

// RoundTrip is the fuzz check of a decoder and its encoder: when b decodes,
// its encoding decodes again to an equal value (reflect.DeepEqual). what
// names the message in the failure.
func RoundTrip[T any](t *testing.T, what string, b []byte, decode func([]byte) (T, error), encode func(T) []byte) {
	t.Helper()
	v, err := decode(b)
	if err != nil {
		return
	}
	v2, err := decode(encode(v))
	if err != nil || !reflect.DeepEqual(v, v2) {
		t.Fatalf("%s: %+v vs %+v, %v", what, v, v2, err)
	}
}

// WriteFuzzCorpus writes seeds, by fuzz target name, as corpus files under
// testdata/fuzz of the package under test (seed-00, seed-01, ...). It
// skips unless WSYNC_WRITE_CORPUS is set: run it after changing a seed.
func WriteFuzzCorpus(t *testing.T, seeds map[string][][]byte) {
	t.Helper()
	if os.Getenv("WSYNC_WRITE_CORPUS") == "" {
		t.Skip("set WSYNC_WRITE_CORPUS=1 to rewrite testdata/fuzz")
	}
	for name, ss := range seeds {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range ss {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
