package vfs

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/wsync/wsync/watermark"
)

var ctx = context.Background()

// oldSchema writes a database at schema version v, as a release of that
// version left it, and returns its path and the database, open.
func oldSchema(t *testing.T, v int) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("v%d.db", v))
	db, err := sql.Open("sqlite", "file:"+path)
	must(t, err)
	s0 := &Store{opts: Options{}}
	must(t, migrate(ctx, db, v, s0.initRows))
	return path, db
}

// openMigrated opens the store at path, which checks that it migrated to
// the current schema version.
func openMigrated(t *testing.T, path string) *Store {
	t.Helper()
	s := openStore(t, path)
	var v int
	must(t, s.w.QueryRow(`PRAGMA user_version`).Scan(&v))
	if v != SchemaVersion {
		t.Errorf("migrated to version %d, want %d", v, SchemaVersion)
	}
	return s
}

func TestSchemaMigratesOldVersion(t *testing.T) {
	path, db := oldSchema(t, 1)
	var v int
	must(t, db.QueryRow(`PRAGMA user_version`).Scan(&v))
	if v != 1 {
		t.Fatalf("old database at version %d, want 1", v)
	}
	if _, err := db.Exec(`SELECT 1 FROM xattrs`); err == nil {
		t.Fatal("version 1 already has xattrs")
	}
	db.Close()

	s := openMigrated(t, path)
	a, err := s.Create(ctx, RootIno, "f", NewAttr{Mode: 0o644})
	must(t, err)
	must(t, s.SetXattr(ctx, a.Ino, "user.k", []byte("v"), 0))
}

func TestSchemaRefusesNewer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	s := openStore(t, path)
	must(t, s.Close())
	db, err := sql.Open("sqlite", "file:"+path)
	must(t, err)
	_, err = db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, SchemaVersion+7))
	must(t, err)
	db.Close()
	_, err = Open(ctx, path, Options{NoSync: true})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("open newer schema: err = %v, want ErrSchemaTooNew", err)
	}
}

func TestCreateIsExclusive(t *testing.T) {
	s := newStore(t)
	_, err := s.Create(ctx, RootIno, "a", NewAttr{Mode: 0o644})
	must(t, err)
	if _, err := s.Create(ctx, RootIno, "a", NewAttr{Mode: 0o644}); !errors.Is(err, ErrExist) {
		t.Errorf("second create: err = %v, want ErrExist", err)
	}
	if _, err := s.Mkdir(ctx, RootIno, "a", NewAttr{Mode: 0o755}); !errors.Is(err, ErrExist) {
		t.Errorf("mkdir over file: err = %v, want ErrExist", err)
	}
	f, _ := s.Lookup(ctx, RootIno, "a")
	if _, err := s.Create(ctx, f.Ino, "b", NewAttr{}); !errors.Is(err, ErrNotDir) {
		t.Errorf("create in a file: err = %v, want ErrNotDir", err)
	}
	if _, err := s.Create(ctx, RootIno, "..", NewAttr{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("create '..': err = %v, want ErrInvalid", err)
	}
	if _, err := s.Create(ctx, RootIno, string(bytes.Repeat([]byte("x"), 256)), NewAttr{}); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("create long name: err = %v, want ErrNameTooLong", err)
	}
}

func TestNewNodesTakeCallerOwnership(t *testing.T) {
	s := newStore(t)
	a, err := s.Create(ctx, RootIno, "a", NewAttr{Mode: 0o640, Uid: 42, Gid: 43})
	must(t, err)
	if a.Uid != 42 || a.Gid != 43 || a.Mode != 0o640 || a.Kind != KindFile || a.Nlink != 1 {
		t.Errorf("attr = %+v", a)
	}
	root, err := s.GetAttr(ctx, RootIno)
	must(t, err)
	if root.Uid != 1000 || root.Kind != KindDir {
		t.Errorf("root = %+v, want owned by 1000", root)
	}
}

func TestRmdirAndUnlinkRules(t *testing.T) {
	s := newStore(t)
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	_, err = s.Create(ctx, d.Ino, "f", NewAttr{Mode: 0o644})
	must(t, err)
	if err := s.Rmdir(ctx, RootIno, "d"); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("rmdir non-empty: %v", err)
	}
	if err := s.Unlink(ctx, RootIno, "d"); !errors.Is(err, ErrIsDir) {
		t.Errorf("unlink dir: %v", err)
	}
	if err := s.Rmdir(ctx, d.Ino, "f"); !errors.Is(err, ErrNotDir) {
		t.Errorf("rmdir file: %v", err)
	}
	must(t, s.Unlink(ctx, d.Ino, "f"))
	must(t, s.Rmdir(ctx, RootIno, "d"))
	if _, err := s.Lookup(ctx, RootIno, "d"); !errors.Is(err, ErrNotExist) {
		t.Errorf("lookup removed dir: %v", err)
	}
}

func TestRenameRules(t *testing.T) {
	tests := []struct {
		name      string
		src, dst  string
		flags     RenameFlags
		wantErr   error
		wantAfter map[string]string
	}{
		{"file over file", "f1", "f2", 0, nil, map[string]string{"f2": "file 644 2 "}},
		{"file over dir", "f1", "empty", 0, ErrIsDir, nil},
		{"dir over file", "dir", "f1", 0, ErrNotDir, nil},
		{"dir over empty dir", "dir", "empty", 0, nil, map[string]string{"empty/x": "file 644 1 "}},
		{"dir over non-empty dir", "empty", "dir", 0, ErrNotEmpty, nil},
		{"dir into its own subtree", "dir", "dir/sub/in", 0, ErrInvalid, nil},
		{"noreplace", "f1", "f2", RenameNoReplace, ErrExist, nil},
		{"exchange refused", "f1", "f2", RenameExchange, ErrInvalid, nil},
		{"missing source", "nope", "f2", 0, ErrNotExist, nil},
		{"across dirs", "f1", "dir/sub/f1", 0, nil, map[string]string{"dir/sub/f1": "file 644 2 "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			writeFile(t, s, "f1", []byte("f1"))
			writeFile(t, s, "f2", []byte("two"))
			must(t, s.MkdirPath(ctx, "dir/sub", 0o755, true))
			writeFile(t, s, "dir/x", []byte("x"))
			must(t, s.MkdirPath(ctx, "empty", 0o755, false))
			sp, sn := splitPath(tt.src)
			dp, dn := splitPath(tt.dst)
			spi, _ := s.ResolvePath(ctx, sp)
			dpi, err := s.ResolvePath(ctx, dp)
			must(t, err)
			err = s.Rename(ctx, spi, sn, dpi, dn, tt.flags)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("rename %s -> %s: err = %v, want %v", tt.src, tt.dst, err, tt.wantErr)
			}
			got := tree(t, s)
			for p, want := range tt.wantAfter {
				if len(got[p]) < len(want) || got[p][:len(want)] != want {
					t.Errorf("after rename %s = %q, want prefix %q", p, got[p], want)
				}
			}
			if tt.wantErr == nil {
				if _, ok := got[tt.src]; ok {
					t.Errorf("source %s still exists", tt.src)
				}
			}
		})
	}
}

func TestRenameOverOwnHardlinkIsNoop(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", []byte("a"))
	must(t, s.LinkPath(ctx, "a", "b"))
	must(t, s.RenamePath(ctx, "a", "b"))
	if _, err := s.Stat(ctx, "a"); err != nil {
		t.Errorf("rename onto own hardlink removed the source: %v", err)
	}
}

func TestHardlinks(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", []byte("hello"))
	must(t, s.LinkPath(ctx, "a", "b"))
	a, _ := s.Stat(ctx, "a")
	b, _ := s.Stat(ctx, "b")
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Fatalf("a=%+v b=%+v, want one inode with nlink 2", a, b)
	}
	h, err := s.OpenHandle(ctx, a.Ino)
	must(t, err)
	_, err = h.WriteAt(ctx, []byte("HE"), 0)
	must(t, err)
	must(t, h.Release(ctx))
	if got := string(readFile(t, s, "b")); got != "HEllo" {
		t.Errorf("write through a, read b = %q", got)
	}
	must(t, s.RemovePath(ctx, "a", false))
	if got := string(readFile(t, s, "b")); got != "HEllo" {
		t.Errorf("after unlink of a, b = %q", got)
	}
	b, _ = s.Stat(ctx, "b")
	if b.Nlink != 1 {
		t.Errorf("nlink after unlink = %d", b.Nlink)
	}
	must(t, s.MkdirPath(ctx, "d", 0o755, false))
	d, _ := s.ResolvePath(ctx, "d")
	if _, err := s.Link(ctx, d, RootIno, "d2"); !errors.Is(err, ErrPerm) {
		t.Errorf("hardlink to a directory: err = %v, want ErrPerm", err)
	}
}

func TestReadDirIsOrderedAndResumable(t *testing.T) {
	s := newStore(t)
	for i := range 25 {
		_, err := s.Create(ctx, RootIno, fmt.Sprintf("f%02d", 24-i), NewAttr{Mode: 0o644})
		must(t, err)
	}
	var got []string
	after := ""
	for {
		page, err := s.ReadDir(ctx, RootIno, after, 7)
		must(t, err)
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			got = append(got, e.Name)
		}
		after = page[len(page)-1].Name
	}
	if len(got) != 25 || got[0] != "f00" || got[24] != "f24" {
		t.Errorf("readdir pages = %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("not in order at %d: %v", i, got)
		}
	}
}

func TestSymlinkIsData(t *testing.T) {
	s := newStore(t)
	must(t, s.SymlinkPath(ctx, "/etc/passwd", "l"))
	target, err := s.ReadLinkPath(ctx, "l")
	must(t, err)
	if target != "/etc/passwd" {
		t.Errorf("target = %q", target)
	}
	if _, err := s.ReadFile(ctx, "l"); err == nil {
		t.Error("reading through a symlink succeeded; symlinks must never be followed")
	}
	if _, err := s.Stat(ctx, "l/x"); !errors.Is(err, ErrNotDir) {
		t.Errorf("resolving through a symlink: err = %v, want ErrNotDir", err)
	}
	// WriteFile replaces a symlink instead of writing through it.
	writeFile(t, s, "l", []byte("data"))
	a, _ := s.Stat(ctx, "l")
	if a.Kind != KindFile {
		t.Errorf("after write, l is %v", a.Kind)
	}
}

func TestSetAttr(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "f", []byte("0123456789"))
	ino, _ := s.ResolvePath(ctx, "f")
	mode, uid := uint32(0o4755), uint32(7)
	mtime := time.Unix(1700000000, 5)
	atime := time.Unix(1600000000, 0)
	size := int64(4)
	a, err := s.SetAttr(ctx, ino, SetAttr{Mode: &mode, Uid: &uid, Mtime: &mtime, Atime: &atime, Size: &size})
	must(t, err)
	if a.Mode != 0o4755 || a.Uid != 7 || !a.Mtime.Equal(mtime) || !a.Atime.Equal(atime) || a.Size != 4 {
		t.Errorf("attr = %+v", a)
	}
	if got := string(readFile(t, s, "f")); got != "0123" {
		t.Errorf("truncated content = %q", got)
	}
	size = 8
	_, err = s.SetAttr(ctx, ino, SetAttr{Size: &size})
	must(t, err)
	if got := readFile(t, s, "f"); !bytes.Equal(got, []byte("0123\x00\x00\x00\x00")) {
		t.Errorf("extended content = %q", got)
	}
}

func TestOwnershipAndAtimeStampNoRev(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "f", []byte("x"))
	ino, _ := s.ResolvePath(ctx, "f")
	rev := s.CurrentRev()
	uid := uint32(5)
	at := time.Unix(1, 0)
	_, err := s.SetAttr(ctx, ino, SetAttr{Uid: &uid, Atime: &at})
	must(t, err)
	if s.CurrentRev() != rev {
		t.Errorf("chown/atime bumped rev %d -> %d; ownership and atime are local", rev, s.CurrentRev())
	}
}

func TestXattrs(t *testing.T) {
	s := newStore(t)
	a, err := s.Create(ctx, RootIno, "f", NewAttr{Mode: 0o644})
	must(t, err)
	must(t, s.SetXattr(ctx, a.Ino, "user.a", []byte("1"), 0))
	if err := s.SetXattr(ctx, a.Ino, "user.a", []byte("2"), XattrCreate); !errors.Is(err, ErrExist) {
		t.Errorf("create existing: %v", err)
	}
	if err := s.SetXattr(ctx, a.Ino, "user.b", []byte("2"), XattrReplace); !errors.Is(err, ErrNoData) {
		t.Errorf("replace missing: %v", err)
	}
	if err := s.SetXattr(ctx, a.Ino, "trusted.x", []byte("2"), 0); !errors.Is(err, ErrNotSupp) {
		t.Errorf("non-user namespace: %v", err)
	}
	v, err := s.GetXattr(ctx, a.Ino, "user.a")
	must(t, err)
	if string(v) != "1" {
		t.Errorf("get = %q", v)
	}
	if _, err := s.GetXattr(ctx, a.Ino, "security.capability"); !errors.Is(err, ErrNoData) {
		t.Errorf("missing xattr: %v", err)
	}
	names, err := s.ListXattr(ctx, a.Ino)
	must(t, err)
	if len(names) != 1 || names[0] != "user.a" {
		t.Errorf("list = %v", names)
	}
	must(t, s.RemoveXattr(ctx, a.Ino, "user.a"))
	if err := s.RemoveXattr(ctx, a.Ino, "user.a"); !errors.Is(err, ErrNoData) {
		t.Errorf("remove twice: %v", err)
	}
}

func TestStatFS(t *testing.T) {
	s := newStore(t)
	st, err := s.StatFS(ctx)
	must(t, err)
	if st.Blocks == 0 || st.BlockSize == 0 || st.Files == 0 || st.NameLen != 255 || st.BlocksAvail > st.Blocks {
		t.Errorf("statfs = %+v", st)
	}
}

func TestMemoryStore(t *testing.T) {
	s, err := Open(ctx, Memory, Options{})
	must(t, err)
	defer s.Close()
	data := pattern(3*cs+10, 1)
	if _, err := s.WriteFile(ctx, "a/b", nil, 0o644); !errors.Is(err, ErrNotExist) {
		t.Errorf("write under a missing parent: %v", err)
	}
	must(t, s.MkdirPath(ctx, "x/y", 0o755, true))
	writeFile(t, s, "x/y/big", data)
	if got := readFile(t, s, "x/y/big"); !bytes.Equal(got, data) {
		t.Error("memory store read back differs")
	}
}

func TestPathValidation(t *testing.T) {
	long := string(bytes.Repeat([]byte("a"), 256))
	tests := []struct {
		p    string
		want error
	}{
		{"a", nil}, {"a/b/c.txt", nil}, {"ü/ñ", nil},
		{"", ErrInvalid}, {"/a", ErrInvalid}, {"a/", ErrInvalid}, {"a//b", ErrInvalid},
		{".", ErrInvalid}, {"a/./b", ErrInvalid}, {"..", ErrInvalid}, {"a/../b", ErrInvalid},
		{"a\x00b", ErrInvalid}, {long, ErrNameTooLong}, {string(bytes.Repeat([]byte("a/"), 2049)) + "a", ErrNameTooLong},
	}
	for _, tt := range tests {
		if err := ValidatePath(tt.p); !errors.Is(err, tt.want) {
			t.Errorf("ValidatePath(%.40q) = %v, want %v", tt.p, err, tt.want)
		}
	}
}

func FuzzValidatePath(f *testing.F) {
	for _, p := range []string{"a", "a/b", "../x", "a//b", "a\x00", "./a", "a/.."} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePath(p) != nil {
			return
		}
		// A valid path stays inside the root whatever joins it.
		clean := filepath.Clean("/root/" + p)
		if clean != "/root/"+p {
			t.Fatalf("valid path %q cleans to %q", p, clean)
		}
		if len(p) > MaxPathLen {
			t.Fatalf("valid path of %d bytes", len(p))
		}
	})
}

// A directory's mode syncs when the same SetAttr also sets its times
// (which alone are local): the mode change reaches the feed.
func TestDirectoryModeAndTimesInOneSetAttr(t *testing.T) {
	s := newStore(t)
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	must(t, s.Sync(ctx))
	after := watermark.At(s.CurrentRev())
	mode := uint32(0o700)
	mtime := time.Unix(1_700_000_000, 0)
	_, err = s.SetAttr(ctx, d.Ino, SetAttr{Mode: &mode, Mtime: &mtime})
	must(t, err)
	must(t, s.Sync(ctx))
	es := feed(t, s, after, Ignore{})
	if len(es) != 1 || es[0].Path != "d" || es[0].Mode != mode {
		t.Fatalf("feed after chmod and utimes of a directory: %+v, want d with mode %o", es, mode)
	}
}
