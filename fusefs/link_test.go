package fusefs_test

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
)

// TestLinkOfAnOpenFileKeepsItsSize links a file whose writes are still in
// an open handle. The kernel caches the attributes link answers for the
// hour the mount allows, so an answer built from the node's row (size 0:
// nothing committed yet) leaves every reader of either name an empty file.
func TestLinkOfAnOpenFileKeepsItsSize(t *testing.T) {
	fusetest.RequireFUSE(t)
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{
		EntryTimeout: time.Hour,
		AttrTimeout:  time.Hour,
	}})
	data := bytes.Repeat([]byte("linked "), 1000)
	f, err := os.Create(m.Path("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(m.Path("a"), m.Path("b")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		fi, err := os.Stat(m.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(data)) {
			t.Errorf("stat %s after link: size %d, want %d", name, fi.Size(), len(data))
		}
	}
	got, err := os.ReadFile(m.Path("b"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("read b after link: %d bytes, want %d", len(got), len(data))
	}
}
