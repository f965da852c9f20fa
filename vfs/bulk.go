package vfs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wsync/wsync/chunkstore"
)

// Bulk creation in Apply (issue 12). An entry that creates a name its
// directory does not hold (knownAbsent: a directory the batch created, or
// the batch's names probed once per directory) needs no savepoint, no
// lookup and no statement of its own: its node, name and changes rows are
// queued with the inode number SQLite would have given it (AUTOINCREMENT
// hands out max + 1, in order) and written by multi-row INSERTs, 256 rows
// a statement. Everything else the apply records for the entry (its rev,
// chunk references, invalidations, the conflict detection of an absent
// path, the parent's times) happens where it did, so the rows written are
// the ones the entry-by-entry path writes.
//
// Queued rows are invisible to SQL, so they are written (flush) before
// anything that reads or writes the tables they go to: before any entry
// that takes the entry-by-entry path, before a fence check that reads, and
// at the end of the batch. What the entry-by-entry path reads from memory
// instead (the directories resolved, t.dirs; the names known, t.known) is
// kept current as rows are queued.

// bulkApply turns bulk creation on; tests turn it off to compare the rows
// both paths write.
var bulkApply = true

// bulkRows is the rows of new nodes not yet written; at most one per
// Apply.
type bulkRows struct {
	t       *wtx
	nodes   []node
	names   []bulkName
	written int // rows written so far
}

type bulkName struct {
	parent Ino
	name   string
	path   string
}

// bulkStatementRows is the most rows one INSERT writes (14 parameters a
// node row, well under SQLite's limit of 32,766).
const bulkStatementRows = 256

// Parsing a statement of 256 rows costs as much as running it, so a flush
// cuts its rows into powers of two (256, then 128, 64, ... for the rest):
// the same few statements come again, and the writer's statement cache
// keeps a batch statement that repeats (stmts.go).
// stmtRows is how many of n rows (n > 0) the next statement writes: the
// largest power of two up to bulkStatementRows that n holds.
func stmtRows(n int) int {
	k := bulkStatementRows
	for k > n {
		k /= 2
	}
	return k
}

func nodesInsert(k int) string {
	return `INSERT INTO nodes(ino, kind, mode, uid, gid, nlink, size, mtime, ctime, atime, manifest, target, rdev, rev) VALUES ` +
		rowsOf("(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", k)
}

// appendNodeRow appends the parameters of n's row in nodesInsert's order.
func appendNodeRow(args []any, n *node) []any {
	var target any
	if n.kind == KindSymlink {
		target = n.target
	}
	return append(args, n.ino, n.kind, n.mode, n.uid, n.gid, n.nlink, n.size, n.mtime, n.ctime, n.atime, n.manifest, target, n.rdev, n.rev)
}

func direntsInsert(k int) string {
	return `INSERT INTO dirents(parent, name, child) VALUES ` + rowsOf("(?,?,?)", k)
}

func changesUpsert(k int) string {
	return `INSERT INTO changes(path, rev) VALUES ` + rowsOf("(?,?)", k) + ` ON CONFLICT(path) DO UPDATE SET rev = excluded.rev`
}

// create applies e in bulk when it creates a name that is certainly free
// under a directory already resolved; handled false leaves e to applyEntry
// (after flush). changed is what applyEntry would have reported.
func (b *bulkRows) create(e *ChangeEntry) (handled, changed bool, err error) {
	t := b.t
	if !bulkApply {
		return false, false, nil
	}
	var kind Kind
	switch e.Kind {
	case EntryFile:
		kind = KindFile
	case EntryDir:
		kind = KindDir
	case EntrySymlink:
		kind = KindSymlink
	default:
		return false, false, nil
	}
	dir, name := splitPath(e.Path)
	parent := RootIno
	if dir != "" {
		var ok bool
		if parent, ok = t.dirs[dir]; !ok {
			// Resolving may read and create directories: as applyEntry
			// would, after the queued rows are in.
			if err := b.flush(); err != nil {
				return true, false, err
			}
			if parent, err = t.ensureDir(dir, false); errors.Is(err, errSkipEntry) {
				return true, false, nil
			}
			if err != nil || parent == 0 {
				return true, false, err
			}
		}
	}
	if !t.knownAbsent(dir, parent, name) {
		return false, false, nil
	}
	if t.cf != nil {
		// Detection of an absent path reads bases and the changes row of
		// e's own path (never queued: the name is free) and may record a
		// conflict; it never moves anything aside.
		var cur node
		exists := false
		done, changed, err := t.detect(e, parent, name, &cur, &exists)
		if err != nil || done {
			return true, changed, err
		}
		if exists {
			return true, false, fmt.Errorf("%w: detection found %q in place", ErrInvalid, e.Path)
		}
	}
	nn := newNode{kind: kind, attr: NewAttr{Mode: e.Mode, Uid: t.s.opts.Owner.Uid, Gid: t.s.opts.Owner.Gid}, mtime: e.Mtime}
	switch kind {
	case KindFile:
		for _, r := range e.Chunks {
			if _, ok := t.missing[r.Hash]; ok {
				return true, false, fmt.Errorf("chunk %s: %w", r.Hash, chunkstore.ErrUnknownHash)
			}
		}
		nn.manifest = e.Chunks
	case KindSymlink:
		nn.target = e.Target
	}
	n := t.newRow(nn)
	n.ino = t.s.nextIno()
	t.s.sawIno(n.ino)
	b.nodes = append(b.nodes, n)
	b.names = append(b.names, bulkName{parent: parent, name: name, path: e.Path})
	t.noteName(parent, name, true)
	if err := t.dirChanged(parent); err != nil {
		return true, false, err
	}
	if kind == KindDir {
		t.names(n.ino).complete = true // empty, and only its batch's names go in
		if t.dirs == nil {
			t.dirs = make(map[string]Ino)
		}
		t.dirs[e.Path] = n.ino
	}
	t.inval = append(t.inval, Invalidation{Ino: n.ino, Parent: parent, Name: name, New: true})
	return true, true, nil
}

// flush writes the queued rows.
func (b *bulkRows) flush() error {
	if len(b.nodes) == 0 {
		return nil
	}
	t := b.t
	for start := 0; start < len(b.nodes); {
		k := stmtRows(len(b.nodes) - start)
		nodes, names := b.nodes[start:start+k], b.names[start:start+k]
		start += k
		args := make([]any, 0, 14*k)
		for i := range nodes {
			args = appendNodeRow(args, &nodes[i])
		}
		if _, err := t.exec(nodesInsert(k), args...); err != nil {
			return fmt.Errorf("insert %d nodes: %w", k, err)
		}
		args = args[:0]
		for i, nm := range names {
			args = append(args, nm.parent, nm.name, nodes[i].ino)
		}
		if _, err := t.exec(direntsInsert(k), args...); err != nil {
			return fmt.Errorf("add %d entries: %w", k, err)
		}
		args = args[:0]
		for i, nm := range names {
			args = append(args, nm.path, nodes[i].rev)
		}
		if _, err := t.exec(changesUpsert(k), args...); err != nil {
			return fmt.Errorf("touch %d paths: %w", k, err)
		}
	}
	b.written += len(b.nodes)
	b.nodes, b.names = b.nodes[:0], b.names[:0]
	return nil
}

// rowsOf is the VALUES list of n rows of the form row.
func rowsOf(row string, n int) string {
	var sb strings.Builder
	sb.Grow(n * (len(row) + 1))
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(row)
	}
	return sb.String()
}
