package converge

import (
	"strings"

	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// The convergence methods, in the range syncwire reserves for them
// (512..767). The container serves them; the server calls them.
const (
	MethodRoot          rpc.Method = 512 // ignore -> root hash, rev, names
	MethodNode          rpc.Method = 513 // path, after, limit, ignore -> a page of children
	MethodRevs          rpc.Method = 514 // paths -> change revs
	MethodEntries       rpc.Method = 515 // paths -> entry stream
	MethodSnapBegin     rpc.Method = 520 // root, rev, total -> staged count (resume point)
	MethodSnapHave      rpc.Method = 521 // hashes -> bitmap of what the receiver holds
	MethodSnapObjects   rpc.Method = 522 // stream of compressed object messages -> count
	MethodSnapPage      rpc.Method = 523 // one compressed page of records -> staged, total
	MethodSnapCommit    rpc.Method = 524 // root -> install revs
	firstConvergeMethod            = MethodRoot
)

// Bounds.
const (
	// MaxChildren bounds the children of one Node page.
	MaxChildren = 1024
	// MaxPageBytes bounds the encoding of one Node page.
	MaxPageBytes = 512 << 10
	// MaxWalkDepth bounds how deep a walk descends, and the depth of a path
	// a responder answers for.
	MaxWalkDepth = 256
	// MaxDirChildren bounds the children a walk accepts for one directory
	// across its pages.
	MaxDirChildren = 1 << 20
	// MaxPaths bounds the paths of one Revs or Entries request.
	MaxPaths = 1024
)

// minChildSize is the smallest encoded child: name length, one name byte,
// kind, mode, hash.
const minChildSize = 1 + 1 + 1 + 1 + 32

// rootInfo answers MethodRoot.
type rootInfo struct {
	Root  Hash
	Rev   int64
	Names int
}

func appendRootInfo(b []byte, ri rootInfo) []byte {
	w := writer{b: b}
	w.hash(ri.Root)
	w.uvarint(uint64(ri.Rev))
	w.uvarint(uint64(ri.Names))
	return w.b
}

func decodeRootInfo(p []byte) (rootInfo, error) {
	r := reader{b: p}
	ri := rootInfo{Root: r.hash(), Rev: int64(r.bounded("rev", 1<<62)), Names: int(r.bounded("names", 1<<40))}
	return ri, r.done()
}

// nodeRequest asks for a page of one directory's children.
type nodeRequest struct {
	Path   string // store form, "" the root
	After  string // children after this name ("" from the start)
	Limit  int    // 1..MaxChildren
	Ignore []string
}

func appendNodeRequest(b []byte, q nodeRequest) []byte {
	w := writer{b: b}
	w.str(q.Path)
	w.str(q.After)
	w.uvarint(uint64(q.Limit))
	w.ignore(q.Ignore)
	return w.b
}

func decodeNodeRequest(p []byte) (nodeRequest, error) {
	r := reader{b: p}
	var q nodeRequest
	q.Path = r.path(true)
	q.After = r.name(true)
	q.Limit = int(r.uvarint())
	q.Ignore = r.ignore()
	if err := r.done(); err != nil {
		return q, err
	}
	if q.Limit < 1 || q.Limit > MaxChildren {
		return q, badRequest("page limit %d outside 1..%d", q.Limit, MaxChildren)
	}
	if depth(q.Path) > MaxWalkDepth {
		return q, badRequest("path of depth %d exceeds %d", depth(q.Path), MaxWalkDepth)
	}
	return q, nil
}

func depth(p string) int {
	if p == "" {
		return 0
	}
	return strings.Count(p, "/") + 1
}

// nodePage is one page of a directory's children.
type nodePage struct {
	Children []Child
	More     bool
}

func appendNodePage(b []byte, pg nodePage) []byte {
	w := writer{b: b}
	var flags byte
	if pg.More {
		flags = 1
	}
	w.byte(flags)
	w.uvarint(uint64(len(pg.Children)))
	for _, c := range pg.Children {
		w.str(c.Name)
		w.byte(byte(c.Kind))
		w.uvarint(uint64(c.Mode))
		w.hash(c.Hash)
	}
	return w.b
}

// decodeNodePage decodes and checks a page for a request with the given
// after and limit: at most limit children, valid names in strictly
// ascending order after `after`, known kinds, permission-bit modes.
func decodeNodePage(p []byte, after string, limit int) (nodePage, error) {
	var pg nodePage
	if len(p) > MaxPageBytes {
		return pg, malformed("node page of %d bytes exceeds %d", len(p), MaxPageBytes)
	}
	r := reader{b: p}
	flags := r.byte()
	if flags&^1 != 0 {
		r.fail("bad page flags %#x", flags)
	}
	pg.More = flags&1 != 0
	n := r.count("children", MaxChildren, minChildSize)
	if r.err == nil && n > limit {
		r.fail("%d children for a page of %d", n, limit)
	}
	if r.err != nil {
		return pg, r.err
	}
	pg.Children = make([]Child, 0, n)
	prev := after
	for i := range n {
		var c Child
		c.Name = r.name(false)
		c.Kind = vfs.Kind(r.byte())
		c.Mode = uint32(r.bounded("mode", 0o7777))
		c.Hash = r.hash()
		if r.err != nil {
			return pg, r.err
		}
		if c.Kind != vfs.KindFile && c.Kind != vfs.KindDir && c.Kind != vfs.KindSymlink {
			return pg, malformed("child %d: kind %d", i, c.Kind)
		}
		if (i > 0 || after != "") && c.Name <= prev {
			return pg, malformed("child %q out of order after %q", c.Name, prev)
		}
		prev = c.Name
		pg.Children = append(pg.Children, c)
	}
	if err := r.done(); err != nil {
		return pg, err
	}
	if pg.More && n == 0 {
		return pg, malformed("empty page with more to come")
	}
	return pg, nil
}

func appendPaths(b []byte, paths []string) []byte {
	w := writer{b: b}
	w.uvarint(uint64(len(paths)))
	for _, p := range paths {
		w.str(p)
	}
	return w.b
}

func decodePaths(p []byte) ([]string, error) {
	r := reader{b: p}
	n := r.count("paths", MaxPaths, 2)
	out := make([]string, 0, n)
	for range n {
		out = append(out, r.path(false))
	}
	return out, r.done()
}

func appendRevs(b []byte, revs []int64) []byte {
	w := writer{b: b}
	w.uvarint(uint64(len(revs)))
	for _, v := range revs {
		w.uvarint(uint64(v))
	}
	return w.b
}

func decodeRevs(p []byte, n int) ([]int64, error) {
	r := reader{b: p}
	if got := r.count("revs", MaxPaths, 1); r.err == nil && got != n {
		return nil, malformed("%d revs for %d paths", got, n)
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(r.bounded("rev", 1<<62))
	}
	return out, r.done()
}
