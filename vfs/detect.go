package vfs

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// Conflict detection in the apply of a sync peer's batch
// (ApplyOptions.Conflicts): the rules of conflict.go against the bases of
// bases.go, and what each policy does.

// conflictSet is an Apply's conflict detection state (ApplyOptions.Conflicts).
type conflictSet struct {
	opts ConflictOptions
	peer string
	now  time.Time
	push watermark.Cursor // the peer has our feed through here
	run  BounceRun        // and these revs hold its own entries
	// bases: the batch's base rows (path -> key); loaded: the paths whose
	// rows were read (a loaded path missing from bases has none).
	bases  map[string][]byte
	loaded map[string]bool
	// writes are the base rows to write at the end of the batch (nil
	// value: delete the row).
	writes map[string][]byte
	// restamp are paths whose current state the peer must receive again:
	// stamped after the batch's bounce run, so the next push carries them.
	restamp []string
	found   []Conflict
	// seen are the paths inTheWay already settled in this batch.
	seen map[string]bool
}

// changedUnderQuery finds one node below a directory changed in a window
// of revs; the listing is the outer loop (CROSS JOIN), as in subtreeQuery.
const changedUnderQuery = `WITH RECURSIVE sub(child, rel) AS (
		SELECT child, name FROM dirents WHERE parent = ?
		UNION ALL
		SELECT d.child, sub.rel || '/' || d.name FROM dirents d JOIN sub ON d.parent = sub.child
	)
	SELECT 1 FROM sub CROSS JOIN nodes n ON n.ino = sub.child CROSS JOIN changes c ON c.path = ? || '/' || sub.rel
	WHERE n.kind IN ` + syncedKinds + `
	AND (c.rev > ? OR (c.rev = ? AND ? AND c.path > ?)) AND NOT (c.rev > ? AND c.rev <= ?) LIMIT 1`

// changedUnder reports whether the live subtree below our directory dir
// (at path) holds a node whose path changed since since, outside run: a
// local change the other side does not have. Such a directory must not be
// removed on the other side's word. It reads the live subtree only (what a
// removal would take anyway), so the tombstones of a large directory the
// peer emptied cost nothing.
func (t *wtx) changedUnder(dir Ino, path string, since watermark.Cursor, run BounceRun) (bool, error) {
	var one int
	err := t.tx.QueryRowContext(t.ctx, changedUnderQuery,
		dir, path, since.Rev, since.Rev, since.Partial, since.Path, run.From, run.To).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("changes below %q: %w", path, err)
	}
	return true, nil
}

// record adds a conflict record for path (our state cur at rev ours, the
// peer's in at rev theirs).
func (t *wtx) record(c *conflictSet, path string, cur state, ours int64, in state, theirs int64, copyPath, copySide string) error {
	policy := c.opts.Policy
	cf := Conflict{Path: path, Peer: c.peer, Side: c.opts.Side, At: c.now, Policy: policy, Kind: conflictKind(cur, in),
		Server: cur.public(ours), Container: in.public(theirs), Copy: copyPath, CopySide: copySide}
	server, err := json.Marshal(cf.Server)
	if err != nil {
		return err
	}
	container, err := json.Marshal(cf.Container)
	if err != nil {
		return err
	}
	res, err := t.exec(`INSERT INTO conflicts(path, peer, side, at, policy, kind, server, container, copy, copy_side)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, path, c.peer, c.opts.Side, c.now.UnixNano(), string(policy), cf.Kind,
		string(server), string(container), copyPath, copySide)
	if err != nil {
		return fmt.Errorf("record conflict %q: %w", path, err)
	}
	if cf.ID, err = res.LastInsertId(); err != nil {
		return err
	}
	c.found = append(c.found, cf)
	return nil
}

// copyName picks a free name beside path for a conflict copy of side's
// version.
func (t *wtx) copyName(c *conflictSet, parent Ino, path, side string) (string, error) {
	for n := 1; n <= maxCopyTries; n++ {
		p := ConflictCopyName(path, side, c.now, n)
		_, name := splitPath(p)
		_, err := lookupChild(t.ctx, t.tx, parent, name)
		if errors.Is(err, ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("conflict copy of %q: %w: %d names taken", path, ErrExist, maxCopyTries)
}

// errSkipEntry: the entry is not applied (a directory of the peer's where
// our version wins under ServerWins); the batch goes on.
var errSkipEntry = errors.New("entry skipped")

// dirtyDir is the key detection gives one of our directories whose
// subtree holds changes the peer has not received: it differs from every
// base, so removing it on the peer's word is a conflict.
var dirtyDir = []byte{byte(EntryDir), 1}

// startSync sets up an Apply batch's conflict detection and fence.
func (t *wtx) startSync(entries []ChangeEntry, opts ApplyOptions) error {
	if opts.Conflicts == nil && opts.Fence == nil {
		return nil
	}
	run, err := bounceRun(t.ctx, t.tx, opts.Peer)
	if err != nil {
		return err
	}
	if opts.Fence != nil {
		if t.fence, err = t.loadFence(*opts.Fence, run); err != nil {
			return err
		}
	}
	if opts.Conflicts == nil {
		return nil
	}
	c := &conflictSet{opts: *opts.Conflicts, peer: opts.Peer, push: opts.Watermarks.Push, run: run,
		bases: make(map[string][]byte), loaded: make(map[string]bool, len(entries)), writes: make(map[string][]byte, len(entries)), seen: make(map[string]bool)}
	if c.opts.Policy == "" {
		c.opts.Policy = KeepBoth
	}
	if c.opts.Side == "" {
		c.opts.Side = SideContainer
	}
	if c.opts.Now == nil {
		c.opts.Now = time.Now
	}
	c.now = c.opts.Now().UTC().Truncate(time.Second)
	paths := make([]string, len(entries))
	for i := range entries {
		paths[i] = entries[i].Path
	}
	if err := t.loadBases(c, paths); err != nil {
		return err
	}
	t.cf = c
	return nil
}

// detect runs conflict detection for entry e, whose path holds cur
// (exists) in parent under name. done: the entry is settled here (changed
// says whether the store changed); otherwise the apply goes on as usual,
// with cur and exists updated when detection moved our version aside.
func (t *wtx) detect(e *ChangeEntry, parent Ino, name string, cur *node, exists *bool) (done, changed bool, err error) {
	c := t.cf
	ours := absent
	if *exists {
		ours = nodeState(cur)
	}
	in := entryState(e)
	base, err := t.base(c, e.Path, ours)
	if err != nil {
		return true, false, err
	}
	ourKey := ours.key()
	if ours.isDir() && !in.isDir() && bytes.Equal(ourKey, base) {
		// Our directory did not change itself; what it holds may have.
		dirty, err := t.changedUnder(cur.ino, e.Path, c.push, c.run)
		if err != nil {
			return true, false, err
		}
		if dirty {
			ourKey = dirtyDir
		}
	}
	switch decide(base, ourKey, in.key()) {
	case same, takeTheirs:
		c.writes[e.Path] = in.key()
		return false, false, nil
	case keepOurs:
		// The peer still holds the base: ours goes to it on the next push.
		c.restamp = append(c.restamp, e.Path)
		return true, false, nil
	}
	c.writes[e.Path] = in.key() // what the peer holds now
	ourRev, err := t.changeRev(e.Path)
	if err != nil {
		return true, false, err
	}
	rec := func(copyPath, copySide string) error {
		return t.record(c, e.Path, ours, ourRev, in, e.Rev, copyPath, copySide)
	}
	switch {
	case c.opts.Policy == KeepBoth && ours.isDir() && in.kind == EntryDelete:
		// Our directory stays for what changed below it (modify beats
		// delete); the paths below settle, and record, one by one.
		c.restamp = append(c.restamp, e.Path)
		return true, false, nil
	case c.opts.Policy == ServerWins,
		c.opts.Policy == KeepBoth && in.kind == EntryDelete: // modify beats delete
		c.restamp = append(c.restamp, e.Path)
		return true, false, rec("", "")
	case c.opts.Policy == ContainerWins,
		ours.kind == EntryDelete: // modify beats delete: theirs comes back
		return false, false, rec("", "")
	case ours.sameContent(in):
		// Only the modes differ: ours stays, without a copy or a record.
		c.restamp = append(c.restamp, e.Path)
		return true, false, nil
	case in.isDir():
		// Their directory takes the name; ours (not a directory) goes
		// beside it.
		cp, err := t.moveAside(c, parent, name, e.Path)
		if err != nil {
			return true, false, err
		}
		*exists = false
		return false, false, rec(cp, SideServer)
	}
	// Ours keeps the name; theirs goes beside it.
	cp, err := t.copyName(c, parent, e.Path, c.opts.Side)
	if err != nil {
		return true, false, err
	}
	nn := newNode{attr: NewAttr{Mode: e.Mode, Uid: t.s.opts.Owner.Uid, Gid: t.s.opts.Owner.Gid}, mtime: e.Mtime}
	switch e.Kind {
	case EntryFile:
		for _, r := range e.Chunks {
			if _, ok := t.missing[r.Hash]; ok {
				return true, false, fmt.Errorf("chunk %s: %w", r.Hash, chunkstore.ErrUnknownHash)
			}
		}
		nn.kind, nn.manifest = KindFile, e.Chunks
	case EntrySymlink:
		nn.kind, nn.target = KindSymlink, e.Target
	}
	_, cname := splitPath(cp)
	n, err := t.insertNode(parent, cp, cname, nn)
	if err != nil {
		return true, false, err
	}
	t.inval = append(t.inval, Invalidation{Ino: n.ino, Parent: parent, Name: cname, New: true})
	c.writes[cp] = nil // the peer does not hold it yet
	c.restamp = append(c.restamp, e.Path, cp)
	return true, true, rec(cp, SideContainer)
}

// moveAside renames our node (parent, name) at path to a free conflict
// copy name of the server's side, and returns the copy's path.
func (t *wtx) moveAside(c *conflictSet, parent Ino, name, path string) (string, error) {
	cp, err := t.copyName(c, parent, path, SideServer)
	if err != nil {
		return "", err
	}
	_, cname := splitPath(cp)
	if err := t.rename(parent, name, parent, cname, RenameNoReplace); err != nil {
		return "", fmt.Errorf("conflict copy of %q: %w", path, err)
	}
	c.writes[cp] = nil
	c.restamp = append(c.restamp, cp)
	return cp, nil
}

// inTheWay decides, under conflict detection, for our node n at path
// (dir, name), not a directory, where the peer's entry needs a
// directory. Unchanged since the base, it goes as before (false). Changed,
// keep-both moves it beside (true), container-wins lets it go (false) and
// server-wins skips the peer's entry (errSkipEntry); each records the
// conflict once.
func (t *wtx) inTheWay(dir Ino, name, path string, n node) (bool, error) {
	c := t.cf
	ours := nodeState(&n)
	base, err := t.base(c, path, ours)
	if err != nil {
		return false, err
	}
	if bytes.Equal(base, ours.key()) {
		return false, nil
	}
	theirs := state{kind: EntryDir}
	first := !c.seen[path]
	c.seen[path] = true
	if first && c.opts.Policy != KeepBoth {
		open, err := t.openConflictAt(c.peer, path)
		if err != nil {
			return false, err
		}
		first = !open
	}
	rev, err := t.changeRev(path)
	if err != nil {
		return false, err
	}
	switch c.opts.Policy {
	case ServerWins:
		if first {
			c.restamp = append(c.restamp, path)
			if err := t.record(c, path, ours, rev, theirs, 0, "", ""); err != nil {
				return false, err
			}
		}
		return false, errSkipEntry
	case ContainerWins:
		c.writes[path] = theirs.key()
		if first {
			return false, t.record(c, path, ours, rev, theirs, 0, "", "")
		}
		return false, nil
	}
	cp, err := t.moveAside(c, dir, name, path)
	if err != nil {
		return false, err
	}
	c.writes[path] = theirs.key()
	return true, t.record(c, path, ours, rev, theirs, 0, cp, SideServer)
}

// openConflictAt reports whether an open conflict with peer is recorded
// at path.
func (t *wtx) openConflictAt(peer, path string) (bool, error) {
	var n int
	err := t.tx.QueryRowContext(t.ctx, `SELECT count(*) FROM conflicts WHERE resolved = 0 AND peer = ? AND path = ?`, peer, path).Scan(&n)
	return n > 0, err
}
