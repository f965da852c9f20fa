package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// feedPage is how many change rows the feed reads per read transaction.
const feedPage = 256

// Changes streams the coalesced feed: one entry per path touched after
// `after`, up to and including rev through.Rev, ordered by (rev, path), each
// materialised from the path's current state (a live node wins over a
// tombstone). Paths ig ignores are left out (Ignore.IgnoresEntry). The feed reads a page of rows
// per read transaction and never holds one while the consumer runs, so
// memory stays flat and writers are never blocked; a path rewritten while
// the feed runs moves past `through` and is delivered by a later feed.
//
// Every hardlink name has its own entry.
func (s *Store) Changes(ctx context.Context, after, through watermark.Cursor, ig Ignore) iter.Seq2[ChangeEntry, error] {
	return func(yield func(ChangeEntry, error) bool) {
		cur := after
		for {
			page, more, err := s.feedPage(ctx, cur, through.Rev, ig)
			if err != nil {
				yield(ChangeEntry{}, err)
				return
			}
			for _, e := range page.entries {
				if !yield(e, nil) {
					return
				}
			}
			if !more {
				return
			}
			cur = page.last
		}
	}
}

type page struct {
	entries []ChangeEntry
	last    watermark.Cursor // the last row read, ignored or not
}

func (s *Store) feedPage(ctx context.Context, after watermark.Cursor, through int64, ig Ignore) (page, bool, error) {
	var pg page
	s.settle()
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return pg, false, fmt.Errorf("changes: %w", err)
	}
	q := newTxQuerier(tx, s.rc)
	defer func() {
		tx.Rollback()
		q.done(ctx)
	}()
	var rows *sql.Rows
	if after.Partial {
		rows, err = q.QueryContext(ctx, `SELECT path, rev FROM changes
			WHERE (rev, path) > (?, ?) AND rev <= ? ORDER BY rev, path LIMIT ?`, after.Rev, after.Path, through, feedPage)
	} else {
		rows, err = q.QueryContext(ctx, `SELECT path, rev FROM changes
			WHERE rev > ? AND rev <= ? ORDER BY rev, path LIMIT ?`, after.Rev, through, feedPage)
	}
	if err != nil {
		return pg, false, fmt.Errorf("changes: %w", err)
	}
	type row struct {
		path string
		rev  int64
	}
	rs, err := scanRows(rows, func(r *sql.Rows, x *row) error { return r.Scan(&x.path, &x.rev) })
	if err != nil {
		return pg, false, fmt.Errorf("changes: %w", err)
	}
	memo := ignoreMemo{ig: ig}
	paths := make([]string, 0, len(rs))
	revs := make([]int64, 0, len(rs))
	for _, r := range rs {
		pg.last = watermark.Within(r.rev, r.path)
		parent, _ := splitPath(r.path)
		if memo.dir(parent) {
			continue // below an ignored directory: not even materialised
		}
		paths = append(paths, r.path)
		revs = append(revs, r.rev)
	}
	es, err := newResolver(ctx, q).entries(paths, revs)
	if err != nil {
		return pg, false, fmt.Errorf("changes: materialise a page after %v: %w", after, err)
	}
	for _, e := range es {
		if memo.match(e.Path, entryIsDir(e)) { // Ignore.IgnoresEntry
			continue
		}
		pg.entries = append(pg.entries, e)
	}
	return pg, len(rs) == feedPage, nil
}

// resolver resolves paths with a cache of directories, for a page of feed
// rows that mostly share parents.
type resolver struct {
	ctx  context.Context
	q    chunkstore.Querier
	dirs map[string]Ino // directory path -> ino; a missing or non-dir path maps to 0
}

func newResolver(ctx context.Context, q chunkstore.Querier) *resolver {
	return &resolver{ctx: ctx, q: q, dirs: map[string]Ino{"": RootIno}}
}

// dir resolves a directory path; 0 when it is not a live directory.
func (r *resolver) dir(p string) (Ino, error) {
	if ino, ok := r.dirs[p]; ok {
		return ino, nil
	}
	parent, name := splitPath(p)
	pino, err := r.dir(parent)
	if err != nil || pino == 0 {
		return 0, err
	}
	n, err := lookupNode(r.ctx, r.q, pino, name)
	var ino Ino
	switch {
	case errors.Is(err, ErrNotExist), errors.Is(err, ErrNotDir):
	case err != nil:
		return 0, err
	case n.kind == KindDir:
		ino = n.ino
	}
	r.dirs[p] = ino
	return ino, nil
}

// entry materialises the current state of path.
func (r *resolver) entry(path string, rev int64) (ChangeEntry, error) {
	es, err := r.entries([]string{path}, []int64{rev})
	if err != nil {
		return ChangeEntry{}, err
	}
	return es[0], nil
}

// entryCols is what an entry needs of a node (entryOf).
const entryCols = `n.ino, n.kind, n.mode, n.size, n.mtime, n.manifest, n.target`

// maxInNames is the most names one query of entries looks up.
const maxInNames = 256

// entries materialises the current state of each path, revs[i] being
// path i's rev: a live node's entry, or a delete when the path is absent,
// below something that is not a directory, or a special file (local: it
// reads as absent). The names of one directory are looked up together, up
// to maxInNames a query, where a query per path cost a sender a fifth of its
// CPU in a pull of 10,000 files. The IN list is padded (chunkstore.PadIn),
// so the same few statements come again.
func (r *resolver) entries(paths []string, revs []int64) ([]ChangeEntry, error) {
	type key struct {
		parent Ino
		name   string
	}
	out := make([]ChangeEntry, len(paths))
	keys := make([]key, len(paths))
	names := make(map[Ino][]string)
	for i, p := range paths {
		out[i] = ChangeEntry{Kind: EntryDelete, Rev: revs[i], Path: p}
		parent, name := splitPath(p)
		pino, err := r.dir(parent)
		if err != nil {
			return nil, err
		}
		keys[i] = key{pino, name}
		if pino != 0 {
			names[pino] = append(names[pino], name)
		}
	}
	found := make(map[key]node, len(paths))
	for pino, ns := range names {
		slices.Sort(ns)
		ns = slices.Compact(ns)
		for len(ns) > 0 {
			part := ns[:min(len(ns), maxInNames)]
			ns = ns[len(part):]
			k := chunkstore.PadIn(len(part))
			args := make([]any, 0, k+1)
			args = append(args, pino)
			for i := range k {
				args = append(args, part[min(i, len(part)-1)])
			}
			rows, err := r.q.QueryContext(r.ctx, `SELECT d.name, `+entryCols+` FROM dirents d JOIN nodes n ON n.ino = d.child
				WHERE d.parent = ? AND d.name IN (`+chunkstore.Placeholders(k)+`)`, args...)
			if err != nil {
				return nil, err
			}
			err = func() error {
				defer rows.Close()
				for rows.Next() {
					var name string
					var n node
					var target sql.NullString
					if err := rows.Scan(&name, &n.ino, &n.kind, &n.mode, &n.size, &n.mtime, &n.manifest, &target); err != nil {
						return err
					}
					n.target = target.String
					found[key{pino, name}] = n
				}
				return rows.Err()
			}()
			if err != nil {
				return nil, err
			}
		}
	}
	for i, k := range keys {
		n, ok := found[k]
		if !ok || n.kind.Special() {
			continue
		}
		e, err := entryOf(&n, revs[i], paths[i])
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

func entryOf(n *node, rev int64, path string) (ChangeEntry, error) {
	e := ChangeEntry{Rev: rev, Path: path, Mode: n.mode, Mtime: n.mtime}
	switch n.kind {
	case KindFile:
		m, err := n.decodeManifest()
		if err != nil {
			return e, err
		}
		e.Kind, e.Size, e.Chunks = EntryFile, n.size, m
	case KindDir:
		e.Kind = EntryDir
	case KindSymlink:
		e.Kind, e.Target = EntrySymlink, n.target
	default:
		return e, fmt.Errorf("inode %d: unknown kind %d", n.ino, n.kind)
	}
	return e, nil
}
