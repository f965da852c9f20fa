package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// Merge bases: the state of each path a peer and this store last agreed
// on (conflict.go), kept in the bases table and written a page at a time.

// peerHas reports whether the peer holds our state of a path last touched
// at rev (the fallback base rule).
func (c *conflictSet) peerHas(rev int64, path string) bool {
	if rev == 0 {
		return true // never touched here: absent on both sides as far as we know
	}
	if !c.push.Admits(rev, path) {
		return true
	}
	return rev > c.run.From && rev <= c.run.To
}

// loadBases reads the base rows of paths (in pages of 256).
func (t *wtx) loadBases(c *conflictSet, paths []string) error {
	for len(paths) > 0 {
		part := paths[:min(len(paths), 256)]
		paths = paths[len(part):]
		args := make([]any, 0, len(part)+1)
		args = append(args, c.peer)
		for _, p := range part {
			args = append(args, p)
			c.loaded[p] = true
		}
		rows, err := t.tx.QueryContext(t.ctx, `SELECT path, state FROM bases WHERE peer = ? AND path IN (`+
			chunkstore.Placeholders(len(part))+`)`, args...)
		if err != nil {
			return fmt.Errorf("bases: %w", err)
		}
		type row struct {
			path string
			key  []byte
		}
		rs, err := scanRows(rows, func(r *sql.Rows, x *row) error { return r.Scan(&x.path, &x.key) })
		if err != nil {
			return fmt.Errorf("bases: %w", err)
		}
		for _, r := range rs {
			c.bases[r.path] = r.key
		}
	}
	return nil
}

// baseRow is path's base row: from the batch's rows (loadBases) or, for a
// path outside the batch (an ancestor in the way), read now.
func (t *wtx) baseRow(c *conflictSet, path string) ([]byte, bool, error) {
	if k, ok := c.bases[path]; ok {
		return k, true, nil
	}
	if c.loaded[path] {
		return nil, false, nil
	}
	var k []byte
	err := t.tx.QueryRowContext(t.ctx, `SELECT state FROM bases WHERE peer = ? AND path = ?`, c.peer, path).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("base %q: %w", path, err)
	}
	return k, true, nil
}

// changeRev is the rev of path's last change here (0: never changed).
func (t *wtx) changeRev(path string) (int64, error) {
	var rev int64
	err := t.tx.QueryRowContext(t.ctx, `SELECT rev FROM changes WHERE path = ?`, path).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return rev, err
}

// base is the key of path's merge base with the peer, given our current
// state of it: its row (or the row this batch will write), or the
// fallback rule where it has none. nil is absent.
func (t *wtx) base(c *conflictSet, path string, cur state) ([]byte, error) {
	if k, ok := c.writes[path]; ok {
		return k, nil
	}
	k, ok, err := t.baseRow(c, path)
	if err != nil || ok {
		return k, err
	}
	if cur.kind == EntryDelete {
		return nil, nil
	}
	rev, err := t.changeRev(path)
	if err != nil {
		return nil, err
	}
	if c.peerHas(rev, path) {
		return cur.key(), nil
	}
	return nil, nil
}

// finishConflicts writes the batch's base rows and re-stamps the paths
// the peer must receive again, after the batch's own revs (so they fall
// outside its bounce run and the next push carries them).
func (t *wtx) finishConflicts(c *conflictSet) error {
	if err := t.writeBases(c.peer, c.writes); err != nil {
		return err
	}
	return t.restamp(c.restamp)
}

// baseRows is how many rows one statement writes or deletes (3 and 1
// parameters a row, well under SQLite's limit of 32,766).
const baseRows = 256

// writeBases writes peer's base rows (a nil key deletes the row), a page
// of rows per statement: one statement per row cost as much again as the
// rest of an apply.
func (t *wtx) writeBases(peer string, writes map[string][]byte) error {
	var put, del []string
	for path, k := range writes {
		if k == nil {
			del = append(del, path)
		} else {
			put = append(put, path)
		}
	}
	slices.Sort(put) // rows in key order: B-tree appends, not splits
	for len(put) > 0 {
		part := put[:min(len(put), baseRows)]
		put = put[len(part):]
		args := make([]any, 0, 3*len(part))
		for _, p := range part {
			args = append(args, peer, p, writes[p])
		}
		if _, err := t.exec(`INSERT INTO bases(peer, path, state) VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?),", len(part)), ",")+
			` ON CONFLICT(peer, path) DO UPDATE SET state = excluded.state`, args...); err != nil {
			return fmt.Errorf("bases of %q: %w", peer, err)
		}
	}
	for len(del) > 0 {
		part := del[:min(len(del), baseRows)]
		del = del[len(part):]
		args := make([]any, 0, len(part)+1)
		args = append(args, peer)
		for _, p := range part {
			args = append(args, p)
		}
		if _, err := t.exec(`DELETE FROM bases WHERE peer = ? AND path IN (`+
			chunkstore.Placeholders(len(part))+`)`, args...); err != nil {
			return fmt.Errorf("bases of %q: %w", peer, err)
		}
	}
	return nil
}

// restamp records paths as changed again, each in a mutation of its own.
func (t *wtx) restamp(paths []string) error {
	for _, p := range paths {
		t.nextMutation()
		if err := t.touch(p); err != nil {
			return err
		}
	}
	return nil
}

// Delivered records what a peer acknowledged of a push batch, in one
// transaction: the watermarks, the merge base of every entry it applied
// (bases true; the server keeps them, a container does not) and a new rev
// for every path it deferred (it had changes there we have not fetched),
// so the path goes again after the next pull.
func (s *Store) Delivered(ctx context.Context, peer string, ws watermark.Set, sent []ChangeEntry, deferred []string, bases bool) error {
	return s.update(ctx, func(t *wtx) error {
		if err := t.setWatermarks(peer, ws); err != nil {
			return err
		}
		if bases {
			skip := make(map[string]bool, len(deferred))
			for _, p := range deferred {
				skip[p] = true
			}
			c := &conflictSet{peer: peer, writes: make(map[string][]byte, len(sent))}
			for i := range sent {
				if !skip[sent[i].Path] {
					c.writes[sent[i].Path] = entryState(&sent[i]).key()
				}
			}
			if err := t.finishConflicts(c); err != nil {
				return err
			}
		}
		return t.restamp(deferred)
	})
}

// ForgetBases drops every merge base kept for peer: its store was
// replaced (a snapshot bootstrap), so what it held before says nothing.
func (s *Store) ForgetBases(ctx context.Context, peer string) error {
	return s.update(ctx, func(t *wtx) error { return t.forgetBases(peer) })
}

func (t *wtx) forgetBases(peer string) error {
	if _, err := t.exec(`DELETE FROM bases WHERE peer = ?`, peer); err != nil {
		return fmt.Errorf("forget bases %q: %w", peer, err)
	}
	return nil
}
