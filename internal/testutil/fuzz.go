package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

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
