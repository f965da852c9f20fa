package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"

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
	res := newResolver(ctx, q)
	memo := ignoreMemo{ig: ig}
	for _, r := range rs {
		pg.last = watermark.Within(r.rev, r.path)
		parent, _ := splitPath(r.path)
		if memo.dir(parent) {
			continue // below an ignored directory: not even materialised
		}
		e, err := res.entry(r.path, r.rev)
		if err != nil {
			return pg, false, fmt.Errorf("changes: materialise %q: %w", r.path, err)
		}
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
	del := ChangeEntry{Kind: EntryDelete, Rev: rev, Path: path}
	parent, name := splitPath(path)
	pino, err := r.dir(parent)
	if err != nil || pino == 0 {
		return del, err
	}
	n, err := lookupNode(r.ctx, r.q, pino, name)
	if errors.Is(err, ErrNotExist) || errors.Is(err, ErrNotDir) {
		return del, nil
	}
	if err != nil || n.kind.Special() {
		// A special file is local: its path reads as absent.
		return del, err
	}
	return entryOf(&n, rev, path)
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
