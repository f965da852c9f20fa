package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The read-only scans below serve convergence (package converge): one pass
// over the whole tree for Merkle hashes and snapshots, and by-path lookups
// of change revs and entries for repair. None of them writes.

// TreeRow is one directory entry with the parts of its node that the
// convergence hashes and snapshots need. Manifest aliases the scan's row
// buffer only until fn returns: copy it to keep it.
type TreeRow struct {
	Parent   Ino
	Name     string
	Ino      Ino
	Kind     Kind
	Mode     uint32 // permission bits
	Mtime    int64  // nanoseconds since the epoch
	Size     int64
	Manifest []byte // encoded chunkstore.Manifest (files); see chunkstore.AppendManifest
	Target   string // symlinks
}

// ScanTree calls fn for every directory entry in the store but those of
// special files (local, never hashed or sent), in (parent, name) order, inside one read transaction, and returns the rev that
// transaction saw: the rows are a consistent snapshot of the tree at that
// rev. fn must not call back into the store (an in-memory store has one
// connection, and the scan holds it).
func (s *Store) ScanTree(ctx context.Context, fn func(*TreeRow) error) (int64, error) {
	s.settle()
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return 0, fmt.Errorf("scan tree: %w", err)
	}
	defer tx.Rollback()
	var rev int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'rev'`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("scan tree: read rev: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT d.parent, d.name, n.ino, n.kind, n.mode, n.mtime, n.size, n.manifest, n.target
		FROM dirents d JOIN nodes n ON n.ino = d.child WHERE n.kind IN `+syncedKinds+` ORDER BY d.parent, d.name`)
	if err != nil {
		return 0, fmt.Errorf("scan tree: %w", err)
	}
	defer rows.Close()
	var r TreeRow
	var target sql.NullString
	var manifest sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&r.Parent, &r.Name, &r.Ino, &r.Kind, &r.Mode, &r.Mtime, &r.Size, &manifest, &target); err != nil {
			return 0, fmt.Errorf("scan tree: %w", err)
		}
		r.Manifest, r.Target = manifest, target.String
		if err := fn(&r); err != nil {
			return 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("scan tree: %w", err)
	}
	return rev, nil
}

// Empty reports whether the store holds no node but the root, special
// files aside (a snapshot installs over them).
func (s *Store) Empty(ctx context.Context) (bool, error) {
	var one int
	err := s.committed().QueryRowContext(ctx, `SELECT 1 FROM dirents d JOIN nodes n ON n.ino = d.child
		WHERE n.kind IN `+syncedKinds+` LIMIT 1`).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("empty: %w", err)
	}
	return false, nil
}

// ChangeRevs returns, for each path (store form), the rev of its last
// touch in the changes table (live or tombstone), 0 for a path never
// touched. The answer is in input order.
func (s *Store) ChangeRevs(ctx context.Context, paths []string) ([]int64, error) {
	out := make([]int64, len(paths))
	for i, p := range paths {
		err := s.committed().QueryRowContext(ctx, `SELECT rev FROM changes WHERE path = ?`, p).Scan(&out[i])
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("change rev %q: %w", p, err)
		}
	}
	return out, nil
}

// EntriesAt materialises the current state of each path (store form, not
// the root) as the change feed would: a file, dir or symlink entry for a
// live node, a delete entry otherwise (a special file reads as absent). Each entry's Rev is the path's
// change rev (0 if it was never touched). The paths are resolved in one
// read transaction, so the entries are one consistent state.
func (s *Store) EntriesAt(ctx context.Context, paths []string) ([]ChangeEntry, error) {
	for _, p := range paths {
		if err := ValidatePath(p); err != nil {
			return nil, pathErr("entries", p, err)
		}
	}
	s.settle()
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("entries: %w", err)
	}
	q := newTxQuerier(tx, s.rc)
	defer func() {
		tx.Rollback()
		q.done(ctx)
	}()
	res := newResolver(ctx, q)
	out := make([]ChangeEntry, 0, len(paths))
	for _, p := range paths {
		var rev int64
		err := q.QueryRowContext(ctx, `SELECT rev FROM changes WHERE path = ?`, p).Scan(&rev)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("entries: %q: %w", p, err)
		}
		e, err := res.entry(p, rev)
		if err != nil {
			return nil, fmt.Errorf("entries: materialise %q: %w", p, err)
		}
		out = append(out, e)
	}
	return out, nil
}
