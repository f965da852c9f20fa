package vfs

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/wsync/wsync/chunkstore"
)

// The primitives below run inside a write transaction. Those that change
// synced state stamp the current mutation's rev on the nodes they touch and
// record the touched paths in changes; local-only state (atime, parent
// directory times, ownership, xattrs) changes without a rev.

// addRefs and dropRefs queue chunk reference changes; they are applied in
// one batch at commit (a batch of 256 new files is two statements, not 512).
// Apply checks up front that every chunk its entries need is present.
func (t *wtx) addRefs(m chunkstore.Manifest)  { t.adds = append(t.adds, m...) }
func (t *wtx) dropRefs(m chunkstore.Manifest) { t.drops = append(t.drops, m...) }

func (t *wtx) flushRefs() error {
	if len(t.taken) > 0 {
		// A taken hold's reference stands for one the batch adds; a chunk
		// the batch ended up not referencing gives it back.
		t.adds = slices.DeleteFunc(t.adds, func(r chunkstore.Ref) bool {
			_, ok := t.taken[r.Hash]
			if ok {
				delete(t.taken, r.Hash)
			}
			return ok
		})
		for _, r := range t.taken {
			t.drops = append(t.drops, r)
		}
		t.taken = nil
	}
	if len(t.adds) > 0 {
		if err := t.s.chunks.AddRefs(t.ctx, t.tx, t.adds); err != nil {
			return err
		}
	}
	if len(t.drops) > 0 {
		if err := t.s.chunks.DropRefs(t.ctx, t.tx, t.drops); err != nil {
			return err
		}
	}
	t.adds, t.drops = t.adds[:0], t.drops[:0]
	return nil
}

// touch records that path changed in the current mutation. A group's
// mutation keeps the row for the group's commit (wtx.touched).
func (t *wtx) touch(path string) error {
	if t.touched != nil {
		t.touched[path] = t.stamp()
		return nil
	}
	_, err := t.exec(`INSERT INTO changes(path, rev) VALUES(?, ?)
		ON CONFLICT(path) DO UPDATE SET rev = excluded.rev`, path, t.stamp())
	if err != nil {
		return fmt.Errorf("touch %q: %w", path, err)
	}
	return nil
}

// flushTouched writes the change rows a group's mutations kept, in
// multi-row statements of the sizes bulk Apply uses.
func (t *wtx) flushTouched() error {
	if len(t.touched) == 0 {
		return nil
	}
	args := make([]any, 0, 2*min(len(t.touched), bulkStatementRows))
	left := len(t.touched)
	k := stmtRows(left)
	for p, rev := range t.touched {
		args = append(args, p, rev)
		if len(args) < 2*k {
			continue
		}
		if _, err := t.exec(changesUpsert(k), args...); err != nil {
			return fmt.Errorf("write %d change rows: %w", k, err)
		}
		left -= k
		args, k = args[:0], stmtRows(left)
	}
	clear(t.touched)
	return nil
}

// touchNode stamps a node and every one of its names.
func (t *wtx) touchNode(ino Ino) error {
	if _, err := t.exec(`UPDATE nodes SET rev = ? WHERE ino = ?`, t.stamp(), ino); err != nil {
		return err
	}
	return t.touchNames(ino)
}

// touchNames records every name of a node as changed (its rev is stamped
// by the caller).
func (t *wtx) touchNames(ino Ino) error {
	paths, err := t.nodePaths(ino)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if err := t.touch(p); err != nil {
			return err
		}
	}
	return nil
}

// newNode is what insertNode writes.
type newNode struct {
	kind     Kind
	attr     NewAttr
	mtime    int64 // 0: now
	ctime    int64 // 0: now (a file's content folded into its create: the commit's time)
	manifest chunkstore.Manifest
	target   string
	rdev     uint32 // device nodes
	// ino is the inode number to insert with (0: AUTOINCREMENT's): a
	// mutation answered before it ran (behind.go) was told its number.
	ino Ino
}

// insertNode creates a node with one name, (parent, name), and records the
// path (a special file stamps no rev and records nothing: it never syncs).
// It takes references on the manifest's chunks.
func (t *wtx) insertNode(parent Ino, path, name string, nn newNode) (node, error) {
	n := t.newRow(nn)
	var target any
	if n.kind == KindSymlink {
		target = n.target
	}
	// The number the memo handed out with the answer, or the next.
	n.ino = nn.ino
	if n.ino == 0 {
		n.ino = t.s.nextIno()
	}
	if t.pend != nil && nn.ino != 0 {
		t.pend.addNode(n)
	} else {
		_, err := t.exec(`INSERT INTO nodes(ino, kind, mode, uid, gid, nlink, size, mtime, ctime, atime, manifest, target, rdev, rev)
		VALUES(?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)`,
			n.ino, n.kind, n.mode, n.uid, n.gid, n.size, n.mtime, n.ctime, n.atime, n.manifest, target, n.rdev, n.rev)
		if err != nil {
			return node{}, fmt.Errorf("insert node %d: %w", n.ino, err)
		}
	}
	t.s.sawIno(n.ino)
	if nn.kind == KindDir {
		t.names(n.ino).complete = true // empty, and only addDirent fills it
	}
	if err := t.addDirent(parent, name, n.ino); err != nil {
		return node{}, err
	}
	if err := t.touchSynced(n.kind, path); err != nil {
		return node{}, err
	}
	return n, nil
}

// newRow is the row insertNode writes for nn, without its inode number:
// it stamps the mutation's rev (a synced kind) and takes references on
// the manifest's chunks.
func (t *wtx) newRow(nn newNode) node {
	var rev int64
	if !nn.kind.Special() {
		rev = t.stamp()
	}
	n := rowOf(nn, t.now, rev)
	if nn.kind == KindFile {
		t.addRefs(nn.manifest)
	}
	t.useNode(n.kind, n.size)
	return n
}

// rowOf is the row of a new node made at now with rev (0 for a special
// file), without its inode number.
func rowOf(nn newNode, now, rev int64) node {
	n := node{kind: nn.kind, mode: nn.attr.Mode & 0o7777, uid: nn.attr.Uid, gid: nn.attr.Gid, nlink: 1,
		size: nn.manifest.Size(), mtime: nn.mtime, ctime: nn.ctime, atime: now, rdev: nn.rdev, rev: rev}
	if n.mtime == 0 {
		n.mtime = now
	}
	if n.ctime == 0 {
		n.ctime = now
	}
	switch nn.kind {
	case KindSymlink:
		n.mode, n.target, n.size = 0o777, nn.target, int64(len(nn.target))
	case KindFile:
		n.manifest = chunkstore.AppendManifest(nil, nn.manifest)
	}
	return n
}

// touchSynced records path as changed unless the node there is a special
// file. A special file's path needs no row of its own: it reads as absent
// in the feed, and whatever synced node was at the path before it left
// through an operation that recorded the path (a special file only takes a
// free name, or replaces a node whose removal is recorded).
func (t *wtx) touchSynced(k Kind, path string) error {
	if k.Special() {
		return nil
	}
	return t.touch(path)
}

// nameChange is a name a mutation added (child) or removed (child 0).
type nameChange struct {
	dir   Ino
	name  string
	child Ino
}

// addDirent adds a name and updates the parent's times (local only).
func (t *wtx) addDirent(parent Ino, name string, child Ino) error {
	if t.pend != nil {
		t.pend.addName(parent, name, child)
	} else if _, err := t.exec(`INSERT INTO dirents(parent, name, child) VALUES(?, ?, ?)`, parent, name, child); err != nil {
		return fmt.Errorf("add entry %q: %w", name, err)
	}
	t.noteName(parent, name, true)
	t.named = append(t.named, nameChange{parent, name, child})
	return t.dirChanged(parent)
}

// removeDirent removes the name, which must name child (a removal
// answered from the memo did not read it), and updates the parent's times.
func (t *wtx) removeDirent(parent Ino, name string, child Ino) error {
	res, err := t.exec(`DELETE FROM dirents WHERE parent = ? AND name = ? AND child = ?`, parent, name, child)
	if err != nil {
		return fmt.Errorf("remove entry %q: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("remove entry %q of inode %d: it does not name inode %d: %w", name, parent, child, errors.Join(err, ErrNotExist))
	}
	t.noteName(parent, name, false)
	t.named = append(t.named, nameChange{parent, name, 0})
	return t.dirChanged(parent)
}

// dirChanged marks a directory whose mtime and ctime become now at commit
// (once per directory however many entries the transaction changed in it).
// Directory times are local: they never stamp a rev (the seed keeps parent
// directory metadata out of content sync).
func (t *wtx) dirChanged(dir Ino) error {
	if t.dirty == nil {
		t.dirty = make(map[Ino]struct{})
	}
	t.dirty[dir] = struct{}{}
	return nil
}

func (t *wtx) touchDirs() error {
	for dir := range t.dirty {
		if _, err := t.exec(`UPDATE nodes SET mtime = ?, ctime = ? WHERE ino = ?`, t.now, t.now, dir); err != nil {
			return err
		}
	}
	return nil
}

// deleteNode removes a node row, its xattrs and its chunk references.
func (t *wtx) deleteNode(ino Ino) error {
	var n node
	err := t.tx.QueryRowContext(t.ctx, `DELETE FROM nodes WHERE ino = ? RETURNING kind, size, manifest`, ino).Scan(&n.kind, &n.size, &n.manifest)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotExist
	}
	if err != nil {
		return fmt.Errorf("delete inode %d: %w", ino, err)
	}
	t.use.Entries--
	if n.kind == KindFile {
		t.useFile(n.size, 0)
		m, err := n.decodeManifest()
		if err != nil {
			return err
		}
		t.dropRefs(m)
	}
	if !t.s.xattrs.may(ino) {
		return nil
	}
	_, err = t.exec(`DELETE FROM xattrs WHERE ino = ?`, ino)
	return err
}

// dropName removes one name of a non-directory node and records a tombstone
// for its path. The node goes when its last name goes, unless a handle
// still has it open: then it stays with nlink 0 until the last release.
func (t *wtx) dropName(parent Ino, name, path string, n node) error {
	if err := t.trash(path, n.ino, n.kind, TrashDelete); err != nil {
		return err
	}
	if err := t.removeDirent(parent, name, n.ino); err != nil {
		return err
	}
	if err := t.touchSynced(n.kind, path); err != nil {
		return err
	}
	t.inval = append(t.inval, Invalidation{Ino: n.ino, Parent: parent, Name: name})
	if n.nlink == 1 && !t.s.isOpen(n.ino) {
		// The last name of a file nobody has open (n was read in this
		// transaction): the node goes, with no count to lower first.
		return t.deleteNode(n.ino)
	}
	return t.unref(n.ino, 1)
}

// unref lowers a node's link count by k and deletes it at zero unless open.
func (t *wtx) unref(ino Ino, k int) error {
	var nlink int
	if err := t.tx.QueryRowContext(t.ctx, `UPDATE nodes SET nlink = nlink - ?, ctime = ? WHERE ino = ? RETURNING nlink`, k, t.now, ino).Scan(&nlink); err != nil {
		return fmt.Errorf("unlink inode %d: %w", ino, err)
	}
	if nlink > 0 || t.s.markOrphan(ino) {
		return nil
	}
	return t.deleteNode(ino)
}

// subtreeQuery lists the entries below a directory with their kinds. The
// CROSS JOIN keeps the listing the outer loop: a plain join let SQLite scan
// every node of the store against a Bloom filter of the listing, so an
// rmdir of an empty directory cost a pass over the whole store
// (TestSubtreeQueriesSearch).
const subtreeQuery = `WITH RECURSIVE sub(parent, name, child, rel) AS (
		SELECT parent, name, child, name FROM dirents WHERE parent = ?
		UNION ALL
		SELECT d.parent, d.name, d.child, sub.rel || '/' || d.name FROM dirents d JOIN sub ON d.parent = sub.child
	)
	SELECT sub.parent, sub.name, sub.child, sub.rel, n.kind FROM sub CROSS JOIN nodes n ON n.ino = sub.child`

type subEntry struct {
	parent Ino
	name   string
	child  Ino
	rel    string // path relative to the subtree's root
	kind   Kind
}

// subtree lists every entry below directory dir, parents before children.
func (t *wtx) subtree(dir Ino) ([]subEntry, error) {
	rows, err := t.tx.QueryContext(t.ctx, subtreeQuery, dir)
	if err != nil {
		return nil, fmt.Errorf("list subtree: %w", err)
	}
	defer rows.Close()
	var out []subEntry
	for rows.Next() {
		var e subEntry
		if err := rows.Scan(&e.parent, &e.name, &e.child, &e.rel, &e.kind); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// removeAt removes the node n named (parent, name) at path, with its whole
// subtree if it is a directory, recording one tombstone per removed path.
func (t *wtx) removeAt(parent Ino, name, path string, n node) error {
	t.dirs = nil
	if n.kind != KindDir {
		return t.dropName(parent, name, path, n)
	}
	sub, err := t.subtree(n.ino)
	if err != nil {
		return err
	}
	// Children first so every directory is empty when it goes.
	for i := len(sub) - 1; i >= 0; i-- {
		e := sub[i]
		p := joinPath(path, e.rel)
		if err := t.trash(p, e.child, e.kind, TrashDelete); err != nil {
			return err
		}
		if _, err := t.exec(`DELETE FROM dirents WHERE parent = ? AND name = ?`, e.parent, e.name); err != nil {
			return err
		}
		t.noteName(e.parent, e.name, false)
		if err := t.touchSynced(e.kind, p); err != nil {
			return err
		}
		t.inval = append(t.inval, Invalidation{Ino: e.child, Parent: e.parent, Name: e.name})
		if e.kind == KindDir {
			if err := t.deleteNode(e.child); err != nil {
				return err
			}
			continue
		}
		if err := t.unref(e.child, 1); err != nil {
			return err
		}
	}
	return t.removeDir(parent, name, path, n)
}

// removeDir removes the empty directory n named (parent, name) at path.
func (t *wtx) removeDir(parent Ino, name, path string, n node) error {
	t.dirs = nil
	if err := t.trash(path, n.ino, n.kind, TrashDelete); err != nil {
		return err
	}
	if err := t.removeDirent(parent, name, n.ino); err != nil {
		return err
	}
	if err := t.touch(path); err != nil {
		return err
	}
	t.inval = append(t.inval, Invalidation{Ino: n.ino, Parent: parent, Name: name})
	return t.deleteNode(n.ino)
}

// setContent replaces a file node's manifest in place, moving chunk
// references from the old manifest to the new one; n becomes the row it
// writes. paths are the node's paths, nil when the caller does not know
// them (they are read); it returns them.
func (t *wtx) setContent(n *node, m chunkstore.Manifest, mtime int64, paths []string) ([]string, error) {
	old, err := n.decodeManifest()
	if err != nil {
		return nil, err
	}
	if paths == nil {
		if paths, err = t.nodePaths(n.ino); err != nil {
			return nil, err
		}
	}
	if !slices.Equal(old, m) {
		if err := t.trashPaths(paths, n.ino, TrashOverwrite); err != nil {
			return nil, err
		}
	}
	t.addRefs(m)
	t.dropRefs(old)
	t.useFile(n.size, m.Size())
	n.manifest, n.size, n.mtime, n.ctime, n.rev = chunkstore.AppendManifest(nil, m), m.Size(), mtime, t.now, t.stamp()
	if r := t.pendingRow(n.ino); r != nil {
		r.manifest, r.size, r.mtime, r.ctime, r.rev = n.manifest, n.size, n.mtime, n.ctime, n.rev
	} else if _, err = t.exec(`UPDATE nodes SET manifest = ?, size = ?, mtime = ?, ctime = ?, rev = ? WHERE ino = ?`,
		n.manifest, n.size, n.mtime, n.ctime, n.rev, n.ino); err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := t.touch(p); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// pendingRow is the row of node ino waiting in the group for a queued
// mutation that keeps rows (pending.go), or nil.
func (t *wtx) pendingRow(ino Ino) *node {
	if t.pend == nil {
		return nil
	}
	return t.pend.row(ino)
}

// parentDir resolves a directory inode for a mutation inside it.
func (t *wtx) parentDir(ino Ino) (node, error) {
	p, err := getNode(t.ctx, t.tx, ino)
	if err != nil {
		return p, err
	}
	if p.kind != KindDir {
		return p, ErrNotDir
	}
	return p, nil
}
