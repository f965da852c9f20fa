package fusefs

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/wsync/wsync/vfs"
)

// openFile is the one vfs.Handle of an inode, shared by every FUSE handle
// open on it. Sharing keeps all descriptors of a file coherent (a read
// through one sees writes through another, as on a local disk) and makes the
// commit points simple: a flush through any descriptor commits everything
// written so far, and the last release commits and closes the vfs handle.
type openFile struct {
	ino vfs.Ino

	// Guarded by Server.mu.
	refs    int
	closing chan struct{} // non-nil while the last release commits

	// ready is closed once h (or err) is set by the opener.
	ready chan struct{}
	err   error

	// mu serialises calls on h.
	mu        sync.Mutex
	h         *vfs.Handle
	lastWrite time.Time // of the last write not yet committed
}

// acquire returns ino's openFile with one more reference, opening the vfs
// handle on first use. An open racing with the last release of the same
// inode waits for that release to commit, so it sees the committed bytes.
func (s *Server) acquire(ctx context.Context, ino vfs.Ino) (*openFile, error) {
	for {
		s.mu.Lock()
		of := s.opens[ino]
		if of == nil {
			of = &openFile{ino: ino, refs: 1, ready: make(chan struct{})}
			s.opens[ino] = of
			s.mu.Unlock()
			h, err := s.store.OpenHandle(ctx, ino)
			s.mu.Lock()
			of.h, of.err = h, err
			if err != nil {
				delete(s.opens, ino)
			}
			close(of.ready)
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return of, nil
		}
		if of.closing != nil {
			ch := of.closing
			s.mu.Unlock()
			<-ch
			continue
		}
		of.refs++
		s.mu.Unlock()
		<-of.ready
		if of.err != nil {
			return nil, of.err
		}
		return of, nil
	}
}

// release drops one reference; the last one commits and closes the handle.
func (s *Server) release(ctx context.Context, of *openFile) error {
	s.mu.Lock()
	of.refs--
	last := of.refs == 0
	if last {
		of.closing = make(chan struct{})
	}
	s.mu.Unlock()
	if !last {
		return nil
	}
	of.mu.Lock()
	dirty := of.h.Dirty()
	err := of.h.Release(ctx)
	of.mu.Unlock()
	if dirty && err == nil {
		s.metrics.commits.Add(1)
	}
	s.mu.Lock()
	delete(s.opens, of.ino)
	close(of.closing)
	s.mu.Unlock()
	return err
}

// openFor returns ino's openFile if one is open and ready, without taking a
// reference (callers use it under the node's own request).
func (s *Server) openFor(ino vfs.Ino) *openFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	of := s.opens[ino]
	if of == nil || of.closing != nil {
		return nil
	}
	select {
	case <-of.ready:
		if of.err != nil {
			return nil
		}
		return of
	default:
		return nil
	}
}

// flush commits of's pending writes; it reports whether it committed.
func (of *openFile) flush(ctx context.Context) (bool, error) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if !of.h.Dirty() {
		return false, nil
	}
	if err := of.h.Flush(ctx); err != nil {
		return false, err
	}
	of.lastWrite = time.Time{}
	return true, nil
}

func (of *openFile) truncate(ctx context.Context, size int64) error {
	of.mu.Lock()
	defer of.mu.Unlock()
	if err := of.h.Truncate(ctx, size); err != nil {
		return err
	}
	of.lastWrite = time.Now()
	return nil
}

// overlay puts what the handle knows and the store does not yet (the size
// and mtime of uncommitted writes) over a store attribute.
func (of *openFile) overlay(a *vfs.Attr) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if !of.h.Dirty() {
		return
	}
	a.Size = of.h.Size()
	if !of.lastWrite.IsZero() && of.lastWrite.After(a.Mtime) {
		a.Mtime = of.lastWrite
		a.Ctime = of.lastWrite
	}
}

// DirtyHandles counts open files with uncommitted writes.
func (s *Server) DirtyHandles() int {
	n := 0
	for _, of := range s.openFiles() {
		of.mu.Lock()
		if of.h.Dirty() {
			n++
		}
		of.mu.Unlock()
	}
	return n
}

// OpenHandles counts files open through the mount (one per inode).
func (s *Server) OpenHandles() int { return len(s.openFiles()) }

func (s *Server) openFiles() []*openFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*openFile, 0, len(s.opens))
	for _, of := range s.opens {
		select {
		case <-of.ready:
			if of.err == nil && of.closing == nil {
				list = append(list, of)
			}
		default:
		}
	}
	return list
}

// Flush commits every dirty open file through the same locks the FUSE
// requests take, so no write is split by the commit. It is the flush rule's
// mount-side half: call it (or vfs.Store.FlushAll) before answering a feed.
func (s *Server) Flush(ctx context.Context) error {
	var errs []error
	for _, of := range s.openFiles() {
		committed, err := of.flush(ctx)
		if err != nil {
			errs = append(errs, err)
		} else if committed {
			s.metrics.commits.Add(1)
		}
	}
	return errors.Join(errs...)
}

// releaseAll commits and closes files the kernel left open at unmount (it
// releases them itself on a clean unmount; an aborted connection does not).
func (s *Server) releaseAll(ctx context.Context) error {
	var errs []error
	for _, of := range s.openFiles() {
		s.mu.Lock()
		of.refs = 1
		s.mu.Unlock()
		errs = append(errs, s.release(ctx, of))
	}
	return errors.Join(errs...)
}

// fileHandle is one FUSE open of a regular file.
type fileHandle struct {
	srv    *Server
	node   *Node
	of     *openFile
	append bool
}

var (
	_ fs.FileReader    = (*fileHandle)(nil)
	_ fs.FileWriter    = (*fileHandle)(nil)
	_ fs.FileFlusher   = (*fileHandle)(nil)
	_ fs.FileFsyncer   = (*fileHandle)(nil)
	_ fs.FileReleaser  = (*fileHandle)(nil)
	_ fs.FileAllocater = (*fileHandle)(nil)
)

func (f *fileHandle) Read(ctx context.Context, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	defer f.srv.metrics.track(opRead, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	f.of.mu.Lock()
	n, err := f.of.h.ReadAt(ctx, dest, off)
	f.of.mu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, toErrno(err)
	}
	f.srv.metrics.readBytes.Add(uint64(n))
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *fileHandle) Write(ctx context.Context, data []byte, off int64) (_ uint32, errno syscall.Errno) {
	defer f.srv.metrics.track(opWrite, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	f.of.mu.Lock()
	if f.append {
		// The kernel's idea of the end may be stale when another handle
		// grew the file; O_APPEND writes at the end we know.
		off = f.of.h.Size()
	}
	n, err := f.of.h.WriteAt(ctx, data, off)
	if n > 0 {
		f.of.lastWrite = time.Now()
	}
	f.of.mu.Unlock()
	f.srv.metrics.writtenBytes.Add(uint64(n))
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

func (f *fileHandle) Fsync(ctx context.Context, flags uint32) (errno syscall.Errno) {
	defer f.srv.metrics.track(opFsync, time.Now(), &errno)
	return f.commit(context.WithoutCancel(ctx))
}

func (f *fileHandle) commit(ctx context.Context) syscall.Errno {
	committed, err := f.of.flush(ctx)
	if err != nil {
		return toErrno(err)
	}
	if committed {
		f.srv.metrics.commits.Add(1)
		f.node.noteOwnChange(ctx)
	}
	return 0
}

func (f *fileHandle) Release(ctx context.Context) (errno syscall.Errno) {
	defer f.srv.metrics.track(opRelease, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	f.of.mu.Lock()
	dirty := f.of.h.Dirty()
	f.of.mu.Unlock()
	if err := f.srv.release(ctx, f.of); err != nil {
		// The kernel ignores RELEASE's answer; a lost commit must at
		// least be visible.
		f.srv.log.Error("release", "ino", f.of.ino, "err", err)
		return toErrno(err)
	}
	if dirty {
		f.node.noteOwnChange(ctx)
	}
	return 0
}

// Allocate implements fallocate(2) mode 0 as an extension of the file (the
// store keeps no preallocated space, and sparse regions read as zeros) and
// FALLOC_FL_KEEP_SIZE as a no-op; punching or collapsing holes is
// EOPNOTSUPP.
func (f *fileHandle) Allocate(ctx context.Context, off, size uint64, mode uint32) (errno syscall.Errno) {
	defer f.srv.metrics.track(opAllocate, time.Now(), &errno)
	ctx = context.WithoutCancel(ctx)
	const keepSize = 0x01 // FALLOC_FL_KEEP_SIZE
	switch mode {
	case 0:
		end := int64(off + size)
		f.of.mu.Lock()
		defer f.of.mu.Unlock()
		if end <= f.of.h.Size() {
			return 0
		}
		if err := f.of.h.Truncate(ctx, end); err != nil {
			return toErrno(err)
		}
		f.of.lastWrite = time.Now()
		return 0
	case keepSize:
		return 0
	}
	return syscall.EOPNOTSUPP
}
