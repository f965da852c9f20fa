package vfs

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/wsync/wsync/internal/crashpoint"
)

// Rows of queued creates, written in bulk.
//
// A create the write-behind answered (behind.go) runs with no statement of
// its own: its node row and its name are kept in the open group
// (pendingRows) with the inode number it was answered with, its parent's
// new times too, and multi-row INSERTs write them (bulk.go's, 256 rows a
// statement) before any other statement of the group's transaction runs
// (txQuerier.flushPending: a mutation's savepoint, a read of a mount
// request, a query of a later mutation, the group's commit). So the SQL sees every
// row as if each create had written its own, and a run of creates (a
// build, a checkout, an untar) costs a few statements, not five each.
//
// A file's commit queued while the file's row waits there (its create
// ran, but its commit did not fold into it: behindCommit), and a SetAttr
// queued while a node's row waits there (tar's times and mode), change
// the kept row in place, as their UPDATEs would have.
//
// Such a create needs no savepoint: nothing it does reaches SQLite. If
// it fails (errBehind, or a test's injected failure), the rows it kept
// are dropped, which is all it did, and it is lost with the mutations
// answered after it, as ever. If writing the kept rows fails, they belong
// to mutations already merged into the group: the group is lost, as a
// failed group commit loses it (logged, counted, reported by the next
// fsync), a prefix of the answered mutations surviving.
type pendingRows struct {
	nodes []node
	at    map[Ino]int // index in nodes
	names []pendingName
	dirs  map[Ino]int64
	// flushes counts the writes of the rows (pendingMark).
	flushes int
	// err is a failed write of the rows: sticky, the group cannot commit.
	err error
}

type pendingName struct {
	parent Ino
	name   string
	child  Ino
}

// pendingMark is where a mutation's rows start, to drop them if it fails.
type pendingMark struct{ nodes, names, flushes int }

func (p *pendingRows) mark() pendingMark {
	return pendingMark{len(p.nodes), len(p.names), p.flushes}
}

// dropSince drops the rows kept since m; false if they were written
// since (they are in the transaction).
func (p *pendingRows) dropSince(m pendingMark) bool {
	if p.flushes != m.flushes {
		return false
	}
	for _, n := range p.nodes[m.nodes:] {
		delete(p.at, n.ino)
	}
	p.nodes, p.names = p.nodes[:m.nodes], p.names[:m.names]
	return true
}

// addNode keeps a new node's row.
func (p *pendingRows) addNode(n node) {
	if p.at == nil {
		p.at = make(map[Ino]int)
	}
	p.at[n.ino] = len(p.nodes)
	p.nodes = append(p.nodes, n)
}

// row returns the kept row of node ino, to change in place, or nil.
func (p *pendingRows) row(ino Ino) *node {
	if i, ok := p.at[ino]; ok {
		return &p.nodes[i]
	}
	return nil
}

// addName keeps a new name.
func (p *pendingRows) addName(parent Ino, name string, child Ino) {
	p.names = append(p.names, pendingName{parent: parent, name: name, child: child})
}

// touchDir keeps a directory's new mtime and ctime.
func (p *pendingRows) touchDir(dir Ino, now int64) {
	if p.dirs == nil {
		p.dirs = make(map[Ino]int64)
	}
	p.dirs[dir] = now
}

// flush writes the kept rows through q: nodes, then names, then the
// directories' times (a directory made by a kept create gets its times
// after its row). Called before any other statement of the group's
// transaction (and so outside any savepoint).
func (p *pendingRows) flush(ctx context.Context, q *txQuerier) error {
	if p.err != nil {
		return p.err
	}
	if len(p.nodes) == 0 && len(p.names) == 0 && len(p.dirs) == 0 {
		return nil
	}
	p.flushes++
	if err := p.write(ctx, q); err != nil {
		p.err = fmt.Errorf("write the rows of %d queued creates: %w", len(p.nodes), err)
		return p.err
	}
	p.nodes, p.names = p.nodes[:0], p.names[:0]
	clear(p.at)
	clear(p.dirs)
	return nil
}

func (p *pendingRows) write(ctx context.Context, q *txQuerier) error {
	args := make([]any, 0, 14*min(len(p.nodes), bulkStatementRows))
	for start := 0; start < len(p.nodes); {
		k := stmtRows(len(p.nodes) - start)
		args = args[:0]
		for i := range p.nodes[start : start+k] {
			args = appendNodeRow(args, &p.nodes[start+i])
		}
		if _, err := q.ExecContext(ctx, nodesInsert(k), args...); err != nil {
			return fmt.Errorf("insert %d nodes: %w", k, err)
		}
		start += k
	}
	crashpoint.Hit("vfs.pending.flush") // node rows written, their names not
	for start := 0; start < len(p.names); {
		k := stmtRows(len(p.names) - start)
		args = args[:0]
		for _, nm := range p.names[start : start+k] {
			args = append(args, nm.parent, nm.name, nm.child)
		}
		if _, err := q.ExecContext(ctx, direntsInsert(k), args...); err != nil {
			return fmt.Errorf("add %d entries: %w", k, err)
		}
		start += k
	}
	for _, dir := range slices.Sorted(maps.Keys(p.dirs)) {
		now := p.dirs[dir]
		if _, err := q.ExecContext(ctx, `UPDATE nodes SET mtime = ?, ctime = ? WHERE ino = ?`, now, now, dir); err != nil {
			return fmt.Errorf("set the times of directory %d: %w", dir, err)
		}
	}
	return nil
}
