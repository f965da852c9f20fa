package vfs

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A name whose path would pass MaxPathLen is refused (ErrNameTooLong) by
// every mutation the store runs at once, and nothing changes: the wire
// carries no longer path, so one such node stopped every pull after it. A
// directory that moves counts its deepest path too. (The mount checks
// what the write-behind answers first: fusefs.TestAbuseDeepNesting.)
func TestPathsPastMaxPathLenRefused(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "store.db"), Options{NoSync: true, NoWriteBehind: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	seg := strings.Repeat("d", 200)
	// deep: 20 segments of 200 bytes, 4,019 bytes; room for a name of 76.
	deep := strings.TrimSuffix(strings.Repeat(seg+"/", 20), "/")
	must(t, s.MkdirPath(ctx, deep, 0o755, true))
	dir, err := s.ResolvePath(ctx, deep)
	must(t, err)
	fits, over := strings.Repeat("f", MaxPathLen-len(deep)-1), strings.Repeat("f", MaxPathLen-len(deep))
	if len(fits) > MaxNameLen {
		t.Fatalf("test setup: name of %d bytes", len(fits))
	}
	for _, tc := range []struct {
		what string
		op   func(name string) error
	}{
		{"create", func(name string) error { _, err := s.Create(ctx, dir, name, NewAttr{Mode: 0o644}); return err }},
		{"mkdir", func(name string) error { _, err := s.Mkdir(ctx, dir, name, NewAttr{Mode: 0o755}); return err }},
		{"symlink", func(name string) error { _, err := s.Symlink(ctx, dir, name, "t", NewAttr{Mode: 0o777}); return err }},
	} {
		if err := tc.op(over); !errors.Is(err, ErrNameTooLong) {
			t.Errorf("%s of a %d-byte path: %v, want ENAMETOOLONG", tc.what, len(deep)+1+len(over), err)
		}
		if _, err := s.Lookup(ctx, dir, over); !errors.Is(err, ErrNotExist) {
			t.Errorf("after the refused %s: lookup %v, want ENOENT", tc.what, err)
		}
	}
	// At the limit exactly: made.
	if _, err := s.Create(ctx, dir, fits, NewAttr{Mode: 0o644}); err != nil {
		t.Errorf("create of a %d-byte path: %v", len(deep)+1+len(fits), err)
	}

	// link
	writeFile(t, s, "a", []byte("x"))
	a, err := s.Stat(ctx, "a")
	must(t, err)
	if _, err := s.Link(ctx, a.Ino, dir, over); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("link to a path past the limit: %v, want ENAMETOOLONG", err)
	}

	// rename of a file, then of a directory whose subtree would pass it
	if err := s.Rename(ctx, RootIno, "a", dir, over, 0); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("rename of a file to a path past the limit: %v, want ENAMETOOLONG", err)
	}
	must(t, s.MkdirPath(ctx, "top/"+seg, 0o755, true)) // top's deepest path: 200 bytes below it
	if err := s.Rename(ctx, RootIno, "top", dir, "t", 0); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("rename of a directory whose subtree would pass the limit: %v, want ENAMETOOLONG", err)
	}
	if _, err := s.Stat(ctx, "top/"+seg); err != nil {
		t.Errorf("after the refused rename: %v", err)
	}
	if _, err := s.Stat(ctx, "a"); err != nil {
		t.Errorf("after the refused renames: %v", err)
	}
}
