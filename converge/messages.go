package converge

import (
	"strings"

	"github.com/wsync/wsync/syncwire"
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
	e := rpc.NewEncoder(b)
	e.PutFixed(ri.Root[:])
	e.PutUvarint(uint64(ri.Rev))
	e.PutUvarint(uint64(ri.Names))
	return e.Bytes()
}

func decodeRootInfo(p []byte) (rootInfo, error) {
	d := newDecoder(p)
	ri := rootInfo{Root: d.Fixed32(), Rev: int64(d.Bounded("rev", 1<<62)), Names: int(d.Bounded("names", 1<<40))}
	return ri, d.Done()
}

// nodeRequest asks for a page of one directory's children.
type nodeRequest struct {
	Path   string // store form, "" the root
	After  string // children after this name ("" from the start)
	Limit  int    // 1..MaxChildren
	Ignore []string
}

func appendNodeRequest(b []byte, q nodeRequest) []byte {
	e := rpc.NewEncoder(b)
	e.PutString(q.Path)
	e.PutString(q.After)
	e.PutUvarint(uint64(q.Limit))
	syncwire.AppendIgnore(&e, q.Ignore)
	return e.Bytes()
}

func decodeNodeRequest(p []byte) (nodeRequest, error) {
	d := newDecoder(p)
	var q nodeRequest
	q.Path = readPath(&d, true)
	q.After = readName(&d, true)
	q.Limit = int(d.Uvarint())
	q.Ignore = syncwire.DecodeIgnore(&d)
	if err := d.Done(); err != nil {
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
	e := rpc.NewEncoder(b)
	var flags byte
	if pg.More {
		flags = 1
	}
	e.PutByte(flags)
	e.PutUvarint(uint64(len(pg.Children)))
	for _, c := range pg.Children {
		e.PutString(c.Name)
		e.PutByte(byte(c.Kind))
		e.PutUvarint(uint64(c.Mode))
		e.PutFixed(c.Hash[:])
	}
	return e.Bytes()
}

// decodeNodePage decodes and checks a page for a request with the given
// after and limit: at most limit children, valid names in strictly
// ascending order after `after`, known kinds, permission-bit modes.
func decodeNodePage(p []byte, after string, limit int) (nodePage, error) {
	var pg nodePage
	if len(p) > MaxPageBytes {
		return pg, malformed("node page of %d bytes exceeds %d", len(p), MaxPageBytes)
	}
	d := newDecoder(p)
	flags := d.Byte()
	if flags&^1 != 0 {
		d.Fail("bad page flags %#x", flags)
	}
	pg.More = flags&1 != 0
	n := d.Count("children", MaxChildren, minChildSize)
	if d.Err() == nil && n > limit {
		d.Fail("%d children for a page of %d", n, limit)
	}
	if err := d.Err(); err != nil {
		return pg, err
	}
	pg.Children = make([]Child, 0, n)
	prev := after
	for i := range n {
		var c Child
		c.Name = readName(&d, false)
		c.Kind = vfs.Kind(d.Byte())
		c.Mode = uint32(d.Bounded("mode", 0o7777))
		c.Hash = d.Fixed32()
		if err := d.Err(); err != nil {
			return pg, err
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
	if err := d.Done(); err != nil {
		return pg, err
	}
	if pg.More && n == 0 {
		return pg, malformed("empty page with more to come")
	}
	return pg, nil
}

func appendPaths(b []byte, paths []string) []byte {
	e := rpc.NewEncoder(b)
	e.PutUvarint(uint64(len(paths)))
	for _, p := range paths {
		e.PutString(p)
	}
	return e.Bytes()
}

func decodePaths(p []byte) ([]string, error) {
	d := newDecoder(p)
	n := d.Count("paths", MaxPaths, 2)
	out := make([]string, 0, n)
	for range n {
		out = append(out, readPath(&d, false))
	}
	return out, d.Done()
}

func appendRevs(b []byte, revs []int64) []byte {
	e := rpc.NewEncoder(b)
	e.PutUvarint(uint64(len(revs)))
	for _, v := range revs {
		e.PutUvarint(uint64(v))
	}
	return e.Bytes()
}

func decodeRevs(p []byte, n int) ([]int64, error) {
	d := newDecoder(p)
	if got := d.Count("revs", MaxPaths, 1); d.Err() == nil && got != n {
		return nil, malformed("%d revs for %d paths", got, n)
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(d.Bounded("rev", 1<<62))
	}
	return out, d.Done()
}
