package vfs

import (
	"fmt"
	"strings"
	"testing"
)

// The queries that walk a subtree search the store's tables by key from
// the listing, whatever the store holds: none scans nodes, dirents or
// changes (an rmdir of an empty directory once scanned every node).
func TestSubtreeQueriesSearch(t *testing.T) {
	s := newStore(t)
	for i := range 300 {
		writeFile(t, s, fmt.Sprint("f", i), []byte("x"))
	}
	d, err := s.Mkdir(ctx, RootIno, "d", NewAttr{Mode: 0o755})
	must(t, err)
	must(t, s.Sync(ctx))
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"subtree":       {subtreeQuery, []any{d.Ino}},
		"changed under": {changedUnderQuery, []any{d.Ino, "d", 0, 0, false, "", 0, 0}},
	} {
		rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q.sql, q.args...)
		must(t, err)
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			must(t, rows.Scan(&id, &parent, &notused, &detail))
			plan = append(plan, detail)
		}
		rows.Close()
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN") && step != "SCAN sub" {
				t.Errorf("%s query: %q in its plan:\n%s", name, step, strings.Join(plan, "\n"))
			}
		}
	}
}
