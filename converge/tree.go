package converge

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
)

// Hash is a Merkle hash: sha256.
type Hash [32]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Child is one name in a directory as the Merkle tree sees it: what both
// sides must agree on. Hash is the content hash: sha256 of the encoded
// manifest for a file, sha256 of the target for a symlink, the directory's
// Merkle hash for a directory.
type Child struct {
	Name string
	Kind vfs.Kind
	Mode uint32
	Hash Hash
}

// node is one name of the tree with what a snapshot or repair needs to
// rebuild it.
type node struct {
	Child
	mtime    int64
	manifest []byte // files: encoded manifest
	target   string
	dir      *dir // directories
}

type dir struct {
	children []node // sorted by name
}

// Tree is the Merkle tree of one store's live state for one ignore list,
// as of one rev: every directory's hash folds its sorted children (name,
// kind, mode & 07777, content hash); ignored names are left out at every
// level, with their subtrees.
type Tree struct {
	Rev  int64
	Root Hash
	root *dir
	n    int // names in the tree
}

// Len is the number of names (files, directories, symlinks) in the tree.
func (t *Tree) Len() int { return t.n }

// BuildTree scans the store once and hashes it bottom-up. The tree keeps
// what a snapshot or repair needs to rebuild each entry (see buildTree for
// one that keeps only the hashes).
func BuildTree(ctx context.Context, s *vfs.Store, ignore vfs.Ignore) (*Tree, error) {
	return buildTree(ctx, s, ignore, true)
}

// buildTree builds a tree; without full it keeps only names, kinds, modes
// and hashes: what a responder caches and a plain verify needs (17 MiB
// against 22 MiB for 100,000 files).
func buildTree(ctx context.Context, s *vfs.Store, ignore vfs.Ignore, full bool) (*Tree, error) {
	kids := make(map[vfs.Ino][]node)
	rev, err := s.ScanTree(ctx, func(r *vfs.TreeRow) error {
		n := node{Child: Child{Name: r.Name, Kind: r.Kind, Mode: r.Mode & 0o7777}, mtime: r.Mtime}
		switch r.Kind {
		case vfs.KindFile:
			if len(r.Manifest) == 0 {
				n.Hash = emptyManifestHash
			} else {
				n.Hash = sha256.Sum256(r.Manifest)
			}
			if full {
				n.manifest = normManifest(r.Manifest)
			}
		case vfs.KindSymlink:
			if full {
				n.target = r.Target
			}
			n.Hash = sha256.Sum256([]byte(r.Target))
		case vfs.KindDir:
			// Hashed below, once its children are known; the inode rides in
			// the hash field until then.
			binary.LittleEndian.PutUint64(n.Hash[:], uint64(r.Ino))
		default:
			return fmt.Errorf("build tree: inode %d: %w: kind %d", r.Ino, vfs.ErrInvalid, r.Kind)
		}
		kids[r.Parent] = append(kids[r.Parent], n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	t := &Tree{Rev: rev}
	// Ignored names are dropped top down, where their paths are known (the
	// scan is in inode order): a dropped directory is never entered, so
	// what is below it is out whatever the patterns say of it.
	var build func(ino vfs.Ino, path string, depth int) (*dir, error)
	build = func(ino vfs.Ino, path string, depth int) (*dir, error) {
		if depth > vfs.MaxPathLen/2 {
			return nil, fmt.Errorf("build tree: %w: directory cycle at inode %d", vfs.ErrLoop, ino)
		}
		d := &dir{children: kids[ino]}
		delete(kids, ino)
		if !ignore.Empty() {
			d.children = slices.DeleteFunc(d.children, func(c node) bool {
				return ignore.Excludes(joinPath(path, c.Name), c.Kind == vfs.KindDir)
			})
		}
		// The scan is in (parent, name) order already; SQLite's BINARY
		// collation is bytewise, as Go's string order.
		for i := range d.children {
			c := &d.children[i]
			if c.Kind != vfs.KindDir {
				continue
			}
			sub, err := build(vfs.Ino(binary.LittleEndian.Uint64(c.Hash[:])), joinPath(path, c.Name), depth+1)
			if err != nil {
				return nil, err
			}
			c.dir = sub
			c.Hash = dirHash(sub.children)
		}
		t.n += len(d.children)
		return d, nil
	}
	if t.root, err = build(vfs.RootIno, "", 0); err != nil {
		return nil, err
	}
	t.Root = dirHash(t.root.children)
	return t, nil
}

// emptyManifest is the encoding of a file with no chunks.
var (
	emptyManifest     = chunkstore.AppendManifest(nil, nil)
	emptyManifestHash = sha256.Sum256(emptyManifest)
)

// normManifest copies a stored manifest, mapping a NULL one (an empty
// file) to the canonical empty encoding.
func normManifest(b []byte) []byte {
	if len(b) == 0 {
		return emptyManifest
	}
	return slices.Clone(b)
}

// hashPrefix versions the directory hash.
const hashPrefix = "wsync-merkle-v1\x00"

// dirHash folds a directory's sorted children:
//
//	sha256(prefix || for each child: uvarint(len(name)) name kind uvarint(mode) hash)
func dirHash(children []node) Hash {
	return foldChildren(len(children), func(i int) *Child { return &children[i].Child })
}

// ChildrenHash is the directory hash of a sorted list of children.
func ChildrenHash(children []Child) Hash {
	return foldChildren(len(children), func(i int) *Child { return &children[i] })
}

func foldChildren(n int, at func(int) *Child) Hash {
	h := sha256.New()
	h.Write([]byte(hashPrefix))
	var buf [2*binary.MaxVarintLen64 + 1 + 32]byte
	for i := range n {
		c := at(i)
		b := binary.AppendUvarint(buf[:0], uint64(len(c.Name)))
		h.Write(b)
		h.Write([]byte(c.Name))
		b = append(buf[:0], byte(c.Kind))
		b = binary.AppendUvarint(b, uint64(c.Mode))
		b = append(b, c.Hash[:]...)
		h.Write(b)
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

// lookup returns the directory at path (store form, "" the root), or nil
// when path is not a directory of the tree.
func (t *Tree) lookup(path string) *dir {
	d := t.root
	if path == "" {
		return d
	}
	for seg := range strings.SplitSeq(path, "/") {
		c := d.find(seg)
		if c == nil || c.dir == nil {
			return nil
		}
		d = c.dir
	}
	return d
}

// find returns the child named name, or nil.
func (d *dir) find(name string) *node {
	i, ok := slices.BinarySearchFunc(d.children, name, func(n node, name string) int { return strings.Compare(n.Name, name) })
	if !ok {
		return nil
	}
	return &d.children[i]
}

// page returns up to limit children after the name `after`.
func (d *dir) page(after string, limit int) (out []Child, more bool) {
	i, _ := slices.BinarySearchFunc(d.children, after, func(n node, name string) int { return strings.Compare(n.Name, name) })
	if i < len(d.children) && d.children[i].Name == after {
		i++
	}
	for ; i < len(d.children) && len(out) < limit; i++ {
		out = append(out, d.children[i].Child)
	}
	return out, i < len(d.children)
}

// entry rebuilds the change entry of n at path, as the feed would give it.
func (n *node) entry(path string, rev int64) (vfs.ChangeEntry, error) {
	e := vfs.ChangeEntry{Rev: rev, Path: path, Mode: n.Mode, Mtime: n.mtime}
	switch n.Kind {
	case vfs.KindFile:
		m, _, err := chunkstore.DecodeManifest(n.manifest)
		if err != nil {
			return e, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			m = nil
		}
		e.Kind, e.Chunks, e.Size = vfs.EntryFile, m, m.Size()
	case vfs.KindSymlink:
		e.Kind, e.Target = vfs.EntrySymlink, n.target
	case vfs.KindDir:
		e.Kind = vfs.EntryDir
	}
	return e, nil
}

// walk calls fn for n's path and, for a directory, every path below it in
// pre-order (parents first, names sorted).
func (n *node) walk(path string, fn func(path string, n *node) error) error {
	if err := fn(path, n); err != nil {
		return err
	}
	if n.dir == nil {
		return nil
	}
	for i := range n.dir.children {
		c := &n.dir.children[i]
		if err := c.walk(path+"/"+c.Name, fn); err != nil {
			return err
		}
	}
	return nil
}

// walk calls fn for every name of the tree in pre-order.
func (t *Tree) walk(fn func(path string, n *node) error) error {
	for i := range t.root.children {
		c := &t.root.children[i]
		if err := c.walk(c.Name, fn); err != nil {
			return err
		}
	}
	return nil
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func sha256Sum(b []byte) Hash { return sha256.Sum256(b) }
