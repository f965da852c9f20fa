package chunkstore

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// batchSize bounds the hashes of one SQL statement: IN lists and multi-row
// INSERTs stay well under SQLite's variable limit, and a typical call (256
// refs of a push batch) is one statement per kind.
const batchSize = 256

// refCount is one distinct hash of a refs argument and how often it occurs.
type refCount struct {
	Ref
	n int
}

// countRefs groups refs by hash, in order of first appearance, and checks
// that each is a possible chunk and that repeated hashes agree on the size.
// Holes are left out: they have no row and no count.
func countRefs(op string, refs []Ref) ([]refCount, error) {
	out := make([]refCount, 0, len(refs))
	idx := make(map[Hash]int, len(refs))
	for _, r := range refs {
		if r.IsHole() {
			continue
		}
		if r.Size == 0 || r.Size > ChunkSize {
			return nil, fmt.Errorf("%s %s: %w: size %d", op, r.Hash, ErrSizeMismatch, r.Size)
		}
		if i, ok := idx[r.Hash]; ok {
			if out[i].Size != r.Size {
				return nil, fmt.Errorf("%s %s: %w: refs give sizes %d and %d", op, r.Hash, ErrSizeMismatch, out[i].Size, r.Size)
			}
			out[i].n++
			continue
		}
		idx[r.Hash] = len(out)
		out = append(out, refCount{Ref: r, n: 1})
	}
	return out, nil
}

// byCount splits counts into groups sharing a multiplicity, so each group
// is one "refs = refs ± n WHERE hash IN (...)" statement. Nearly always
// there is one group, n = 1.
func byCount(counts []refCount) map[int][]refCount {
	m := make(map[int][]refCount, 1)
	for _, c := range counts {
		m[c.n] = append(m[c.n], c)
	}
	return m
}

// storedRow is what a refcount update learns of a row.
type storedRow struct {
	size int64
	refs int64   // after the update
	file bool    // bytes outside the row: a chunk file or a pack record
	loc  packLoc // a pack record
}

// updateRefs runs set (an expression of refs and the bound delta) on the
// rows of counts and returns every row it touched.
func updateRefs(ctx context.Context, q Querier, set string, delta int, counts []refCount, found map[Hash]storedRow) error {
	args := make([]any, 0, len(counts)+1)
	args = append(args, delta)
	for i := range counts {
		args = append(args, counts[i].Hash[:])
	}
	rows, err := q.QueryContext(ctx, "UPDATE chunks SET refs = "+set+" WHERE hash IN ("+Placeholders(len(counts))+") RETURNING hash, size, data IS NULL, pack, pack_off, refs", args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var hb []byte
		var r storedRow
		var pack, off *int64
		if err := rows.Scan(&hb, &r.size, &r.file, &pack, &off, &r.refs); err != nil {
			return err
		}
		h, err := blobHash(hb)
		if err != nil {
			return err
		}
		r.loc = nullLoc(pack, off)
		found[h] = r
	}
	return rows.Err()
}

// AddRefs counts one more reference for each ref, inside the caller's
// transaction; a hash appearing twice counts twice; holes are skipped. A hash without a row
// gets one, its bytes taken from a stage (inline) or its file (which must
// exist with the ref's size); a hash with neither is ErrUnknownHash. On
// error the caller rolls back: earlier refs of the call may be counted.
func (s *Store) AddRefs(ctx context.Context, q Querier, refs []Ref) error {
	return s.batched("add ref", refs, func(batch []refCount) error { return s.addRefs(ctx, q, batch) })
}

// batched counts refs by hash (countRefs, for op) and hands the counts to
// apply batchSize at a time.
func (s *Store) batched(op string, refs []Ref, apply func([]refCount) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	counts, err := countRefs(op, refs)
	if err != nil {
		return err
	}
	for batch := range slices.Chunk(counts, batchSize) {
		if err := apply(batch); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) addRefs(ctx context.Context, q Querier, counts []refCount) error {
	found := make(map[Hash]storedRow, len(counts))
	for n, group := range byCount(counts) {
		// A row the remote has, referenced again after it had none, is
		// owed a check: the remote may have dropped bytes nothing
		// referenced (sharedchunks' collector), and an upload verifies
		// them.
		if err := updateRefs(ctx, q, "refs + ?, remote = CASE WHEN remote = 2 AND refs <= 0 THEN 3 ELSE remote END", n, group, found); err != nil {
			return fmt.Errorf("add refs: %w", err)
		}
	}
	var missing []refCount
	var repairs []Hash
	for _, c := range counts {
		row, ok := found[c.Hash]
		switch {
		case !ok:
			missing = append(missing, c)
		case row.size != int64(c.Size):
			return fmt.Errorf("add ref %s: %w: stored %d bytes, ref says %d", c.Hash, ErrSizeMismatch, row.size, c.Size)
		case row.file && s.dir != "":
			if loc := s.knownLoc(c.Hash); loc.valid() && loc != row.loc {
				repairs = append(repairs, c.Hash)
			}
		}
	}
	syncs := make(map[int64]struct{})
	if err := s.repairRows(ctx, q, repairs, found, syncs); err != nil {
		return err
	}
	if len(missing) == 0 {
		return s.packs.sync(syncs)
	}

	// New rows. Inline bytes and pack records come from the pins (or, for
	// a record no stage holds, from the pending sweep or the location
	// cache); file chunks are taken off the pending sweep before their
	// file is checked, so that a Finish racing with this transaction
	// cannot unlink a file or delete a pack it is about to reference.
	data := make([][]byte, len(missing))
	locs := make([]packLoc, len(missing))
	var staged, onDisk []Hash // file chunks written by a stage, found on disk
	s.mu.Lock()
	for i, c := range missing {
		p := s.pins[c.Hash]
		switch {
		case p != nil && p.data != nil:
			if len(p.data) != int(c.Size) {
				s.mu.Unlock()
				return fmt.Errorf("add ref %s: %w: staged %d bytes, ref says %d", c.Hash, ErrSizeMismatch, len(p.data), c.Size)
			}
			data[i] = p.data
			continue
		case p != nil && p.loc.valid():
			locs[i] = p.loc
		case p != nil && p.onDisk:
			staged = append(staged, c.Hash)
		default:
			locs[i] = s.spareRecordLocked(c.Hash)
			if !locs[i].valid() {
				onDisk = append(onDisk, c.Hash)
			}
		}
		if locs[i].valid() {
			s.sparePackLocked(locs[i].pack)
		} else {
			s.spareLocked(c.Hash)
		}
	}
	s.mu.Unlock()
	sizes := make(map[int64]int64)
	for i, c := range missing {
		switch {
		case data[i] != nil:
		case locs[i].valid():
			if !s.intact(locs[i], int64(c.Size), sizes) {
				return fmt.Errorf("add ref %s: %w", c.Hash, ErrUnknownHash)
			}
			syncs[locs[i].pack] = struct{}{}
		case s.dir == "" || !s.statChunk(c.Hash, int64(c.Size)):
			return fmt.Errorf("add ref %s: %w", c.Hash, ErrUnknownHash)
		}
	}
	if err := s.syncDirs(staged, onDisk); err != nil {
		return fmt.Errorf("add refs: %w", err)
	}
	if err := s.packs.sync(syncs); err != nil {
		return fmt.Errorf("add refs: %w", err)
	}

	args := make([]any, 0, 7*len(missing))
	var sql strings.Builder
	sql.WriteString("INSERT OR FAIL INTO chunks(hash, size, refs, data, pack, pack_off, remote) VALUES ")
	for i, c := range missing {
		if i > 0 {
			sql.WriteByte(',')
		}
		sql.WriteString("(?,?,?,?,?,?,?)")
		var d, pack, off any // NULL for a file chunk
		remote := remoteNone
		if data[i] != nil {
			d = data[i]
		} else if s.remote != nil {
			remote = remoteOwed
		}
		if locs[i].valid() {
			pack, off = locs[i].pack, locs[i].off
		}
		args = append(args, c.Hash[:], c.Size, c.n, d, pack, off, remote)
	}
	// Inside the caller's write transaction the UPDATE above saw every
	// row, so these are new. OR FAIL, and no upsert clause (whose update
	// aborts), spare SQLite a statement journal: a statement that may abort
	// half done journals every page it changes, and past 64 KiB the journal
	// spills to a temporary file (9 us a chunk in a pull into a store of
	// 100,000 files). A failed statement fails the caller's transaction,
	// which is rolled back whole.
	if _, err := q.ExecContext(ctx, sql.String(), args...); err != nil {
		return fmt.Errorf("add refs: %w", err)
	}
	return nil
}

// repairRows points rows whose bytes are lost (a pack or chunk file
// truncated or deleted from outside) at a fresh copy a stage appended, the
// way a rewritten file repaired a file chunk. Only rows whose hash was
// appended again are looked at, so the common case costs nothing.
func (s *Store) repairRows(ctx context.Context, q Querier, hs []Hash, found map[Hash]storedRow, syncs map[int64]struct{}) error {
	sizes := make(map[int64]int64)
	for _, h := range hs {
		row := found[h]
		if row.loc.valid() && s.intact(row.loc, row.size, sizes) || !row.loc.valid() && s.statChunk(h, row.size) {
			continue
		}
		s.mu.Lock()
		loc := packLoc{}
		if p := s.pins[h]; p != nil && p.loc.valid() {
			loc = p.loc
		} else {
			loc = s.locs[h]
		}
		if loc.valid() {
			s.sparePackLocked(loc.pack)
		}
		s.mu.Unlock()
		if !loc.valid() || !s.intact(loc, row.size, sizes) {
			continue
		}
		syncs[loc.pack] = struct{}{}
		if err := s.packs.sync(map[int64]struct{}{loc.pack: {}}); err != nil {
			return fmt.Errorf("add refs: %w", err)
		}
		if _, err := q.ExecContext(ctx, "UPDATE chunks SET pack = ?, pack_off = ? WHERE hash = ?", loc.pack, loc.off, h[:]); err != nil {
			return fmt.Errorf("add refs: %w", err)
		}
		s.log.Warn("chunk bytes were lost; the row now names a fresh copy", "hash", h)
	}
	return nil
}

// DropRefs counts one reference less for each ref (never below zero);
// a hash appearing twice counts twice; holes are skipped. A hash without a row is
// ErrUnknownHash; on error the caller rolls back.
func (s *Store) DropRefs(ctx context.Context, q Querier, refs []Ref) error {
	return s.batched("drop ref", refs, func(batch []refCount) error {
		found := make(map[Hash]storedRow, len(batch))
		for n, group := range byCount(batch) {
			if err := updateRefs(ctx, q, "max(refs - ?, 0)", n, group, found); err != nil {
				return fmt.Errorf("drop refs: %w", err)
			}
		}
		for _, c := range batch {
			row, ok := found[c.Hash]
			switch {
			case !ok:
				return fmt.Errorf("drop ref %s: %w", c.Hash, ErrUnknownHash)
			case row.size != int64(c.Size):
				return fmt.Errorf("drop ref %s: %w: stored %d bytes, ref says %d", c.Hash, ErrSizeMismatch, row.size, c.Size)
			}
		}
		s.noteDropped(found)
		return nil
	})
}

// Has returns the hashes whose bytes are present, in input order with
// duplicates kept: a chunk a live stage holds, or a row whose bytes are
// intact (inline data of the row's size, or a file of that size). A row
// without its bytes counts as absent, so the sender ships it again,
// unless the store has a Remote that holds them (reads fetch them).
//
// HoleHash is always present: a hole has no bytes to fetch. Callers skip
// holes before probing (Manifest.Hashes); this only keeps one that slipped
// through from being asked for.
//
// A present chunk no manifest references is kept by a live collection for
// its grace (GCOptions.Grace) after Has reported it, so that a caller that
// probes and then references it finds it; one that waits longer may get
// ErrUnknownHash from AddRefs, before anything changed, and probes again.
func (s *Store) Has(ctx context.Context, q Querier, hashes []Hash) ([]Hash, error) {
	present := make(map[Hash]bool, len(hashes))
	ask := make([]Hash, 0, len(hashes))
	s.mu.Lock()
	for _, h := range hashes {
		if _, seen := present[h]; seen {
			continue
		}
		if h == HoleHash {
			present[h] = true
			continue
		}
		p := s.pins[h]
		held := p != nil && (p.data != nil || p.onDisk)
		present[h] = held
		if !held {
			ask = append(ask, h)
		}
	}
	s.mu.Unlock()

	for batch := range slices.Chunk(ask, batchSize) {
		args := make([]any, len(batch))
		for i := range batch {
			args[i] = batch[i][:]
		}
		// length() of a blob reads the record header, not the bytes.
		rows, err := q.QueryContext(ctx, "SELECT hash, size, length(data), pack, pack_off, refs, remote FROM chunks WHERE hash IN ("+Placeholders(len(batch))+")", args...)
		if err != nil {
			return nil, fmt.Errorf("has chunks: %w", err)
		}
		var files []Ref
		var packed []packRef
		var unreferenced []Hash         // rows present only until a GC: see noteProbed
		uploaded := make(map[Hash]bool) // rows whose bytes the remote has
		for rows.Next() {
			var hb []byte
			var size, refs, remote int64
			var dataLen, pack, off *int64
			if err := rows.Scan(&hb, &size, &dataLen, &pack, &off, &refs, &remote); err != nil {
				rows.Close()
				return nil, fmt.Errorf("has chunks: %w", err)
			}
			h, err := blobHash(hb)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("has chunks: %w", err)
			}
			if refs <= 0 {
				unreferenced = append(unreferenced, h)
			}
			if (remote == remoteDone || remote == remoteVerify) && s.remote != nil {
				uploaded[h] = true
			}
			switch loc := nullLoc(pack, off); {
			case dataLen != nil:
				present[h] = *dataLen == size
			case s.dir == "":
			case loc.valid():
				packed = append(packed, packRef{Ref{Hash: h, Size: uint32(size)}, loc})
			default:
				files = append(files, Ref{Hash: h, Size: uint32(size)})
			}
			if dataLen != nil && !present[h] || dataLen == nil && s.dir == "" {
				s.log.Warn("stored chunk has lost its bytes; reporting it absent", "hash", h)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("has chunks: %w", err)
		}
		sizes := make(map[int64]int64)
		for _, r := range packed {
			present[r.Hash] = s.intact(r.loc, int64(r.Size), sizes)
		}
		for _, r := range files {
			present[r.Hash] = s.statChunk(r.Hash, int64(r.Size))
		}
		// A chunk whose bytes are lost but that a stage appended again
		// (the sender shipped it anew) is present: the copy's location is
		// remembered, reads find it, and AddRefs repairs the row.
		for _, r := range append(files, packRefs(packed)...) {
			if present[r.Hash] {
				continue
			}
			if loc := s.knownLoc(r.Hash); loc.valid() && s.intact(loc, int64(r.Size), sizes) {
				present[r.Hash] = true
				continue
			}
			if uploaded[r.Hash] { // reads fetch it from the remote
				present[r.Hash] = true
				continue
			}
			s.log.Warn("chunk file or pack record missing or short; reporting the chunk absent", "hash", r.Hash)
		}
		s.noteProbed(unreferenced, present)
	}

	out := make([]Hash, 0, len(hashes))
	for _, h := range hashes {
		if present[h] {
			out = append(out, h)
		}
	}
	return out, nil
}

// Placeholders returns "?,?,...,?" with n marks: the IN list of a query
// over n values (also vfs's, on the same databases).
func Placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

// PadIn is how many values an IN list of n (n > 0) is padded to, repeating
// its last one: the next power of two, so a statement cache sees a few
// lengths of a batch query instead of every one.
func PadIn(n int) int { return 1 << bits.Len(uint(n-1)) }

// blobHash converts a hash column.
func blobHash(b []byte) (Hash, error) {
	if len(b) != len(Hash{}) {
		return Hash{}, fmt.Errorf("%w: a stored hash has %d bytes", ErrCorrupt, len(b))
	}
	return Hash(b), nil
}

// packRef is a stored chunk and its pack record.
type packRef struct {
	Ref
	loc packLoc
}

func packRefs(ps []packRef) []Ref {
	out := make([]Ref, len(ps))
	for i, p := range ps {
		out[i] = p.Ref
	}
	return out
}
