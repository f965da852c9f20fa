package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsync/wsync/chunkstore"
)

const cs = chunkstore.ChunkSize

// maxDirtyChunks bounds the chunk images one open file holds in memory; past
// it the oldest is hashed and stored early.
const maxDirtyChunks = 8

// pooledImage is the smallest image taken from bufPool (a full chunk's
// buffer): past it, an image is likely to grow to a chunk.
const pooledImage = 128 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, cs); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

// putBuf returns a full-size image to the pool; smaller ones are dropped.
func putBuf(b *[]byte) {
	if cap(*b) == cs {
		*b = (*b)[:cs]
		bufPool.Put(b)
	}
}

// newImage returns an image buffer of length l (its bytes not cleared).
// An image of pooledImage bytes or more is a full chunk's buffer from the
// pool, which it then grows in place: a file written in pieces (git's
// pack, a linker's output, 128 KiB writes) no longer doubled its image
// through fresh, cleared buffers of 128, 256 and 512 KiB, each copied
// into the next. A small file's chunk gets a buffer sized to its data (a
// power of two from 512 bytes), so writing a 200-byte file clears neither
// half a megabyte nor a page: at 4 KiB the images were a third of the
// bytes a created file allocated (BenchmarkCreateSmallFile/group: 12.0 ->
// 8.4 KB and 18.6-19.0 -> 16.2-17.1 us of CPU a file).
func newImage(l int64) *[]byte {
	if l >= pooledImage {
		b := getBuf()
		*b = (*b)[:l]
		return b
	}
	c := int64(512)
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
// commit in stored, the committed manifest in base (up to cut), or zeros
// (a hole). Everything but base is kept per written chunk, so the state
// costs memory in proportion to what was written, whatever the length: a
// truncate to 1 TiB adds nothing, and a commit walks base's refs and the
// written chunks, never every chunk index.
type openFile struct {
	s      *Store
	ino    Ino
	refs   int  // handles; guarded by Store.openMu
	orphan bool // its last name went while open; guarded by Store.openMu

	mu       sync.Mutex
	idle     sync.Cond // L is &mu; signalled as each background store ends
	loaded   bool
	base     chunkstore.Manifest // the committed content
	bidx     chunkstore.Index    // base's chunk index
	baseSize int64
	cut      int64 // base bytes at or past cut were truncated away: zeros
	size     int64
	mtime    int64
	dirty    bool
	bufs     map[int64]*[]byte
	lru      []int64                  // dirty chunk indices, oldest first
	flights  map[int64]*flight        // the newest image of each chunk in flight
	inflight int                      // background stores running, superseded ones too
	stored   map[int64]chunkstore.Ref // chunks stored since the last commit; a hole for zeros
	stage    *chunkstore.Stage
	// werr is a failure the writer has not heard of (a background store,
	// or a commit FlushAll ran): the next write, flush or close reports
	// it, once.
	werr error
	// failing is the last background store's failure, nil once one
	// succeeds. While it is set a write that needs a new image past the
	// dirty bound retries a store in the foreground and fails if it
	// fails, so memory stays bounded while the disk is full.
	failing  error
	stale    bool  // the committed content changed under a clean file (an apply)
	rev      int64 // the rev of this state's last commit
	released bool
	// charged is the file's part of Store.reserved: what its buffered
	// size exceeds its committed size by (quota.go).
	charged int64
}

type flight struct {
	buf   *[]byte
	n     int
	stage *chunkstore.Stage // the stage of the commit it belongs to
}

func newOpenFile(s *Store, ino Ino) *openFile {
	f := &openFile{s: s, ino: ino}
	f.idle.L = &f.mu
	return f
}

// readerFile is a read-only view of committed content.
func (s *Store) readerFile(ino Ino, m chunkstore.Manifest, size int64) *openFile {
	f := newOpenFile(s, ino)
	f.setBase(m, size)
	f.loaded = true
	return f
}

// setBase makes m the committed content, nothing cut.
func (f *openFile) setBase(m chunkstore.Manifest, size int64) {
	f.base, f.bidx = m, m.Index()
	f.baseSize = m.Size()
	f.cut, f.size = f.baseSize, size
}

// Handle is one open of a file. Writes are buffered in the inode's open
// state; full chunks are hashed and stored in the background as they fill;
// Flush commits the manifest as one rev.
type Handle struct {
	f      *openFile
	closed atomic.Bool
	// dir is the directory the file was opened through (SetDir), 0 when
	// unknown; read marks the handle's first read, counted for the
	// directory's read-ahead (ahead.go).
	dir  Ino
	read atomic.Bool
}

// OpenHandle opens a file for reading and writing through buffered state.
// While a handle is open its node survives unlink (nlink 0) until Release.
func (s *Store) OpenHandle(ctx context.Context, ino Ino) (*Handle, error) {
	h, _, err := s.OpenHandleAttr(ctx, ino)
	return h, err
}

// OpenHandleAttr is OpenHandle that also returns the file's attributes,
// as GetAttr would answer them once the handle exists (read after the
// open is registered, with the writes open handles buffer): the mount's
// open needs both, and this is one read of the node instead of two.
func (s *Store) OpenHandleAttr(ctx context.Context, ino Ino) (*Handle, Attr, error) {
	if s.closed.Load() {
		return nil, Attr{}, ErrClosed
	}
	// Register the open before reading the node: an unlink committing in
	// between then sees the file open and keeps the node (markOrphan), and
	// one that committed before makes the read fail.
	f := s.register(ino)
	h := &Handle{f: f}
	if s.mem != nil {
		// A file the memo holds whole, while no other writer works: an
		// unlink answered from now on sees the file open, and one
		// answered before took the file out of the memo. (A queued
		// commit of the file put its new chunk list there, and holds its
		// chunks' stage until it runs.)
		f.mu.Lock()
		n, ok := s.memoOpen(ino)
		if ok && f.needsLoad() {
			ok = f.loadFrom(n) == nil
		}
		f.mu.Unlock()
		if ok {
			if n.nlink == 0 {
				s.openMu.Lock()
				f.orphan = true
				s.openMu.Unlock()
			}
			return h, s.overlay(n.attr()), nil
		}
	}
	// The read waits for a write transaction in progress, so an unlink
	// that missed the registration above has committed before it.
	var n node
	s.lockW()
	err := s.viewLocked(ctx, func(ctx context.Context, q chunkstore.Querier) (err error) {
		n, err = getNode(ctx, q, ino)
		return err
	})
	at := s.writes.Load() // stands while the writer is held
	s.wmu.Unlock()
	switch {
	case err == nil && n.kind == KindDir:
		err = ErrIsDir
	case err == nil && (n.kind == KindSymlink || n.kind.Special()):
		err = ErrInvalid
	}
	if err != nil {
		s.unregister(f)
		return nil, Attr{}, err
	}
	if n.nlink == 0 {
		// Opened by inode after its last name went: its last release
		// deletes it.
		s.openMu.Lock()
		f.orphan = true
		s.openMu.Unlock()
	}
	// The node read above is the committed state while nothing was
	// written since: the handle's first read needs no second query of it.
	f.mu.Lock()
	if f.needsLoad() && s.writes.Load() == at {
		_ = f.loadFrom(n) // a manifest that does not decode: load reports it
	}
	f.mu.Unlock()
	return h, s.overlay(n.attr()), nil
}

// register counts one more open of ino's shared state, making it if needed.
func (s *Store) register(ino Ino) *openFile {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	f := s.open[ino]
	if f == nil {
		f = newOpenFile(s, ino)
		s.open[ino] = f
	}
	f.refs++
	return f
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
	// A loaded file that no apply changed knows the size and mtime,
	// committed or not: a commit landing between the caller's read of the
	// node and this check must not take the file back to its old size.
	f.mu.Lock()
	if f.loaded && (f.dirty || !f.stale) {
		a.Size = f.size
		a.Mtime = time.Unix(0, f.mtime)
	}
	f.mu.Unlock()
	return a
}

func (s *Store) setOpenMtime(ino Ino, mtime int64) {
	if f := s.openState(ino); f != nil {
		f.mu.Lock()
		if f.loaded {
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
	if !f.needsLoad() {
		return nil
	}
	n, err := f.s.viewNode(ctx, f.ino)
	if err != nil {
		return err
	}
	return f.loadFrom(n)
}

// needsLoad reports whether the committed state must be read (again).
// Called with f.mu held.
func (f *openFile) needsLoad() bool { return !f.loaded || f.stale && !f.dirty }

// loadFrom takes the committed state from n, read now. Called with f.mu
// held.
func (f *openFile) loadFrom(n node) error {
	m, err := n.decodeManifest()
	if err != nil {
		return err
	}
	f.setBase(m, n.size)
	f.mtime = n.mtime
	f.loaded, f.stale = true, false
	f.recharge()
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
	return f.imageFor(ctx, i, false)
}

// imageFor is image for a write; whole says the write replaces every byte
// of chunk i, so a chunk not in memory is not read first (an overwrite of
// whole chunks reads nothing of what it replaces). Called with f.mu held.
func (f *openFile) imageFor(ctx context.Context, i int64, whole bool) (*[]byte, error) {
	if b, ok := f.bufs[i]; ok {
		f.touchLRU(i)
		return b, nil
	}
	b := newImage(chunkLen(f.size, i))
	buf := *b
	// A whole write sets every byte: a pooled buffer's old bytes never
	// show.
	if !whole {
		if err := f.readChunk(ctx, i, buf, 0, f.size); err != nil {
			putBuf(b)
			return nil, err
		}
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
	valid := int64(ref.Size)
	if !ok {
		if ref, ok = f.bidx.Chunk(i); !ok {
			clear(p)
			return nil
		}
		valid = min(int64(ref.Size), f.cut-i*cs)
	}
	if off >= valid {
		clear(p)
		return nil
	}
	if int64(len(p)) > valid-off {
		clear(p[valid-off:])
		p = p[:valid-off]
	}
	if ref.IsHole() {
		clear(p)
		return nil
	}
	// A reader connection even while a group is open: a chunk that a
	// group's mutation names is pinned by a stage the group holds until it
	// commits, and chunkstore reads pinned chunks without SQL; everything
	// else is in committed rows. So a read never waits for the writer.
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
	if size > old {
		// Growth reserves its room under the quota first: refused, the
		// file is as it was.
		if err := f.reserve(size); err != nil {
			return err
		}
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
		// Flights past the end are superseded: growing again must not
		// bring their bytes back.
		for i := range f.flights {
			if i >= limit {
				delete(f.flights, i)
			}
		}
		f.cut = min(f.cut, size)
		if b := f.bufs[edge]; edge >= 0 && int64(len(*b)) > size-edge*cs {
			*b = (*b)[:size-edge*cs]
		}
	}
	f.size = size
	if size < old {
		f.recharge()
	}
	return nil
}

// withLoaded runs fn with f.mu held and f's base loaded.
func (f *openFile) withLoaded(ctx context.Context, fn func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(ctx); err != nil {
		return err
	}
	return fn()
}

// withFile runs fn on h's open state, loaded, with its lock held.
func (h *Handle) withFile(ctx context.Context, fn func(f *openFile) error) error {
	if h.closed.Load() {
		return ErrClosed
	}
	return h.f.withLoaded(ctx, func() error { return fn(h.f) })
}

// checkRange bounds a caller's offset and length before anything is
// allocated for them: negative is EINVAL, past MaxFileSize EFBIG.
func checkRange(off, n int64) error {
	switch {
	case off < 0 || n < 0:
		return ErrInvalid
	case off > chunkstore.MaxFileSize || n > chunkstore.MaxFileSize-off:
		return ErrFileTooBig
	}
	return nil
}

// takeErr returns the failure the writer has not heard of, once. Called
// with f.mu held.
func (f *openFile) takeErr() error {
	err := f.werr
	f.werr = nil
	return err
}

// WriteAt writes p at off. Chunks the write fills to their end are hashed
// and stored in the background; the write blocks only when too many are in
// flight. A background store that failed since the last write, flush or
// close is reported here (its bytes are kept dirty and stored again later).
func (h *Handle) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := checkRange(off, int64(len(p))); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var written int
	var flights []launched
	err := h.withFile(ctx, func(f *openFile) (err error) {
		written, flights, err = f.writeAt(ctx, p, off)
		return err
	})
	for _, fl := range flights {
		h.f.s.hashSem <- struct{}{}
		go h.f.store(ctx, fl.i, fl.f)
	}
	return written, err
}

// writeAt is WriteAt with f.mu held; it returns the chunk stores to start
// once the lock is released.
func (f *openFile) writeAt(ctx context.Context, p []byte, off int64) (int, []launched, error) {
	if err := f.takeErr(); err != nil {
		return 0, nil, err
	}
	end := off + int64(len(p))
	if err := f.makeRoom(ctx, off/cs, (end-1)/cs); err != nil {
		return 0, nil, err
	}
	if end > f.size {
		if err := f.resize(ctx, end); err != nil {
			return 0, nil, err
		}
	}
	var full []int64
	written := 0
	for written < len(p) {
		pos := off + int64(written)
		i := pos / cs
		within := pos - i*cs
		upto := min(within+int64(len(p)-written), cs)
		b, err := f.imageFor(ctx, i, within == 0 && upto >= chunkLen(f.size, i))
		if err != nil {
			return written, nil, err
		}
		extendImage(b, upto)
		k := copy((*b)[within:], p[written:])
		written += k
		if pos+int64(k) == (i+1)*cs {
			full = append(full, i)
		}
	}
	f.dirty = true
	f.mtime = time.Now().UnixNano()
	flights := f.launch(full)
	// Past the dirty bound, the oldest images go too.
	for len(f.bufs) > maxDirtyChunks {
		flights = append(flights, f.launch(f.lru[:1])...)
	}
	return written, flights, nil
}

// makeRoom keeps the dirty images of a file whose stores fail within the
// bound: while a write to chunks [first, last] would take them past it, the
// oldest image is stored in the foreground, and its failure fails the write
// (ENOSPC while the disk is full) instead of the image staying in memory.
// Called with f.mu held, which it releases while it stores.
func (f *openFile) makeRoom(ctx context.Context, first, last int64) error {
	for f.failing != nil && len(f.lru) > 0 {
		need := 0
		for i := first; i <= last; i++ {
			if _, ok := f.bufs[i]; !ok {
				need++
			}
		}
		if len(f.bufs)+need <= maxDirtyChunks {
			return nil
		}
		fl := f.launch(f.lru[:1])
		f.mu.Unlock()
		f.s.hashSem <- struct{}{}
		f.store(ctx, fl[0].i, fl[0].f)
		f.mu.Lock()
		if f.failing != nil {
			f.werr = nil // reported now
			return f.failing
		}
	}
	return nil
}

type launched struct {
	i int64
	f *flight
}

// launch moves chunk images into flight. Called with f.mu held.
func (f *openFile) launch(idx []int64) []launched {
	var out []launched
	for _, i := range slices.Clone(idx) {
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
		fl := &flight{buf: b, n: int(chunkLen(f.size, i)), stage: f.stage}
		f.flights[i] = fl
		f.inflight++
		out = append(out, launched{i, fl})
	}
	return out
}

// storeImage stores one chunk image of a local write under stage: an
// all-zero image becomes a hole without being hashed, and bytes that would
// take the disk reserve are refused (ErrNoSpace, reserve.go).
func (s *Store) storeImage(ctx context.Context, stage *chunkstore.Stage, data []byte) (chunkstore.Ref, error) {
	if chunkstore.IsZero(data) {
		return chunkstore.Ref{Hash: chunkstore.HoleHash, Size: uint32(len(data))}, nil
	}
	if err := s.room.admit(len(data)); err != nil {
		return chunkstore.Ref{}, err
	}
	return stage.PutHashed(ctx, data)
}

// store hashes and stores one chunk image, holding a slot of hashSem. On
// failure an image that is still the chunk's newest goes back to the dirty
// images (nothing is lost while the file is open) and the error waits for
// the writer.
func (f *openFile) store(ctx context.Context, i int64, fl *flight) {
	defer func() { <-f.s.hashSem }()
	ref, err := f.s.storeImage(context.WithoutCancel(ctx), fl.stage, (*fl.buf)[:fl.n])
	f.mu.Lock()
	keep := false
	if err != nil {
		err = fmt.Errorf("store chunk %d of inode %d: %w", i, f.ino, err)
		countWriteError("store", err)
	}
	if f.flights[i] == fl {
		delete(f.flights, i)
		// Unless newer bytes superseded the image or a resize changed the
		// chunk's length (resize re-images a chunk whose length changes),
		// the stored chunk is now the chunk's source.
		_, redirtied := f.bufs[i]
		if !redirtied && int64(fl.n) == chunkLen(f.size, i) {
			if err == nil {
				if f.stored == nil {
					f.stored = make(map[int64]chunkstore.Ref)
				}
				f.stored[i] = ref
			} else {
				if f.bufs == nil {
					f.bufs = make(map[int64]*[]byte)
				}
				f.bufs[i] = fl.buf
				f.lru = append(f.lru, i)
				keep = true
				if f.werr == nil {
					f.werr = err
				}
			}
		}
	}
	f.failing = err
	f.inflight--
	f.idle.Broadcast()
	f.mu.Unlock()
	if !keep {
		putBuf(fl.buf)
	}
}

// ReadAt reads through the open state: buffered writes are visible.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	h.noteRead(ctx, off)
	var n int
	err := h.withFile(ctx, func(f *openFile) (err error) {
		n, err = f.readAt(ctx, p, off)
		return err
	})
	return n, err
}

// noteRead counts a handle's first read toward the read-ahead of its
// directory's small files.
func (h *Handle) noteRead(ctx context.Context, off int64) {
	if h.dir != 0 && off == 0 && !h.read.Load() && h.read.CompareAndSwap(false, true) && h.Size() <= chunkstore.ChunkSize {
		h.f.s.noteFirstRead(ctx, h.dir)
	}
}

// ReadSpan is ReadAt for a reader that copies the bytes itself (the
// mount's READ reply, spliced from a file into the kernel): when the n
// bytes at off (fewer at the end of the file) are committed bytes of one
// chunk the store keeps in a file of its own (chunkstore.Store.Span), it
// returns where they lie, held open until the caller releases the span.
// ok false: read them with ReadAt, which has every other case (bytes
// written and not committed, holes, small chunks, errors). The bytes are
// the file's as of the call, as ReadAt's are: a chunk file never changes.
func (h *Handle) ReadSpan(ctx context.Context, off int64, n int) (sp chunkstore.FileSpan, ok bool) {
	if off < 0 || n <= 0 {
		return sp, false
	}
	h.noteRead(ctx, off)
	h.withFile(ctx, func(f *openFile) error {
		sp, ok = f.span(off, n)
		return nil
	}) // an error (loading the file's manifest) comes again to ReadAt
	return sp, ok
}

// span is ReadSpan's look-up. Called with f.mu held.
func (f *openFile) span(off int64, n int) (chunkstore.FileSpan, bool) {
	if off >= f.size {
		return chunkstore.FileSpan{}, false
	}
	n = int(min(int64(n), f.size-off))
	i := off / cs
	within := off - i*cs
	if within+int64(n) > cs {
		return chunkstore.FileSpan{}, false // two chunks
	}
	if _, ok := f.bufs[i]; ok {
		return chunkstore.FileSpan{}, false
	}
	if _, ok := f.flights[i]; ok {
		return chunkstore.FileSpan{}, false
	}
	ref, ok := f.stored[i]
	valid := int64(ref.Size)
	if !ok {
		if ref, ok = f.bidx.Chunk(i); !ok {
			return chunkstore.FileSpan{}, false
		}
		valid = min(int64(ref.Size), f.cut-i*cs)
	}
	if within+int64(n) > valid {
		return chunkstore.FileSpan{}, false
	}
	return f.s.chunks.Span(ref, within, n)
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

// Truncate sets the file's size and commits it. Growing adds a hole: no
// bytes are written or hashed, however large.
func (h *Handle) Truncate(ctx context.Context, size int64) error {
	if err := checkRange(0, size); err != nil {
		return err
	}
	err := h.withFile(ctx, func(f *openFile) error {
		if size == f.size {
			return nil
		}
		if err := f.resize(ctx, size); err != nil {
			return err
		}
		f.dirty = true
		f.mtime = time.Now().UnixNano()
		return nil
	})
	if err != nil {
		return err
	}
	return h.Flush(ctx)
}

// Allocate makes the file at least off+n bytes long (fallocate(2) mode 0:
// the store reserves no space, so the new bytes are a hole), under the
// same bounds as a write.
func (h *Handle) Allocate(ctx context.Context, off, n int64) error {
	if err := checkRange(off, n); err != nil {
		return err
	}
	if off+n <= h.Size() {
		return nil
	}
	return h.Truncate(ctx, off+n)
}

// Seek finds the first offset at or after off that is in a data region
// (hole false: SEEK_DATA) or in a hole (hole true: SEEK_HOLE), by chunk:
// a chunk with written or stored bytes is data, one that is a hole ref,
// truncated away or never written is a hole, and the end of the file is a
// hole. At or past the end it is ErrPastEnd (ENXIO). It walks the written
// chunks and base's refs, so tools that copy sparse files skip a
// terabyte of holes in one call.
func (h *Handle) Seek(ctx context.Context, off int64, hole bool) (int64, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	var pos int64
	err := h.withFile(ctx, func(f *openFile) (err error) {
		pos, err = f.seek(off, hole)
		return err
	})
	return pos, err
}

// seek is Seek with f.mu held.
func (f *openFile) seek(off int64, hole bool) (int64, error) {
	if off >= f.size {
		return 0, ErrPastEnd
	}
	i, n := off/cs, (f.size+cs-1)/cs
	if hole {
		for i < n && f.isData(i) {
			i++
		}
		return min(max(off, i*cs), f.size), nil
	}
	if i = f.nextData(i, n); i >= n {
		return 0, ErrPastEnd
	}
	return max(off, i*cs), nil
}

// isData reports whether chunk i holds bytes other than a hole's. Called
// with f.mu held.
func (f *openFile) isData(i int64) bool {
	if _, ok := f.bufs[i]; ok {
		return true
	}
	if _, ok := f.flights[i]; ok {
		return true
	}
	if r, ok := f.stored[i]; ok {
		return !r.IsHole()
	}
	r, ok := f.bidx.Chunk(i)
	return ok && !r.IsHole() && i*cs < f.cut
}

// nextData returns the first data chunk in [i, n), or n. Called with f.mu
// held.
func (f *openFile) nextData(i, n int64) int64 {
	best := n
	for j := range f.bufs {
		if j >= i && j < best {
			best = j
		}
	}
	for j := range f.flights {
		if j >= i && j < best {
			best = j
		}
	}
	for j, r := range f.stored {
		if !r.IsHole() && j >= i && j < best {
			best = j
		}
	}
	for off, r := range f.base.Runs() {
		j := off / cs
		if j >= best || off >= f.cut {
			break
		}
		if j < i || r.IsHole() {
			continue
		}
		if s, ok := f.stored[j]; !ok || !s.IsHole() {
			return j
		}
	}
	return best
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

// CommittedRev is the rev the file's last commit through any of its
// handles stamped, 0 if none did since it was opened.
func (h *Handle) CommittedRev() int64 {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.rev
}

// Dirty reports whether the handle's file has uncommitted writes.
func (h *Handle) Dirty() bool {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.dirty
}

// Flush commits buffered writes: every chunk is stored, then one
// transaction writes the manifest, size and mtime and stamps one rev on the
// node and all its names. A failure (a full disk: ENOSPC) keeps the writes
// buffered, so a later flush retries them; an earlier failure that this
// commit made good is not reported.
func (h *Handle) Flush(ctx context.Context) error {
	if h.closed.Load() {
		return ErrClosed
	}
	err := h.f.commit(ctx)
	if err != nil {
		countWriteError("commit", err)
	}
	return err
}

func (f *openFile) commit(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.inflight > 0 {
		f.idle.Wait()
	}
	// A failure not yet reported is settled by this commit: retried
	// below, it either succeeds (nothing was lost) or returns its error.
	f.werr = nil
	if !f.dirty || f.released {
		return nil
	}
	if f.stage == nil {
		f.stage = f.s.chunks.NewStage()
	}
	for i, b := range f.bufs {
		l := chunkLen(f.size, i)
		extendImage(b, l)
		ref, err := f.s.storeImage(ctx, f.stage, (*b)[:l])
		if err != nil {
			f.failing = fmt.Errorf("store chunk %d of inode %d: %w", i, f.ino, err)
			return fmt.Errorf("flush inode %d: %w", f.ino, f.failing)
		}
		if f.stored == nil {
			f.stored = make(map[int64]chunkstore.Ref)
		}
		f.stored[i] = ref
		delete(f.bufs, i)
		f.dropLRU(i)
		putBuf(b)
	}
	f.failing = nil
	m := f.manifest()
	if err := m.Validate(); err != nil || m.Size() != f.size {
		return fmt.Errorf("flush inode %d: built a manifest of %d bytes for %d: %v", f.ino, m.Size(), f.size, err)
	}
	mtime := f.mtime
	stage := f.stage
	own := f.charged // this commit's growth, reserved: moved to the usage with it
	commitFn := func(rev *int64) func(*wtx) error {
		return func(t *wtx) error {
			t.hold(stage)
			t.own = own
			t.carries = true // the file's row, declared below; its paths' change rows, chunk references
			n, paths, ok := t.keptNode(f.ino)
			if !ok {
				var err error
				if n, err = getNode(t.ctx, t.tx, f.ino); err != nil {
					return err
				}
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
				t.useFile(n.size, m.Size())
				t.keepNode(f.ino, nil)
				_, err = t.exec(`UPDATE nodes SET manifest = ?, size = ?, mtime = ? WHERE ino = ?`,
					chunkstore.AppendManifest(nil, m), m.Size(), mtime, f.ino)
				return err
			}
			paths, err := t.setContent(&n, m, mtime, paths)
			if err != nil {
				return err
			}
			a := n.attr()
			t.keepNode(f.ino, &a)
			t.keepRow(f.ino, n.manifest, paths)
			*rev = t.cur
			return nil
		}
	}
	// Answered from memory when the memo knows the node (behind.go): the
	// chunks are staged, the row is written when the queue runs it.
	rev, queued := f.s.behindCommit(f.ino, content{man: m, mtime: mtime, stage: stage, own: own}, commitFn(new(int64)))
	if !queued {
		if err := f.s.mutate(ctx, commitFn(&rev)); err != nil {
			return fmt.Errorf("flush inode %d: %w", f.ino, err)
		}
	}
	f.rev = rev
	f.settled(own)
	f.setBase(m, f.size)
	f.recharge()
	clear(f.stored)
	f.stage = nil // the transaction holds it until it commits
	f.dirty = false
	return nil
}

// manifest builds the file's manifest from the committed one and the
// chunks stored since: base's refs where the chunk is untouched and not
// cut, the stored ref where it was written, holes elsewhere. It walks
// base's refs in the ranges it copies and the stored chunks, not every
// chunk index. Called with f.mu held and no dirty images.
func (f *openFile) manifest() chunkstore.Manifest {
	nchunks := (f.size + cs - 1) / cs
	// Base chunks [0, reuse) are whole and uncut, with the same length in
	// the new file; the partial tail counts when the size is unchanged.
	lim := min(f.cut, f.size, f.baseSize)
	reuse := lim / cs
	if f.baseSize%cs != 0 && lim == f.baseSize && f.size == f.baseSize {
		reuse++
	}
	var m chunkstore.Manifest
	fill := func(lo, hi int64) {
		if b := min(hi, reuse); lo < b {
			m = f.bidx.AppendChunks(m, lo, b)
			lo = b
		}
		if lo < hi {
			m = m.AppendHole(min(hi*cs, f.size) - lo*cs)
		}
	}
	next := int64(0)
	for _, i := range slices.Sorted(maps.Keys(f.stored)) {
		if i >= nchunks {
			continue
		}
		fill(next, i)
		m = m.Append(f.stored[i])
		next = i + 1
	}
	fill(next, nchunks)
	return m
}

// Release flushes and closes the handle. The last release of a file whose
// names are all gone deletes its node.
func (h *Handle) Release(ctx context.Context) error {
	if h.closed.Swap(true) {
		return nil
	}
	err := h.f.commit(ctx)
	if err != nil {
		countWriteError("commit", err)
	}
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
	for f.inflight > 0 {
		f.idle.Wait()
	}
	f.released = true
	f.recharge()
	for i, b := range f.bufs {
		putBuf(b)
		delete(f.bufs, i)
	}
	f.lru = nil
	if f.stage != nil {
		f.stage.Release()
		f.stage = nil
	}
	f.mu.Unlock()
	if !orphan {
		return err
	}
	derr := s.mutate(ctx, func(t *wtx) error {
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

// FlushAll commits every dirty open file it can, so a feed read sees what
// still-running processes wrote. One file's failure does not fail the call
// (the pull goes on with the others): the error stays with the file, for
// its writer's next write, flush or close, and is logged. Only a cancelled
// context or a closed store fail it; when the store is closing, every
// file's failure is returned.
func (s *Store) FlushAll(ctx context.Context) error {
	s.openMu.Lock()
	fs := make([]*openFile, 0, len(s.open))
	for _, f := range s.open {
		fs = append(fs, f)
	}
	s.openMu.Unlock()
	closing := ctx.Value(closingKey{}) != nil
	var errs []error
	for _, f := range fs {
		err := f.commit(ctx)
		switch {
		case err == nil:
		case closing:
			errs = append(errs, err)
		case ctx.Err() != nil || errors.Is(err, ErrClosed):
			return err
		default:
			f.mu.Lock()
			if f.werr == nil {
				f.werr = err
			}
			f.mu.Unlock()
			countWriteError("flushall", err)
			s.log.Warn("commit of an open file failed; its writer will get the error", "ino", f.ino, "err", err)
		}
	}
	return errors.Join(errs...)
}

// ReadAt reads a file's bytes by inode, through the open state if any.
func (s *Store) ReadAt(ctx context.Context, ino Ino, p []byte, off int64) (int, error) {
	if f := s.openState(ino); f != nil {
		var n int
		err := f.withLoaded(ctx, func() (err error) {
			n, err = f.readAt(ctx, p, off)
			return err
		})
		return n, err
	}
	n, err := s.viewNode(ctx, ino)
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
	return s.readerFile(ino, m, n.size).readAt(ctx, p, off)
}
