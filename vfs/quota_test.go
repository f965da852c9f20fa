package vfs

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
)

// scanUsage counts the usage from the rows, as the counters must say.
func scanUsage(t *testing.T, s *Store) Usage {
	t.Helper()
	must(t, s.Sync(ctx))
	var u Usage
	must(t, s.w.QueryRow(`SELECT coalesce(sum(CASE WHEN kind = ? THEN size ELSE 0 END), 0), count(*) - 1 FROM nodes`, KindFile).Scan(&u.Bytes, &u.Entries))
	return u
}

func checkUsage(t *testing.T, s *Store, when string) {
	t.Helper()
	if got, want := s.Usage(), scanUsage(t, s); got != want {
		t.Fatalf("%s: usage counters %+v, rows say %+v", when, got, want)
	}
}

func TestUsageCountersFollowEveryMutation(t *testing.T) {
	for _, window := range []time.Duration{-1, time.Hour} {
		path := filepath.Join(t.TempDir(), "s.db")
		s, err := Open(ctx, path, Options{NoSync: true, GroupWindow: window})
		must(t, err)
		checkUsage(t, s, "empty")
		d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
		must(t, err)
		a, h, err := s.CreateOpen(ctx, d.Ino, "f", NewAttr{Mode: 0o644})
		must(t, err)
		_, err = h.WriteAt(ctx, pattern(3*cs+17, 1), 0)
		must(t, err)
		must(t, h.Release(ctx))
		checkUsage(t, s, "write")
		_, err = s.Link(ctx, a.Ino, RootIno, "hard")
		must(t, err)
		_, err = s.Symlink(ctx, RootIno, "ln", "d/f", NewAttr{})
		must(t, err)
		_, err = s.Mknod(ctx, RootIno, "fifo", KindFifo, 0, NewAttr{Mode: 0o644})
		must(t, err)
		checkUsage(t, s, "link, symlink, fifo")
		size := int64(100)
		_, err = s.SetAttr(ctx, a.Ino, SetAttr{Size: &size})
		must(t, err)
		size = 1 << 40 // a hole counts at its logical size
		_, err = s.SetAttr(ctx, a.Ino, SetAttr{Size: &size})
		must(t, err)
		checkUsage(t, s, "truncate")
		if got := s.Usage().Bytes; got != 1<<40 {
			t.Errorf("a 1 TiB sparse file: usage %d bytes, want %d (logical size)", got, int64(1<<40))
		}
		writeFile(t, s, "d/g", pattern(1000, 2))
		writeFile(t, s, "d/g", pattern(10, 3))
		must(t, s.Rename(ctx, RootIno, "d", RootIno, "e", 0))
		st := s.Chunks().NewStage()
		apply(t, s, st, stageEntry(t, st, "x/y/z", pattern(5000, 4)), ChangeEntry{Kind: EntryDelete, Rev: 2, Path: "hard"})
		st.Release()
		checkUsage(t, s, "path api, rename, apply")
		// Unlinked while open: counted until the last release.
		h, err = s.OpenHandle(ctx, a.Ino)
		must(t, err)
		must(t, s.RemovePath(ctx, "e", true))
		checkUsage(t, s, "rm -r with an open file")
		must(t, h.Release(ctx))
		checkUsage(t, s, "last release")
		want := s.Usage()
		must(t, s.Close())
		s = openStore(t, path)
		if got := s.Usage(); got != want {
			t.Errorf("reopened: usage %+v, want %+v", got, want)
		}
		checkUsage(t, s, "reopened")
	}
}

func TestUsageCountersMigrateFromTheRows(t *testing.T) {
	path, db := oldSchema(t, 6)
	_, err := db.Exec(`INSERT INTO nodes(kind, mode, uid, gid, nlink, size, mtime, ctime, atime, rev) VALUES
		(?, 420, 0, 0, 1, 1234, 0, 0, 0, 1), (?, 493, 0, 0, 1, 0, 0, 0, 0, 2), (?, 511, 0, 0, 1, 9, 0, 0, 0, 3)`,
		KindFile, KindDir, KindSymlink)
	must(t, err)
	db.Close()
	s := openMigrated(t, path)
	if got, want := s.Usage(), (Usage{Bytes: 1234, Entries: 3}); got != want {
		t.Errorf("migrated usage %+v, want %+v", got, want)
	}
}

func TestQuotaValidate(t *testing.T) {
	for _, q := range []Quota{{MaxBytes: -1}, {MaxEntries: -5}, {MaxFileSize: -1}, {MaxBytes: MaxQuotaBytes + 1},
		{MaxEntries: MaxQuotaEntries + 1}, {MaxFileSize: chunkstore.MaxFileSize + 1}} {
		if err := newStore(t).SetQuota(q); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetQuota(%+v): err = %v, want ErrInvalid", q, err)
		}
	}
	if err := (Quota{MaxBytes: MaxQuotaBytes, MaxEntries: MaxQuotaEntries, MaxFileSize: chunkstore.MaxFileSize}).Validate(); err != nil {
		t.Errorf("the largest quota: %v", err)
	}
}

func TestQuotaEntriesRefuseCreate(t *testing.T) {
	s := newStore(t)
	must(t, s.SetQuota(Quota{MaxEntries: 2}))
	_, err := s.Mkdir(ctx, RootIno, "a", NewAttr{Mode: 0o755})
	must(t, err)
	_, err = s.Create(ctx, RootIno, "b", NewAttr{Mode: 0o644})
	must(t, err)
	for name, op := range map[string]func() error{
		"create":  func() error { _, err := s.Create(ctx, RootIno, "c", NewAttr{Mode: 0o644}); return err },
		"mkdir":   func() error { _, err := s.Mkdir(ctx, RootIno, "c", NewAttr{Mode: 0o755}); return err },
		"symlink": func() error { _, err := s.Symlink(ctx, RootIno, "c", "b", NewAttr{}); return err },
		"path":    func() error { return s.MkdirPath(ctx, "c", 0o755, false) },
	} {
		err := op()
		var qe *QuotaError
		if !errors.As(err, &qe) || qe.Limit != LimitEntries || Errno(err) != syscall.EDQUOT {
			t.Errorf("%s over max entries: err = %v (errno %v), want an entries QuotaError, EDQUOT", name, err, Errno(err))
		}
	}
	// A hardlink is no new entry; a rename neither.
	b, err := s.Stat(ctx, "b")
	must(t, err)
	_, err = s.Link(ctx, b.Ino, RootIno, "b2")
	must(t, err)
	must(t, s.RenamePath(ctx, "b2", "a/b3"))
	checkUsage(t, s, "after refusals")
}

func TestQuotaBytesRefuseWriteAndKeepWhatIsThere(t *testing.T) {
	s := newStore(t)
	must(t, s.SetQuota(Quota{MaxBytes: 1 << 20}))
	old := pattern(600<<10, 1)
	writeFile(t, s, "old", old)
	a, h, err := s.CreateOpen(ctx, RootIno, "new", NewAttr{Mode: 0o644})
	must(t, err)
	_, err = h.WriteAt(ctx, pattern(400<<10, 2), 0)
	must(t, err)
	// The next 64 KiB would take 1000 KiB + 64 KiB past 1 MiB: refused whole.
	n, err := h.WriteAt(ctx, pattern(64<<10, 3), 400<<10)
	if !errors.Is(err, ErrQuota) || Errno(err) != syscall.EDQUOT || n != 0 {
		t.Fatalf("write past the quota: n = %d, err = %v, want 0, EDQUOT", n, err)
	}
	// Up to the last byte fits.
	_, err = h.WriteAt(ctx, pattern(24<<10, 4), 400<<10)
	must(t, err)
	must(t, h.Release(ctx))
	if got := s.Usage().Bytes; got != 1<<20 {
		t.Errorf("usage %d, want exactly the quota %d", got, 1<<20)
	}
	if got := readFile(t, s, "old"); !bytes.Equal(got, old) {
		t.Error("the file written before the quota was reached changed")
	}
	if got := readFile(t, s, "new"); len(got) != 424<<10 {
		t.Errorf("new file %d bytes, want %d", len(got), 424<<10)
	}
	// Truncate up, the path API, growing a file: refused. Nothing changes.
	size := int64(2 << 20)
	if _, err := s.SetAttr(ctx, a.Ino, SetAttr{Size: &size}); !errors.Is(err, ErrQuota) {
		t.Errorf("truncate past the quota: err = %v, want ErrQuota", err)
	}
	if _, err := s.WriteFile(ctx, "more", []byte("x"), 0o644); !errors.Is(err, ErrQuota) {
		t.Errorf("path write past the quota: err = %v, want ErrQuota", err)
	}
	if _, err := s.Stat(ctx, "more"); !errors.Is(err, ErrNotExist) {
		t.Errorf("a refused path write left /more: %v", err)
	}
	// Replacing a file by a smaller one is fine, and frees room.
	writeFile(t, s, "old", []byte("small"))
	writeFile(t, s, "more", pattern(100<<10, 5))
	checkUsage(t, s, "end")
}

func TestQuotaMaxFileSize(t *testing.T) {
	s := newStore(t)
	must(t, s.SetQuota(Quota{MaxFileSize: 100 << 10}))
	_, h, err := s.CreateOpen(ctx, RootIno, "f", NewAttr{Mode: 0o644})
	must(t, err)
	defer h.Release(ctx)
	_, err = h.WriteAt(ctx, pattern(100<<10, 1), 0)
	must(t, err)
	_, err = h.WriteAt(ctx, []byte("x"), 100<<10)
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Limit != LimitFileSize || Errno(err) != syscall.EFBIG || !errors.Is(err, ErrQuota) {
		t.Errorf("write past the max file size: err = %v (errno %v), want a file size QuotaError, EFBIG", err, Errno(err))
	}
	if _, err := s.WriteFile(ctx, "g", pattern(200<<10, 2), 0o644); Errno(err) != syscall.EFBIG {
		t.Errorf("path write past the max file size: err = %v, want EFBIG", err)
	}
	// Overwriting within the size is fine.
	_, err = h.WriteAt(ctx, []byte("y"), 5)
	must(t, err)
}

func TestQuotaLoweredBelowUsage(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", pattern(300<<10, 1))
	writeFile(t, s, "b", pattern(300<<10, 2))
	must(t, s.SetQuota(Quota{MaxBytes: 100 << 10, MaxEntries: 1}))
	// Existing data is kept and readable.
	if got := readFile(t, s, "a"); !bytes.Equal(got, pattern(300<<10, 1)) {
		t.Fatal("lowering the quota changed /a")
	}
	// What does not grow goes through: an in-place rewrite, a shrink, a delete.
	b, err := s.Stat(ctx, "b")
	must(t, err)
	h, err := s.OpenHandle(ctx, b.Ino)
	must(t, err)
	_, err = h.WriteAt(ctx, []byte("rewrite"), 10)
	must(t, err)
	must(t, h.Flush(ctx))
	// Growing is refused.
	if _, err := h.WriteAt(ctx, []byte("x"), 300<<10); !errors.Is(err, ErrQuota) {
		t.Errorf("growing over a lowered quota: err = %v, want ErrQuota", err)
	}
	must(t, h.Release(ctx))
	if _, err := s.Create(ctx, RootIno, "c", NewAttr{Mode: 0o644}); !errors.Is(err, ErrQuota) {
		t.Errorf("create over a lowered quota: err = %v, want ErrQuota", err)
	}
	must(t, s.RemovePath(ctx, "a", false))
	writeFile(t, s, "b", []byte("shrunk"))
	checkUsage(t, s, "after")
}

// Writers racing for the last bytes of the quota never take the usage past
// it: each write reserves its growth under one lock.
func TestQuotaRacingWritersNeverOvershoot(t *testing.T) {
	s := newStore(t)
	const quota = 3<<20 + 12345
	must(t, s.SetQuota(Quota{MaxBytes: quota}))
	var wg sync.WaitGroup
	const writers = 8
	written := make([]int64, writers)
	for i := range writers {
		_, h, err := s.CreateOpen(ctx, RootIno, string(rune('a'+i)), NewAttr{Mode: 0o644})
		must(t, err)
		wg.Go(func() {
			defer func() {
				// Every write answered is committed: no commit is refused.
				if err := h.Release(ctx); err != nil {
					t.Errorf("writer %d release: %v", i, err)
				}
			}()
			buf := pattern(32<<10, byte(i))
			for off := int64(0); ; off += int64(len(buf)) {
				if _, err := h.WriteAt(ctx, buf, off); err != nil {
					if !errors.Is(err, ErrQuota) {
						t.Errorf("writer %d: %v", i, err)
					}
					return
				}
				written[i] = off + int64(len(buf))
				if off%(256<<10) == 0 {
					if err := h.Flush(ctx); err != nil {
						t.Errorf("writer %d flush: %v", i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	var sum int64
	for _, w := range written {
		sum += w
	}
	u := s.Usage()
	if u.Bytes > quota || u.Bytes != sum {
		t.Errorf("usage %d for %d bytes written, quota %d: want the writes, at most the quota", u.Bytes, sum, quota)
	}
	if quota-u.Bytes >= 32<<10 {
		t.Errorf("usage %d leaves %d of the quota: a whole write still fitted", u.Bytes, quota-u.Bytes)
	}
	checkUsage(t, s, "after the race")
}

func TestApplyQuotaRefusesTheWholeBatch(t *testing.T) {
	s := newStore(t)
	must(t, s.SetQuota(Quota{MaxBytes: 10 << 10, MaxEntries: 10}))
	st := s.Chunks().NewStage()
	defer st.Release()
	batch := []ChangeEntry{stageEntry(t, st, "a", pattern(6<<10, 1)), stageEntry(t, st, "b", pattern(6<<10, 2))}
	_, err := s.Apply(ctx, batch, ApplyOptions{Source: Upstream, Stage: st, Quota: true})
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Limit != LimitBytes || qe.Need != 12<<10 {
		t.Fatalf("apply past the quota: err = %v, want a bytes QuotaError needing %d", err, 12<<10)
	}
	if _, err := s.Stat(ctx, "a"); !errors.Is(err, ErrNotExist) {
		t.Errorf("a refused batch left /a: %v", err)
	}
	checkUsage(t, s, "refused")
	// Without Quota (a push to the container) the batch applies.
	apply(t, s, st, batch...)
	checkUsage(t, s, "applied")
}

func TestStatFSShowsTheQuota(t *testing.T) {
	s := newStore(t)
	writeFile(t, s, "a", pattern(40960, 1))
	must(t, s.SetQuota(Quota{MaxBytes: 1 << 20, MaxEntries: 100}))
	st, err := s.StatFS(ctx)
	must(t, err)
	if st.Blocks != (1<<20)/4096 || st.BlocksFree != (1<<20-40960)/4096 || st.BlocksAvail > st.BlocksFree {
		t.Errorf("blocks %d free %d avail %d, want %d, %d, at most free", st.Blocks, st.BlocksFree, st.BlocksAvail, (1<<20)/4096, (1<<20-40960)/4096)
	}
	if st.Files != 100 || st.FilesFree != 99 {
		t.Errorf("files %d free %d, want 100, 99", st.Files, st.FilesFree)
	}
}
