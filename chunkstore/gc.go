package chunkstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync/atomic"
	"time"
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
// after that only the files of stages released since. It is one unbounded
// step: what a store runs when it opens. A live store collects in bounded
// steps with a Collection.
//
// A newer GC supersedes an unfinished Sweep: its Finish reports its rows
// and unlinks nothing, the newer sweep covering the files.
func (s *Store) GC(ctx context.Context, q Querier) (*Sweep, error) {
	sw, _, err := s.NewCollection(GCOptions{}).Step(ctx, q)
	return sw, err
}

// GCOptions configure a Collection.
type GCOptions struct {
	// MaxChunks bounds one Step: the rows it looks at and deletes, the
	// released files it checks and the pack records it moves, each at most
	// MaxChunks. 0 means no bound: one step does everything (GC).
	MaxChunks int
	// Grace spares rows whose last reference went, or that Has reported
	// present while unreferenced, less than Grace ago: a reader that read
	// a manifest just before it was replaced, or a sync peer that probed a
	// chunk and is about to reference it, finds the bytes still there.
	Grace time.Duration
	// Keep reports hashes the caller still needs outside any transaction
	// (vfs: the committed manifests open files read through); a step
	// leaves them alone. It is called with the Store's lock held and must
	// not call back into the Store.
	Keep func(Hash) bool
}

// Collection is one pass of a collection run in bounded steps, each inside
// a write transaction of its own, so that writers wait at most one step.
// Plan (optional, outside the writer) finds the packs worth compacting;
// Step collects the next MaxChunks rows and moves the next records. A
// Collection is used by one goroutine at a time.
type Collection struct {
	s     *Store
	opts  GCOptions
	after int64 // row id cursor: rows up to it were looked at
	// rowsDone: the cursor passed the last unreferenced row.
	rowsDone bool
	// packs are the sealed packs Plan found mostly or entirely dead, in
	// the order they are worked on.
	packs   []int64
	planned bool
	steps   int
}

// NewCollection starts a pass.
func (s *Store) NewCollection(opts GCOptions) *Collection {
	return &Collection{s: s, opts: opts}
}

// SetKeep replaces GCOptions.Keep for the next steps.
func (c *Collection) SetKeep(keep func(Hash) bool) { c.opts.Keep = keep }

// bounded reports whether steps are bounded.
func (c *Collection) bounded() bool { return c.opts.MaxChunks > 0 }

// Plan counts each sealed pack's live bytes from the rows, through r (a
// reader: no writer lock is needed, a step checks again what it acts on),
// and lists the packs to compact or delete. It also seals the current pack
// when it is large and mostly dead, so that its dead space can be
// reclaimed without waiting for it to fill.
func (c *Collection) Plan(ctx context.Context, r Querier) error {
	s := c.s
	c.planned = true
	if s.dir == "" {
		return nil
	}
	// Rows without references are left out: the pass deletes them
	// before it turns to packs.
	live, err := packLiveBytes(ctx, r, true)
	if err != nil {
		return fmt.Errorf("gc plan: %w", err)
	}
	c.packs = c.packs[:0]
	for _, p := range s.packs.list() {
		if p.pins > 0 {
			continue
		}
		if p.current {
			if p.size < sealMinSize || float64(p.size-live[p.id].bytes) <= compactDeadRatio*float64(p.size) {
				continue
			}
			s.packs.seal(p.id)
		}
		if dead, _ := c.s.packDead(p.id, live[p.id]); dead {
			c.packs = append(c.packs, p.id)
		}
	}
	slices.Sort(c.packs)
	return nil
}

// sealMinSize: Plan seals a current pack at least this large that is more
// than half dead (smaller ones are not worth a new file).
const sealMinSize = 8 << 20

type liveCount struct{ n, bytes int64 }

// packLiveBytes counts the rows and bytes (headers included) each pack's
// rows name; only referenced rows with referenced set.
func packLiveBytes(ctx context.Context, q Querier, referenced bool) (map[int64]liveCount, error) {
	live := make(map[int64]liveCount)
	query := "SELECT pack, count(*), sum(size) FROM chunks WHERE pack IS NOT NULL GROUP BY pack"
	if referenced {
		query = "SELECT pack, count(*), sum(size) FROM chunks WHERE pack IS NOT NULL AND refs > 0 GROUP BY pack"
	}
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var c liveCount
		if err := rows.Scan(&id, &c.n, &c.bytes); err != nil {
			return nil, err
		}
		c.bytes += c.n * recordHeaderLen
		live[id] = c
	}
	return live, rows.Err()
}

// packDead reports whether a sealed pack has no live row or is more than
// compactDeadRatio dead.
func (s *Store) packDead(id int64, c liveCount) (bool, error) {
	if c.n == 0 {
		return true, nil
	}
	fi, err := os.Stat(s.packs.path(id))
	if err != nil {
		return false, err
	}
	return float64(fi.Size()-c.bytes) > compactDeadRatio*float64(fi.Size()), nil
}

// Step runs one step inside the caller's write transaction and returns its
// Sweep (Finish it after the commit) and whether the pass has more to do.
// A bounded step deletes at most MaxChunks rows, checks at most MaxChunks
// released files and moves at most MaxChunks pack records.
func (c *Collection) Step(ctx context.Context, q Querier) (*Sweep, bool, error) {
	s := c.s
	if err := s.checkOpen(); err != nil {
		return nil, false, err
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
	limit := -1
	if c.bounded() {
		limit = c.opts.MaxChunks
	}
	rows, err := q.QueryContext(ctx, "SELECT id, hash, size, data IS NOT NULL, pack, pack_off FROM chunks WHERE refs <= 0 AND id > ? ORDER BY id LIMIT ?", c.after, limit)
	if err != nil {
		return nil, false, fmt.Errorf("gc: %w", err)
	}
	var victims []victim
	for rows.Next() {
		var v victim
		var hb []byte
		var pack, off *int64
		if err := rows.Scan(&v.id, &hb, &v.size, &v.inline, &pack, &off); err != nil {
			rows.Close()
			return nil, false, fmt.Errorf("gc: %w", err)
		}
		v.loc = nullLoc(pack, off)
		if v.hash, err = blobHash(hb); err != nil {
			rows.Close()
			return nil, false, fmt.Errorf("gc: %w", err)
		}
		victims = append(victims, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("gc: %w", err)
	}
	if len(victims) > 0 {
		c.after = victims[len(victims)-1].id
	}
	c.rowsDone = limit < 0 || len(victims) < limit

	now := time.Now()
	s.mu.Lock()
	if c.steps == 0 {
		s.pruneYoungLocked(now, c.opts.Grace)
	}
	c.steps++
	keep := victims[:0]
	for _, v := range victims {
		switch {
		case s.pins[v.hash] != nil:
		case c.opts.Keep != nil && c.opts.Keep(v.hash):
		case s.youngLocked(v.hash, now, c.opts.Grace):
			sw.stats.Young++
		default:
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
		if c.bounded() && len(sw.seen) >= c.opts.MaxChunks {
			break
		}
		sw.seen = append(sw.seen, h)
	}
	s.mu.Unlock()

	for batch := range slices.Chunk(victims, batchSize) {
		args := make([]any, len(batch))
		for i, v := range batch {
			args[i] = v.id
		}
		if _, err := q.ExecContext(ctx, "DELETE FROM chunks WHERE id IN ("+Placeholders(len(batch))+")", args...); err != nil {
			return nil, false, fmt.Errorf("gc: %w", err)
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

	more := !c.rowsDone
	if s.dir != "" {
		if err := sw.findOrphans(ctx, q, scan); err != nil {
			return nil, false, err
		}
		if c.bounded() {
			if !c.planned {
				if err := c.Plan(ctx, q); err != nil {
					return nil, false, err
				}
			}
			// Packs once the rows are gone: what is left in a pack then
			// is what compaction must move.
			if c.rowsDone {
				if err := c.stepPacks(ctx, q, sw); err != nil {
					return nil, false, err
				}
			}
			more = more || len(c.packs) > 0
		} else if err := sw.collectPacks(ctx, q); err != nil {
			return nil, false, err
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	s.sweep = sw
	return sw, more, nil
}

// stepPacks works on the planned packs: moves up to MaxChunks of their
// live records into the current pack, and plans the deletion of each pack
// left with no row.
func (c *Collection) stepPacks(ctx context.Context, q Querier, sw *Sweep) error {
	s := c.s
	budget := c.opts.MaxChunks
	syncs := make(map[int64]struct{})
	for len(c.packs) > 0 && budget > 0 {
		id := c.packs[0]
		if st, ok := s.packs.state(id); !ok || st.current || st.pins > 0 {
			// Gone, or in use again: the next pass looks at it anew.
			c.packs = c.packs[1:]
			continue
		}
		lim := budget
		n, err := sw.compact(ctx, q, id, lim, syncs)
		if err != nil {
			s.log.Warn("pack compaction stopped; the pack is kept", "pack", id, "err", err)
			c.packs = c.packs[1:]
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("gc: %w", err)
			}
			continue
		}
		budget -= n
		if n < lim {
			// Fewer rows than the budget: the pack has none left.
			var one int
			err := q.QueryRowContext(ctx, "SELECT 1 FROM chunks WHERE pack = ? LIMIT 1", id).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				sw.dropPacks[id] = struct{}{}
				c.packs = c.packs[1:]
				continue
			}
			if err != nil {
				return fmt.Errorf("gc: %w", err)
			}
		}
	}
	if err := s.packs.sync(syncs); err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	return nil
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
	for batch := range slices.Chunk(todo, batchSize) {
		args := make([]any, len(batch))
		for i := range batch {
			args[i] = batch[i].hash[:]
		}
		rows, err := q.QueryContext(ctx, "SELECT hash FROM chunks WHERE hash IN ("+Placeholders(len(batch))+")", args...)
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
	live, err := packLiveBytes(ctx, q, false)
	if err != nil {
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
		if dead, err := s.packDead(p.id, c); err != nil || !dead {
			continue
		}
		if _, err := sw.compact(ctx, q, p.id, -1, syncs); err != nil {
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

// compact copies the records of up to limit (-1: all) of a pack's rows into
// the current pack and points the rows at the copies, inside the GC's
// transaction, and returns how many it moved.
func (sw *Sweep) compact(ctx context.Context, q Querier, id int64, limit int, syncs map[int64]struct{}) (int, error) {
	s := sw.s
	type rec struct {
		id   int64
		hash Hash
		size int64
		off  int64
	}
	rows, err := q.QueryContext(ctx, "SELECT id, hash, size, pack_off FROM chunks WHERE pack = ? LIMIT ?", id, limit)
	if err != nil {
		return 0, err
	}
	var recs []rec
	for rows.Next() {
		var r rec
		var hb []byte
		if err := rows.Scan(&r.id, &hb, &r.size, &r.off); err != nil {
			rows.Close()
			return 0, err
		}
		if r.hash, err = blobHash(hb); err != nil {
			rows.Close()
			return 0, err
		}
		recs = append(recs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for i, r := range recs {
		if err := ctx.Err(); err != nil {
			return i, err
		}
		data, err, ok := s.readRecord(packLoc{pack: id, off: r.off}, r.hash, r.size)
		if !ok {
			return i, fmt.Errorf("pack %d: %w: missing", id, ErrCorrupt)
		}
		if err != nil {
			return i, err
		}
		loc, err := s.packs.append(s.dir, r.hash, data)
		if err != nil {
			return i, err
		}
		s.packs.unpin(loc.pack) // the row holds it from the commit on
		syncs[loc.pack] = struct{}{}
		if _, err := q.ExecContext(ctx, "UPDATE chunks SET pack = ?, pack_off = ? WHERE id = ?", loc.pack, loc.off, r.id); err != nil {
			return i, err
		}
		sw.moved[r.hash] = loc
		sw.stats.Moved++
	}
	return len(recs), nil
}

// Finish unlinks the sweep's files, skipping any hash pinned or referenced
// since GC. Call it after the GC's transaction has committed, once.
func (sw *Sweep) Finish() (GCStats, error) {
	s := sw.s
	st := sw.stats
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

// gcState is what live collection keeps between steps; guarded by
// Store.mu but for dropped.
type gcState struct {
	// young remembers when a row lost its last reference (DropRefs) or
	// was reported present while unreferenced (Has), for GCOptions.Grace.
	young map[Hash]int64
	// youngAll is when young overflowed and was cleared: every row counts
	// as young until youngAll + grace.
	youngAll int64
	// dropped counts the bytes of rows whose last reference went; dropCh
	// is signalled on each increase.
	dropped atomic.Int64
	dropCh  chan struct{}
}

// maxYoung bounds gcState.young (about 4 MiB).
const maxYoung = 1 << 16

func (s *Store) noteYoungLocked(h Hash, now int64) {
	if s.gc.young == nil {
		s.gc.young = make(map[Hash]int64)
	}
	if _, ok := s.gc.young[h]; !ok && len(s.gc.young) >= maxYoung {
		clear(s.gc.young)
		s.gc.youngAll = now
	}
	s.gc.young[h] = now
}

// youngLocked reports whether h lost its last reference, or was probed,
// less than grace ago.
func (s *Store) youngLocked(h Hash, now time.Time, grace time.Duration) bool {
	if grace <= 0 {
		return false
	}
	cut := now.Add(-grace).UnixNano()
	if s.gc.youngAll > cut {
		return true
	}
	t, ok := s.gc.young[h]
	return ok && t > cut
}

// pruneYoungLocked forgets what is older than grace.
func (s *Store) pruneYoungLocked(now time.Time, grace time.Duration) {
	if grace <= 0 {
		return
	}
	cut := now.Add(-grace).UnixNano()
	for h, t := range s.gc.young {
		if t <= cut {
			delete(s.gc.young, h)
		}
	}
}

// noteDropped records the rows DropRefs left without a reference.
func (s *Store) noteDropped(found map[Hash]storedRow) {
	now := time.Now().UnixNano()
	var bytes int64
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, r := range found {
		if r.refs <= 0 {
			s.noteYoungLocked(h, now)
			bytes += r.size
		}
	}
	if bytes == 0 {
		return
	}
	s.gc.dropped.Add(bytes)
	if s.gc.dropCh == nil {
		s.gc.dropCh = make(chan struct{}, 1)
	}
	select {
	case s.gc.dropCh <- struct{}{}:
	default:
	}
}

// noteProbed records the unreferenced rows Has reported present: a caller
// is about to reference them.
func (s *Store) noteProbed(hs []Hash, present map[Hash]bool) {
	if len(hs) == 0 {
		return
	}
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		if present[h] {
			s.noteYoungLocked(h, now)
		}
	}
}

// DroppedBytes counts the bytes of rows whose last reference went since
// the Store was created (a transaction that rolled back counts too): a
// live collector runs when it has grown enough since its last pass.
func (s *Store) DroppedBytes() int64 { return s.gc.dropped.Load() }

// Dropped is signalled (non-blocking, one pending signal) whenever
// DroppedBytes grows.
func (s *Store) Dropped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gc.dropCh == nil {
		s.gc.dropCh = make(chan struct{}, 1)
	}
	return s.gc.dropCh
}
