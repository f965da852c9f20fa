package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/wsync/wsync/chunkstore"
)

// Ino is an inode number. Inode numbers are never reused within a store.
type Ino uint64

// RootIno is the root directory's fixed inode.
const RootIno Ino = 1

// Kind is a node's type.
type Kind uint8

const (
	KindFile Kind = iota + 1
	KindDir
	KindSymlink
	// The special kinds are local to the store that holds them: no rev, no
	// change row, no feed entry, no Merkle hash (see "Special files" in the
	// package doc).
	KindFifo
	KindSocket
	KindCharDev
	KindBlockDev
)

func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	case KindFifo:
		return "fifo"
	case KindSocket:
		return "socket"
	case KindCharDev:
		return "chardev"
	case KindBlockDev:
		return "blockdev"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Special reports whether k is a FIFO, a socket or a device node: a kind
// that never syncs.
func (k Kind) Special() bool { return k >= KindFifo && k <= KindBlockDev }

// syncedKinds is the SQL list of the kinds that sync, for the scans that
// must not see special files.
const syncedKinds = `(1, 2, 3)` // KindFile, KindDir, KindSymlink

// Attr is a node's attributes.
type Attr struct {
	Ino   Ino
	Kind  Kind
	Mode  uint32 // permission bits, mode & 07777
	Uid   uint32
	Gid   uint32
	Nlink uint32
	Size  int64
	Rdev  uint32 // device number of a device node (the kernel's encoding)
	Mtime time.Time
	Ctime time.Time
	Atime time.Time
	Rev   int64 // the rev of the last synced mutation that touched the node
}

// DirEntry is one name in a directory.
type DirEntry struct {
	Name string
	Ino  Ino
	Kind Kind
	Mode uint32
}

// NewAttr is the permission bits and owner a new node gets.
type NewAttr struct {
	Mode uint32 // permission bits
	Uid  uint32
	Gid  uint32
}

// node is a nodes row.
type node struct {
	ino                 Ino
	kind                Kind
	mode, uid, gid      uint32
	nlink               uint32
	size                int64
	mtime, ctime, atime int64
	manifest            []byte // encoded chunkstore.Manifest, files only
	target              string // symlinks only
	rdev                uint32 // device nodes only
	rev                 int64
}

const nodeCols = `n.ino, n.kind, n.mode, n.uid, n.gid, n.nlink, n.size, n.mtime, n.ctime, n.atime, n.manifest, n.target, n.rdev, n.rev`

// attrCols is nodeCols without the manifest (read as NULL): what a node's
// attributes need, without reading a large file's chunk list.
const attrCols = `n.ino, n.kind, n.mode, n.uid, n.gid, n.nlink, n.size, n.mtime, n.ctime, n.atime, NULL, n.target, n.rdev, n.rev`

// pageCols is attrCols with the manifest of a node whose encoded manifest
// is at most maxKeptManifest bytes (NULL for a larger one): what a listing
// page reads for the write-behind's memo (behind.go).
var pageCols = `n.ino, n.kind, n.mode, n.uid, n.gid, n.nlink, n.size, n.mtime, n.ctime, n.atime, CASE WHEN length(n.manifest) <= ` +
	strconv.Itoa(maxKeptManifest) + ` THEN n.manifest END, n.target, n.rdev, n.rev`

func scanNode(sc interface{ Scan(...any) error }) (node, error) {
	var n node
	var target sql.NullString
	err := sc.Scan(&n.ino, &n.kind, &n.mode, &n.uid, &n.gid, &n.nlink, &n.size, &n.mtime, &n.ctime, &n.atime, &n.manifest, &target, &n.rdev, &n.rev)
	n.target = target.String
	return n, err
}

// scanRows reads a query's whole answer, a T a row through scan, and
// closes rows: for a caller that runs more statements before using it.
func scanRows[T any](rows *sql.Rows, scan func(r *sql.Rows, x *T) error) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var x T
		if err := scan(rows, &x); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}

// nodeOf is the row that has attributes a and the encoded manifest: the
// inverse of attr, for rows kept in memory (kept.go, behind.go).
func nodeOf(a Attr, manifest []byte) node {
	return node{ino: a.Ino, kind: a.Kind, mode: a.Mode, uid: a.Uid, gid: a.Gid, nlink: a.Nlink, size: a.Size,
		mtime: a.Mtime.UnixNano(), ctime: a.Ctime.UnixNano(), atime: a.Atime.UnixNano(), manifest: manifest,
		rdev: a.Rdev, rev: a.Rev}
}

func (n *node) attr() Attr {
	return Attr{
		Ino: n.ino, Kind: n.kind, Mode: n.mode, Uid: n.uid, Gid: n.gid, Nlink: n.nlink, Size: n.size, Rdev: n.rdev,
		Mtime: time.Unix(0, n.mtime), Ctime: time.Unix(0, n.ctime), Atime: time.Unix(0, n.atime), Rev: n.rev,
	}
}

func (n *node) decodeManifest() (chunkstore.Manifest, error) {
	if len(n.manifest) == 0 {
		return nil, nil
	}
	m, _, err := chunkstore.DecodeManifest(n.manifest)
	if err != nil {
		return nil, fmt.Errorf("inode %d: %w", n.ino, err)
	}
	return m, nil
}

func getNode(ctx context.Context, q chunkstore.Querier, ino Ino) (node, error) {
	return scanOne(q.QueryRowContext(ctx, `SELECT `+nodeCols+` FROM nodes n WHERE n.ino = ?`, ino))
}

// getAttrs is getNode without the manifest: a stat of a large file does
// not read its chunk list.
func getAttrs(ctx context.Context, q chunkstore.Querier, ino Ino) (node, error) {
	return scanOne(q.QueryRowContext(ctx, `SELECT `+attrCols+` FROM nodes n WHERE n.ino = ?`, ino))
}

// scanOne scans the one node a query selects: none is ErrNotExist.
func scanOne(row *sql.Row) (node, error) {
	n, err := scanNode(row)
	if errors.Is(err, sql.ErrNoRows) {
		return n, ErrNotExist
	}
	return n, err
}

// lookupChild resolves one name in a directory known to exist.
func lookupChild(ctx context.Context, q chunkstore.Querier, parent Ino, name string) (node, error) {
	return scanOne(q.QueryRowContext(ctx, `SELECT `+nodeCols+` FROM dirents d JOIN nodes n ON n.ino = d.child
		WHERE d.parent = ? AND d.name = ?`, parent, name))
}

// lookupChildAttrs is lookupChild without the manifest (getAttrs).
func lookupChildAttrs(ctx context.Context, q chunkstore.Querier, parent Ino, name string) (node, error) {
	return scanOne(q.QueryRowContext(ctx, `SELECT `+attrCols+` FROM dirents d JOIN nodes n ON n.ino = d.child
		WHERE d.parent = ? AND d.name = ?`, parent, name))
}

// lookupLink is lookupNode reading only what removing a name needs: the
// node's ino, kind and link count (each column scanned costs; a node row
// has 14).
func lookupLink(ctx context.Context, q chunkstore.Querier, parent Ino, name string) (node, error) {
	var n node
	err := q.QueryRowContext(ctx, `SELECT n.ino, n.kind, n.nlink FROM dirents d JOIN nodes n ON n.ino = d.child
		WHERE d.parent = ? AND d.name = ?`, parent, name).Scan(&n.ino, &n.kind, &n.nlink)
	if errors.Is(err, sql.ErrNoRows) {
		return n, absentIn(ctx, q, parent)
	}
	return n, err
}

// absentIn is the error of a name missing from parent: ErrNotExist in a
// directory, ErrNotDir in anything else.
func absentIn(ctx context.Context, q chunkstore.Querier, parent Ino) error {
	p, err := getAttrs(ctx, q, parent)
	switch {
	case err != nil:
		return err
	case p.kind != KindDir:
		return ErrNotDir
	}
	return ErrNotExist
}

// lookupNode resolves one name in a directory. A missing name in a parent
// that is not a directory is ErrNotDir.
func lookupNode(ctx context.Context, q chunkstore.Querier, parent Ino, name string) (node, error) {
	n, err := lookupChild(ctx, q, parent, name)
	if errors.Is(err, ErrNotExist) {
		err = absentIn(ctx, q, parent)
	}
	return n, err
}

// resolve walks a store-form path from the root without following symlinks.
// An intermediate segment that is not a directory is ErrNotDir.
func resolve(ctx context.Context, q chunkstore.Querier, path string) (node, error) {
	if path == "" {
		return getNode(ctx, q, RootIno)
	}
	cur := RootIno
	var n node
	var err error
	for rest := path; ; {
		var name string
		var more bool
		name, rest, more = strings.Cut(rest, "/")
		n, err = lookupNode(ctx, q, cur, name)
		if err != nil {
			return n, err
		}
		if !more {
			return n, nil
		}
		if n.kind != KindDir {
			return n, ErrNotDir
		}
		cur = n.ino
	}
}

// walkDirs walks the directories of a store-form path from the root, in
// a write transaction. A segment that is a directory is stepped into; for
// any other (found: it exists but is not a directory) other decides: it
// returns the directory to go on in, or 0 to end the walk, which then
// returns 0. This is apply's ensureDir and mkdir -p.
func (t *wtx) walkDirs(path string, other func(dir Ino, name, walked string, n node, found bool) (Ino, error)) (Ino, error) {
	return t.walkDirsFrom(RootIno, "", path, other, nil)
}

// walkDirsFrom is walkDirs from the directory cur at walked, rest being the
// path below it; seen, if set, learns each directory reached.
func (t *wtx) walkDirsFrom(cur Ino, walked, rest string, other func(dir Ino, name, walked string, n node, found bool) (Ino, error),
	seen func(walked string, ino Ino)) (Ino, error) {
	for rest != "" {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		walked = joinPath(walked, name)
		n, err := lookupChild(t.ctx, t.tx, cur, name)
		switch {
		case err == nil && n.kind == KindDir:
			cur = n.ino
		case err != nil && !errors.Is(err, ErrNotExist):
			return 0, err
		default:
			if cur, err = other(cur, name, walked, n, err == nil); err != nil || cur == 0 {
				return 0, err
			}
		}
		if seen != nil {
			seen(walked, cur)
		}
	}
	return cur, nil
}

// dirPath returns the store-form path of a directory ("" for the root).
// Paths come from the store's cache of directory paths (guarded by the
// writer lock, since only write transactions use it); what this
// transaction learns joins the cache when it commits, so a rolled-back
// transaction (whose inode numbers may be handed out again) leaves no trace.
func (t *wtx) dirPath(ino Ino) (string, error) { return t.dirPathAt(ino, 0) }

func (t *wtx) dirPathAt(ino Ino, depth int) (string, error) {
	if ino == RootIno {
		return "", nil
	}
	if p, ok := t.s.dirCache[ino]; ok {
		return p, nil
	}
	if p, ok := t.dirAdds[ino]; ok {
		return p, nil
	}
	if t.grp != nil && !t.forgot {
		if p, ok := t.grp.dirAdds[ino]; ok {
			return p, nil
		}
	}
	if depth > MaxPathLen/2 {
		return "", fmt.Errorf("inode %d: %w: directory cycle", ino, ErrLoop)
	}
	var parent Ino
	var name string
	err := t.tx.QueryRowContext(t.ctx, `SELECT parent, name FROM dirents WHERE child = ? LIMIT 1`, ino).Scan(&parent, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotExist
	}
	if err != nil {
		return "", err
	}
	pp, err := t.dirPathAt(parent, depth+1)
	if err != nil {
		return "", err
	}
	p := joinPath(pp, name)
	if t.dirAdds == nil {
		t.dirAdds = make(map[Ino]string)
	}
	t.dirAdds[ino] = p
	return p, nil
}

// forgetDirPaths drops every cached directory path: a directory moved.
func (t *wtx) forgetDirPaths() {
	clear(t.s.dirCache)
	t.dirAdds = nil
	t.forgot = true
}

// nodePaths returns every path of a node: one per hardlink name.
func (t *wtx) nodePaths(ino Ino) ([]string, error) {
	if ino == RootIno {
		return nil, nil
	}
	rows, err := t.tx.QueryContext(t.ctx, `SELECT parent, name FROM dirents WHERE child = ?`, ino)
	if err != nil {
		return nil, err
	}
	type pn struct {
		parent Ino
		name   string
	}
	names, err := scanRows(rows, func(r *sql.Rows, x *pn) error { return r.Scan(&x.parent, &x.name) })
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(names))
	for _, x := range names {
		dp, err := t.dirPath(x.parent)
		if err != nil {
			return nil, err
		}
		paths = append(paths, joinPath(dp, x.name))
	}
	return paths, nil
}
