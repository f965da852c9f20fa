package workspace_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// A child that changes type while ls -R walks the tree is listed as what it
// is when the walk reaches it: a directory that became a file is not an
// error (before, List of it failed with ENOTDIR and ended the listing, as
// did a stat of a child under it), and a file that became a directory is
// walked as one (before, it was listed as a directory and its children left
// out), unless a directory-only pattern ignores it (before, it was listed).
// Each change is made from the walk's own callback, between two of its
// steps, so the race is hit every time.
func TestWalkListsAChildAsWhatItIsNow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ignore string
		at     string // the entry whose yield makes the change
		change func(t *testing.T, s *vfs.Store)
		want   []string
	}{{
		name: "a directory becomes a file before it is read",
		at:   "/d",
		change: func(t *testing.T, s *vfs.Store) {
			must(t, s.RemovePath(context.Background(), "d", true))
			writeStore(t, s, "d", "now a file")
		},
		want: []string{"/a file", "/b file", "/d dir", "/z file"},
	}, {
		name: "a directory becomes a file while its entries are read",
		at:   "/d/x",
		change: func(t *testing.T, s *vfs.Store) {
			must(t, s.RemovePath(context.Background(), "d", true))
			writeStore(t, s, "d", "now a file")
		},
		want: []string{"/a file", "/b file", "/d dir", "/d/x file", "/z file"},
	}, {
		name: "a file becomes a directory",
		at:   "/a",
		change: func(t *testing.T, s *vfs.Store) {
			must(t, s.RemovePath(context.Background(), "b", false))
			writeStore(t, s, "b/in", "under what was a file")
		},
		want: []string{"/a file", "/b dir", "/b/in file", "/d dir", "/d/x file", "/d/y file", "/z file"},
	}, {
		name:   "a file becomes a directory a pattern ignores",
		ignore: "b/\n",
		at:     "/a",
		change: func(t *testing.T, s *vfs.Store) {
			must(t, s.RemovePath(context.Background(), "b", false))
			writeStore(t, s, "b/secret", "ignored")
		},
		want: []string{"/.wsyncignore file", "/a file", "/d dir", "/d/x file", "/d/y file", "/z file"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, w := newDefault(t)
			ctx := context.Background()
			if tc.ignore != "" {
				write(t, w, "/.wsyncignore", tc.ignore)
			}
			for _, p := range []string{"/a", "/b", "/d/x", "/d/y", "/z"} {
				if p == "/d/x" {
					must(t, w.Mkdir(ctx, "/d", 0, false))
				}
				write(t, w, p, "content of "+p)
			}
			s, err := w.Store(ctx)
			must(t, err)
			var got []string
			err = w.Walk(ctx, "/", true, true, func(fi workspace.FileInfo) error {
				got = append(got, fi.Path+" "+fi.Type)
				if fi.Path == tc.at {
					tc.change(t, s)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("walk: %v (listed %q)", err, got)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("listed %q, want %q", got, tc.want)
			}
		})
	}
}

// A node replaced by one of another kind between the two reads that stat
// and ls make of it (its attributes, then a symlink's target or a file's
// hash) is read again as what it now is: a call never fails because of it.
// Before, the second read failed (readlink of a file, open of a symlink:
// EINVAL). /f always exists (each change is a rename over it), so every
// call must succeed; the loop is bounded and stops at the first failure.
func TestStatOfANodeReplacedMidRead(t *testing.T) {
	_, w := newDefault(t)
	ctx := context.Background()
	s, err := w.Store(ctx)
	must(t, err)
	writeStore(t, s, "f", "a file")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if i%2 == 0 {
				err = s.SymlinkPath(ctx, "target", "next")
			} else {
				_, err = s.WriteFile(ctx, "next", []byte("a file again"), 0o644)
			}
			if err == nil {
				err = s.RenamePath(ctx, "next", "f")
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		fi, err := w.Stat(ctx, "/f", true)
		if err != nil {
			t.Fatalf("stat of a node that always exists: %v", err)
		}
		if fi.Type == "symlink" && fi.Target != "target" || fi.Type == "file" && fi.SHA256 == "" {
			t.Fatalf("stat %+v", fi)
		}
		if _, err := w.List(ctx, "/", true, true); err != nil {
			t.Fatalf("ls -R: %v", err)
		}
	}
}

// A write's mode with bits outside the permission bits is refused and
// nothing is written, as mkdir's and chmod's are (the API's ?mode= is
// refused before, by ParseMode; a Go caller's was cut to 0644 here).
func TestWriteFileRefusesModeOutsidePermissionBits(t *testing.T) {
	_, w := newDefault(t)
	ctx := context.Background()
	mode := uint32(0o100644)
	if _, err := w.WriteFile(ctx, "/f", strings.NewReader("x"), &mode); !errors.Is(err, vfs.ErrInvalid) || !strings.Contains(err.Error(), "0100000") {
		t.Fatalf("write with mode %#o: %v, want EINVAL naming 0100000", mode, err)
	}
	if _, err := w.Stat(ctx, "/f", false); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("stat after the refused write: %v", err)
	}
}
