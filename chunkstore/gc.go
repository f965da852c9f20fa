package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Sweep is a collection in two steps: GC deletes rows inside the caller's
// transaction, and Finish, called after that transaction commits, unlinks
// the files. A rolled-back GC is simply never finished.
type Sweep struct {
	s     *Store
	stats GCStats // rows deleted and their inline bytes, counted by GC

	// files are the chunk files to unlink: those of deleted rows, and
	// orphans with no row. AddRefs takes a hash out before referencing it.
	files map[Hash]int64
	temps []diskFile
	// seen are the released hashes this sweep looked at; Finish clears
	// them from the store's list.
	seen    []Hash
	scanned bool
	done    bool
}

// GC deletes, inside the caller's write transaction, every row that no
// manifest references and no live stage pins, and returns the Sweep that
// removes their files once the transaction has committed. It also looks for
// orphan files (bytes written by a stage whose transaction never committed,
// or left by a crash): on the first GC of a Store the whole Dir is listed,
// after that only the files of stages released since.
//
// A newer GC supersedes an unfinished Sweep: its Finish reports its rows
// and unlinks nothing, the newer sweep covering the files.
func (s *Store) GC(ctx context.Context, q Querier) (*Sweep, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	sw := &Sweep{s: s, files: make(map[Hash]int64)}

	type victim struct {
		id     int64
		hash   Hash
		size   int64
		inline bool
	}
	rows, err := q.QueryContext(ctx, "SELECT id, hash, size, data IS NOT NULL FROM chunks WHERE refs <= 0")
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	var victims []victim
	for rows.Next() {
		var v victim
		var hb []byte
		if err := rows.Scan(&v.id, &hb, &v.size, &v.inline); err != nil {
			rows.Close()
			return nil, fmt.Errorf("gc: %w", err)
		}
		if v.hash, err = blobHash(hb); err != nil {
			rows.Close()
			return nil, fmt.Errorf("gc: %w", err)
		}
		victims = append(victims, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}

	s.mu.Lock()
	keep := victims[:0]
	for _, v := range victims {
		if s.pins[v.hash] == nil {
			keep = append(keep, v)
		}
	}
	victims = keep
	scan := s.needScan
	if old := s.sweep; old != nil {
		// Superseded: if its transaction committed, its rows are gone and
		// their files are orphans this sweep must find.
		for h := range old.files {
			s.released[h] = struct{}{}
		}
	}
	for h := range s.released {
		sw.seen = append(sw.seen, h)
	}
	s.mu.Unlock()

	for start := 0; start < len(victims); start += batchSize {
		batch := victims[start:min(start+batchSize, len(victims))]
		args := make([]any, len(batch))
		for i, v := range batch {
			args[i] = v.id
		}
		if _, err := q.ExecContext(ctx, "DELETE FROM chunks WHERE id IN ("+placeholders(len(batch))+")", args...); err != nil {
			return nil, fmt.Errorf("gc: %w", err)
		}
	}
	for _, v := range victims {
		sw.stats.Rows++
		if v.inline {
			sw.stats.Bytes += v.size
		} else if s.dir != "" {
			sw.files[v.hash] = v.size
		}
	}

	if s.dir != "" {
		if err := sw.findOrphans(ctx, q, scan); err != nil {
			return nil, err
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.sweep = sw
	return sw, nil
}

// findOrphans adds to the sweep the files that have no row: everything in
// Dir when scan is set, else the released hashes.
func (sw *Sweep) findOrphans(ctx context.Context, q Querier, scan bool) error {
	s := sw.s
	var cands []diskFile
	if scan {
		all, err := s.scanDir()
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		for _, f := range all {
			if f.temp {
				sw.temps = append(sw.temps, f)
			} else {
				cands = append(cands, f)
			}
		}
		sw.scanned = true
	} else {
		for _, h := range sw.seen {
			path := s.filePath(h)
			if fi, err := os.Lstat(path); err == nil {
				cands = append(cands, diskFile{hash: h, path: path, size: fi.Size()})
			}
		}
	}

	// Drop the files that are already doomed, then those with rows.
	todo := cands[:0]
	for _, f := range cands {
		if _, ok := sw.files[f.hash]; !ok {
			todo = append(todo, f)
		}
	}
	for start := 0; start < len(todo); start += batchSize {
		batch := todo[start:min(start+batchSize, len(todo))]
		args := make([]any, len(batch))
		for i := range batch {
			args[i] = batch[i].hash[:]
		}
		rows, err := q.QueryContext(ctx, "SELECT hash FROM chunks WHERE hash IN ("+placeholders(len(batch))+")", args...)
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		stored := make(map[Hash]bool, len(batch))
		for rows.Next() {
			var hb []byte
			if err := rows.Scan(&hb); err != nil {
				rows.Close()
				return fmt.Errorf("gc: %w", err)
			}
			if h, err := blobHash(hb); err == nil {
				stored[h] = true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		for _, f := range batch {
			if !stored[f.hash] {
				sw.files[f.hash] = f.size
			}
		}
	}
	return nil
}

// spareLocked takes h off the pending sweep: a transaction is about to
// reference its file. If that transaction rolls back, h is left for the
// next sweep to look at.
func (s *Store) spareLocked(h Hash) {
	if s.sweep == nil {
		return
	}
	if _, ok := s.sweep.files[h]; ok {
		delete(s.sweep.files, h)
		s.released[h] = struct{}{}
	}
}

// Finish unlinks the sweep's files, skipping any hash pinned or referenced
// since GC. Call it after the GC's transaction has committed, once.
func (sw *Sweep) Finish() (GCStats, error) {
	s := sw.s
	st := GCStats{Rows: sw.stats.Rows, Bytes: sw.stats.Bytes}
	var errs []error
	s.mu.Lock()
	if sw.done {
		s.mu.Unlock()
		return GCStats{}, nil
	}
	sw.done = true
	if s.sweep != sw {
		// Superseded by a newer GC (which unlinks these rows' files), or
		// the store closed.
		s.mu.Unlock()
		return st, nil
	}
	type doomed struct {
		hash Hash
		size int64
	}
	files := make([]doomed, 0, len(sw.files))
	for h, size := range sw.files {
		files = append(files, doomed{h, size})
	}
	s.mu.Unlock()

	// One file per lock hold: a Put or AddRefs of the same hash either
	// comes before (and the hash is skipped) or after (and finds no file,
	// which it writes again or reports). The lock holds the unlink itself,
	// so neither can slip in between the check and the unlink.
	temps := 0
	unlink := func(h Hash, path string, size int64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pins[h] != nil || s.sweep != sw {
			return
		}
		if _, ok := sw.files[h]; !ok && path == "" {
			return // spared by AddRefs
		}
		if path == "" {
			path = s.filePath(h)
			s.fds.forget(h) // the cached fd would keep the bytes alive
		}
		err := os.Remove(path)
		switch {
		case err == nil:
			st.Files++
			st.Bytes += size
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, err)
		}
	}
	for _, f := range files {
		unlink(f.hash, "", f.size)
	}
	for _, f := range sw.temps {
		before := st.Files
		unlink(f.hash, f.path, f.size)
		temps += int(st.Files - before)
	}

	s.mu.Lock()
	if s.sweep == sw {
		s.sweep = nil
		if sw.scanned && len(errs) == 0 {
			s.needScan = false
		}
	}
	for _, h := range sw.seen {
		delete(s.released, h)
	}
	s.mu.Unlock()

	if sw.scanned && (st.Files > 0 || st.Rows > 0) {
		s.log.Info("chunk sweep after open", "rows", st.Rows, "files", st.Files, "temp_files", temps, "bytes", st.Bytes)
	} else if st.Files > 0 || st.Rows > 0 {
		s.log.Debug("chunk sweep", "rows", st.Rows, "files", st.Files, "bytes", st.Bytes)
	}
	if len(errs) > 0 {
		return st, fmt.Errorf("gc finish: %w", errors.Join(errs...))
	}
	return st, nil
}
