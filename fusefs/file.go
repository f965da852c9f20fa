package fusefs

import (
	"context"
	"errors"
	"io"
	"math"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
)

// The store shares one open state among every handle of an inode (reads
// through one see writes through another, and a flush through any commits
// all of them), so each FUSE open gets its own vfs.Handle. The Server keeps
// the set of them for the flush rule and the dirty-handle gauge.

func (s *Server) track(fh *fileHandle) {
	s.mu.Lock()
	s.handles[fh] = struct{}{}
	s.mu.Unlock()
}

func (s *Server) untrack(fh *fileHandle) {
	s.mu.Lock()
	delete(s.handles, fh)
	s.mu.Unlock()
}

func (s *Server) fileHandles() []*fileHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*fileHandle, 0, len(s.handles))
	for fh := range s.handles {
		list = append(list, fh)
	}
	return list
}

// DirtyHandles counts open files with uncommitted writes.
func (s *Server) DirtyHandles() int {
	dirty := make(map[vfs.Ino]bool)
	for _, fh := range s.fileHandles() {
		if fh.h.Dirty() {
			dirty[fh.h.Ino()] = true
		}
	}
	return len(dirty)
}

// OpenHandles counts FUSE handles of files open through the mount.
func (s *Server) OpenHandles() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.handles)
}

// Flush commits every dirty file open through the mount: the flush rule's
// mount-side half, vfs.Store.FlushAll with this mount's commit count. Call
// either before answering a feed, so a pull sees what still-running
// processes wrote.
func (s *Server) Flush(ctx context.Context) error {
	dirty := s.DirtyHandles()
	err := s.store.FlushAll(ctx)
	if err == nil {
		for range dirty {
			s.metrics.committed()
		}
	}
	return err
}

// releaseAll commits and closes handles the kernel left open at unmount (it
// releases them itself on a clean unmount; an aborted connection does not).
func (s *Server) releaseAll(ctx context.Context) error {
	var errs []error
	for _, fh := range s.fileHandles() {
		s.untrack(fh)
		errs = append(errs, fh.h.Release(ctx))
	}
	return errors.Join(errs...)
}

// fileHandle is one FUSE open of a regular file.
type fileHandle struct {
	srv    *Server
	node   *Node
	h      *vfs.Handle
	attr   vfs.Attr // as of the open
	append bool
	// committed: a flush or fsync through this handle committed writes,
	// to be noted (off the close path) at release.
	committed atomic.Bool
}

var (
	_ fs.FileReader    = (*fileHandle)(nil)
	_ fs.FileWriter    = (*fileHandle)(nil)
	_ fs.FileFlusher   = (*fileHandle)(nil)
	_ fs.FileFsyncer   = (*fileHandle)(nil)
	_ fs.FileReleaser  = (*fileHandle)(nil)
	_ fs.FileAllocater = (*fileHandle)(nil)
	_ fs.FileLseeker   = (*fileHandle)(nil)
)

func (f *fileHandle) Read(ctx context.Context, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	defer f.srv.metrics.track(opRead, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	// A READ longer than a chunk (the 1 MiB of a sequential read) never
	// lies in one chunk file: it is not asked for.
	if len(dest) >= spliceMin && len(dest) <= chunkstore.ChunkSize {
		if sp, ok := f.h.ReadSpan(ctx, off, len(dest)); ok {
			f.srv.metrics.spliced(sp.N)
			return &spanResult{sp}, 0
		}
	}
	n, err := f.h.ReadAt(ctx, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, toErrno(err)
	}
	f.srv.metrics.read(n)
	// A vector goes to the kernel in the reply's one writev. go-fuse
	// tries to splice any other result first: for bytes in memory that
	// is the header written into a pipe and drained again, two system
	// calls a READ for nothing.
	return fuse.ReadResultVector([][]byte{dest[:n]}), 0
}

// spliceMin is the smallest READ answered from a chunk file by splice:
// the kernel moves the bytes from the file to the reply without the copy
// through our memory a pread makes, for four more system calls than a
// plain reply's pread and writev (go-fuse writes the header into a pipe,
// splices the file into it and the pipe into /dev/fuse, then drains and
// checks the pipe), which a small read does not earn back.
const spliceMin = 64 << 10

// spanResult is a READ's reply from a chunk file (vfs.Handle.ReadSpan):
// go-fuse splices it (Seekable), or copies it with a pread when it cannot
// (Bytes), and calls Done once the reply is out.
type spanResult struct{ sp chunkstore.FileSpan }

// Seekable is what go-fuse splices from.
func (r *spanResult) Seekable() (fd uintptr, off int64, sz int) {
	return r.sp.File.Fd(), r.sp.Off, r.sp.N
}

func (r *spanResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if cap(buf) < r.sp.N {
		buf = make([]byte, r.sp.N)
	}
	n, err := r.sp.File.ReadAt(buf[:r.sp.N], r.sp.Off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fuse.ToStatus(err)
	}
	return buf[:n], fuse.OK
}

func (r *spanResult) Size() int { return r.sp.N }

func (r *spanResult) Done() { r.sp.Release() }

func (f *fileHandle) Write(ctx context.Context, data []byte, off int64) (_ uint32, errno syscall.Errno) {
	defer f.srv.metrics.track(opWrite, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	if f.append {
		// The kernel's idea of the end may be stale when another handle
		// grew the file; O_APPEND writes at the end the store knows.
		off = f.h.Size()
	}
	n, err := f.h.WriteAt(ctx, data, off)
	f.srv.metrics.wrote(n)
	if err != nil {
		return uint32(n), toErrno(err)
	}
	return uint32(n), 0
}

// Flush runs at every close(2) of a descriptor: it commits, so a file is
// in the store (and the change feed) as soon as its writer closed it, even
// though the kernel sends RELEASE asynchronously later.
func (f *fileHandle) Flush(ctx context.Context) (errno syscall.Errno) {
	defer f.srv.metrics.track(opFlush, time.Now(), &errno)
	return f.commit(context.WithoutCancel(ctx))
}

// Fsync is Node.Fsync's (which the bridge prefers) for this handle.
func (f *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return f.node.Fsync(ctx, f, flags)
}

// Fsync (fsync, fdatasync, and fsync of a directory) commits the file's
// writes if a handle is given, then the store's group of local mutations
// (vfs.Store.Sync): once it returns, everything answered before survives
// a crash of the daemon.
func (n *Node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) (errno syscall.Errno) {
	defer n.srv.metrics.track(opFsync, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	if fh, ok := f.(*fileHandle); ok {
		if errno := fh.commit(ctx); errno != 0 {
			return errno
		}
	}
	return toErrno(n.srv.store.Sync(ctx))
}

func (f *fileHandle) commit(ctx context.Context) syscall.Errno {
	if !f.h.Dirty() {
		return 0
	}
	if err := f.h.Flush(ctx); err != nil {
		return toErrno(err)
	}
	f.srv.metrics.committed()
	f.committed.Store(true)
	return 0
}

func (f *fileHandle) Release(ctx context.Context) (errno syscall.Errno) {
	defer f.srv.metrics.track(opRelease, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	dirty := f.h.Dirty()
	f.srv.untrack(f)
	if err := f.h.Release(ctx); err != nil {
		// The kernel ignores RELEASE's answer; a lost commit must at
		// least be visible.
		f.srv.log.Error("release", "ino", f.h.Ino(), "err", err)
		return toErrno(err)
	}
	if dirty {
		f.srv.metrics.committed()
	}
	if dirty || f.committed.Load() {
		// The kernel's pages are what this file committed: a later open
		// at that rev may keep them.
		if rev := f.h.CommittedRev(); rev != 0 {
			f.node.cacheRev.Store(rev)
		}
	}
	return 0
}

// Allocate implements fallocate(2) mode 0 as an extension of the file (the
// store keeps no preallocated space: the new bytes are a hole, stored as
// nothing) and FALLOC_FL_KEEP_SIZE as a change of the times alone; both
// mark the mtime, as a local file system's fallocate does. Punching or collapsing
// holes is EOPNOTSUPP. A range past the largest file is EFBIG, as for a
// write.
func (f *fileHandle) Allocate(ctx context.Context, off, size uint64, mode uint32) (errno syscall.Errno) {
	defer f.srv.metrics.track(opAllocate, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	const keepSize = 0x01 // FALLOC_FL_KEEP_SIZE
	if mode != 0 && mode != keepSize {
		return syscall.EOPNOTSUPP
	}
	if off > chunkstore.MaxFileSize || size > chunkstore.MaxFileSize-off {
		return syscall.EFBIG
	}
	if mode != keepSize {
		// Allocate commits the extension with any pending writes.
		if err := f.h.Allocate(ctx, int64(off), int64(size)); err != nil {
			return toErrno(err)
		}
	}
	// A fallocate marks the times even when it changes no byte, as a
	// local file system's does (file_modified), KEEP_SIZE too.
	now := time.Now()
	_, err := f.srv.store.SetAttr(ctx, f.node.ino, vfs.SetAttr{Mtime: &now})
	return toErrno(err)
}

// Lseek answers SEEK_DATA and SEEK_HOLE (the kernel handles the other
// whences itself) from the store's chunks, so cp, tar and rsync skip the
// holes of a sparse file instead of reading them.
func (f *fileHandle) Lseek(ctx context.Context, off uint64, whence uint32) (_ uint64, errno syscall.Errno) {
	const seekData, seekHole = 3, 4
	if whence != seekData && whence != seekHole {
		return 0, syscall.EINVAL
	}
	if off > math.MaxInt64 {
		return 0, syscall.ENXIO
	}
	n, err := f.h.Seek(context.WithoutCancel(ctx), int64(off), whence == seekHole)
	if err != nil {
		return 0, toErrno(err)
	}
	return uint64(n), 0
}
