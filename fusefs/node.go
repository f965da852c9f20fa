package fusefs

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/vfs"
)

// Node is one vfs inode in go-fuse's tree. All node kinds share the type:
// the store decides what an operation means for a kind, and the kernel
// never sends a file operation to a directory or the reverse.
type Node struct {
	fs.Inode
	srv *Server
	ino vfs.Ino

	// cacheRev is the rev of the content the kernel's page cache holds for
	// this node, as far as we know: set at open and after our own commits.
	// An open that finds the store at the same rev keeps the cache.
	cacheRev atomic.Int64

	// dirAttr caches this directory's mode and gid (mode<<32 | gid, 0 for
	// unknown) as last reported, for the setgid rule of Create and Mkdir:
	// an extra store read per create otherwise. The kernel refreshes it
	// with a GETATTR after any invalidation.
	dirAttr atomic.Uint64
}

func (n *Node) remember(a vfs.Attr) {
	if a.Kind == vfs.KindDir {
		n.dirAttr.Store(uint64(a.Mode|syscall.S_IFDIR)<<32 | uint64(a.Gid))
	}
}

// parentAttr is the mode and gid new children of n inherit from.
func (n *Node) parentAttr(ctx context.Context) (vfs.Attr, error) {
	if v := n.dirAttr.Load(); v != 0 {
		return vfs.Attr{Mode: uint32(v>>32) & 07777, Gid: uint32(v)}, nil
	}
	a, err := n.srv.attr(ctx, n.ino)
	if err == nil {
		n.remember(a)
	}
	return a, err
}

var (
	_ fs.InodeEmbedder      = (*Node)(nil)
	_ fs.NodeLookuper       = (*Node)(nil)
	_ fs.NodeGetattrer      = (*Node)(nil)
	_ fs.NodeSetattrer      = (*Node)(nil)
	_ fs.NodeOpendirHandler = (*Node)(nil)
	_ fs.NodeOpener         = (*Node)(nil)
	_ fs.NodeCreater        = (*Node)(nil)
	_ fs.NodeMkdirer        = (*Node)(nil)
	_ fs.NodeRmdirer        = (*Node)(nil)
	_ fs.NodeUnlinker       = (*Node)(nil)
	_ fs.NodeRenamer        = (*Node)(nil)
	_ fs.NodeSymlinker      = (*Node)(nil)
	_ fs.NodeMknoder        = (*Node)(nil)
	_ fs.NodeReadlinker     = (*Node)(nil)
	_ fs.NodeLinker         = (*Node)(nil)
	_ fs.NodeGetxattrer     = (*Node)(nil)
	_ fs.NodeSetxattrer     = (*Node)(nil)
	_ fs.NodeListxattrer    = (*Node)(nil)
	_ fs.NodeRemovexattrer  = (*Node)(nil)
	_ fs.NodeStatfser       = (*Node)(nil)
	_ fs.NodeCopyFileRanger = (*Node)(nil)
	_ fs.NodeFsyncer        = (*Node)(nil)
)

// Ino is the node's vfs inode number.
func (n *Node) Ino() vfs.Ino { return n.ino }

// attr is the node's attributes as the kernel should see them: the store's
// (which include an open file's uncommitted size and mtime), with the
// configured root owner.
func (s *Server) attr(ctx context.Context, ino vfs.Ino) (vfs.Attr, error) {
	a, err := s.store.GetAttr(ctx, ino)
	if err != nil {
		return a, err
	}
	s.overlay(&a)
	return a, nil
}

func (s *Server) overlay(a *vfs.Attr) {
	if a.Ino != vfs.RootIno {
		return
	}
	s.mu.Lock()
	if o := s.rootOwner; o != nil {
		a.Uid, a.Gid = o.Uid, o.Gid
	}
	s.mu.Unlock()
}

// child makes (or finds) the Inode for a store node named in a reply and
// fills the entry.
func (n *Node) child(ctx context.Context, a vfs.Attr, out *fuse.EntryOut) *fs.Inode {
	n.srv.overlay(&a)
	fillAttr(&out.Attr, a)
	c := &Node{srv: n.srv, ino: a.Ino}
	c.remember(a)
	return n.NewInode(ctx, c, fs.StableAttr{
		Mode: kindMode(a.Kind),
		Ino:  uint64(a.Ino),
		Gen:  nodeGen,
	})
}

func (n *Node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.srv.metrics.track(opLookup, time.Now(), &errno)
	a, err := n.srv.store.Lookup(context.WithoutCancel(ctx), n.ino, name)
	if err != nil {
		if errors.Is(err, vfs.ErrNotExist) && n.GetChild(name) != nil {
			// An upstream apply removed or renamed it; drop go-fuse's
			// stale edge so its tree stays what the kernel holds.
			n.RmChild(name)
		}
		return nil, toErrno(err)
	}
	return n.child(ctx, a, out), 0
}

func (n *Node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.srv.metrics.track(opGetattr, time.Now(), &errno)
	a, err := n.srv.attr(context.WithoutCancel(ctx), n.ino)
	if fh, ok := f.(*fileHandle); ok && errors.Is(err, vfs.ErrNotExist) {
		// The store can lose a node to an unlink racing with the open of
		// its last name (see the package doc); the descriptor still
		// answers fstat(2) as a deleted file's does.
		a, err = fh.attr, nil
		a.Nlink = 0
		a.Size = fh.h.Size()
	}
	if err != nil {
		return toErrno(err)
	}
	n.remember(a)
	fillAttr(&out.Attr, a)
	return 0
}

func (n *Node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.srv.metrics.track(opSetattr, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	s := n.srv
	cur, err := s.attr(ctx, n.ino)
	if err != nil {
		return toErrno(err)
	}
	req := decodeSetattr(in)
	if err := checkSetattr(callerOf(ctx), cur, req); err != nil {
		return toErrno(err)
	}
	if req.size != nil {
		switch {
		case cur.Kind == vfs.KindDir:
			return syscall.EISDIR
		case cur.Kind != vfs.KindFile:
			return syscall.EINVAL
		}
		// The store truncates through the file's open state when it is
		// open, so buffered writes and the truncation commit together.
		req.sa.Size = req.size
	}
	sa := req.sa
	// Tools restate what is already so (tar and cp -p chown and chmod every
	// file they make): a no-op costs no write transaction.
	if sa.Mode != nil && *sa.Mode == cur.Mode {
		sa.Mode = nil
	}
	if sa.Uid != nil && *sa.Uid == cur.Uid {
		sa.Uid = nil
	}
	if sa.Gid != nil && *sa.Gid == cur.Gid {
		sa.Gid = nil
	}
	if sa.Size != nil && *sa.Size == cur.Size {
		sa.Size = nil
		if sa.Mtime == nil {
			// A truncation to the size the file has changes no byte but
			// marks the times: POSIX asks it of open(O_TRUNC) (make's
			// ": > stamp" of an empty stamp), Linux does it for
			// ftruncate(2). The kernel sends open's truncation as the
			// SETATTR a truncate(2) of the path sends, which keeps them,
			// so both mark them. (FUSE_ATOMIC_O_TRUNC, which go-fuse can
			// ask for with MountOptions.ExtraCapabilities, would bring
			// O_TRUNC in OPEN's flags instead; Open does not truncate.)
			now := time.Now()
			sa.Mtime = &now
		}
	}
	a := cur
	if sa.Mode != nil || sa.Uid != nil || sa.Gid != nil || sa.Atime != nil || sa.Mtime != nil || sa.Size != nil {
		// An mtime set on a dirty open file (cp -p sets times through the
		// descriptor before close) is kept by the store for its commit.
		if a, err = s.store.SetAttr(ctx, n.ino, sa); err != nil {
			return toErrno(err)
		}
		if n.ino == vfs.RootIno {
			// The root's reported owner may be ours (Options.Owner); a
			// chown moves it as well as the store's.
			s.mu.Lock()
			if o := s.rootOwner; o != nil && sa.Uid != nil {
				o.Uid = *sa.Uid
			}
			if o := s.rootOwner; o != nil && sa.Gid != nil {
				o.Gid = *sa.Gid
			}
			s.mu.Unlock()
		}
		s.overlay(&a)
		n.cacheRev.Store(a.Rev)
	}
	n.remember(a)
	fillAttr(&out.Attr, a)
	return 0
}

func (n *Node) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	defer n.srv.metrics.track(opOpen, time.Now(), &errno)
	if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		// The kernel opens FIFOs and sockets itself and refuses device
		// nodes on this nodev mount; OPEN never reaches us for them.
		return nil, 0, syscall.EACCES
	}
	fh, a, errno := n.open(context.WithoutCancel(ctx), flags)
	if errno != 0 {
		return nil, 0, errno
	}
	if prev := n.cacheRev.Swap(a.Rev); prev == a.Rev {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// Nothing is ever written through a read-only descriptor (without
		// the writeback cache, the kernel writes a shared mapping's pages
		// through a writable one), so its close has nothing to commit: no
		// FLUSH, one round trip less per file read.
		fuseFlags |= fuse.FOPEN_NOFLUSH
	}
	return fh, fuseFlags, 0
}

// open makes a FUSE handle on the node and returns the node's attributes
// as of after the open. (The kernel truncates with a SETATTR before OPEN;
// O_TRUNC arrives here only with a CREATE of a name that appeared since the
// kernel's lookup.)
func (n *Node) open(ctx context.Context, flags uint32) (*fileHandle, vfs.Attr, syscall.Errno) {
	// The store reads the node after the handle exists: an unlink that
	// raced with the open may have removed the node before the store
	// registered the handle, and a handle on a removed node must not be
	// returned.
	h, a, err := n.srv.store.OpenHandleAttr(ctx, n.ino)
	if err != nil {
		return nil, vfs.Attr{}, toErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if err = h.Truncate(ctx, 0); err == nil {
			a, err = n.srv.store.GetAttr(ctx, n.ino)
		}
	}
	if err != nil {
		return nil, vfs.Attr{}, toErrno(errors.Join(err, h.Release(ctx)))
	}
	if _, p := n.Parent(); p != nil {
		// Files of one directory read one after another: the store reads
		// the directory's other small files ahead.
		h.SetDir(vfs.Ino(p.StableAttr().Ino))
	}
	return n.handle(h, a, flags), a, 0
}

// handle wraps an open store handle for the kernel.
func (n *Node) handle(h *vfs.Handle, a vfs.Attr, flags uint32) *fileHandle {
	fh := &fileHandle{srv: n.srv, node: n, h: h, attr: a, append: flags&syscall.O_APPEND != 0}
	n.srv.track(fh)
	return fh
}

// fits refuses a new name here whose path would be longer than
// vfs.MaxPathLen (ENAMETOOLONG): the sync carries no longer path. The
// store checks what it runs at once; its write-behind answers a create or
// a link before it knows the directory's path, so the mount checks first,
// from the kernel's tree. A directory the tree no longer reaches from the
// root (removed) is left to the store.
func (n *Node) fits(name string) syscall.Errno {
	dirLen, segs := 0, 0
	for p := n.EmbeddedInode(); !p.IsRoot(); {
		seg, parent := p.Parent()
		if parent == nil {
			return 0
		}
		dirLen, segs = dirLen+len(seg), segs+1
		p = parent
	}
	if segs > 1 {
		dirLen += segs - 1 // the separators
	}
	if vfs.ChildPathLen(dirLen, name) > vfs.MaxPathLen {
		return syscall.ENAMETOOLONG
	}
	return 0
}

func (n *Node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, _ fs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.srv.metrics.track(opCreate, time.Now(), &errno)
	if errno := n.fits(name); errno != 0 {
		return nil, nil, 0, errno
	}
	ctx = context.WithoutCancel(ctx)
	s := n.srv
	parent, err := n.parentAttr(ctx)
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	// The node and its handle in one mutation: a new empty file needs no
	// truncate and no read of what was just written.
	a, h, err := s.store.CreateOpen(ctx, n.ino, name, newNodeAttr(parent, callerOf(ctx), mode, false))
	if errors.Is(err, vfs.ErrExist) && flags&syscall.O_EXCL == 0 {
		// Created by someone else since the kernel's lookup: open it.
		a, err = s.store.Lookup(ctx, n.ino, name)
		if err == nil && a.Kind == vfs.KindDir {
			err = vfs.ErrIsDir
		}
	}
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	child := n.child(ctx, a, out)
	cn := child.Operations().(*Node)
	var fh *fileHandle
	if h != nil {
		fh = cn.handle(h, a, flags)
	} else {
		var errno syscall.Errno
		if fh, a, errno = cn.open(ctx, flags); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	cn.cacheRev.Store(a.Rev)
	return child, fh, 0, 0
}

func (n *Node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.srv.metrics.track(opMkdir, time.Now(), &errno)
	if errno := n.fits(name); errno != 0 {
		return nil, errno
	}
	ctx = context.WithoutCancel(ctx)
	parent, err := n.parentAttr(ctx)
	if err != nil {
		return nil, toErrno(err)
	}
	a, err := n.srv.store.Mkdir(ctx, n.ino, name, newNodeAttr(parent, callerOf(ctx), mode, true))
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, a, out), 0
}

func (n *Node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.srv.metrics.track(opSymlink, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	parent, err := n.parentAttr(ctx)
	if err != nil {
		return nil, toErrno(err)
	}
	// Owned as any new node: the group of a setgid directory.
	a, err := n.srv.store.Symlink(ctx, n.ino, name, target, newNodeAttr(parent, callerOf(ctx), 0o777, false))
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, a, out), 0
}

// Mknod makes FIFOs, sockets (bind(2) of a Unix socket comes here) and
// device nodes, all local to the container (vfs.Store.Mknod). Opening a
// device node fails with EACCES, as on any nodev mount: the kernel checks
// that before it would ask us. mknod(2) of a regular file comes here too.
func (n *Node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.srv.metrics.track(opMknod, time.Now(), &errno)
	if errno := n.fits(name); errno != 0 {
		return nil, errno
	}
	ctx = context.WithoutCancel(ctx)
	parent, err := n.parentAttr(ctx)
	if err != nil {
		return nil, toErrno(err)
	}
	a := newNodeAttr(parent, callerOf(ctx), mode, false)
	var got vfs.Attr
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		got, err = n.srv.store.Create(ctx, n.ino, name, a)
	case syscall.S_IFIFO:
		got, err = n.srv.store.Mknod(ctx, n.ino, name, vfs.KindFifo, 0, a)
	case syscall.S_IFSOCK:
		got, err = n.srv.store.Mknod(ctx, n.ino, name, vfs.KindSocket, 0, a)
	case syscall.S_IFCHR:
		got, err = n.srv.store.Mknod(ctx, n.ino, name, vfs.KindCharDev, dev, a)
	case syscall.S_IFBLK:
		got, err = n.srv.store.Mknod(ctx, n.ino, name, vfs.KindBlockDev, dev, a)
	default:
		return nil, syscall.EINVAL
	}
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, got, out), 0
}

func (n *Node) Readlink(ctx context.Context) (_ []byte, errno syscall.Errno) {
	defer n.srv.metrics.track(opReadlink, time.Now(), &errno)
	target, err := n.srv.store.Readlink(context.WithoutCancel(ctx), n.ino)
	if err != nil {
		return nil, toErrno(err)
	}
	return []byte(target), 0
}

func (n *Node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.srv.metrics.track(opLink, time.Now(), &errno)
	t, ok := target.(*Node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if errno := n.fits(name); errno != 0 {
		return nil, errno
	}
	a, err := n.srv.store.Link(context.WithoutCancel(ctx), t.ino, n.ino, name)
	if err != nil {
		return nil, toErrno(err)
	}
	return n.child(ctx, a, out), 0
}

func (n *Node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.srv.metrics.track(opUnlink, time.Now(), &errno)
	return toErrno(n.srv.store.Unlink(context.WithoutCancel(ctx), n.ino, name))
}

func (n *Node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.srv.metrics.track(opRmdir, time.Now(), &errno)
	return toErrno(n.srv.store.Rmdir(context.WithoutCancel(ctx), n.ino, name))
}

// Linux renameat2(2) flags.
const (
	renameNoReplace = 0x1
	renameExchange  = 0x2
)

func (n *Node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	defer n.srv.metrics.track(opRename, time.Now(), &errno)
	np, ok := newParent.(*Node)
	if !ok {
		return syscall.EXDEV
	}
	var rf vfs.RenameFlags
	switch flags {
	case 0:
	case renameNoReplace:
		rf = vfs.RenameNoReplace
	default:
		// RENAME_EXCHANGE and RENAME_WHITEOUT are not supported.
		return syscall.EINVAL
	}
	return toErrno(n.srv.store.Rename(context.WithoutCancel(ctx), n.ino, name, np.ino, newName, rf))
}

// Extended attributes: only the user namespace is stored. The kernel keeps
// user.* off symlinks and special files and checks write permission.
const userXattrPrefix = "user."

func (n *Node) Getxattr(ctx context.Context, attr string, dest []byte) (_ uint32, errno syscall.Errno) {
	defer n.srv.metrics.track(opGetxattr, time.Now(), &errno)
	if !strings.HasPrefix(attr, userXattrPrefix) {
		return 0, syscall.ENODATA
	}
	v, err := n.srv.store.GetXattr(context.WithoutCancel(ctx), n.ino, attr)
	if err != nil {
		return 0, toErrno(err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *Node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) (errno syscall.Errno) {
	defer n.srv.metrics.track(opSetxattr, time.Now(), &errno)
	if !strings.HasPrefix(attr, userXattrPrefix) {
		return syscall.EOPNOTSUPP
	}
	return toErrno(n.srv.store.SetXattr(context.WithoutCancel(ctx), n.ino, attr, data, flags))
}

func (n *Node) Listxattr(ctx context.Context, dest []byte) (_ uint32, errno syscall.Errno) {
	defer n.srv.metrics.track(opListxattr, time.Now(), &errno)
	names, err := n.srv.store.ListXattr(context.WithoutCancel(ctx), n.ino)
	if err != nil {
		return 0, toErrno(err)
	}
	var list []byte
	for _, name := range names {
		if strings.HasPrefix(name, userXattrPrefix) {
			list = append(append(list, name...), 0)
		}
	}
	if len(dest) < len(list) {
		return uint32(len(list)), syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

func (n *Node) Removexattr(ctx context.Context, attr string) (errno syscall.Errno) {
	defer n.srv.metrics.track(opRemovexattr, time.Now(), &errno)
	if !strings.HasPrefix(attr, userXattrPrefix) {
		return syscall.EOPNOTSUPP
	}
	return toErrno(n.srv.store.RemoveXattr(context.WithoutCancel(ctx), n.ino, attr))
}

func (n *Node) Statfs(ctx context.Context, out *fuse.StatfsOut) (errno syscall.Errno) {
	defer n.srv.metrics.track(opStatfs, time.Now(), &errno)
	st, err := n.srv.store.StatFS(context.WithoutCancel(ctx))
	if err != nil {
		return toErrno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.BlocksFree, st.BlocksAvail
	out.Files, out.Ffree = st.Files, st.FilesFree
	out.Bsize, out.Frsize = st.BlockSize, st.BlockSize
	out.NameLen = st.NameLen
	if out.NameLen == 0 {
		out.NameLen = vfs.MaxNameLen
	}
	return 0
}

// copyBuf is the unit of CopyFileRange: two chunks.
const copyBuf = 1 << 20

// CopyFileRange copies inside the daemon: cp(1) asks for a whole file in one
// request, where a read/write loop would cost the kernel two round trips per
// MiB. The bytes still go through the destination handle (and its hashing).
func (n *Node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle,
	offOut uint64, length uint64, flags uint64) (_ uint32, errno syscall.Errno) {
	defer n.srv.metrics.track(opCopyFileRange, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	src, ok1 := fhIn.(*fileHandle)
	dst, ok2 := fhOut.(*fileHandle)
	if !ok1 || !ok2 || flags != 0 {
		return 0, syscall.EINVAL
	}
	length = min(length, 1<<30) // the reply counts in uint32; the kernel loops
	buf := make([]byte, min(length, copyBuf))
	var done uint64
	for done < length {
		p := buf[:min(uint64(len(buf)), length-done)]
		k, err := src.h.ReadAt(ctx, p, int64(offIn+done))
		if err != nil && !errors.Is(err, io.EOF) {
			return uint32(done), toErrno(err)
		}
		if k == 0 {
			break
		}
		w, err := dst.h.WriteAt(ctx, p[:k], int64(offOut+done))
		done += uint64(w)
		if err != nil {
			return uint32(done), toErrno(err)
		}
		if k < len(p) {
			break
		}
	}
	n.srv.metrics.read(int(done))
	n.srv.metrics.wrote(int(done))
	return uint32(done), 0
}
