package chunkstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ReadAt reads bytes of one chunk at off, like io.ReaderAt: fewer than
// len(p) bytes come with io.EOF. Staged bytes are read first, then the
// chunk's file or row. A stored chunk whose bytes are missing or short is
// ErrCorrupt; a chunk the store has never seen is ErrUnknownHash. A hole
// reads as zeros.
//
// With a Remote, bytes missing locally are fetched from it (checked
// against the hash) and kept as a local chunk file for the next read.
func (s *Store) ReadAt(ctx context.Context, q Querier, r Ref, p []byte, off int64) (int, error) {
	n, err := s.readLocal(ctx, q, r, p, off)
	if s.remote == nil || r.IsHole() || !remoteMiss(err) {
		return n, err
	}
	data, ferr := s.fetch(ctx, r.Hash, int(r.Size))
	if ferr != nil {
		return 0, errors.Join(err, ferr)
	}
	if off >= int64(len(data)) {
		return 0, io.EOF
	}
	return readSlice(data, p, off)
}

func (s *Store) readLocal(ctx context.Context, q Querier, r Ref, p []byte, off int64) (int, error) {
	size := int64(r.Size)
	if off < 0 {
		return 0, fmt.Errorf("read chunk %s: negative offset %d", r.Hash, off)
	}
	if off >= size {
		return 0, io.EOF
	}
	if r.IsHole() {
		n := int(min(int64(len(p)), size-off))
		clear(p[:n])
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	if d := s.pinnedData(r.Hash); d != nil {
		if int64(len(d)) != size {
			return 0, fmt.Errorf("read chunk %s: %w: staged %d bytes, ref says %d", r.Hash, ErrSizeMismatch, len(d), size)
		}
		return readSlice(d, p, off)
	}
	if d := s.aheadData(r.Hash); d != nil && int64(len(d)) == size {
		return readSlice(d, p, off)
	}
	// Pack chunks seen before and large chunks in files are read without
	// SQL (the FUSE read path); the row is the fallback, for inline chunks
	// and for chunks stored under an older layout or threshold.
	if s.dir != "" {
		if loc := s.knownLoc(r.Hash); loc.valid() {
			if n, err, ok := s.readPack(loc, r, p, off); ok {
				return n, err
			}
			s.forgetLoc(r.Hash, loc)
		}
	}
	triedFile := false
	if s.dir != "" && !s.inline(int(r.Size)) && !s.packed(int(r.Size)) {
		if n, err, ok := s.readFile(r, p, off); ok {
			return n, err
		}
		triedFile = true
	}

	return s.readRow(ctx, q, r, p, off, triedFile, true)
}

// readRow reads through r's row. A pack record whose pack is gone may have
// been moved by a compaction that committed after the row was read: retry
// says to look the row up once more.
func (s *Store) readRow(ctx context.Context, q Querier, r Ref, p []byte, off int64, triedFile, retry bool) (int, error) {
	size := int64(r.Size)
	var rowSize int64
	var dataLen, pack, packOff *int64
	var data []byte
	err := q.QueryRowContext(ctx, "SELECT size, length(data), substr(data, ?, ?), pack, pack_off FROM chunks WHERE hash = ?",
		off+1, len(p), r.Hash[:]).Scan(&rowSize, &dataLen, &data, &pack, &packOff)
	loc := nullLoc(pack, packOff)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if !triedFile && s.dir != "" {
			if n, err, ok := s.readFile(r, p, off); ok {
				return n, err
			}
		}
		return 0, fmt.Errorf("read chunk %s: %w", r.Hash, ErrUnknownHash)
	case err != nil:
		return 0, fmt.Errorf("read chunk %s: %w", r.Hash, err)
	case rowSize != size:
		return 0, fmt.Errorf("read chunk %s: %w: stored %d bytes, ref says %d", r.Hash, ErrSizeMismatch, rowSize, size)
	case loc.valid():
		n, err, ok := s.readPack(loc, r, p, off)
		if !ok && retry {
			return s.readRow(ctx, q, r, p, off, triedFile, false)
		}
		if !ok {
			return 0, fmt.Errorf("read chunk %s: %w: its pack is missing", r.Hash, ErrCorrupt)
		}
		if err == nil || err == io.EOF {
			s.rememberLoc(r.Hash, loc)
		}
		return n, err
	case dataLen == nil:
		if !triedFile && s.dir != "" {
			if n, err, ok := s.readFile(r, p, off); ok {
				return n, err
			}
		}
		return 0, fmt.Errorf("read chunk %s: %w: its file is missing", r.Hash, ErrCorrupt)
	case *dataLen != size:
		return 0, fmt.Errorf("read chunk %s: %w: row holds %d of %d bytes", r.Hash, ErrCorrupt, *dataLen, size)
	}
	n := copy(p, data)
	if int64(n) < size-off && n < len(p) {
		return n, fmt.Errorf("read chunk %s: %w: short row", r.Hash, ErrCorrupt)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func readSlice(d, p []byte, off int64) (int, error) {
	n := copy(p, d[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readFile reads from r's file; ok is false when there is no file.
func (s *Store) readFile(r Ref, p []byte, off int64) (n int, err error, ok bool) {
	cf, err := s.fds.open(fdKey{hash: r.Hash}, s.filePath(r.Hash))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, false
	}
	if err != nil {
		return 0, fmt.Errorf("read chunk %s: %w", r.Hash, err), true
	}
	defer s.fds.done(cf)
	size := int64(r.Size)
	if cf.size != size {
		return 0, fmt.Errorf("read chunk %s: %w: file has %d bytes, ref says %d", r.Hash, ErrCorrupt, cf.size, size), true
	}
	want := min(int64(len(p)), size-off)
	n, err = cf.f.ReadAt(p[:want], off)
	if int64(n) < want {
		if err == nil || err == io.EOF {
			err = ErrCorrupt
		}
		return n, fmt.Errorf("read chunk %s: %w: file shrank to %d bytes", r.Hash, err, off+int64(n)), true
	}
	if int64(n) < int64(len(p)) {
		return n, io.EOF, true
	}
	return n, nil, true
}

// Get returns a copy of one whole chunk. With a Remote, a chunk whose
// bytes are missing locally is fetched from it, when its row gives the
// size.
func (s *Store) Get(ctx context.Context, q Querier, h Hash) ([]byte, error) {
	data, err := s.getLocal(ctx, q, h)
	if s.remote == nil || !remoteMiss(err) {
		return data, err
	}
	var size int
	if qerr := q.QueryRowContext(ctx, "SELECT size FROM chunks WHERE hash = ?", h[:]).Scan(&size); qerr != nil {
		return nil, err
	}
	data, ferr := s.fetch(ctx, h, size)
	if ferr != nil {
		return nil, errors.Join(err, ferr)
	}
	return append([]byte(nil), data...), nil
}

func (s *Store) getLocal(ctx context.Context, q Querier, h Hash) ([]byte, error) {
	s.mu.Lock()
	var staged []byte
	var stagedFile bool
	var loc packLoc
	if p := s.pins[h]; p != nil {
		staged, stagedFile, loc = p.data, p.onDisk, p.loc
	}
	if !loc.valid() {
		loc = s.locs[h]
	}
	s.mu.Unlock()
	if staged != nil {
		return append([]byte(nil), staged...), nil
	}
	if loc.valid() {
		data, err, ok := s.readRecord(loc, h, -1)
		if ok && err == nil {
			return data, nil
		}
		s.forgetLoc(h, loc)
	}

	return s.getRow(ctx, q, h, stagedFile, true)
}

// getRow is Get through h's row; retry as in readRow.
func (s *Store) getRow(ctx context.Context, q Querier, h Hash, stagedFile, retry bool) ([]byte, error) {
	var size int64
	var data []byte
	var pack, packOff *int64
	err := q.QueryRowContext(ctx, "SELECT size, data, pack, pack_off FROM chunks WHERE hash = ?", h[:]).Scan(&size, &data, &pack, &packOff)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if !stagedFile {
			return nil, fmt.Errorf("get chunk %s: %w", h, ErrUnknownHash)
		}
		size = -1
	case err != nil:
		return nil, fmt.Errorf("get chunk %s: %w", h, err)
	case data != nil:
		if int64(len(data)) != size {
			return nil, fmt.Errorf("get chunk %s: %w: row holds %d of %d bytes", h, ErrCorrupt, len(data), size)
		}
		return data, nil
	case s.dir == "":
		return nil, fmt.Errorf("get chunk %s: %w: no bytes in the row", h, ErrCorrupt)
	case nullLoc(pack, packOff).valid():
		loc := nullLoc(pack, packOff)
		data, err, ok := s.readRecord(loc, h, size)
		if !ok && retry {
			return s.getRow(ctx, q, h, stagedFile, false)
		}
		if !ok {
			return nil, fmt.Errorf("get chunk %s: %w: its pack is missing", h, ErrCorrupt)
		}
		if err != nil {
			return nil, fmt.Errorf("get chunk %s: %w", h, err)
		}
		s.rememberLoc(h, loc)
		return data, nil
	}

	cf, err := s.fds.open(fdKey{hash: h}, s.filePath(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get chunk %s: %w: its file is missing", h, ErrCorrupt)
	}
	if err != nil {
		return nil, fmt.Errorf("get chunk %s: %w", h, err)
	}
	defer s.fds.done(cf)
	if size < 0 { // staged file chunk: trust its length
		size = cf.size
	}
	if cf.size != size || size > ChunkSize {
		return nil, fmt.Errorf("get chunk %s: %w: file has %d bytes, want %d", h, ErrCorrupt, cf.size, size)
	}
	buf := make([]byte, size)
	if n, err := cf.f.ReadAt(buf, 0); n < len(buf) {
		if err == nil || err == io.EOF {
			err = ErrCorrupt
		}
		return nil, fmt.Errorf("get chunk %s: %w: file shrank to %d bytes", h, err, n)
	}
	return buf, nil
}

// getBatch is how many hashes GetEach looks up in one query.
const getBatch = 256

// batchInlineMax bounds the inline bytes GetEach takes with a batch's rows:
// a larger row (stored under an older threshold) goes through Get, so a
// batch holds at most getBatch x batchInlineMax bytes.
const batchInlineMax = 64 << 10

// GetEach calls fn with each chunk of hs, in order, as Get returns it, and
// stops at the first error. The rows of chunks that are neither pinned nor
// at a known pack location are looked up getBatch at a time, one query per
// batch where Get runs one per chunk: a sender streaming 10,000 small
// chunks spent a quarter of its CPU in those queries. A row's inline bytes
// come with it and a pack record is read where the row says; anything else
// (no row, a file chunk, a record gone with its pack, a remote fetch) goes
// through Get. data is fn's only until it returns: the bytes of pack
// records and pinned chunks are read into one buffer GetEach reuses (a
// sender of 100 MB allocated 100 MB for them, and its collector ran
// through a quarter of its CPU), so fn copies what it keeps.
func (s *Store) GetEach(ctx context.Context, q Querier, hs []Hash, fn func(Hash, []byte) error) error {
	var scratch []byte
	for len(hs) > 0 {
		batch := hs[:min(len(hs), getBatch)]
		hs = hs[len(batch):]
		rows, err := s.batchRows(ctx, q, batch)
		if err != nil {
			return err
		}
		for _, h := range batch {
			data, err := s.getBatched(ctx, q, h, rows, &scratch)
			if err != nil {
				return err
			}
			if err := fn(h, data); err != nil {
				return err
			}
		}
	}
	return nil
}

// batchRow is what GetEach reads of a row: its size, its inline bytes
// (when at most batchInlineMax) and its pack location.
type batchRow struct {
	size   int64
	inline []byte
	loc    packLoc
}

// batchRows reads the rows of the hashes whose bytes are not in memory or
// at a known pack location.
func (s *Store) batchRows(ctx context.Context, q Querier, hs []Hash) (map[Hash]batchRow, error) {
	args := make([]any, 0, len(hs)+1)
	args = append(args, batchInlineMax)
	s.mu.Lock()
	for _, h := range hs {
		if p := s.pins[h]; p != nil && (p.data != nil || p.loc.valid()) {
			continue
		}
		if _, ok := s.locs[h]; ok && s.dir != "" {
			continue
		}
		args = append(args, h[:])
	}
	s.mu.Unlock()
	if len(args) == 1 {
		return nil, nil
	}
	// Padded with its last hash (PadIn): a few statements, kept by the cache.
	for k := PadIn(len(args) - 1); len(args)-1 < k; {
		args = append(args, args[len(args)-1])
	}
	rs, err := q.QueryContext(ctx, "SELECT hash, size, CASE WHEN length(data) <= ? THEN data END, pack, pack_off FROM chunks WHERE hash IN ("+
		Placeholders(len(args)-1)+")", args...)
	if err != nil {
		return nil, fmt.Errorf("get chunks: %w", err)
	}
	defer rs.Close()
	rows := make(map[Hash]batchRow, len(args)-1)
	for rs.Next() {
		var hb []byte
		var r batchRow
		var pack, off *int64
		if err := rs.Scan(&hb, &r.size, &r.inline, &pack, &off); err != nil {
			return nil, fmt.Errorf("get chunks: %w", err)
		}
		if len(hb) != len(Hash{}) {
			return nil, fmt.Errorf("get chunks: %w: a row's hash has %d bytes", ErrCorrupt, len(hb))
		}
		r.loc = nullLoc(pack, off)
		rows[Hash(hb)] = r
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("get chunks: %w", err)
	}
	return rows, nil
}

// getBatched is Get with the row batchRows read, when it read one; a
// pinned chunk's bytes and a pack record are read into *scratch.
func (s *Store) getBatched(ctx context.Context, q Querier, h Hash, rows map[Hash]batchRow, scratch *[]byte) ([]byte, error) {
	s.mu.Lock()
	var staged []byte
	var loc packLoc
	if p := s.pins[h]; p != nil {
		staged, loc = p.data, p.loc
	}
	if !loc.valid() && s.dir != "" {
		loc = s.locs[h]
	}
	s.mu.Unlock()
	switch r, ok := rows[h]; {
	case staged != nil:
		*scratch = append((*scratch)[:0], staged...)
		return *scratch, nil
	case loc.valid():
		if data, err, ok := s.readRecordInto(scratch, loc, h, -1); ok && err == nil {
			return data, nil
		}
		s.forgetLoc(h, loc)
	case !ok:
	case r.inline != nil && int64(len(r.inline)) == r.size:
		return r.inline, nil
	case r.loc.valid() && s.dir != "":
		if data, err, ok := s.readRecordInto(scratch, r.loc, h, r.size); ok && err == nil {
			s.rememberLoc(h, r.loc)
			return data, nil
		}
	}
	return s.Get(ctx, q, h)
}

// FileSpan is where part of a chunk's bytes lie in a chunk file of the
// store: n bytes of File from Off. It holds the file open until Release,
// which its user calls once (a reader that copies the bytes itself, as a
// FUSE reply spliced from the file does, after the reply is out).
type FileSpan struct {
	File *os.File
	Off  int64
	N    int
	s    *Store
	cf   *cachedFile
}

// Release lets the file go.
func (sp *FileSpan) Release() {
	if sp.cf != nil {
		sp.s.fds.done(sp.cf)
		sp.cf = nil
	}
}

// Span returns where the n bytes of r from off lie, when r is a chunk in
// a file of its own, whole on this disk (a large chunk, not staged in
// memory, not a hole) and the n bytes are all in it. ok false says to read
// them with ReadAt, which has every other place a chunk can be, and the
// errors. A chunk file's bytes never change (its name is their hash), so
// the span stays right for as long as it is held, even past an unlink.
func (s *Store) Span(r Ref, off int64, n int) (sp FileSpan, ok bool) {
	if s.dir == "" || r.IsHole() || s.inline(int(r.Size)) || s.packed(int(r.Size)) ||
		off < 0 || n <= 0 || off+int64(n) > int64(r.Size) {
		return FileSpan{}, false
	}
	if s.pinnedData(r.Hash) != nil {
		return FileSpan{}, false
	}
	cf, err := s.fds.open(fdKey{hash: r.Hash}, s.filePath(r.Hash))
	if err != nil {
		return FileSpan{}, false
	}
	if cf.size != int64(r.Size) {
		s.fds.done(cf)
		return FileSpan{}, false
	}
	return FileSpan{File: cf.f, Off: off, N: n, s: s, cf: cf}, true
}
