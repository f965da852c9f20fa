package chunkstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Pack layout: Dir/packs/<id>.pack, append-only files of records, each a
// 40-byte header (magic, little-endian uint32 length, the chunk's hash)
// followed by the chunk's bytes. A chunk row names its record by (pack,
// pack_off). A Store appends only to packs it created itself, so a record,
// once written, is never rewritten: a location stays valid until its pack is
// deleted, and pack ids (from the clock, strictly increasing) are never
// reused by a later pack.
const (
	packDirName     = "packs"
	packSuffix      = ".pack"
	recordHeaderLen = 40
	// defaultPackLimit is where a Store rolls to a new pack.
	defaultPackLimit = 128 << 20
	// compactDeadRatio is the share of dead bytes past which GC copies a
	// sealed pack's live chunks into the current pack and deletes it.
	compactDeadRatio = 0.5
)

var recordMagic = [4]byte{'w', 's', 'c', 'k'}

// packLoc is where a record starts.
type packLoc struct {
	pack, off int64
}

func (l packLoc) valid() bool { return l.pack != 0 }

// appendRecordHeader appends the header of a record of data under h.
func appendRecordHeader(b []byte, h Hash, n int) []byte {
	b = append(b, recordMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	return append(b, h[:]...)
}

// decodeRecordHeader decodes the header at the front of b.
func decodeRecordHeader(b []byte) (Hash, int, error) {
	if len(b) < recordHeaderLen {
		return Hash{}, 0, fmt.Errorf("%w: pack record header of %d bytes", ErrCorrupt, len(b))
	}
	if [4]byte(b[:4]) != recordMagic {
		return Hash{}, 0, fmt.Errorf("%w: bad pack record magic", ErrCorrupt)
	}
	n := binary.LittleEndian.Uint32(b[4:8])
	if n == 0 || n > ChunkSize {
		return Hash{}, 0, fmt.Errorf("%w: pack record of %d bytes", ErrCorrupt, n)
	}
	return Hash(b[8:recordHeaderLen]), int(n), nil
}

// pack is one pack file this Store knows.
type pack struct {
	id   int64
	w    *os.File // the append handle, for packs this Store created
	size int64    // bytes reserved by appends (packs found at open: 0)
	// pins counts records whose stage still holds them, and appends in
	// flight: GC neither compacts nor deletes a pack with pins.
	pins int
	// gen counts finished appends; synced is the gen the last fsync covers.
	gen, synced uint64
}

// packTable is the set of pack files. The current pack takes appends; all
// others are sealed.
type packTable struct {
	dir    string // Dir/packs
	noSync bool
	limit  int64

	mu     sync.Mutex
	m      map[int64]*pack
	cur    *pack
	lastID int64
	// dirReady: Dir/packs exists (and its creation is durable).
	dirReady bool
}

var recordPool = sync.Pool{New: func() any { b := make([]byte, 0, recordHeaderLen+ChunkSize); return &b }}

func newPackTable(dir string, noSync bool) (*packTable, error) {
	t := &packTable{dir: filepath.Join(dir, packDirName), noSync: noSync, limit: defaultPackLimit, m: make(map[int64]*pack)}
	ents, err := os.ReadDir(t.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list packs: %w", err)
	}
	t.dirReady = true
	for _, e := range ents {
		id, ok := parsePackName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		t.m[id] = &pack{id: id}
		t.lastID = max(t.lastID, id)
	}
	return t, nil
}

func parsePackName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, packSuffix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

func (t *packTable) path(id int64) string {
	return filepath.Join(t.dir, strconv.FormatInt(id, 10)+packSuffix)
}

// exists reports whether the pack is known and not deleted.
func (t *packTable) exists(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id] != nil
}

// rollLocked seals the current pack and creates a new one.
func (t *packTable) rollLocked(parent string) error {
	if !t.dirReady {
		if err := os.Mkdir(t.dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if !t.noSync {
			if err := syncDir(parent); err != nil {
				return err
			}
		}
		t.dirReady = true
	}
	id := max(time.Now().UnixNano(), t.lastID+1)
	f, err := os.OpenFile(t.path(id), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if !t.noSync {
		// The name is durable before any row can name the pack; the bytes
		// are synced per commit (syncPacks).
		if err := syncDir(t.dir); err != nil {
			f.Close()
			os.Remove(f.Name())
			return err
		}
	}
	t.lastID = id
	p := &pack{id: id, w: f}
	t.m[id] = p
	t.cur = p
	return nil
}

// append writes one record and returns its location, pinned: the caller
// unpins it when its stage lets go (or at once, for a copy nobody holds).
// Offsets are reserved under the lock; the write itself runs outside it.
func (t *packTable) append(parent string, h Hash, data []byte) (packLoc, error) {
	n := int64(recordHeaderLen + len(data))
	t.mu.Lock()
	if t.cur == nil || t.cur.size > 0 && t.cur.size+n > t.limit {
		if err := t.rollLocked(parent); err != nil {
			t.mu.Unlock()
			return packLoc{}, fmt.Errorf("new pack: %w", err)
		}
	}
	p := t.cur
	loc := packLoc{pack: p.id, off: p.size}
	p.size += n
	p.pins++
	t.mu.Unlock()

	bp := recordPool.Get().(*[]byte)
	buf := append(appendRecordHeader((*bp)[:0], h, len(data)), data...)
	_, err := p.w.WriteAt(buf, loc.off)
	*bp = buf[:0]
	recordPool.Put(bp)

	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		p.pins--
		return packLoc{}, fmt.Errorf("append to pack %d: %w", p.id, err)
	}
	p.gen++
	return loc, nil
}

func (t *packTable) unpin(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.m[id]; p != nil && p.pins > 0 {
		p.pins--
	}
}

// sync makes every finished append to the given packs durable: one fsync
// per pack with appends since its last sync.
func (t *packTable) sync(ids map[int64]struct{}) error {
	if t == nil || t.noSync || len(ids) == 0 {
		return nil
	}
	for id := range ids {
		t.mu.Lock()
		p := t.m[id]
		if p == nil || p.w == nil || p.synced >= p.gen {
			t.mu.Unlock()
			continue
		}
		g := p.gen
		t.mu.Unlock()
		if err := p.w.Sync(); err != nil {
			return fmt.Errorf("sync pack %d: %w", id, err)
		}
		t.mu.Lock()
		p.synced = max(p.synced, g)
		t.mu.Unlock()
	}
	return nil
}

// packState is a pack as GC sees it.
type packState struct {
	id      int64
	current bool
	pins    int
	size    int64 // bytes appended by this Store (0 for packs found at open)
}

func (t *packTable) list() []packState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]packState, 0, len(t.m))
	for id, p := range t.m {
		out = append(out, packState{id: id, current: p == t.cur, pins: p.pins, size: p.size})
	}
	return out
}

// state returns one pack's state; false if it is gone.
func (t *packTable) state(id int64) (packState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.m[id]
	if p == nil {
		return packState{}, false
	}
	return packState{id: id, current: p == t.cur, pins: p.pins, size: p.size}, true
}

// seal makes the pack no longer current if it still is: the next append
// starts a new pack, and GC may then compact this one.
func (t *packTable) seal(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur != nil && t.cur.id == id {
		t.cur = nil
	}
}

// remove deletes a sealed, unpinned pack; false if it is in use.
func (t *packTable) remove(id int64) (bool, error) {
	t.mu.Lock()
	p := t.m[id]
	if p == nil {
		t.mu.Unlock()
		return false, nil
	}
	if p == t.cur || p.pins > 0 {
		t.mu.Unlock()
		return false, nil
	}
	delete(t.m, id)
	t.mu.Unlock()
	if p.w != nil {
		p.w.Close()
	}
	if err := os.Remove(t.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

func (t *packTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.m {
		if p.w != nil {
			p.w.Close()
			p.w = nil
		}
	}
	t.cur = nil
}

// defaultPackMax: chunks up to this size go to packs when not inline.
const defaultPackMax = ChunkSize - 1

// openPack returns a pack's read handle from the fd cache; ok is false when
// the pack is gone (deleted by GC, or from outside).
func (s *Store) openPack(id int64) (cf *cachedFile, ok bool, err error) {
	if !s.packs.exists(id) {
		return nil, false, nil
	}
	cf, err = s.fds.open(fdKey{pack: id}, s.packs.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	return cf, true, nil
}

// readPack reads from r's record at loc like ReadAt; ok is false when the
// pack is gone.
func (s *Store) readPack(loc packLoc, r Ref, p []byte, off int64) (n int, err error, ok bool) {
	cf, ok, err := s.openPack(loc.pack)
	if !ok {
		return 0, nil, false
	}
	if err != nil {
		return 0, fmt.Errorf("read chunk %s: %w", r.Hash, err), true
	}
	defer s.fds.done(cf)
	size := int64(r.Size)
	// A record cut short (a pack truncated from outside) is damaged as a
	// whole, whichever part of it is read: one fstat, like a chunk file's
	// size check.
	if fi, err := cf.f.Stat(); err != nil || fi.Size() < loc.off+recordHeaderLen+size {
		return 0, fmt.Errorf("read chunk %s: %w: pack %d is short", r.Hash, ErrCorrupt, loc.pack), true
	}
	want := min(int64(len(p)), size-off)
	n, err = cf.f.ReadAt(p[:want], loc.off+recordHeaderLen+off)
	if int64(n) < want {
		if err == nil || err == io.EOF {
			err = ErrCorrupt
		}
		return n, fmt.Errorf("read chunk %s: %w: pack %d is short", r.Hash, err, loc.pack), true
	}
	if want < int64(len(p)) {
		return n, io.EOF, true
	}
	return n, nil, true
}

// readRecord returns a copy of the whole chunk at loc after checking its
// header; size < 0 takes the header's length.
func (s *Store) readRecord(loc packLoc, h Hash, size int64) (data []byte, err error, ok bool) {
	return s.readRecordInto(nil, loc, h, size)
}

// readRecordInto is readRecord into *scratch's storage, grown (and kept
// in *scratch) when it is too small; nil scratch reads into a fresh
// slice. With the size known, the header and the bytes come in one read.
func (s *Store) readRecordInto(scratch *[]byte, loc packLoc, h Hash, size int64) (data []byte, err error, ok bool) {
	cf, ok, err := s.openPack(loc.pack)
	if !ok || err != nil {
		return nil, err, ok
	}
	defer s.fds.done(cf)
	buf := func(n int) []byte {
		if scratch == nil {
			return make([]byte, n)
		}
		if cap(*scratch) < n {
			*scratch = make([]byte, n)
		}
		return (*scratch)[:n]
	}
	check := func(hdr []byte) (int, error) {
		got, n, err := decodeRecordHeader(hdr)
		switch {
		case err != nil:
			return 0, err
		case got != h:
			return 0, fmt.Errorf("%w: pack %d holds %s at %d", ErrCorrupt, loc.pack, got, loc.off)
		case size >= 0 && int64(n) != size:
			return 0, fmt.Errorf("%w: pack record of %d bytes, want %d", ErrCorrupt, n, size)
		}
		return n, nil
	}
	short := func(err error) error {
		if err == nil || err == io.EOF {
			err = ErrCorrupt
		}
		return fmt.Errorf("%w: pack %d is short", err, loc.pack)
	}
	if size >= 0 && size <= ChunkSize {
		b := buf(recordHeaderLen + int(size))
		k, rerr := cf.f.ReadAt(b, loc.off)
		if k < recordHeaderLen {
			return nil, fmt.Errorf("%w: pack %d: %v", ErrCorrupt, loc.pack, rerr), true
		}
		if _, err := check(b[:recordHeaderLen]); err != nil {
			return nil, err, true
		}
		if k < len(b) {
			return nil, short(rerr), true
		}
		if scratch == nil {
			// One allocation for the header and the bytes: hand back the
			// bytes alone, so the caller's copy does not pin the header.
			return b[recordHeaderLen:len(b):len(b)], nil, true
		}
		return b[recordHeaderLen:], nil, true
	}
	var hdr [recordHeaderLen]byte
	if _, err := cf.f.ReadAt(hdr[:], loc.off); err != nil {
		return nil, fmt.Errorf("%w: pack %d: %v", ErrCorrupt, loc.pack, err), true
	}
	n, err := check(hdr[:])
	if err != nil {
		return nil, err, true
	}
	b := buf(n)
	if k, err := cf.f.ReadAt(b, loc.off+recordHeaderLen); k < n {
		return nil, short(err), true
	}
	return b, nil, true
}

// intact reports whether the pack holding loc is long enough for a record
// of size bytes. sizes caches each pack's length for one call.
func (s *Store) intact(loc packLoc, size int64, sizes map[int64]int64) bool {
	n, ok := sizes[loc.pack]
	if !ok {
		n = -1
		if cf, ok, err := s.openPack(loc.pack); ok && err == nil {
			if fi, err := cf.f.Stat(); err == nil {
				n = fi.Size()
			}
			s.fds.done(cf)
		}
		sizes[loc.pack] = n
	}
	return n >= loc.off+recordHeaderLen+size
}

// knownLoc returns where a pinned or recently seen pack chunk is.
func (s *Store) knownLoc(h Hash) packLoc {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pins[h]; p != nil && p.loc.valid() {
		return p.loc
	}
	return s.locs[h]
}

func (s *Store) rememberLoc(h Hash, loc packLoc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rememberLocLocked(h, loc)
}

func (s *Store) forgetLoc(h Hash, loc packLoc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locs[h] == loc {
		delete(s.locs, h)
	}
}

// nullLoc converts a row's pack columns.
func nullLoc(pack, off *int64) packLoc {
	if pack == nil || off == nil {
		return packLoc{}
	}
	return packLoc{pack: *pack, off: *off}
}
