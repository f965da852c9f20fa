package fusefs_test

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/fusetest"
)

// A truncation to the size a file has marks its mtime, as open(O_TRUNC)
// must and ftruncate(2) does on a local file system: make's ": > stamp" of
// an empty stamp left the stamp as old as it was, and the target it stands
// for was rebuilt on every run.
func TestTruncationToTheSameSizeMarksMtime(t *testing.T) {
	fusetest.RequireFUSE(t)
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour}})
	old := time.Unix(1_000_000_000, 0)
	for _, tc := range []struct {
		what string
		data string
		op   func(p string) error
	}{
		{"open(O_TRUNC) of an empty file", "", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			return f.Close()
		}},
		{"ftruncate to the same size", "abc", func(p string) error {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(3)
		}},
	} {
		p := m.Path("f")
		if err := os.WriteFile(p, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		if err := tc.op(p); err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.ModTime().Equal(old) || fi.Size() != int64(len(tc.data)) {
			t.Errorf("%s: mtime %v, size %d; want now, %d", tc.what, fi.ModTime(), fi.Size(), len(tc.data))
		}
	}
}

// A fallocate marks the mtime, KEEP_SIZE or inside the file too, as a
// local file system's does (file_modified); it kept it.
func TestFallocateMarksMtime(t *testing.T) {
	fusetest.RequireFUSE(t)
	m := fusetest.NewMount(t, fusetest.Options{Options: fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour}})
	old := time.Unix(1_000_000_000, 0)
	for _, mode := range []uint32{0, unix.FALLOC_FL_KEEP_SIZE} {
		p := m.Path("f")
		if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Fallocate(int(f.Fd()), mode, 0, 3)
		f.Close()
		if err != nil {
			t.Fatalf("fallocate mode %d: %v", mode, err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.ModTime().Equal(old) || fi.Size() != 3 {
			t.Errorf("fallocate mode %d inside the file: mtime %v, size %d; want now, 3", mode, fi.ModTime(), fi.Size())
		}
	}
}
