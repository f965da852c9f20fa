package chunkstore

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// File layout: Dir/<first two hex digits>/<64 hex digits>, one file per
// chunk. Bytes are written to Dir/xx/.tmp-<hash>-<random>, fsynced and
// renamed into place, so a name in the layout always has complete, durable
// bytes behind it. The rename itself is made durable by syncDirs, which
// AddRefs calls before the transaction naming the chunk can commit: one
// directory fsync per directory and batch instead of one per chunk, which
// on disk costs about as much as the chunk's own fsync (docs/PERFORMANCE.md).
const tempPrefix = ".tmp-"

func (s *Store) filePath(h Hash) string {
	x := h.String()
	return filepath.Join(s.dir, x[:2], x)
}

// writeFile makes h's bytes durable at its path. A regular file of the right
// size already there is kept: names are only ever published complete, so
// the size check guards against damage from outside, not from us.
func (s *Store) writeFile(h Hash, data []byte) error {
	path := s.filePath(h)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(data)) {
		return nil
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix+h.String()+"-*")
	if errors.Is(err, fs.ErrNotExist) {
		if err = s.mkdir(dir); err == nil {
			f, err = os.CreateTemp(dir, tempPrefix+h.String()+"-*")
		}
	}
	if err != nil {
		return fmt.Errorf("write chunk %s: %w", h, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil && !s.noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write chunk %s: %w", h, err)
	}
	if !s.noSync {
		s.mu.Lock()
		s.dirtyDirs[dir] = struct{}{}
		s.mu.Unlock()
	}
	// A damaged file we replaced may still be open in the cache.
	s.fds.forget(fdKey{hash: h})
	return nil
}

func (s *Store) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if s.noSync {
		return nil
	}
	return syncDir(s.dir)
}

// syncDirs makes the directory entries of chunk files durable. Directories
// with renames not yet synced are synced once; unsynced lists directories
// to sync regardless (files found on disk rather than written by this
// Store). syncMu makes a caller wait for a sync another caller has started
// on a directory it needs.
func (s *Store) syncDirs(hs []Hash, unsynced []Hash) error {
	if s.noSync || len(hs)+len(unsynced) == 0 {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	need := make(map[string]struct{})
	s.mu.Lock()
	for _, h := range hs {
		dir := filepath.Dir(s.filePath(h))
		if _, ok := s.dirtyDirs[dir]; ok {
			need[dir] = struct{}{}
			delete(s.dirtyDirs, dir)
		}
	}
	s.mu.Unlock()
	for _, h := range unsynced {
		need[filepath.Dir(s.filePath(h))] = struct{}{}
	}
	for dir := range need {
		if err := syncDir(dir); err != nil {
			s.mu.Lock()
			for dir := range need {
				s.dirtyDirs[dir] = struct{}{}
			}
			s.mu.Unlock()
			return fmt.Errorf("sync chunk dir: %w", err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// statChunk reports whether h's file is a regular file of size bytes.
func (s *Store) statChunk(h Hash, size int64) bool {
	fi, err := os.Stat(s.filePath(h))
	return err == nil && fi.Mode().IsRegular() && fi.Size() == size
}

// diskFile is a file found in Dir by a scan.
type diskFile struct {
	hash Hash
	path string
	size int64
	temp bool // an unfinished write (ours in progress, or a crash's)
}

// scanDir lists the chunk files and temp files in Dir. Names it does not
// recognise are left alone.
func (s *Store) scanDir() ([]diskFile, error) {
	subs, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("scan chunk dir: %w", err)
	}
	var out []diskFile
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(s.dir, sub.Name()))
		if err != nil {
			return nil, fmt.Errorf("scan chunk dir: %w", err)
		}
		for _, e := range ents {
			name := e.Name()
			f := diskFile{path: filepath.Join(s.dir, sub.Name(), name)}
			hex := name
			if strings.HasPrefix(name, tempPrefix) {
				f.temp = true
				hex = strings.TrimPrefix(name, tempPrefix)
				if len(hex) < 64 {
					continue
				}
				hex = hex[:64]
			}
			h, err := ParseHash(hex)
			if err != nil || (!f.temp && (name[:2] != sub.Name() || !e.Type().IsRegular())) {
				continue
			}
			f.hash = h
			if fi, err := e.Info(); err == nil {
				f.size = fi.Size()
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// fdCache keeps recently read chunk files open, so a FUSE read of a file
// chunk costs a pread, not open+fstat+pread+close. Content addressing makes
// this safe: a name's bytes never change, and an fd that outlives an
// unlink still reads the right bytes.
type fdCache struct {
	mu  sync.Mutex
	max int
	m   map[fdKey]*cachedFile
	lru list.List // of *cachedFile, most recent first
}

// fdKey names a chunk file (pack 0) or a pack file (hash zero).
type fdKey struct {
	pack int64
	hash Hash
}

type cachedFile struct {
	key     fdKey
	f       *os.File
	size    int64
	users   int
	evicted bool
	elem    *list.Element
}

const defaultFDCacheSize = 64

func newFDCache(max int) *fdCache {
	return &fdCache{max: max, m: make(map[fdKey]*cachedFile)}
}

// open returns h's file, from the cache when it is there; the caller calls
// done when it has finished reading.
func (c *fdCache) open(h fdKey, path string) (*cachedFile, error) {
	c.mu.Lock()
	if cf := c.m[h]; cf != nil {
		cf.users++
		c.lru.MoveToFront(cf.elem)
		c.mu.Unlock()
		return cf, nil
	}
	c.mu.Unlock()

	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	cf := &cachedFile{key: h, f: f, size: fi.Size(), users: 1}
	if c.max <= 0 {
		cf.evicted = true
		return cf, nil
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[h]; old != nil { // another reader got there first
		old.users++
		c.lru.MoveToFront(old.elem)
		f.Close()
		return old, nil
	}
	c.m[h] = cf
	cf.elem = c.lru.PushFront(cf)
	for c.lru.Len() > c.max {
		c.evictLocked(c.lru.Back().Value.(*cachedFile))
	}
	return cf, nil
}

func (c *fdCache) done(cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf.users--; cf.users == 0 && cf.evicted {
		cf.f.Close()
	}
}

// forget drops h from the cache (its file was unlinked or replaced).
func (c *fdCache) forget(h fdKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf := c.m[h]; cf != nil {
		c.evictLocked(cf)
	}
}

func (c *fdCache) evictLocked(cf *cachedFile) {
	delete(c.m, cf.key)
	c.lru.Remove(cf.elem)
	cf.evicted = true
	if cf.users == 0 {
		cf.f.Close()
	}
}

func (c *fdCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		c.evictLocked(c.lru.Back().Value.(*cachedFile))
	}
	return nil
}
