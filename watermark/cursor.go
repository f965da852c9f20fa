package watermark

import (
	"encoding/binary"
	"fmt"
)

// Cursor is a position in a change feed ordered by (Rev, Path).
//
// Full reports whether the cursor has no path: every change committed at or
// before Rev has been offered. A cursor with a path means "offered up to and
// including Path within Rev". The zero Cursor (rev 0, full) is the start of
// every feed.
type Cursor struct {
	Rev  int64
	Path string
	// Partial is true when Path is meaningful; false is the "path: null" of the
	// protocol. A separate flag keeps "" a legal path value in comparisons.
	Partial bool
}

// At returns the full cursor for rev: everything at or before rev offered.
func At(rev int64) Cursor { return Cursor{Rev: rev} }

// Within returns the partial cursor (rev, path).
func Within(rev int64, path string) Cursor { return Cursor{Rev: rev, Path: path, Partial: true} }

// Compare orders cursors: by rev, then a partial cursor before the full cursor
// of the same rev, then partial cursors by path. It returns -1, 0 or +1.
func (c Cursor) Compare(d Cursor) int {
	switch {
	case c.Rev < d.Rev:
		return -1
	case c.Rev > d.Rev:
		return 1
	}
	switch {
	case c.Partial && !d.Partial:
		return -1
	case !c.Partial && d.Partial:
		return 1
	case !c.Partial:
		return 0
	case c.Path < d.Path:
		return -1
	case c.Path > d.Path:
		return 1
	}
	return 0
}

// Less reports whether c sorts before d.
func (c Cursor) Less(d Cursor) bool { return c.Compare(d) < 0 }

// Covers reports whether c is at or past d.
func (c Cursor) Covers(d Cursor) bool { return c.Compare(d) >= 0 }

// Admits reports whether a feed entry at (rev, path) lies after c, that is,
// whether a feed resuming from c still has to offer it.
func (c Cursor) Admits(rev int64, path string) bool {
	return c.Less(Within(rev, path))
}

func (c Cursor) String() string {
	if !c.Partial {
		return fmt.Sprintf("%d", c.Rev)
	}
	return fmt.Sprintf("%d:%q", c.Rev, c.Path)
}

// MaxPathLen bounds the path of an encoded cursor, matching vfs.MaxPathLen.
const MaxPathLen = 4096

// AppendBinary appends the cursor's encoding: uvarint rev, one flag byte, and
// for a partial cursor a uvarint length and the path bytes.
func (c Cursor) AppendBinary(b []byte) ([]byte, error) {
	if c.Rev < 0 {
		return b, fmt.Errorf("encode cursor: %w: negative rev %d", ErrBadCursor, c.Rev)
	}
	b = binary.AppendUvarint(b, uint64(c.Rev))
	if !c.Partial {
		return append(b, 0), nil
	}
	if len(c.Path) > MaxPathLen {
		return b, fmt.Errorf("encode cursor: %w: path of %d bytes", ErrBadCursor, len(c.Path))
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(c.Path)))
	return append(b, c.Path...), nil
}

// DecodeCursor decodes a cursor from the front of b and returns the rest.
func DecodeCursor(b []byte) (Cursor, []byte, error) {
	rev, n := binary.Uvarint(b)
	if n <= 0 || rev > 1<<62 {
		return Cursor{}, nil, fmt.Errorf("decode cursor: %w: bad rev", ErrBadCursor)
	}
	b = b[n:]
	if len(b) < 1 {
		return Cursor{}, nil, fmt.Errorf("decode cursor: %w: truncated", ErrBadCursor)
	}
	flag := b[0]
	b = b[1:]
	switch flag {
	case 0:
		return At(int64(rev)), b, nil
	case 1:
	default:
		return Cursor{}, nil, fmt.Errorf("decode cursor: %w: flag %d", ErrBadCursor, flag)
	}
	l, n := binary.Uvarint(b)
	if n <= 0 || l > MaxPathLen || uint64(len(b)-n) < l {
		return Cursor{}, nil, fmt.Errorf("decode cursor: %w: bad path length", ErrBadCursor)
	}
	p := string(b[n : n+int(l)])
	return Within(int64(rev), p), b[n+int(l):], nil
}
