package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/wsync/wsync/chunkstore"
)

// The trash keeps what deletes and overwrites replace, on a store opened
// with Options.Trash (the server's). A trash row is the node's state at
// one path when it went: a file's manifest, size, mode and mtime, a
// symlink's target, a directory's mode, with when and why. It is a
// manifest, not a copy: the row holds one chunk reference per chunk of the
// manifest (chunkstore refcounts), taken in the transaction that removes
// or rewrites the node, and given back in the transaction that deletes
// the row (expiry, purge, eviction, restore). A collection step deletes
// only rows whose count is zero inside its own write transaction, and
// every one of those transactions serialises with it, so a chunk a trash
// row names is never collected (docs/ARCHITECTURE.md, "Trash").

// TrashOptions configure a store's trash (Options.Trash).
type TrashOptions struct {
	// Retention is how long a row is kept (0: DefaultTrashRetention).
	// Expired rows are deleted by the next collection pass (gc.go) or
	// ExpireTrash.
	Retention time.Duration
	// MaxBytes bounds the file bytes the trash holds, counted as the
	// files' sizes (0: DefaultTrashMaxBytes; negative: no bound); MaxEntries
	// its rows (0: DefaultTrashMaxEntries; negative: no bound). A commit
	// that takes the trash past either evicts the oldest rows, its own
	// included: a file larger than MaxBytes is not kept.
	MaxBytes   int64
	MaxEntries int64
}

// Defaults of TrashOptions.
const (
	DefaultTrashRetention  = 24 * time.Hour
	DefaultTrashMaxBytes   = 10 << 30
	DefaultTrashMaxEntries = 1_000_000
)

func (o TrashOptions) withDefaults() TrashOptions {
	if o.Retention <= 0 {
		o.Retention = DefaultTrashRetention
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultTrashMaxBytes
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = DefaultTrashMaxEntries
	}
	return o
}

// Why a row was trashed (TrashEntry.Op).
const (
	TrashDelete    = "delete"    // removed, or replaced by a node of another type
	TrashOverwrite = "overwrite" // a file's content replaced
)

// Who trashed it (TrashEntry.Origin).
const (
	OriginSync    = "sync"    // an Apply: entries pulled from the container
	OriginAPI     = "api"     // a path operation (the files API)
	OriginRestore = "restore" // a forced RestoreTrash replacing a live node
	OriginLocal   = "local"   // a mount mutation
)

// MaxTrashRestore bounds the paths one RestoreTrash brings back, and
// MaxTrashList one TrashList.
const (
	MaxTrashRestore = 200_000
	MaxTrashList    = 100_000
)

// trashStep bounds the rows one transaction of expiry or purge deletes.
const trashStep = 256

// TrashEntry is one row of the trash.
type TrashEntry struct {
	ID        int64
	Path      string // store form
	Kind      Kind
	Mode      uint32
	Size      int64
	Mtime     time.Time
	Target    string // symlinks
	TrashedAt time.Time
	Op        string // TrashDelete or TrashOverwrite
	Origin    string // OriginSync, OriginAPI, ...
	manifest  chunkstore.Manifest
}

// TrashUsage is what the trash holds.
type TrashUsage struct {
	Entries int64
	Bytes   int64
}

// trash records the node ino (of kind k) at path as it is now, before the
// caller removes or rewrites it: one row, and a reference on each chunk
// of its manifest. A store without a trash, a special file and the root
// record nothing.
func (t *wtx) trash(path string, ino Ino, k Kind, op string) error {
	if t.s.opts.Trash == nil || k.Special() || path == "" {
		return nil
	}
	origin := t.origin
	if origin == "" {
		origin = OriginAPI
	}
	var kind Kind
	var size int64
	var mb []byte
	err := t.tx.QueryRowContext(t.ctx, `INSERT INTO trash(path, kind, mode, size, mtime, manifest, target, at, op, origin)
		SELECT ?, kind, mode, CASE WHEN kind = ? THEN size ELSE 0 END, mtime, manifest, target, ?, ?, ? FROM nodes WHERE ino = ?
		RETURNING kind, size, manifest`, path, KindFile, t.now, op, origin, ino).Scan(&kind, &size, &mb)
	if err != nil {
		return fmt.Errorf("trash %q: %w", path, err)
	}
	if kind == KindFile && len(mb) > 0 {
		m, _, err := chunkstore.DecodeManifest(mb)
		if err != nil {
			return fmt.Errorf("trash %q: %w", path, err)
		}
		t.addRefs(m)
	}
	t.trashBytes += size
	t.trashEntries++
	return nil
}

// trashPaths records paths, every name of file ino, before an overwrite.
func (t *wtx) trashPaths(paths []string, ino Ino, op string) error {
	if t.s.opts.Trash == nil {
		return nil
	}
	for _, p := range paths {
		if err := t.trash(p, ino, KindFile, op); err != nil {
			return err
		}
	}
	return nil
}

// settleTrash runs at commit, before the chunk references are flushed:
// it adds the transaction's rows to the trash's totals and evicts the
// oldest rows while the totals are past the bounds.
func (t *wtx) settleTrash() error {
	if t.trashBytes == 0 && t.trashEntries == 0 {
		return nil
	}
	if err := t.addTrashTotals(t.trashBytes, t.trashEntries); err != nil {
		return err
	}
	added := t.trashEntries > 0
	t.trashBytes, t.trashEntries = 0, 0
	if !added || t.s.opts.Trash == nil {
		return nil
	}
	return t.evictTrash(t.s.opts.Trash.withDefaults())
}

func (t *wtx) addTrashTotals(bytes, entries int64) error {
	if _, err := t.exec(`UPDATE meta SET value = value + ? WHERE key = 'trash_bytes'`, bytes); err != nil {
		return fmt.Errorf("trash totals: %w", err)
	}
	if _, err := t.exec(`UPDATE meta SET value = value + ? WHERE key = 'trash_entries'`, entries); err != nil {
		return fmt.Errorf("trash totals: %w", err)
	}
	return nil
}

func trashUsage(ctx context.Context, q chunkstore.Querier) (TrashUsage, error) {
	var u TrashUsage
	err := q.QueryRowContext(ctx, `SELECT
		coalesce((SELECT value FROM meta WHERE key = 'trash_entries'), 0),
		coalesce((SELECT value FROM meta WHERE key = 'trash_bytes'), 0)`).Scan(&u.Entries, &u.Bytes)
	if err != nil {
		return u, fmt.Errorf("trash usage: %w", err)
	}
	return u, nil
}

// evictTrash deletes the oldest rows until the trash is within o's bounds.
func (t *wtx) evictTrash(o TrashOptions) error {
	u, err := trashUsage(t.ctx, t.tx)
	if err != nil {
		return err
	}
	overBytes := o.MaxBytes >= 0 && u.Bytes > o.MaxBytes
	overEntries := o.MaxEntries >= 0 && u.Entries > o.MaxEntries
	if !overBytes && !overEntries {
		return nil
	}
	// The cut is the first row (oldest first) through which enough goes.
	needBytes, needEntries := u.Bytes-max(o.MaxBytes, 0), u.Entries-max(o.MaxEntries, 0)
	if !overBytes {
		needBytes = 0
	}
	if !overEntries {
		needEntries = 0
	}
	var cut, freedBytes, freedEntries int64
	for after := int64(0); cut == 0; {
		rows, err := t.tx.QueryContext(t.ctx, `SELECT id, size FROM trash WHERE id > ? ORDER BY id LIMIT ?`, after, trashStep)
		if err != nil {
			return fmt.Errorf("evict trash: %w", err)
		}
		type row struct{ id, size int64 }
		page, err := scanRows(rows, func(r *sql.Rows, x *row) error { return r.Scan(&x.id, &x.size) })
		if err != nil {
			return fmt.Errorf("evict trash: %w", err)
		}
		if len(page) == 0 {
			return fmt.Errorf("evict trash: %w: the totals count more than the rows hold", ErrInvalid)
		}
		for _, r := range page {
			freedBytes += r.size
			freedEntries++
			after = r.id
			if freedBytes >= needBytes && freedEntries >= needEntries {
				cut = r.id
				break
			}
		}
	}
	n, b, err := t.deleteTrash(`id <= ?`, []any{cut}, -1)
	if err != nil {
		return fmt.Errorf("evict trash: %w", err)
	}
	metricTrashEvicted.Add(float64(n))
	t.s.log.Debug("trash over its bounds: oldest entries evicted", "entries", n, "bytes", b)
	return nil
}

// deleteTrash deletes the rows matching where (at most limit, oldest
// first; negative: all), gives back their chunk references and takes
// them off the totals, and returns how many rows and bytes went.
func (t *wtx) deleteTrash(where string, args []any, limit int) (n, bytes int64, err error) {
	q := `DELETE FROM trash WHERE ` + where + ` RETURNING kind, size, manifest`
	if limit >= 0 {
		// Oldest first by the (at) index: an expiry with nothing to
		// expire reads one index entry, not the table.
		q = `DELETE FROM trash WHERE id IN (SELECT id FROM trash WHERE ` + where + ` ORDER BY at, id LIMIT ?) RETURNING kind, size, manifest`
		args = append(slices.Clip(args), limit)
	}
	rows, err := t.tx.QueryContext(t.ctx, q, args...)
	if err != nil {
		return 0, 0, err
	}
	type row struct {
		kind Kind
		size int64
		mb   []byte
	}
	gone, err := scanRows(rows, func(r *sql.Rows, x *row) error { return r.Scan(&x.kind, &x.size, &x.mb) })
	if err != nil {
		return 0, 0, err
	}
	for _, r := range gone {
		if r.kind == KindFile && len(r.mb) > 0 {
			m, _, err := chunkstore.DecodeManifest(r.mb)
			if err != nil {
				return 0, 0, err
			}
			t.dropRefs(m)
		}
		n++
		bytes += r.size
	}
	if n > 0 {
		if err := t.addTrashTotals(-bytes, -n); err != nil {
			return 0, 0, err
		}
	}
	return n, bytes, nil
}

// underPath is the SQL condition (and its arguments) of the rows at store
// path p or below it; the root's is every row.
func underPath(p string) (string, []any) {
	if p == "" {
		return `1`, nil
	}
	// '0' follows '/': the paths below p sort between p+"/" and p+"0".
	return `(path = ? OR (path > ? AND path < ?))`, []any{p, p + "/", p + "0"}
}

// TrashList returns the rows at path or below it, newest first, at most
// limit (0 or past MaxTrashList: MaxTrashList).
func (s *Store) TrashList(ctx context.Context, path string, limit int) ([]TrashEntry, error) {
	if err := checkPath(path, true); err != nil {
		return nil, pathErr("trash list", path, err)
	}
	if limit <= 0 || limit > MaxTrashList {
		limit = MaxTrashList
	}
	where, args := underPath(path)
	var out []TrashEntry
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		rows, err := q.QueryContext(ctx, `SELECT `+trashCols+` FROM trash WHERE `+where+` ORDER BY at DESC, id DESC LIMIT ?`, append(args, limit)...)
		if err != nil {
			return err
		}
		out, err = scanRows(rows, scanTrash)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("trash list: %w", err)
	}
	return out, nil
}

// TrashUsage returns what the trash holds.
func (s *Store) TrashUsage(ctx context.Context) (TrashUsage, error) {
	s.settle()
	return trashUsage(ctx, s.rq)
}

const trashCols = `id, path, kind, mode, size, mtime, manifest, target, at, op, origin`

func scanTrash(r *sql.Rows, e *TrashEntry) error {
	var mtime, at int64
	var mb []byte
	var target sql.NullString
	if err := r.Scan(&e.ID, &e.Path, &e.Kind, &e.Mode, &e.Size, &mtime, &mb, &target, &at, &e.Op, &e.Origin); err != nil {
		return err
	}
	e.Mtime, e.TrashedAt, e.Target = time.Unix(0, mtime), time.Unix(0, at), target.String
	if e.Kind == KindFile && len(mb) > 0 {
		m, _, err := chunkstore.DecodeManifest(mb)
		if err != nil {
			return fmt.Errorf("trash row %d: %w", e.ID, err)
		}
		e.manifest = m
	}
	return nil
}

// PurgeTrash deletes the rows at path or below it trashed before before
// (the zero time: all of them), a bounded step per transaction, and
// returns how many rows and bytes went.
func (s *Store) PurgeTrash(ctx context.Context, path string, before time.Time) (TrashUsage, error) {
	if err := checkPath(path, true); err != nil {
		return TrashUsage{}, pathErr("trash purge", path, err)
	}
	where, args := underPath(path)
	if !before.IsZero() {
		where += ` AND at < ?`
		args = append(args, before.UnixNano())
	}
	u, err := s.purgeTrash(ctx, where, args)
	if err != nil {
		return u, fmt.Errorf("trash purge: %w", err)
	}
	return u, nil
}

// ExpireTrash deletes the rows older than the retention (now minus
// TrashOptions.Retention). The collection loop runs it before each pass.
func (s *Store) ExpireTrash(ctx context.Context, now time.Time) (TrashUsage, error) {
	if s.opts.Trash == nil {
		return TrashUsage{}, nil
	}
	o := s.opts.Trash.withDefaults()
	u, err := s.purgeTrash(ctx, `at < ?`, []any{now.Add(-o.Retention).UnixNano()})
	if err != nil {
		return u, fmt.Errorf("trash expiry: %w", err)
	}
	metricTrashExpired.Add(float64(u.Entries))
	return u, nil
}

func (s *Store) purgeTrash(ctx context.Context, where string, args []any) (TrashUsage, error) {
	var total TrashUsage
	for {
		var n, b int64
		err := s.update(ctx, func(t *wtx) (err error) {
			n, b, err = t.deleteTrash(where, args, trashStep)
			return err
		})
		if err != nil {
			return total, err
		}
		total.Entries += n
		total.Bytes += b
		if n < trashStep {
			return total, nil
		}
	}
}

// RestoreOptions configure RestoreTrash.
type RestoreOptions struct {
	// At picks, for each path, the newest row trashed at or before it
	// (the zero time: the newest).
	At time.Time
	// Force replaces a live node that differs from the row restored at
	// its path (or a non-directory where a restored path needs a
	// directory); the replaced node goes to the trash first. Without it
	// such a restore is refused and changes nothing.
	Force bool
}

// RestoreResult is what RestoreTrash did.
type RestoreResult struct {
	Restored int // nodes created from trash rows
	Matched  int // paths already live as the row had them (directories included)
	Replaced int // live nodes replaced (Force), now in the trash
	Created  int // missing parent directories created (mode 0755)
}

// RestoreTrash brings back path, and every path below it that the trash
// holds, as new changes (one rev each) that sync to the container by the
// ordinary push: for each path the newest row trashed at or before
// opts.At. Directories come back with their modes, files with their
// content, mode and mtime, symlinks with their targets. It runs in one
// transaction: a live node in the way fails the whole restore with a
// *RestoreConflictError (ErrExist) unless opts.Force. The rows restored
// leave the trash; their chunk references move to the new nodes.
func (s *Store) RestoreTrash(ctx context.Context, path string, opts RestoreOptions) (RestoreResult, error) {
	var res RestoreResult
	if err := checkPath(path, true); err != nil {
		return res, pathErr("trash restore", path, err)
	}
	if s.opts.Trash == nil {
		return res, pathErr("trash restore", path, fmt.Errorf("%w: this store keeps no trash", ErrNotSupp))
	}
	at := opts.At
	if at.IsZero() {
		at = time.Unix(0, 1<<62)
	}
	var inval []Invalidation
	err := s.update(ctx, func(t *wtx) error {
		t.origin = OriginRestore
		picks, err := t.restorePicks(path, at)
		if err != nil {
			return err
		}
		r := restorer{t: t, force: opts.Force}
		for i := range picks {
			if err := r.restore(&picks[i]); err != nil {
				return fmt.Errorf("%s: %w", "/"+picks[i].Path, err)
			}
		}
		if len(r.conflicts) > 0 {
			return &RestoreConflictError{Paths: r.conflicts, More: r.more}
		}
		res = r.res
		inval = t.inval
		return nil
	})
	if err != nil {
		return RestoreResult{}, pathErr("trash restore", path, err)
	}
	metricTrashRestored.Add(float64(res.Restored))
	s.markStale(inval)
	return res, nil
}

// restorePicks reads the rows RestoreTrash brings back: per path at or
// below p, the newest trashed at or before at, in path order (a parent
// before what it holds).
func (t *wtx) restorePicks(p string, at time.Time) ([]TrashEntry, error) {
	where, args := underPath(p)
	rows, err := t.tx.QueryContext(t.ctx, `SELECT `+trashCols+` FROM trash WHERE `+where+` AND at <= ? ORDER BY path, at DESC, id DESC`,
		append(args, at.UnixNano())...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var picks []TrashEntry
	for rows.Next() {
		var e TrashEntry
		if err := scanTrash(rows, &e); err != nil {
			return nil, err
		}
		if n := len(picks); n > 0 && picks[n-1].Path == e.Path {
			continue
		}
		if len(picks) == MaxTrashRestore {
			return nil, fmt.Errorf("%w: more than %d paths to restore; restore a narrower path", ErrRange, MaxTrashRestore)
		}
		picks = append(picks, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(picks) == 0 {
		return nil, fmt.Errorf("%w: nothing in the trash", ErrNotExist)
	}
	return picks, nil
}

// maxRestoreConflicts bounds the paths a RestoreConflictError names.
const maxRestoreConflicts = 16

// restorer is one RestoreTrash transaction's work.
type restorer struct {
	t         *wtx
	force     bool
	res       RestoreResult
	conflicts []string // workspace form
	more      bool
}

func (r *restorer) conflict(path string) {
	if len(r.conflicts) < maxRestoreConflicts {
		r.conflicts = append(r.conflicts, "/"+path)
	} else {
		r.more = true
	}
}

// restore brings back one row, as a mutation of its own.
func (r *restorer) restore(e *TrashEntry) error {
	t := r.t
	t.nextMutation()
	dir, name := splitPath(e.Path)
	parent, err := t.walkDirs(dir, func(in Ino, seg, walked string, n node, found bool) (Ino, error) {
		if found {
			if !r.force {
				r.conflict(walked)
				return 0, nil
			}
			if err := t.removeAt(in, seg, walked, n); err != nil {
				return 0, err
			}
			r.res.Replaced++
		}
		d, err := t.insertNode(in, walked, seg, newNode{kind: KindDir, attr: r.owner(0o755)})
		if err != nil {
			return 0, err
		}
		r.res.Created++
		return d.ino, nil
	})
	if err != nil || parent == 0 {
		return err
	}
	cur, err := lookupChild(t.ctx, t.tx, parent, name)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotExist) {
		return err
	}
	if exists && !cur.kind.Special() {
		same, err := e.matches(&cur)
		if err != nil {
			return err
		}
		switch {
		case same:
			r.res.Matched++
			return r.take(e)
		case !r.force:
			r.conflict(e.Path)
			return nil
		}
	}
	if exists {
		if err := t.removeAt(parent, name, e.Path, cur); err != nil {
			return err
		}
		if !cur.kind.Special() {
			r.res.Replaced++
		}
	}
	n, err := t.insertNode(parent, e.Path, name, newNode{kind: e.Kind, attr: r.owner(e.Mode), mtime: e.Mtime.UnixNano(),
		manifest: e.manifest, target: e.Target})
	if err != nil {
		return err
	}
	t.inval = append(t.inval, Invalidation{Ino: n.ino, Parent: parent, Name: name})
	r.res.Restored++
	return r.take(e)
}

func (r *restorer) owner(mode uint32) NewAttr {
	o := r.t.s.opts.Owner
	return NewAttr{Mode: mode, Uid: o.Uid, Gid: o.Gid}
}

// take deletes a restored row: its references move to the live node
// (insertNode took new ones in the same transaction).
func (r *restorer) take(e *TrashEntry) error {
	_, _, err := r.t.deleteTrash(`id = ?`, []any{e.ID}, -1)
	return err
}

// matches reports whether the live node n is what the row would restore:
// a directory (any mode: restoring into a live directory merges), a file
// of the same content and mode, a symlink of the same target.
func (e *TrashEntry) matches(n *node) (bool, error) {
	if n.kind != e.Kind {
		return false, nil
	}
	switch n.kind {
	case KindDir:
		return true, nil
	case KindSymlink:
		return n.target == e.Target, nil
	}
	m, err := n.decodeManifest()
	if err != nil {
		return false, err
	}
	return n.mode == e.Mode && slices.Equal(m, e.manifest), nil
}
