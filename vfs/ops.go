package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wsync/wsync/chunkstore"
)

// SetAttr changes a node's attributes; nil fields are left alone.
type SetAttr struct {
	Mode  *uint32
	Uid   *uint32
	Gid   *uint32
	Size  *int64 // truncate or extend (files only)
	Atime *time.Time
	Mtime *time.Time
}

// RenameFlags are rename(2)'s flags.
type RenameFlags uint32

const (
	RenameNoReplace RenameFlags = 1 << 0 // RENAME_NOREPLACE
	RenameExchange  RenameFlags = 1 << 1 // RENAME_EXCHANGE: refused with ErrInvalid
)

// Lookup resolves name in directory parent.
func (s *Store) Lookup(ctx context.Context, parent Ino, name string) (Attr, error) {
	if err := ValidateName(name); err != nil {
		return Attr{}, err
	}
	var gen uint64
	if s.mem != nil {
		var a Attr
		var ok bool
		var err error
		if a, gen, ok, err = s.memoLookup(parent, name); ok {
			if err != nil {
				return Attr{}, err
			}
			return s.overlay(a), nil
		}
	}
	// One query: a miss is ErrNotExist whether or not parent is a
	// directory (the kernel only looks names up in directories).
	var n node
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) (err error) {
		n, err = lookupChildAttrs(ctx, q, parent, name)
		return err
	})
	a := n.attr()
	if s.mem != nil {
		s.learnLookup(gen, parent, name, a, err)
	}
	if err != nil {
		return Attr{}, err
	}
	return s.overlay(a), nil
}

// GetAttr returns a node's attributes, including writes buffered in open
// handles.
func (s *Store) GetAttr(ctx context.Context, ino Ino) (Attr, error) {
	var gen uint64
	if s.mem != nil {
		var a Attr
		var ok bool
		if a, gen, ok = s.memoAttr(ino); ok {
			return s.overlay(a), nil
		}
	}
	if a, ok := s.keptAttr(ino); ok {
		return s.overlay(a), nil
	}
	at := s.writes.Load()
	n, err := s.viewAttr(ctx, ino)
	if err != nil {
		return Attr{}, err
	}
	a := n.attr()
	if s.writes.Load() == at {
		s.keepAttr(a, at)
	}
	if s.mem != nil {
		s.learnAttr(gen, a)
	}
	return s.overlay(a), nil
}

// ReadDir returns up to limit entries with names > after, in name order, so
// a huge directory can be read in pages.
func (s *Store) ReadDir(ctx context.Context, dir Ino, after string, limit int) ([]DirEntry, error) {
	page, _, err := s.ReadDirAttrs(ctx, dir, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, len(page))
	for i, e := range page {
		out[i] = DirEntry{Name: e.Name, Ino: e.Attr.Ino, Kind: e.Attr.Kind, Mode: e.Attr.Mode}
	}
	return out, nil
}

// DirEntryAttr is a directory entry with its node's attributes as
// committed (without the writes open handles buffer: AttrAsOf adds them).
type DirEntryAttr struct {
	Name string
	Attr Attr
}

// ReadDirAttrs is ReadDir with every entry's attributes (all but the
// manifest), in the one query a page both use: what a listing that also
// answers each entry's lookup (the mount's READDIRPLUS) needs. gen says when they were read: AttrAsOf
// gives an entry's attributes if nothing was written since.
func (s *Store) ReadDirAttrs(ctx context.Context, dir Ino, after string, limit int) (_ []DirEntryAttr, gen uint64, _ error) {
	if limit <= 0 {
		limit = 1024
	}
	// An odd count is a write in progress when gen was read: what is read
	// next may be half of it, and the count would not move again until it
	// ends.
	if gen = s.writes.Load(); gen%2 == 1 {
		gen = 0
	}
	var mgen uint64
	var mans *[][]byte
	if m := s.mem; m != nil {
		// What the memo answers is as of gen or later, and AttrAsOf
		// refuses while anything is queued.
		if page, ok := s.memoPage(dir, after, limit); ok {
			return page, gen, nil
		}
		mgen = m.snap()
		mans = new([][]byte)
	}
	out, err := s.readDirPage(ctx, dir, after, limit, mans)
	if err != nil {
		return nil, 0, err
	}
	if m := s.mem; m != nil {
		// The memo keeps the page's attributes (and a small file's chunk
		// list, for its open), and a whole directory's names, while
		// nothing changed.
		m.mu.Lock()
		if m.gen == mgen && m.busy == 0 {
			s.learnLocked(m, dir, out, *mans, after == "" && len(out) < limit)
		}
		m.mu.Unlock()
	}
	return out, gen, nil
}

// readDirPage is ReadDirAttrs' query.
// With mans, it also reads each entry's encoded chunk list when it is at
// most maxKeptManifest bytes (nil otherwise: unknown unless the file is
// empty), appended to *mans in the page's order.
func (s *Store) readDirPage(ctx context.Context, dir Ino, after string, limit int, mans *[][]byte) ([]DirEntryAttr, error) {
	var out []DirEntryAttr
	cols := attrCols
	if mans != nil {
		cols = pageCols
	}
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		rows, err := q.QueryContext(ctx, `SELECT d.name, `+cols+` FROM dirents d JOIN nodes n ON n.ino = d.child
			WHERE d.parent = ? AND d.name > ? ORDER BY d.name LIMIT ?`, dir, after, limit)
		if err != nil {
			return fmt.Errorf("readdir %d: %w", dir, err)
		}
		if mans != nil {
			*mans = (*mans)[:0]
		}
		out, err = scanRows(rows, func(r *sql.Rows, e *DirEntryAttr) error {
			var name string
			n, err := scanNode(prefixScanner{r, &name})
			e.Name, e.Attr = name, n.attr()
			if mans != nil {
				*mans = append(*mans, n.manifest)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("readdir %d: %w", dir, err)
		}
		if len(out) == 0 {
			n, err := getNode(ctx, q, dir)
			if err != nil {
				return err
			}
			if n.kind != KindDir {
				return ErrNotDir
			}
		}
		return nil
	})
	return out, err
}

// AttrAsOf returns a, read by ReadDirAttrs at gen, with the writes open
// handles buffer, when nothing was written to the store since gen (the
// answer a Lookup would give now); ok is false otherwise.
func (s *Store) AttrAsOf(a Attr, gen uint64) (_ Attr, ok bool) {
	if gen == 0 || s.queuedN.Load() > 0 || s.writes.Load() != gen {
		return Attr{}, false
	}
	return s.overlay(a), true
}

// prefixScanner scans a row whose first column is first and whose others
// are a node's (scanNode).
type prefixScanner struct {
	r     *sql.Rows
	first any
}

func (p prefixScanner) Scan(dest ...any) error {
	return p.r.Scan(append([]any{p.first}, dest...)...)
}

// create makes a new node named name in parent; made, when not nil, runs
// inside the mutation once the node exists.
func (s *Store) create(ctx context.Context, parent Ino, name string, nn newNode, made func(node)) (Attr, error) {
	if err := ValidateName(name); err != nil {
		return Attr{}, err
	}
	if err := s.room.admit(nodeCost + len(nn.target)); err != nil {
		return Attr{}, err
	}
	if a, ok, err := s.behindCreate(ctx, parent, name, nn, made); ok {
		return a, err
	}
	var n node
	err := s.mutate(ctx, s.createFn(parent, name, nn, made, &n, false))
	return n.attr(), err
}

// createFn is the mutation that creates nn as name in parent, leaving the
// new node in n. answered: the write-behind answered it, having found the
// name free and parent a directory in the memo, so no query checks them
// again (the entry's insert still refuses a name in use).
func (s *Store) createFn(parent Ino, name string, nn newNode, made func(node), n *node, answered bool) func(*wtx) error {
	return func(t *wtx) error {
		t.carries = true // the parent's times, the new node
		if !answered {
			if err := t.freeName(parent, name); err != nil {
				return err
			}
		}
		dp, err := t.dirPath(parent)
		if err != nil {
			return err
		}
		if !answered {
			// An answered create was checked by its caller (fusefs): a
			// queued mutation that fails now would take its group with it.
			if err := checkNewPath(len(dp), name, 0); err != nil {
				return err
			}
		}
		path := joinPath(dp, name)
		*n, err = t.insertNode(parent, path, name, nn)
		if err != nil {
			return err
		}
		a := n.attr()
		t.keepNode(n.ino, &a)
		switch n.kind {
		case KindFile:
			t.keepRow(n.ino, n.manifest, []string{path})
		case KindDir:
			// A create below it needs its path: no query (which would
			// also write the rows of queued creates first).
			if t.dirAdds == nil {
				t.dirAdds = make(map[Ino]string)
			}
			t.dirAdds[n.ino] = path
		}
		if made != nil {
			made(*n)
		}
		return nil
	}
}

// CreateOpen makes an empty file, as Create, and opens a handle on it in
// the same mutation, so no unlink can come between the two and the handle
// needs no read of the node (open(2) with O_CREAT).
func (s *Store) CreateOpen(ctx context.Context, parent Ino, name string, a NewAttr) (Attr, *Handle, error) {
	var f *openFile
	attr, err := s.create(ctx, parent, name, newNode{kind: KindFile, attr: a}, func(n node) {
		f = s.register(n.ino)
		f.mu.Lock()
		if !f.loaded {
			f.setBase(nil, 0)
			f.mtime, f.loaded = n.mtime, true
		}
		f.mu.Unlock()
	})
	if err != nil {
		if f != nil {
			s.unregister(f)
		}
		return Attr{}, nil, err
	}
	return attr, &Handle{f: f}, nil
}

// Create makes an empty file; an existing name is ErrExist (O_EXCL).
func (s *Store) Create(ctx context.Context, parent Ino, name string, a NewAttr) (Attr, error) {
	return s.create(ctx, parent, name, newNode{kind: KindFile, attr: a}, nil)
}

// Mkdir makes a directory.
func (s *Store) Mkdir(ctx context.Context, parent Ino, name string, a NewAttr) (Attr, error) {
	return s.create(ctx, parent, name, newNode{kind: KindDir, attr: a}, nil)
}

// Symlink makes a symbolic link to target. The target is data: the store
// never follows it.
func (s *Store) Symlink(ctx context.Context, parent Ino, name, target string, a NewAttr) (Attr, error) {
	if target == "" || len(target) > MaxTargetLen || strings.IndexByte(target, 0) >= 0 {
		return Attr{}, fmt.Errorf("symlink target: %w", ErrInvalid)
	}
	return s.create(ctx, parent, name, newNode{kind: KindSymlink, attr: a, target: target}, nil)
}

// Mknod makes a special file: a FIFO, a socket or a device node (rdev is
// its device number). Special files are local to this store: they stamp no
// rev and never reach the change feed or a Merkle scan, so they never
// cross the wire.
func (s *Store) Mknod(ctx context.Context, parent Ino, name string, kind Kind, rdev uint32, a NewAttr) (Attr, error) {
	if !kind.Special() {
		return Attr{}, fmt.Errorf("mknod %s: %w", kind, ErrInvalid)
	}
	if kind != KindCharDev && kind != KindBlockDev {
		rdev = 0
	}
	return s.create(ctx, parent, name, newNode{kind: kind, attr: a, rdev: rdev}, nil)
}

// Readlink returns a symlink's target.
func (s *Store) Readlink(ctx context.Context, ino Ino) (string, error) {
	n, err := s.viewAttr(ctx, ino)
	if err != nil {
		return "", err
	}
	if n.kind != KindSymlink {
		return "", ErrInvalid
	}
	return n.target, nil
}

// Link adds a second name for a file or symlink; directories are ErrPerm.
func (s *Store) Link(ctx context.Context, ino, newParent Ino, newName string) (Attr, error) {
	if err := ValidateName(newName); err != nil {
		return Attr{}, err
	}
	var n node
	// The new name's attributes are the node's, and an open file's size and
	// mtime are its handle's, not yet its row's.
	if a, ok, err := s.behindLink(ctx, ino, newParent, newName, linkFn(ino, newParent, newName, &n, true)); ok {
		return s.overlay(a), err
	}
	err := s.mutate(ctx, linkFn(ino, newParent, newName, &n, false))
	return s.overlay(n.attr()), err
}

// linkFn is Link's mutation; it leaves the node as linked in out.
// answered: the write-behind answered it, its caller having checked the
// new path's length (see createFn).
func linkFn(ino, newParent Ino, newName string, out *node, answered bool) func(*wtx) error {
	return func(t *wtx) error {
		ctx := t.ctx
		n, err := getNode(ctx, t.tx, ino)
		if err != nil {
			return err
		}
		if n.kind == KindDir {
			return ErrPerm
		}
		if n.nlink == 0 {
			return ErrNotExist
		}
		dp, err := t.dirPath(newParent)
		if err != nil {
			return err
		}
		if !answered {
			if err := checkNewPath(len(dp), newName, 0); err != nil {
				return err
			}
		}
		if err := t.freeName(newParent, newName); err != nil {
			return err
		}
		if err := t.addDirent(newParent, newName, ino); err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE nodes SET nlink = nlink + 1, ctime = ? WHERE ino = ?`, t.now, ino); err != nil {
			return err
		}
		// The new name is a new path for the feed; the other names are
		// unchanged.
		if err := t.touchSynced(n.kind, joinPath(dp, newName)); err != nil {
			return err
		}
		n.nlink++
		n.ctime = t.now
		*out = n
		// The rows it changed: the node's (declared) and the new parent's
		// times; its one new name is in t.named.
		t.carries = true
		a := out.attr()
		t.keepNode(ino, &a)
		return nil
	}
}

// Unlink removes a non-directory name.
func (s *Store) Unlink(ctx context.Context, parent Ino, name string) error {
	return s.remove(ctx, parent, name, false)
}

// Rmdir removes an empty directory.
func (s *Store) Rmdir(ctx context.Context, parent Ino, name string) error {
	return s.remove(ctx, parent, name, true)
}

func (s *Store) remove(ctx context.Context, parent Ino, name string, dir bool) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if ok, err := s.behindRemove(ctx, parent, name, dir); ok {
		return err
	}
	return s.mutate(ctx, s.removeFn(parent, name, dir, nil))
}

// removeFn is the mutation that removes name from parent (an rmdir when
// dir).
func (s *Store) removeFn(parent Ino, name string, dir bool, known *node) func(*wtx) error {
	return func(t *wtx) error {
		var n node
		if known != nil {
			// Answered from the memo, which knew what the name holds: the
			// entry's removal below checks that it still does.
			n = *known
		} else {
			var err error
			if n, err = lookupLink(t.ctx, t.tx, parent, name); err != nil {
				return err
			}
		}
		// The parent's times and the node's row (a directory goes only
		// empty, below).
		t.carries = true
		t.keepNode(n.ino, nil)
		dp, err := t.dirPath(parent)
		if err != nil {
			return err
		}
		path := joinPath(dp, name)
		switch {
		case dir && n.kind != KindDir:
			return ErrNotDir
		case !dir && n.kind == KindDir:
			return ErrIsDir
		case dir:
			if empty, err := t.isEmpty(n.ino); err != nil {
				return err
			} else if !empty {
				return ErrNotEmpty
			}
			return t.removeDir(parent, name, path, n)
		}
		return t.removeAt(parent, name, path, n)
	}
}

// freeName checks, in one query, that parent is a directory and has no
// entry called name.
func (t *wtx) freeName(parent Ino, name string) error {
	var kind Kind
	var child sql.NullInt64
	err := t.tx.QueryRowContext(t.ctx, `SELECT p.kind, d.child FROM nodes p
		LEFT JOIN dirents d ON d.parent = p.ino AND d.name = ? WHERE p.ino = ?`, name, parent).Scan(&kind, &child)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotExist
	case err != nil:
		return err
	case kind != KindDir:
		return ErrNotDir
	case child.Valid:
		return ErrExist
	}
	return nil
}

func (t *wtx) isEmpty(dir Ino) (bool, error) {
	var one int
	err := t.tx.QueryRowContext(t.ctx, `SELECT count(*) FROM (SELECT 1 FROM dirents WHERE parent = ? LIMIT 1)`, dir).Scan(&one)
	return one == 0, err
}

// Rename moves (parent, name) to (newParent, newName) with rename(2)'s rules.
// A directory rename stamps the whole moved subtree with one rev and records
// a tombstone for every old path, in one transaction.
func (s *Store) Rename(ctx context.Context, parent Ino, name string, newParent Ino, newName string, flags RenameFlags) error {
	if flags&RenameExchange != 0 || flags&^(RenameNoReplace|RenameExchange) != 0 {
		return fmt.Errorf("rename flags %#x: %w", flags, ErrInvalid)
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := ValidateName(newName); err != nil {
		return err
	}
	return s.mutate(ctx, func(t *wtx) error {
		return t.rename(parent, name, newParent, newName, flags)
	})
}

func (t *wtx) rename(parent Ino, name string, newParent Ino, newName string, flags RenameFlags) error {
	ctx := t.ctx
	t.dirs = nil
	src, err := lookupNode(ctx, t.tx, parent, name)
	if err != nil {
		return err
	}
	if _, err := t.parentDir(newParent); err != nil {
		return err
	}
	if parent == newParent && name == newName {
		return nil
	}
	if src.kind == KindDir {
		// A directory cannot move into its own subtree.
		for p := newParent; p != RootIno; {
			if p == src.ino {
				return ErrInvalid
			}
			if err := t.tx.QueryRowContext(ctx, `SELECT parent FROM dirents WHERE child = ? LIMIT 1`, p).Scan(&p); err != nil {
				return fmt.Errorf("rename: walk up: %w", err)
			}
		}
	}
	oldDir, err := t.dirPath(parent)
	if err != nil {
		return err
	}
	newDir, err := t.dirPath(newParent)
	if err != nil {
		return err
	}
	oldPath, newPath := joinPath(oldDir, name), joinPath(newDir, newName)
	var sub []subEntry
	if src.kind == KindDir {
		if sub, err = t.subtree(src.ino); err != nil {
			return err
		}
	}
	deepest := 0
	for _, e := range sub {
		deepest = max(deepest, len(e.rel))
	}
	if err := checkNewPath(len(newDir), newName, deepest); err != nil {
		return err
	}

	dst, err := lookupNode(ctx, t.tx, newParent, newName)
	switch {
	case errors.Is(err, ErrNotExist):
	case err != nil:
		return err
	case flags&RenameNoReplace != 0:
		return ErrExist
	case dst.ino == src.ino:
		// Two names of one file: rename(2) does nothing.
		return nil
	case src.kind == KindDir && dst.kind != KindDir:
		return ErrNotDir
	case src.kind != KindDir && dst.kind == KindDir:
		return ErrIsDir
	default:
		if dst.kind == KindDir {
			if empty, err := t.isEmpty(dst.ino); err != nil {
				return err
			} else if !empty {
				return ErrNotEmpty
			}
		}
		if err := t.removeAt(newParent, newName, newPath, dst); err != nil {
			return err
		}
	}

	if src.kind == KindDir {
		t.forgetDirPaths()
	}
	if _, err := t.exec(`UPDATE dirents SET parent = ?, name = ? WHERE parent = ? AND name = ?`, newParent, newName, parent, name); err != nil {
		return fmt.Errorf("rename: move entry: %w", err)
	}
	t.noteName(parent, name, false)
	t.noteName(newParent, newName, true)
	t.named = append(t.named, nameChange{parent, name, 0}, nameChange{newParent, newName, src.ino})
	if src.kind != KindDir {
		// The rows it changes: the moved node's and the replaced one's
		// (declared changed, not stated), the parents' times. A directory
		// moves its subtree's revs with it, and carries nothing.
		t.carries = true
		t.keepNode(src.ino, nil)
		if dst.ino != 0 {
			t.keepNode(dst.ino, nil)
		}
	}
	if err := t.dirChanged(parent); err != nil {
		return err
	}
	if newParent != parent {
		if err := t.dirChanged(newParent); err != nil {
			return err
		}
	}
	t.inval = append(t.inval, Invalidation{Ino: src.ino, Parent: parent, Name: name}, Invalidation{Ino: src.ino, Parent: newParent, Name: newName})
	if src.kind.Special() {
		// Neither name is synced state: the old path held no synced node,
		// and a synced node the move replaced was recorded by removeAt.
		_, err := t.exec(`UPDATE nodes SET ctime = ? WHERE ino = ?`, t.now, src.ino)
		return err
	}
	rev := t.stamp()
	if _, err := t.exec(`UPDATE nodes SET rev = ?, ctime = ? WHERE ino = ?`, rev, t.now, src.ino); err != nil {
		return err
	}
	for _, p := range []string{oldPath, newPath} {
		if err := t.touch(p); err != nil {
			return err
		}
	}
	for _, e := range sub {
		if e.kind.Special() {
			continue // moves along, never synced
		}
		if _, err := t.exec(`UPDATE nodes SET rev = ? WHERE ino = ?`, rev, e.child); err != nil {
			return err
		}
		if err := t.touch(joinPath(oldPath, e.rel)); err != nil {
			return err
		}
		if err := t.touch(joinPath(newPath, e.rel)); err != nil {
			return err
		}
	}
	return nil
}

// SetAttr changes mode, ownership, size and times. Mode, size and mtime are
// synced state and stamp a rev; ownership and atime are local to this side.
func (s *Store) SetAttr(ctx context.Context, ino Ino, sa SetAttr) (Attr, error) {
	if sa.Size != nil {
		if *sa.Size < 0 {
			return Attr{}, ErrInvalid
		}
		if err := s.truncate(ctx, ino, *sa.Size); err != nil {
			return Attr{}, err
		}
		sa.Size = nil
	}
	a, ok := s.behindSetAttr(ino, sa)
	if !ok {
		if err := s.mutate(ctx, setAttrFn(ino, sa, &a)); err != nil {
			return Attr{}, err
		}
	}
	if sa.Mtime != nil {
		s.setOpenMtime(ino, sa.Mtime.UnixNano())
	}
	return s.overlay(a), nil
}

// setAttrFn is the mutation that sets sa on ino, leaving the node's
// attributes in a.
func setAttrFn(ino Ino, sa SetAttr, a *Attr) func(*wtx) error {
	return func(t *wtx) error {
		var ok bool
		if *a, ok = t.keptAttr(ino); !ok {
			n, err := getAttrs(t.ctx, t.tx, ino)
			if err != nil {
				return err
			}
			*a = n.attr()
		}
		t.carries = true // the node's row, declared below
		synced := applySetAttr(a, sa, t.now)
		if synced {
			a.Rev = t.stamp() // in the row's update, not one more (touchNode's)
		}
		if r := t.pendingRow(ino); r != nil {
			// Its create's row waits in the group (pending.go): changed
			// in place, as the update would.
			r.mode, r.uid, r.gid, r.mtime, r.atime, r.ctime, r.rev = a.Mode, a.Uid, a.Gid, a.Mtime.UnixNano(), a.Atime.UnixNano(), t.now, a.Rev
		} else if _, err := t.exec(`UPDATE nodes SET mode = ?, uid = ?, gid = ?, mtime = ?, atime = ?, ctime = ?, rev = ? WHERE ino = ?`,
			a.Mode, a.Uid, a.Gid, a.Mtime.UnixNano(), a.Atime.UnixNano(), t.now, a.Rev, ino); err != nil {
			return err
		}
		// The rest of a kept row (a file's chunk list, its paths) stays
		// true: declared again, and the paths need no query.
		n, paths, rowKept := t.keptNode(ino)
		kept := *a
		t.keepNode(ino, &kept)
		if rowKept {
			t.keepRow(ino, n.manifest, paths)
		}
		switch {
		case !synced:
			return nil
		case rowKept:
			for _, p := range paths {
				if err := t.touch(p); err != nil {
					return err
				}
			}
			return nil
		}
		return t.touchNames(ino)
	}
}

// applySetAttr sets sa on a at time now (but its rev) and reports whether
// the change syncs (a new mode, a file's new mtime).
func applySetAttr(a *Attr, sa SetAttr, now int64) (synced bool) {
	if sa.Mode != nil && a.Kind != KindSymlink && *sa.Mode&0o7777 != a.Mode {
		a.Mode = *sa.Mode & 0o7777
		synced = true
	}
	if sa.Mtime != nil && sa.Mtime.UnixNano() != a.Mtime.UnixNano() {
		a.Mtime = time.Unix(0, sa.Mtime.UnixNano())
		synced = synced || a.Kind != KindDir // directory times are local
	}
	synced = synced && !a.Kind.Special()
	if sa.Uid != nil {
		a.Uid = *sa.Uid
	}
	if sa.Gid != nil {
		a.Gid = *sa.Gid
	}
	if sa.Atime != nil {
		a.Atime = time.Unix(0, sa.Atime.UnixNano())
	}
	a.Ctime = time.Unix(0, now)
	return synced
}

// truncate sets a file's size: through its open state when open, so
// buffered writes and the truncate commit together.
func (s *Store) truncate(ctx context.Context, ino Ino, size int64) error {
	h, err := s.OpenHandle(ctx, ino)
	if err != nil {
		return err
	}
	if err := h.Truncate(ctx, size); err != nil {
		h.Release(ctx)
		return err
	}
	return h.Release(ctx)
}

// StatFS are filesystem figures for statfs(2).
type StatFS struct {
	Blocks, BlocksFree, BlocksAvail uint64 // in units of BlockSize
	Files, FilesFree                uint64
	BlockSize                       uint32
	NameLen                         uint32
}
