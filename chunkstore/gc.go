package chunkstore

import (
	"context"
	"database/sql"
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
	// records are the pack records of deleted rows, in case the same
	// transaction or one before Finish references them again.
	records map[Hash]packLoc
	// dropPacks are packs to delete at Finish: empty ones, and those whose
	// live chunks this GC copied into the current pack. AddRefs takes a
	// pack out when it names one of its records.
	dropPacks map[int64]struct{}
	// moved are the new locations of copied chunks.
	moved map[Hash]packLoc
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
	sw := &Sweep{s: s, files: make(map[Hash]int64), records: make(map[Hash]packLoc),
		dropPacks: make(map[int64]struct{}), moved: make(map[Hash]packLoc)}

	type victim struct {
		id     int64
		hash   Hash
		size   int64
		inline bool
		loc    packLoc
	}
	var rows *sql.Rows
	err := withPackColumns(ctx, q, func() (err error) {
		rows, err = q.QueryContext(ctx, "SELECT id, hash, size, data IS NOT NULL, pack, pack_off FROM chunks WHERE refs <= 0")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	var victims []victim
	for rows.Next() {
		var v victim
		var hb []byte
		var pack, off *int64
		if err := rows.Scan(&v.id, &hb, &v.size, &v.inline, &pack, &off); err != nil {
			rows.Close()
			return nil, fmt.Errorf("gc: %w", err)
		}
		v.loc = nullLoc(pack, off)
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
	s.mu.Lock()
	for _, v := range victims {
		sw.stats.Rows++
		switch {
		case v.inline:
			sw.stats.Bytes += v.size
		case v.loc.valid():
			// Dead space in its pack from now on, reclaimed by compaction.
			sw.stats.Bytes += v.size
			sw.records[v.hash] = v.loc
			delete(s.locs, v.hash)
		case s.dir != "":
			sw.files[v.hash] = v.size
		}
	}
	s.mu.Unlock()

	if s.dir != "" {
		if err := sw.findOrphans(ctx, q, scan); err != nil {
			return nil, err
		}
		if err := sw.collectPacks(ctx, q); err != nil {
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

// spareRecordLocked returns the record of a row deleted by the pending
// sweep, or a record this Store appended or read lately, for AddRefs to
// name again; the zero packLoc if there is none.
func (s *Store) spareRecordLocked(h Hash) packLoc {
	if s.sweep != nil {
		if loc, ok := s.sweep.records[h]; ok {
			delete(s.sweep.records, h)
			return loc
		}
	}
	return s.locs[h]
}

// sparePackLocked keeps the pending sweep from deleting a pack: a
// transaction is about to name one of its records.
func (s *Store) sparePackLocked(id int64) {
	if s.sweep != nil {
		delete(s.sweep.dropPacks, id)
	}
}

// collectPacks counts each sealed pack's live bytes from the rows (dead
// bytes are the rest of the file: deleted rows, copies superseded, appends
// never committed) and plans its deletion when nothing in it is live, or
// its compaction when dead bytes pass compactDeadRatio. The current pack
// and packs holding staged records are left alone.
func (sw *Sweep) collectPacks(ctx context.Context, q Querier) error {
	s := sw.s
	type liveCount struct{ n, bytes int64 }
	live := make(map[int64]liveCount)
	rows, err := q.QueryContext(ctx, "SELECT pack, count(*), sum(size) FROM chunks WHERE pack IS NOT NULL GROUP BY pack")
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	for rows.Next() {
		var id int64
		var c liveCount
		if err := rows.Scan(&id, &c.n, &c.bytes); err != nil {
			rows.Close()
			return fmt.Errorf("gc: %w", err)
		}
		c.bytes += c.n * recordHeaderLen
		live[id] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	syncs := make(map[int64]struct{})
	for _, p := range s.packs.list() {
		if p.current || p.pins > 0 {
			continue
		}
		c := live[p.id]
		if c.n == 0 {
			sw.dropPacks[p.id] = struct{}{}
			continue
		}
		fi, err := os.Stat(s.packs.path(p.id))
		if err != nil || float64(fi.Size()-c.bytes) <= compactDeadRatio*float64(fi.Size()) {
			continue
		}
		if err := sw.compact(ctx, q, p.id, syncs); err != nil {
			// The pack stays; chunks already copied just have new rows.
			s.log.Warn("pack compaction stopped; the pack is kept", "pack", p.id, "err", err)
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("gc: %w", err)
			}
			continue
		}
		sw.dropPacks[p.id] = struct{}{}
	}
	if err := s.packs.sync(syncs); err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	return nil
}

// compact copies the records of a pack's rows into the current pack and
// points the rows at the copies, inside the GC's transaction.
func (sw *Sweep) compact(ctx context.Context, q Querier, id int64, syncs map[int64]struct{}) error {
	s := sw.s
	type rec struct {
		id   int64
		hash Hash
		size int64
		off  int64
	}
	rows, err := q.QueryContext(ctx, "SELECT id, hash, size, pack_off FROM chunks WHERE pack = ?", id)
	if err != nil {
		return err
	}
	var recs []rec
	for rows.Next() {
		var r rec
		var hb []byte
		if err := rows.Scan(&r.id, &hb, &r.size, &r.off); err != nil {
			rows.Close()
			return err
		}
		if r.hash, err = blobHash(hb); err != nil {
			rows.Close()
			return err
		}
		recs = append(recs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err, ok := s.readRecord(packLoc{pack: id, off: r.off}, r.hash, r.size)
		if !ok {
			return fmt.Errorf("pack %d: %w: missing", id, ErrCorrupt)
		}
		if err != nil {
			return err
		}
		loc, err := s.packs.append(s.dir, r.hash, data)
		if err != nil {
			return err
		}
		s.packs.unpin(loc.pack) // the row holds it from the commit on
		syncs[loc.pack] = struct{}{}
		if _, err := q.ExecContext(ctx, "UPDATE chunks SET pack = ?, pack_off = ? WHERE id = ?", loc.pack, loc.off, r.id); err != nil {
			return err
		}
		sw.moved[r.hash] = loc
	}
	return nil
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
			s.fds.forget(fdKey{hash: h}) // the cached fd would keep the bytes alive
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
	for h, loc := range sw.moved {
		if s.locs[h] != (packLoc{}) {
			s.locs[h] = loc
		}
	}
	packs := make([]int64, 0, len(sw.dropPacks))
	for id := range sw.dropPacks {
		packs = append(packs, id)
	}
	s.mu.Unlock()
	for _, id := range packs {
		s.mu.Lock()
		if _, ok := sw.dropPacks[id]; ok && s.sweep == sw {
			// Readers holding the pack's fd keep reading it; new reads
			// find no pack and look the row up again.
			removed, err := s.packs.remove(id)
			s.fds.forget(fdKey{pack: id})
			if err != nil {
				errs = append(errs, err)
			} else if removed {
				st.Packs++
			}
		}
		s.mu.Unlock()
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

	if sw.scanned && (st.Files > 0 || st.Rows > 0 || st.Packs > 0) {
		s.log.Info("chunk sweep after open", "rows", st.Rows, "files", st.Files, "temp_files", temps, "packs", st.Packs, "bytes", st.Bytes)
	} else if st.Files > 0 || st.Rows > 0 || st.Packs > 0 {
		s.log.Debug("chunk sweep", "rows", st.Rows, "files", st.Files, "packs", st.Packs, "bytes", st.Bytes)
	}
	if len(errs) > 0 {
		return st, fmt.Errorf("gc finish: %w", errors.Join(errs...))
	}
	return st, nil
}
