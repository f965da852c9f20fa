package syncwire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
)

// enc appends the primitive encodings of docs/PROTOCOL.md: uvarints,
// zigzag varints, length-prefixed strings, raw hashes and cursors.
type enc struct {
	b   []byte
	err error
}

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) byte(v byte)      { e.b = append(e.b, v) }
func (e *enc) hash(h chunkstore.Hash) {
	e.b = append(e.b, h[:]...)
}

func (e *enc) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *enc) bytes(p []byte) {
	e.uvarint(uint64(len(p)))
	e.b = append(e.b, p...)
}

func (e *enc) rev(r int64) {
	if r < 0 && e.err == nil {
		e.err = fmt.Errorf("encode: negative rev %d", r)
	}
	e.uvarint(uint64(r))
}

func (e *enc) cursor(c watermark.Cursor) {
	b, err := c.AppendBinary(e.b)
	if err != nil && e.err == nil {
		e.err = err
	}
	e.b = b
}

// dec reads what enc wrote. The first failure sticks: later reads return
// zero values and done reports the error, so decoders read straight through
// and check once.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = protoErr(format, args...)
	}
	d.b = nil
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// bounded reads a uvarint and checks it against max.
func (d *dec) bounded(what string, max uint64) uint64 {
	v := d.uvarint()
	if v > max {
		d.fail("%s %d exceeds %d", what, v, max)
		return 0
	}
	return v
}

// count reads an element count, bounded by max and by the bytes left given
// the smallest encoding of one element, so a count never allocates more than
// the message could hold.
func (d *dec) count(what string, max int, minSize int) int {
	n := d.bounded(what, uint64(max))
	if d.err == nil && minSize > 0 && n > uint64(len(d.b)/minSize) {
		d.fail("%s %d in %d bytes", what, n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *dec) raw(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.fail("truncated: want %d bytes, have %d", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed byte string of at most max bytes. The
// result aliases the message.
func (d *dec) bytes(what string, max int) []byte {
	n := d.bounded(what+" length", uint64(max))
	return d.raw(int(n))
}

// str reads a length-prefixed UTF-8-agnostic string of at most max bytes.
func (d *dec) str(what string, max int) string {
	return string(d.bytes(what, max))
}

// utf8str is str for human-facing text (error messages, features).
func (d *dec) utf8str(what string, max int) string {
	s := d.str(what, max)
	if d.err == nil && !utf8.ValidString(s) {
		d.fail("%s is not UTF-8", what)
	}
	return s
}

func (d *dec) hash() chunkstore.Hash {
	var h chunkstore.Hash
	copy(h[:], d.raw(len(h)))
	return h
}

func (d *dec) rev() int64 {
	return int64(d.bounded("rev", 1<<62))
}

func (d *dec) cursor() watermark.Cursor {
	if d.err != nil {
		return watermark.Cursor{}
	}
	c, rest, err := watermark.DecodeCursor(d.b)
	if err != nil {
		d.err = fmt.Errorf("%w: %v", ErrProtocol, err)
		d.b = nil
		return watermark.Cursor{}
	}
	d.b = rest
	return c
}

func (d *dec) manifest() chunkstore.Manifest {
	if d.err != nil {
		return nil
	}
	m, rest, err := chunkstore.DecodeManifest(d.b)
	if err != nil {
		d.err = fmt.Errorf("%w: %v", ErrProtocol, err)
		d.b = nil
		return nil
	}
	d.b = rest
	return m
}

// done reports the first error, or trailing bytes.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = protoErr("%d trailing bytes", len(d.b))
	}
	return d.err
}
