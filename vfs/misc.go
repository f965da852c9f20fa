package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strings"
	"syscall"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/watermark"
)

// Watermarks returns the persisted watermarks for peer (zero Set if none).
func (s *Store) Watermarks(ctx context.Context, peer string) (watermark.Set, error) {
	// Loaded before the read commits the open group: a mutation after it
	// moves the counter, one before it is in what the read sees.
	at := s.writes.Load()
	if k := s.marks.Load(); k != nil && k.at == at {
		if set, ok := k.sets[peer]; ok {
			return set, nil
		}
	}
	set, err := s.readWatermarks(ctx, peer)
	if err == nil && at%2 == 0 && s.writes.Load() == at {
		s.keepMarks(at, peer, set)
	}
	return set, err
}

// keptMarks are watermarks read, stamped with the write counter they were
// read at, as kept attributes are (kept.go): every write transaction moves
// the counter, so while it stands they are what a read would return. An
// idle sync reads a peer's watermarks twice (the push before a command and
// the check after it) and writes nothing: each read cost about 70 us of
// SQL on the path of every exec.
type keptMarks struct {
	at   uint64
	sets map[string]watermark.Set
}

// maxKeptMarks bounds the peers whose watermarks are kept at once.
const maxKeptMarks = 64

// keepMarks keeps set as peer's watermarks at write count at.
func (s *Store) keepMarks(at uint64, peer string, set watermark.Set) {
	for {
		old := s.marks.Load()
		k := &keptMarks{at: at}
		if old != nil && old.at == at {
			if len(old.sets) >= maxKeptMarks {
				return
			}
			k.sets = maps.Clone(old.sets)
		} else {
			k.sets = make(map[string]watermark.Set, 1)
		}
		k.sets[peer] = set
		if s.marks.CompareAndSwap(old, k) {
			return
		}
	}
}

func (s *Store) readWatermarks(ctx context.Context, peer string) (watermark.Set, error) {
	var set watermark.Set
	var push, fetch, applied []byte
	err := s.committed().QueryRowContext(ctx, `SELECT push, fetch, applied_push FROM watermarks WHERE peer = ?`, peer).Scan(&push, &fetch, &applied)
	if errors.Is(err, sql.ErrNoRows) {
		return set, nil
	}
	if err != nil {
		return set, fmt.Errorf("watermarks %q: %w", peer, err)
	}
	for _, x := range []struct {
		b []byte
		c *watermark.Cursor
	}{{push, &set.Push}, {fetch, &set.Fetch}, {applied, &set.AppliedPush}} {
		if *x.c, _, err = watermark.DecodeCursor(x.b); err != nil {
			return set, fmt.Errorf("watermarks %q: %w", peer, err)
		}
	}
	return set, nil
}

// SetWatermarks persists the watermarks for peer.
func (s *Store) SetWatermarks(ctx context.Context, peer string, set watermark.Set) error {
	return s.update(ctx, func(t *wtx) error { return t.setWatermarks(peer, set) })
}

// setWatermarks writes peer's watermarks. A push cursor lowered below the
// stored one is a re-baseline (the peer lost state): the bounce run and
// the merge bases kept for the peer are forgotten with it, so the re-push
// carries every entry and no base claims what the peer no longer holds.
// An applied-push cursor lowered below the stored one is the peer's feed
// going back (it lost the record of pushes we applied, or its store was
// restored from an older copy): the bounce run kept for it names our revs
// holding entries it may no longer have, and is forgotten, so its next
// pull fetches them (what it still has applies as a no-op).
func (t *wtx) setWatermarks(peer string, set watermark.Set) error {
	var old, oldApplied []byte
	err := t.tx.QueryRowContext(t.ctx, `SELECT push, applied_push FROM watermarks WHERE peer = ?`, peer).Scan(&old, &oldApplied)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("set watermarks %q: %w", peer, err)
	}
	lowered, wentBack := false, false
	if err == nil {
		prev, _, err := watermark.DecodeCursor(old)
		lowered = err != nil || set.Push.Less(prev)
		applied, _, err := watermark.DecodeCursor(oldApplied)
		wentBack = err != nil || set.AppliedPush.Less(applied)
	}
	var enc [3][]byte
	for i, c := range []watermark.Cursor{set.Push, set.Fetch, set.AppliedPush} {
		b, err := c.AppendBinary(nil)
		if err != nil {
			return err
		}
		enc[i] = b
	}
	_, err = t.exec(`INSERT INTO watermarks(peer, push, fetch, applied_push) VALUES(?, ?, ?, ?)
		ON CONFLICT(peer) DO UPDATE SET push = excluded.push, fetch = excluded.fetch, applied_push = excluded.applied_push`,
		peer, enc[0], enc[1], enc[2])
	if err != nil {
		return fmt.Errorf("set watermarks %q: %w", peer, err)
	}
	if lowered || wentBack {
		if _, err := t.exec(`UPDATE watermarks SET bounce_from = 0, bounce_to = 0 WHERE peer = ?`, peer); err != nil {
			return fmt.Errorf("set watermarks %q: %w", peer, err)
		}
	}
	if lowered {
		return t.forgetBases(peer)
	}
	return nil
}

// Has returns the subset of hashes whose bytes are present, in input order.
func (s *Store) Has(ctx context.Context, hashes []chunkstore.Hash) ([]chunkstore.Hash, error) {
	return s.chunks.Has(ctx, s.committed(), hashes)
}

// ReadChunk returns one chunk's bytes.
func (s *Store) ReadChunk(ctx context.Context, h chunkstore.Hash) ([]byte, error) {
	return s.chunks.Get(ctx, s.committed(), h)
}

// ReadChunks calls each with every chunk of hs, in order, reading their
// rows in batches (chunkstore.Store.GetEach); an error from each stops it.
func (s *Store) ReadChunks(ctx context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error {
	return s.chunks.GetEach(ctx, s.committed(), hs, each)
}

// GC collects chunks that no manifest references and chunk files that no
// row names (left by a crash between writing bytes and committing).
func (s *Store) GC(ctx context.Context) (chunkstore.GCStats, error) {
	var sweep *chunkstore.Sweep
	err := s.update(context.WithValue(ctx, closingKey{}, true), func(t *wtx) error {
		var err error
		sweep, err = s.chunks.GC(ctx, t.tx)
		return err
	})
	if err != nil {
		return chunkstore.GCStats{}, fmt.Errorf("gc: %w", err)
	}
	crashpoint.Hit("vfs.gc.committed")
	return sweep.Finish()
}

// Xattrs are local to each side: they are kept for tools inside the
// container and never cross the wire. Only the user.* namespace is stored.

// xattrMax bounds one value (the kernel's XATTR_SIZE_MAX). A node's xattrs
// are bounded as a local file system bounds them, since the quota counts
// only files: their names as listxattr(2) lists them (each with its NUL)
// fit xattrListMax, the kernel's XATTR_LIST_MAX, so the node can always be
// listed (and copied: cp -a, tar, rsync -X), and their values total at
// most xattrValuesMax. Past either, SetXattr is ErrNoSpace, as ext4's when
// an inode's xattr block is full.
const (
	xattrMax       = 64 << 10
	xattrListMax   = 64 << 10
	xattrValuesMax = 256 << 10
)

func checkXattr(name string) error {
	if !strings.HasPrefix(name, "user.") || len(name) > 255 || len(name) == len("user.") {
		return ErrNotSupp
	}
	return nil
}

// GetXattr returns one extended attribute; a missing one is ErrNoData.
func (s *Store) GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error) {
	if !strings.HasPrefix(name, "user.") {
		return nil, ErrNoData
	}
	var v []byte
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		err := q.QueryRowContext(ctx, `SELECT value FROM xattrs WHERE ino = ? AND name = ?`, ino, name).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := getNode(ctx, q, ino); err != nil {
				return err
			}
			return ErrNoData
		}
		return err
	})
	if errors.Is(err, ErrNoData) || errors.Is(err, ErrNotExist) {
		return nil, err
	}
	if v == nil {
		v = []byte{}
	}
	return v, err
}

// Xattr flags, as setxattr(2).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// SetXattr sets one extended attribute.
func (s *Store) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags uint32) error {
	if err := checkXattr(name); err != nil {
		return err
	}
	if len(value) > xattrMax {
		return ErrRange
	}
	return s.mutate(ctx, func(t *wtx) error {
		if _, err := getNode(ctx, t.tx, ino); err != nil {
			return err
		}
		var one int
		err := t.tx.QueryRowContext(ctx, `SELECT 1 FROM xattrs WHERE ino = ? AND name = ?`, ino, name).Scan(&one)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if flags&XattrCreate != 0 && exists {
			return ErrExist
		}
		if flags&XattrReplace != 0 && !exists {
			return ErrNoData
		}
		// What the node's other xattrs take: a replaced value does not
		// count against its successor.
		var names, values int
		if err := t.tx.QueryRowContext(ctx, `SELECT coalesce(sum(length(CAST(name AS BLOB)) + 1), 0), coalesce(sum(length(CAST(value AS BLOB))), 0)
			FROM xattrs WHERE ino = ? AND name != ?`, ino, name).Scan(&names, &values); err != nil {
			return err
		}
		if names+len(name)+1 > xattrListMax || values+len(value) > xattrValuesMax {
			return fmt.Errorf("xattrs of inode %d: %w", ino, ErrNoSpace)
		}
		if value == nil {
			value = []byte{}
		}
		t.s.xattrs.add(ino)
		_, err = t.exec(`INSERT INTO xattrs(ino, name, value) VALUES(?, ?, ?)
			ON CONFLICT(ino, name) DO UPDATE SET value = excluded.value`, ino, name, value)
		return err
	})
}

// ListXattr lists a node's extended attribute names.
func (s *Store) ListXattr(ctx context.Context, ino Ino) ([]string, error) {
	var out []string
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		rows, err := q.QueryContext(ctx, `SELECT name FROM xattrs WHERE ino = ? ORDER BY name`, ino)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			out = append(out, n)
		}
		return rows.Err()
	})
	return out, err
}

// RemoveXattr removes one extended attribute.
func (s *Store) RemoveXattr(ctx context.Context, ino Ino, name string) error {
	if !strings.HasPrefix(name, "user.") {
		return ErrNoData
	}
	return s.mutate(ctx, func(t *wtx) error {
		res, err := t.exec(`DELETE FROM xattrs WHERE ino = ? AND name = ?`, ino, name)
		if err != nil {
			return err
		}
		if k, _ := res.RowsAffected(); k == 0 {
			return ErrNoData
		}
		return nil
	})
}

// StatFS reports figures for statfs(2): space from the filesystem that
// holds the chunk files (or the database), files from the node count, both
// from the usage counters. Under a quota (SetQuota) the bounded figures are
// the quota's: total blocks the max bytes, free what the usage and the
// open files' reservations leave of it (available: never more than the
// disk has);
// total files the max entries, free what the entries leave.
func (s *Store) StatFS(ctx context.Context) (StatFS, error) {
	st := StatFS{BlockSize: 4096, NameLen: MaxNameLen}
	use := s.Usage()
	nodes, used := use.Entries+1, use.Bytes // the root is a node too
	var fs syscall.Statfs_t
	dir := "/"
	if !s.memory {
		dir = s.path + ".chunks"
		if s.opts.ChunkDir != "" {
			dir = s.opts.ChunkDir
		}
	}
	if err := syscall.Statfs(dir, &fs); err != nil {
		if err := syscall.Statfs("/", &fs); err != nil {
			return st, fmt.Errorf("statfs: %w", err)
		}
	}
	scale := uint64(fs.Bsize) / uint64(st.BlockSize)
	if scale == 0 {
		scale = 1
	}
	st.BlocksFree = fs.Bfree * scale
	st.BlocksAvail = fs.Bavail * scale
	st.Blocks = st.BlocksFree + uint64(used+int64(st.BlockSize)-1)/uint64(st.BlockSize)
	st.Files = uint64(nodes) + fs.Ffree
	st.FilesFree = fs.Ffree
	if st.FilesFree == 0 {
		st.FilesFree = 1 << 20
		st.Files = uint64(nodes) + st.FilesFree
	}
	q := s.Quota()
	if q.MaxBytes > 0 {
		bs := int64(st.BlockSize)
		s.resMu.Lock()
		held := used + s.reserved
		s.resMu.Unlock()
		st.Blocks = uint64((q.MaxBytes + bs - 1) / bs)
		st.BlocksFree = uint64(max(q.MaxBytes-held, 0) / bs)
		st.BlocksAvail = min(st.BlocksAvail, st.BlocksFree)
	}
	if q.MaxEntries > 0 {
		st.Files = uint64(q.MaxEntries)
		st.FilesFree = uint64(max(q.MaxEntries-use.Entries, 0))
	}
	return st, nil
}

// AllWatermarks returns the watermarks of every peer.
func (s *Store) AllWatermarks(ctx context.Context) (map[string]watermark.Set, error) {
	rows, err := s.committed().QueryContext(ctx, `SELECT peer FROM watermarks ORDER BY peer`)
	if err != nil {
		return nil, fmt.Errorf("watermarks: %w", err)
	}
	var peers []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return nil, err
		}
		peers = append(peers, p)
	}
	rows.Close()
	out := make(map[string]watermark.Set, len(peers))
	for _, p := range peers {
		set, err := s.Watermarks(ctx, p)
		if err != nil {
			return nil, err
		}
		out[p] = set
	}
	return out, rows.Err()
}

// Counts are a store's sizes, for /stats.
type Counts struct {
	Nodes      int64            `json:"nodes"`
	Tombstones int64            `json:"changes_rows"`
	Chunks     chunkstore.Stats `json:"chunks"`
}

// Counts reports node, change-row and chunk figures.
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	if err := s.committed().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM nodes), (SELECT count(*) FROM changes)`).Scan(&c.Nodes, &c.Tombstones); err != nil {
		return c, fmt.Errorf("counts: %w", err)
	}
	cs, err := s.chunks.Stats(ctx, s.committed())
	c.Chunks = cs
	return c, err
}
