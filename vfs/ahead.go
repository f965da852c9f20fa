package vfs

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/metrics"
)

// Read-ahead of a directory's small files.
//
// A cold read of a tree of small files (cat or grep over node_modules, a
// compiler reading a package) reads each file's one chunk with a row
// lookup of its own: about 30 us a file, half of what the mount adds to
// such a read over go-fuse's loopback. The mount names the directory a
// file was opened through (Handle.SetDir). When a second file of one
// directory starts to be read right after the first, the store hands the
// chunks of the directory's other small files, as the memo knows them
// (its listing and small chunk lists), to chunkstore.Prefetch, which
// reads their rows in one query: the reads that follow find them without
// SQL. A reader of one file per directory (package.json after
// package.json) never triggers it, and one that goes on past aheadFiles
// files of a directory triggers it again.
//
// It is a hint and nothing else: what Prefetch keeps is content-addressed
// (never stale), a directory the memo does not list reads nothing ahead,
// and a failed read-ahead costs only the lookups it would have saved.

// aheadFiles is the most small files one read-ahead covers: one query. It
// bounds what a reader makes the store read beyond what it reads itself
// (two files read, up to aheadFiles rows read ahead; chunks already kept
// are not read again).
const aheadFiles = 256

// readAhead follows which directory's files are being read.
type readAhead struct {
	mu    sync.Mutex
	dir   Ino
	reads int // first reads of files of dir, one after another
}

var (
	metricAheadRuns = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_vfs_read_ahead_total",
		Help: "Read-aheads of a directory's small files, started when a second file of the directory was read right after the first.",
	}))
	metricAheadRows = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_vfs_read_ahead_rows_total",
		Help: "Chunk rows read ahead for the reads of small files to come.",
	}))
)

// SetDir names the directory the handle's file was opened through: its
// first read then counts toward reading the directory's small files
// ahead. Call it before the handle's first read.
func (h *Handle) SetDir(dir Ino) { h.dir = dir }

// noteFirstRead counts the first read of a handle's file in its
// directory and reads the directory's small files ahead when this is the
// second file of the directory read in a row.
func (s *Store) noteFirstRead(ctx context.Context, dir Ino) {
	a := &s.ahead
	a.mu.Lock()
	if a.dir != dir {
		a.dir, a.reads = dir, 0
	}
	a.reads++
	due := a.reads%aheadFiles == 2
	a.mu.Unlock()
	if !due {
		return
	}
	refs := s.memoSmallFiles(dir, aheadFiles)
	if len(refs) == 0 {
		return
	}
	metricAheadRuns.Inc()
	n, err := s.chunks.Prefetch(ctx, s.rq, refs)
	metricAheadRows.Add(float64(n))
	if err != nil {
		s.log.Debug("read-ahead failed", "dir", dir, "err", err)
	}
}

// memoSmallFiles returns the chunks of up to limit files of one chunk
// that the memo lists in dir.
func (s *Store) memoSmallFiles(dir Ino, limit int) []chunkstore.Ref {
	m := s.mem
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.dirs[dir]
	if l == nil {
		return nil
	}
	var refs []chunkstore.Ref
	for _, ino := range l.names {
		if ino == 0 {
			continue
		}
		a, ok := m.attrs[ino]
		if !ok || a.Kind != KindFile || a.Size <= 0 || a.Size > chunkstore.ChunkSize {
			continue
		}
		b, ok := m.mans[ino]
		if !ok || len(b) == 0 {
			continue
		}
		man, _, err := chunkstore.DecodeManifest(b)
		if err != nil || len(man) != 1 || man[0].IsHole() {
			continue
		}
		refs = append(refs, man[0])
		if len(refs) == limit {
			break
		}
	}
	return refs
}
