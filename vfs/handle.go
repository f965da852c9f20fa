package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsync/wsync/chunkstore"
)

const cs = chunkstore.ChunkSize

// maxDirtyChunks bounds the chunk images one open file holds in memory; past
// it the oldest is hashed and stored early.
const maxDirtyChunks = 8

var bufPool = sync.Pool{New: func() any { b := make([]byte, cs); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

// putBuf returns a full-size image to the pool; smaller ones are dropped.
func putBuf(b *[]byte) {
	if cap(*b) == cs {
		*b = (*b)[:cs]
		bufPool.Put(b)
	}
}

// newImage returns an image buffer of length l. Full chunks come from the
// pool; a small file's chunk gets a buffer sized to its data, so writing a
// 200-byte file does not clear half a megabyte.
func newImage(l int64) *[]byte {
	if l >= cs {
		return getBuf()
	}
	c := int64(4096)
	for c < l {
		c <<= 1
	}
	b := make([]byte, l, c)
	return &b
}

// extendImage makes an image at least n bytes long; new bytes are zero.
func extendImage(b *[]byte, n int64) {
	old := int64(len(*b))
	if old >= n {
		return
	}
	if int64(cap(*b)) >= n {
		*b = (*b)[:n]
		clear((*b)[old:])
		return
	}
	nb := newImage(n)
	copy(*nb, *b)
	*nb = (*nb)[:n]
	clear((*nb)[old:])
	*b = *nb
}

// openFile is the shared write state of one inode while any handle has it
// open: every handle of the inode reads and writes through it, so two
// processes writing one file see each other's bytes.
//
// A chunk's bytes come from, in priority order: a dirty image in bufs, an
// image being hashed and stored in flight, a chunk stored since the last
// commit in stored, the committed manifest in base, or zeros (a hole).
type openFile struct {
	s      *Store
	ino    Ino
	refs   int  // handles; guarded by Store.openMu
	orphan bool // its last name went while open; guarded by Store.openMu

	mu       sync.Mutex
	loaded   bool
	base     chunkstore.Manifest
	size     int64
	mtime    int64
	dirty    bool
	bufs     map[int64]*[]byte
	lru      []int64 // dirty chunk indices, oldest first
	flights  map[int64]*flight
	stored   map[int64]chunkstore.Ref
	stage    *chunkstore.Stage
	err      error // a background store failed; reported by the next write or flush
	stale    bool  // the committed content changed under a clean file (an apply)
	released bool
}

type flight struct {
	buf  *[]byte
	n    int
	done chan struct{}
}

// Handle is one open of a file. Writes are buffered in the inode's open
// state; full chunks are hashed and stored in the background as they fill;
// Flush commits the manifest as one rev.
type Handle struct {
	f      *openFile
	closed atomic.Bool
}

// OpenHandle opens a file for reading and writing through buffered state.
// While a handle is open its node survives unlink (nlink 0) until Release.
func (s *Store) OpenHandle(ctx context.Context, ino Ino) (*Handle, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	// Register the open before reading the node: an unlink committing in
	// between then sees the file open and keeps the node (markOrphan), and
	// one that committed before makes the read fail.
	s.openMu.Lock()
	f := s.open[ino]
	if f == nil {
		f = &openFile{s: s, ino: ino}
		s.open[ino] = f
	}
	f.refs++
	s.openMu.Unlock()
	h := &Handle{f: f}
	// The read waits for a write transaction in progress, so an unlink
	// that missed the registration above has committed before it.
	s.wmu.Lock()
	n, err := getNode(ctx, s.rq, ino)
	s.wmu.Unlock()
	switch {
	case err == nil && n.kind == KindDir:
		err = ErrIsDir
	case err == nil && (n.kind == KindSymlink || n.kind.Special()):
		err = ErrInvalid
	}
	if err != nil {
		s.unregister(f)
		return nil, err
	}
	if n.nlink == 0 {
		// Opened by inode after its last name went: its last release
		// deletes it.
		s.openMu.Lock()
		f.orphan = true
		s.openMu.Unlock()
	}
	return h, nil
}

// unregister drops one open of f without committing anything.
func (s *Store) unregister(f *openFile) {
	s.openMu.Lock()
	f.refs--
	if f.refs == 0 && s.open[f.ino] == f {
		delete(s.open, f.ino)
	}
	s.openMu.Unlock()
}

// markOrphan notes that an open file lost its last name, so its last
// Release deletes the node; it reports whether the file is open. The check
// and the mark are one step under openMu, so a Release racing with the
// unlink either sees the mark or has already closed the file (and the
// unlink deletes the node itself).
func (s *Store) markOrphan(ino Ino) bool {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	f := s.open[ino]
	if f != nil {
		f.orphan = true
	}
	return f != nil
}

func (s *Store) isOpen(ino Ino) bool {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	return s.open[ino] != nil
}

func (s *Store) openState(ino Ino) *openFile {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	return s.open[ino]
}

// overlay reports buffered size and mtime of an open, dirty file.
func (s *Store) overlay(a Attr) Attr {
	if a.Kind != KindFile {
		return a
	}
	f := s.openState(a.Ino)
	if f == nil {
		return a
	}
	f.mu.Lock()
	if f.dirty {
		a.Size = f.size
		a.Mtime = time.Unix(0, f.mtime)
	}
	f.mu.Unlock()
	return a
}

func (s *Store) setOpenMtime(ino Ino, mtime int64) {
	if f := s.openState(ino); f != nil {
		f.mu.Lock()
		if f.dirty {
			f.mtime = mtime
		}
		f.mu.Unlock()
	}
}

// markStale tells clean open files that their committed content changed.
func (s *Store) markStale(inos []Invalidation) {
	s.openMu.Lock()
	var fs []*openFile
	for _, in := range inos {
		if f := s.open[in.Ino]; f != nil {
			fs = append(fs, f)
		}
	}
	s.openMu.Unlock()
	for _, f := range fs {
		f.mu.Lock()
		f.stale = true
		f.mu.Unlock()
	}
}

// Ino is the handle's inode.
func (h *Handle) Ino() Ino { return h.f.ino }

// load reads the committed state. Called with f.mu held.
func (f *openFile) load(ctx context.Context) error {
	if f.loaded && !(f.stale && !f.dirty) {
		return nil
	}
	n, err := getNode(ctx, f.s.rq, f.ino)
	if err != nil {
		return err
	}
	m, err := n.decodeManifest()
	if err != nil {
		return err
	}
	f.base, f.size, f.mtime = m, n.size, n.mtime
	f.loaded, f.stale = true, false
	return nil
}

func chunkLen(size, i int64) int64 {
	l := size - i*cs
	if l > cs {
		return cs
	}
	return max(l, 0)
}

// image returns the dirty image of chunk i, creating it from the chunk's
// current bytes. Called with f.mu held.
func (f *openFile) image(ctx context.Context, i int64) (*[]byte, error) {
	if b, ok := f.bufs[i]; ok {
		f.touchLRU(i)
		return b, nil
	}
	b := newImage(chunkLen(f.size, i))
	buf := *b
	if err := f.readChunk(ctx, i, buf, 0, f.size); err != nil {
		putBuf(b)
		return nil, err
	}
	if f.bufs == nil {
		f.bufs = make(map[int64]*[]byte)
	}
	f.bufs[i] = b
	f.lru = append(f.lru, i)
	return b, nil
}

func (f *openFile) touchLRU(i int64) {
	for k, j := range f.lru {
		if j == i {
			copy(f.lru[k:], f.lru[k+1:])
			f.lru[len(f.lru)-1] = i
			return
		}
	}
}

func (f *openFile) dropLRU(i int64) {
	for k, j := range f.lru {
		if j == i {
			f.lru = append(f.lru[:k], f.lru[k+1:]...)
			return
		}
	}
}

// readChunk fills p (len <= ChunkSize) with chunk i's bytes from offset off
// within the chunk, as of file size `size`; bytes past the chunk's end (or a
// hole) read as zeros. Called with f.mu held.
func (f *openFile) readChunk(ctx context.Context, i int64, p []byte, off int64, size int64) error {
	n := chunkLen(size, i) - off
	if n < 0 {
		n = 0
	}
	if n > int64(len(p)) {
		n = int64(len(p))
	}
	clear(p[n:])
	if n == 0 {
		return nil
	}
	p = p[:n]
	if b, ok := f.bufs[i]; ok {
		k := 0
		if off < int64(len(*b)) {
			k = copy(p, (*b)[off:])
		}
		clear(p[k:])
		return nil
	}
	if fl, ok := f.flights[i]; ok {
		k := copy(p, (*fl.buf)[off:fl.n])
		clear(p[k:])
		return nil
	}
	ref, ok := f.stored[i]
	if !ok {
		if i >= int64(len(f.base)) {
			clear(p)
			return nil
		}
		ref = f.base[i]
	}
	if off >= int64(ref.Size) {
		clear(p)
		return nil
	}
	k, err := f.s.chunks.ReadAt(ctx, f.s.rq, ref, p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read chunk %d of inode %d: %w", i, f.ino, err)
	}
	clear(p[k:])
	return nil
}

// resize changes the logical size, keeping every chunk's source consistent
// with its new length: a chunk whose length changes becomes a dirty image.
// Called with f.mu held.
func (f *openFile) resize(ctx context.Context, size int64) error {
	old := f.size
	if size == old {
		return nil
	}
	// The chunk that was the tail (when growing) or becomes the tail (when
	// shrinking) changes length; chunks past the new end go away.
	var edge int64 = -1
	if size > old && old%cs != 0 {
		edge = old / cs
	}
	if size < old && size%cs != 0 {
		edge = size / cs
	}
	if edge >= 0 {
		if _, err := f.image(ctx, edge); err != nil {
			return err
		}
	}
	if size < old {
		limit := (size + cs - 1) / cs // chunks [0, limit) remain
		for i, b := range f.bufs {
			if i >= limit {
				putBuf(b)
				delete(f.bufs, i)
				f.dropLRU(i)
			}
		}
		for i := range f.stored {
			if i >= limit {
				delete(f.stored, i)
			}
		}
		if int64(len(f.base)) > limit {
			f.base = f.base[:limit]
		}
		if b := f.bufs[edge]; edge >= 0 && int64(len(*b)) > size-edge*cs {
			*b = (*b)[:size-edge*cs]
		}
	}
	f.size = size
	return nil
}

func (h *Handle) file(ctx context.Context) (*openFile, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	f := h.f
	f.mu.Lock()
	if err := f.load(ctx); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	return f, nil
}

// WriteAt writes p at off. Chunks the write fills to their end are hashed
// and stored in the background; the write blocks only when too many are in
// flight.
func (h *Handle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	if len(p) == 0 {
		return 0, nil
	}
	f, err := h.file(ctx)
	if err != nil {
		return 0, err
	}
	if f.err != nil {
		err := f.err
		f.mu.Unlock()
		return 0, err
	}
	end := off + int64(len(p))
	if end > f.size {
		if err := f.resize(ctx, end); err != nil {
			f.mu.Unlock()
			return 0, err
		}
	}
	var full []int64
	written := 0
	for written < len(p) {
		pos := off + int64(written)
		i := pos / cs
		b, err := f.image(ctx, i)
		if err != nil {
			f.mu.Unlock()
			return written, err
		}
		within := pos - i*cs
		extendImage(b, min(within+int64(len(p)-written), cs))
		k := copy((*b)[within:], p[written:])
		written += k
		if pos+int64(k) == (i+1)*cs {
			full = append(full, i)
		}
	}
	f.dirty = true
	f.mtime = time.Now().UnixNano()
	// Past the dirty bound, the oldest images go too.
	for len(f.bufs)-len(full) > maxDirtyChunks {
		full = append(full, f.lru[0])
		f.dropLRU(f.lru[0])
	}
	flights := f.launch(full)
	f.mu.Unlock()
	for _, fl := range flights {
		f.s.hashSem <- struct{}{}
		go f.store(ctx, fl.i, fl.f)
	}
	return written, nil
}

type launched struct {
	i int64
	f *flight
}

// launch moves chunk images into flight. Called with f.mu held.
func (f *openFile) launch(idx []int64) []launched {
	var out []launched
	for _, i := range idx {
		b, ok := f.bufs[i]
		if !ok {
			continue
		}
		delete(f.bufs, i)
		f.dropLRU(i)
		if f.flights == nil {
			f.flights = make(map[int64]*flight)
		}
		if f.stage == nil {
			f.stage = f.s.chunks.NewStage()
		}
		extendImage(b, chunkLen(f.size, i))
		fl := &flight{buf: b, n: int(chunkLen(f.size, i)), done: make(chan struct{})}
		f.flights[i] = fl
		out = append(out, launched{i, fl})
	}
	return out
}

// store hashes and stores one chunk image in the background.
func (f *openFile) store(ctx context.Context, i int64, fl *flight) {
	defer func() { <-f.s.hashSem }()
	f.mu.Lock()
	stage := f.stage
	f.mu.Unlock()
	ref, err := stage.PutHashed(context.WithoutCancel(ctx), (*fl.buf)[:fl.n])
	f.mu.Lock()
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("store chunk %d of inode %d: %w", i, f.ino, err)
	}
	if f.flights[i] == fl {
		delete(f.flights, i)
		_, redirtied := f.bufs[i]
		// Unless newer bytes superseded the image or a resize changed the
		// chunk's length (resize re-images a chunk whose length changes),
		// the stored chunk is now the chunk's source.
		if !redirtied && err == nil && int64(fl.n) == chunkLen(f.size, i) {
			if f.stored == nil {
				f.stored = make(map[int64]chunkstore.Ref)
			}
			f.stored[i] = ref
		}
	}
	f.mu.Unlock()
	putBuf(fl.buf)
	close(fl.done)
}

// ReadAt reads through the open state: buffered writes are visible.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	f, err := h.file(ctx)
	if err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	return f.readAt(ctx, p, off)
}

// readAt is called with f.mu held.
func (f *openFile) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, io.EOF
	}
	n := len(p)
	if rem := f.size - off; int64(n) > rem {
		n = int(rem)
	}
	for done := 0; done < n; {
		pos := off + int64(done)
		i := pos / cs
		within := pos - i*cs
		k := min(int64(n-done), cs-within)
		if err := f.readChunk(ctx, i, p[done:done+int(k)], within, f.size); err != nil {
			return done, err
		}
		done += int(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Truncate sets the file's size and commits it.
func (h *Handle) Truncate(ctx context.Context, size int64) error {
	if size < 0 {
		return ErrInvalid
	}
	f, err := h.file(ctx)
	if err != nil {
		return err
	}
	if size != f.size {
		if err := f.resize(ctx, size); err != nil {
			f.mu.Unlock()
			return err
		}
		f.dirty = true
		f.mtime = time.Now().UnixNano()
	}
	f.mu.Unlock()
	return h.Flush(ctx)
}

// Size is the file's current size, buffered writes included.
func (h *Handle) Size() int64 {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.loaded {
		if err := f.load(context.Background()); err != nil {
			return 0
		}
	}
	return f.size
}

// Dirty reports whether the handle's file has uncommitted writes.
func (h *Handle) Dirty() bool {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.dirty
}

// Flush commits buffered writes: every chunk is stored, then one
// transaction writes the manifest, size and mtime and stamps one rev on the
// node and all its names.
func (h *Handle) Flush(ctx context.Context) error {
	if h.closed.Load() {
		return ErrClosed
	}
	return h.f.commit(ctx)
}

func (f *openFile) commit(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirty {
		return nil
	}
	// Wait for background stores.
	for len(f.flights) > 0 {
		var fl *flight
		for _, x := range f.flights {
			fl = x
			break
		}
		f.mu.Unlock()
		<-fl.done
		f.mu.Lock()
	}
	if f.err != nil {
		return f.err
	}
	if f.stage == nil {
		f.stage = f.s.chunks.NewStage()
	}
	nchunks := (f.size + cs - 1) / cs
	m := make(chunkstore.Manifest, nchunks)
	var zero *[]byte
	for i := range nchunks {
		l := chunkLen(f.size, i)
		switch b, isBuf := f.bufs[i]; {
		case isBuf:
			extendImage(b, l)
			ref, err := f.stage.PutHashed(ctx, (*b)[:l])
			if err != nil {
				return fmt.Errorf("flush inode %d: %w", f.ino, err)
			}
			m[i] = ref
		case f.stored[i].Size == uint32(l):
			m[i] = f.stored[i]
		case i < int64(len(f.base)) && f.base[i].Size == uint32(l):
			m[i] = f.base[i]
		default:
			// A hole.
			if zero == nil {
				zero = getBuf()
				clear(*zero)
				defer putBuf(zero)
			}
			ref, err := f.stage.PutHashed(ctx, (*zero)[:l])
			if err != nil {
				return fmt.Errorf("flush inode %d: %w", f.ino, err)
			}
			m[i] = ref
		}
	}
	mtime := f.mtime
	err := f.s.update(ctx, func(t *wtx) error {
		n, err := getNode(ctx, t.tx, f.ino)
		if err != nil {
			return err
		}
		if n.nlink == 0 {
			// Unlinked while open: keep the bytes for the remaining readers,
			// nothing to record in the feed.
			old, err := n.decodeManifest()
			if err != nil {
				return err
			}
			t.addRefs(m)
			t.dropRefs(old)
			_, err = t.exec(`UPDATE nodes SET manifest = ?, size = ?, mtime = ? WHERE ino = ?`,
				chunkstore.AppendManifest(nil, m), m.Size(), mtime, f.ino)
			return err
		}
		return t.setContent(n, m, mtime)
	})
	if err != nil {
		return fmt.Errorf("flush inode %d: %w", f.ino, err)
	}
	f.base = m
	for i, b := range f.bufs {
		putBuf(b)
		delete(f.bufs, i)
	}
	f.lru = f.lru[:0]
	clear(f.stored)
	f.stage.Release()
	f.stage = nil
	f.dirty = false
	return nil
}

// Release flushes and closes the handle. The last release of a file whose
// names are all gone deletes its node.
func (h *Handle) Release(ctx context.Context) error {
	if h.closed.Swap(true) {
		return nil
	}
	err := h.f.commit(ctx)
	f, s := h.f, h.f.s
	s.openMu.Lock()
	f.refs--
	last := f.refs == 0
	if last {
		delete(s.open, f.ino)
	}
	orphan := f.orphan
	s.openMu.Unlock()
	if !last {
		return err
	}
	f.mu.Lock()
	f.released = true
	for i, b := range f.bufs {
		putBuf(b)
		delete(f.bufs, i)
	}
	if f.stage != nil {
		f.stage.Release()
		f.stage = nil
	}
	f.mu.Unlock()
	if !orphan {
		return err
	}
	derr := s.update(context.WithoutCancel(ctx), func(t *wtx) error {
		n, err := getNode(ctx, t.tx, f.ino)
		if errors.Is(err, ErrNotExist) {
			return nil
		}
		if err != nil || n.nlink > 0 || s.isOpen(f.ino) {
			return err
		}
		return t.deleteNode(f.ino)
	})
	return errors.Join(err, derr)
}

// FlushAll commits every dirty open handle, so a feed read sees what
// still-running processes wrote.
func (s *Store) FlushAll(ctx context.Context) error {
	s.openMu.Lock()
	fs := make([]*openFile, 0, len(s.open))
	for _, f := range s.open {
		fs = append(fs, f)
	}
	s.openMu.Unlock()
	var errs []error
	for _, f := range fs {
		errs = append(errs, f.commit(ctx))
	}
	return errors.Join(errs...)
}

// ReadAt reads a file's bytes by inode, through the open state if any.
func (s *Store) ReadAt(ctx context.Context, ino Ino, p []byte, off int64) (int, error) {
	if f := s.openState(ino); f != nil {
		f.mu.Lock()
		if err := f.load(ctx); err != nil {
			f.mu.Unlock()
			return 0, err
		}
		n, err := f.readAt(ctx, p, off)
		f.mu.Unlock()
		return n, err
	}
	n, err := getNode(ctx, s.rq, ino)
	if err != nil {
		return 0, err
	}
	if n.kind != KindFile {
		return 0, ErrIsDir
	}
	m, err := n.decodeManifest()
	if err != nil {
		return 0, err
	}
	f := &openFile{s: s, ino: ino, loaded: true, base: m, size: n.size}
	return f.readAt(ctx, p, off)
}
