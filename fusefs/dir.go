package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/vfs"
)

// readdirPage is how many entries one vfs.ReadDir call fetches.
const readdirPage = 256

// dirHandle streams a directory in name order, a page of the store at a
// time, so listing a huge directory holds one page. The offset of an entry
// is a cookie of the handle's: the count of entries returned up to it ("."
// is 1, ".." is 2). A seek to an offset the handle gave resumes after the
// name it gave there (names), so entries other processes removed or added
// meanwhile shift nothing (telldir/seekdir, as on a local file system);
// past maxSeekNames offsets, or to one it never gave, it counts entries from
// the start again, exact while the directory is unchanged.
type dirHandle struct {
	srv *Server
	n   *Node

	pos       uint64 // entries returned so far
	page      []vfs.DirEntryAttr
	gen       uint64 // when page was read (vfs.Store.AttrAsOf)
	pageStart uint64 // position of page[0]
	after     string // last name fetched
	eof       bool
	names     map[uint64]string // offset given -> the name returned with it
	top       uint64            // the largest offset given
}

// maxSeekNames bounds the offsets a handle remembers names for.
const maxSeekNames = 1 << 16

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
	_ fs.FileLookuper     = (*dirHandle)(nil)
)

func (n *Node) OpendirHandle(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.srv.metrics.track(opOpendir, time.Now(), &errno)
	// The kernel sends OPENDIR only for directories; one removed meanwhile
	// fails at the first READDIR (the store checks an empty page's inode).
	return &dirHandle{srv: n.srv, n: n}, 0, 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (_ *fuse.DirEntry, errno syscall.Errno) {
	defer d.srv.metrics.track(opReaddir, time.Now(), &errno)
	de, errno := d.next(context.WithoutCancel(ctx))
	if de != nil {
		de.Off = d.pos
		d.top = max(d.top, d.pos)
		if d.pos > 2 && len(d.names) < maxSeekNames {
			if d.names == nil {
				d.names = make(map[uint64]string)
			}
			d.names[d.pos] = de.Name
		}
	}
	return de, errno
}

func (d *dirHandle) next(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	switch d.pos {
	case 0:
		d.pos++
		return &fuse.DirEntry{Name: ".", Ino: uint64(d.n.ino), Mode: syscall.S_IFDIR}, 0
	case 1:
		d.pos++
		parent := d.n.ino
		if _, p := d.n.Parent(); p != nil {
			parent = vfs.Ino(p.StableAttr().Ino)
		}
		return &fuse.DirEntry{Name: "..", Ino: uint64(parent), Mode: syscall.S_IFDIR}, 0
	}
	i := d.pos - d.pageStart
	if d.page == nil || i >= uint64(len(d.page)) {
		if d.eof {
			return nil, 0
		}
		page, gen, err := d.srv.store.ReadDirAttrs(ctx, d.n.ino, d.after, readdirPage)
		if err != nil {
			return nil, toErrno(err)
		}
		d.gen = gen
		d.eof = len(page) < readdirPage
		if len(page) == 0 {
			d.eof = true
			return nil, 0
		}
		d.page, d.pageStart, d.after = page, d.pos, page[len(page)-1].Name
		i = 0
	}
	e := d.page[i]
	d.pos++
	return &fuse.DirEntry{Name: e.Name, Ino: uint64(e.Attr.Ino), Mode: kindMode(e.Attr.Kind)}, 0
}

// Lookup answers READDIRPLUS's lookup of the entry Readdirent just
// returned with the attributes its page was read with, when nothing was
// written to the store since (vfs.Store.AttrAsOf): a listing costs one
// query a page, not one more per entry. Any other name, or a store
// written meanwhile, is the node's own Lookup.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if i := d.pos - 1 - d.pageStart; d.page != nil && d.pos > d.pageStart && i < uint64(len(d.page)) && d.page[i].Name == name {
		if a, ok := d.srv.store.AttrAsOf(d.page[i].Attr, d.gen); ok {
			return d.n.child(ctx, a, out), 0
		}
	}
	return d.n.Lookup(ctx, name, out)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == d.pos {
		return 0
	}
	if d.page != nil && off >= d.pageStart && off <= d.pageStart+uint64(len(d.page)) && off >= 2 {
		d.pos = off
		return 0
	}
	if name, ok := d.names[off]; ok {
		// Resume after the name given at off, wherever it is now, with
		// offsets past every one given: each stays the cookie of its name.
		d.pos, d.page, d.pageStart, d.after, d.eof = d.top, nil, d.top, name, false
		return 0
	}
	d.pos, d.page, d.pageStart, d.after, d.eof = 0, nil, 0, "", false
	for d.pos < off {
		de, errno := d.next(context.WithoutCancel(ctx))
		if errno != 0 {
			return errno
		}
		if de == nil {
			break
		}
	}
	return 0
}

// Fsyncdir commits the store's group of local mutations, as fsync of a
// file does (Node.Fsync): the rename an atomic replace fsyncs its
// directory for may still be in the open group, which a crash loses.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, nil, flags)
}
