package vfs

import (
	"context"
	"database/sql"
	"fmt"
)

// xattrInos is the set of nodes that may have extended attributes, so
// that deleting a node (every unlink, every rmdir) runs no DELETE on the
// xattrs table for the many nodes that have none. It only errs towards
// "may": an inode number is never reused (AUTOINCREMENT), so a node
// whose xattrs went, or whose SetXattr rolled back, stays in the set at
// the cost of one needless statement when it is deleted. Past
// maxXattrInos nodes it stops counting and says "may" for every node.
type xattrInos struct {
	set map[Ino]struct{}
	all bool
}

// maxXattrInos bounds the set (16 bytes and a map slot a node).
const maxXattrInos = 1 << 16

// load fills the set from the store's rows, at open.
func (x *xattrInos) load(ctx context.Context, db *sql.DB) error {
	x.set, x.all = make(map[Ino]struct{}), false
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT ino FROM xattrs LIMIT ?`, maxXattrInos+1)
	if err != nil {
		return fmt.Errorf("list nodes with xattrs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ino Ino
		if err := rows.Scan(&ino); err != nil {
			return fmt.Errorf("list nodes with xattrs: %w", err)
		}
		x.add(ino)
	}
	return rows.Err()
}

// add notes that ino may have xattrs; call it before writing one.
func (x *xattrInos) add(ino Ino) {
	if x.all {
		return
	}
	if len(x.set) >= maxXattrInos {
		x.set, x.all = nil, true
		return
	}
	x.set[ino] = struct{}{}
}

// may reports whether ino may have xattrs.
func (x *xattrInos) may(ino Ino) bool {
	if x.all {
		return true
	}
	_, ok := x.set[ino]
	return ok
}
