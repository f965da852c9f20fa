package chunkstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// ReadAt reads bytes of one chunk at off, like io.ReaderAt: fewer than
// len(p) bytes come with io.EOF. Staged bytes are read first, then the
// chunk's file or row. A stored chunk whose bytes are missing or short is
// ErrCorrupt; a chunk the store has never seen is ErrUnknownHash.
func (s *Store) ReadAt(ctx context.Context, q Querier, r Ref, p []byte, off int64) (int, error) {
	size := int64(r.Size)
	if off < 0 {
		return 0, fmt.Errorf("read chunk %s: negative offset %d", r.Hash, off)
	}
	if off >= size {
		return 0, io.EOF
	}
	if d := s.pinnedData(r.Hash); d != nil {
		if int64(len(d)) != size {
			return 0, fmt.Errorf("read chunk %s: %w: staged %d bytes, ref says %d", r.Hash, ErrSizeMismatch, len(d), size)
		}
		return readSlice(d, p, off)
	}
	// Large chunks are files (no SQL on the FUSE read path); the row is the
	// fallback, for inline chunks and for chunks stored under an older
	// threshold.
	triedFile := false
	if s.dir != "" && !s.inline(int(r.Size)) {
		if n, err, ok := s.readFile(r, p, off); ok {
			return n, err
		}
		triedFile = true
	}

	var rowSize int64
	var dataLen *int64
	var data []byte
	err := s.queryRow(ctx, q, "SELECT size, length(data), substr(data, ?, ?) FROM chunks WHERE hash = ?",
		off+1, len(p), r.Hash[:]).Scan(&rowSize, &dataLen, &data)
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
	cf, err := s.fds.open(r.Hash, s.filePath(r.Hash))
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

// Get returns a copy of one whole chunk.
func (s *Store) Get(ctx context.Context, q Querier, h Hash) ([]byte, error) {
	s.mu.Lock()
	var staged []byte
	var stagedFile bool
	if p := s.pins[h]; p != nil {
		staged, stagedFile = p.data, p.onDisk
	}
	s.mu.Unlock()
	if staged != nil {
		return append([]byte(nil), staged...), nil
	}

	var size int64
	var data []byte
	err := s.queryRow(ctx, q, "SELECT size, data FROM chunks WHERE hash = ?", h[:]).Scan(&size, &data)
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
	}

	cf, err := s.fds.open(h, s.filePath(h))
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
