package rpc

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Encoder appends the primitive encodings of docs/PROTOCOL.md: uvarints,
// zigzag varints, single bytes, length-prefixed strings and byte strings,
// and fixed-size fields (hashes). The zero value appends to a new buffer.
// An encoding that cannot be written (a negative rev, an oversized cursor)
// is reported with Fail; the first failure sticks and Err returns it.
type Encoder struct {
	b   []byte
	err error
}

// NewEncoder returns an Encoder that appends to b.
func NewEncoder(b []byte) Encoder { return Encoder{b: b} }

// PutUvarint appends v as a uvarint.
func (e *Encoder) PutUvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

// PutVarint appends v as a zigzag varint.
func (e *Encoder) PutVarint(v int64) { e.b = binary.AppendVarint(e.b, v) }

// PutByte appends one byte.
func (e *Encoder) PutByte(v byte) { e.b = append(e.b, v) }

// PutString appends s with a uvarint length prefix.
func (e *Encoder) PutString(s string) {
	e.PutUvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

// PutBytes appends p with a uvarint length prefix.
func (e *Encoder) PutBytes(p []byte) {
	e.PutUvarint(uint64(len(p)))
	e.b = append(e.b, p...)
}

// PutFixed appends p as is: a field whose size both sides know (a hash).
func (e *Encoder) PutFixed(p []byte) { e.b = append(e.b, p...) }

// Append runs fn, an encoder of another package that appends to a buffer
// and may fail (watermark.Cursor.AppendBinary), on the encoder's buffer.
func (e *Encoder) Append(fn func(b []byte) ([]byte, error)) {
	b, err := fn(e.b)
	e.b = b
	e.Fail(err)
}

// Fail records err as the encoder's failure unless one is recorded
// already; a nil err is ignored.
func (e *Encoder) Fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// Len is the length of the encoding so far.
func (e *Encoder) Len() int { return len(e.b) }

// Truncate drops what was appended after the encoding was n bytes long
// (n from Len): for an encoder that tries one form and falls back.
func (e *Encoder) Truncate(n int) { e.b = e.b[:n] }

// Bytes returns the encoding so far.
func (e *Encoder) Bytes() []byte { return e.b }

// Err returns the first failure.
func (e *Encoder) Err() error { return e.err }

// Decoder reads what an Encoder wrote. The first failure sticks: later
// reads return zero values and Done reports it, so decoders read straight
// through and check once. Counts and lengths are checked against their
// limits and the bytes left before anything is allocated.
type Decoder struct {
	b       []byte
	err     error
	failure func(msg string) error
}

// NewDecoder reads p; its failures wrap ErrProtocol with context.
func NewDecoder(p []byte) Decoder { return Decoder{b: p} }

// NewDecoderFunc reads p; failure builds its failures from their context
// ("bad uvarint", "name length 300 exceeds 255"), for a protocol with its
// own malformed-message sentinel.
func NewDecoderFunc(p []byte, failure func(msg string) error) Decoder {
	return Decoder{b: p, failure: failure}
}

// Fail records a failure (unless one is recorded already) and stops the
// decoder: for the checks a message's decoder makes on its fields.
func (d *Decoder) Fail(format string, args ...any) {
	if d.err == nil {
		msg := fmt.Sprintf(format, args...)
		if d.failure != nil {
			d.err = d.failure(msg)
		} else {
			d.err = protoErr("%s", msg)
		}
	}
	d.b = nil
}

// Err returns the first failure.
func (d *Decoder) Err() error { return d.err }

// Len is the number of bytes left.
func (d *Decoder) Len() int { return len(d.b) }

// Rest returns the bytes left and consumes them.
func (d *Decoder) Rest() []byte {
	b := d.b
	d.b = d.b[len(d.b):]
	return b
}

// Done reports the first failure, or trailing bytes.
func (d *Decoder) Done() error {
	if d.err == nil && len(d.b) != 0 {
		d.Fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// Uvarint reads a uvarint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.Fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Varint reads a zigzag varint.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.Fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// Bounded reads a uvarint and checks it against max.
func (d *Decoder) Bounded(what string, max uint64) uint64 {
	v := d.Uvarint()
	if v > max {
		d.Fail("%s %d exceeds %d", what, v, max)
		return 0
	}
	return v
}

// Count reads an element count, bounded by max and by the bytes left given
// elemMin, the smallest encoding of one element, so a count never
// allocates more than the message could hold. elemMin 0 skips the second
// check (elements that may encode to nothing).
func (d *Decoder) Count(what string, max, elemMin int) int {
	n := d.Bounded(what, uint64(max))
	if d.err == nil && elemMin > 0 && n > uint64(len(d.b)/elemMin) {
		d.Fail("%s %d in %d bytes", what, n, len(d.b))
		return 0
	}
	return int(n)
}

// Fixed reads n bytes as is. The result aliases the message.
func (d *Decoder) Fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.Fail("truncated: want %d bytes, have %d", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// Fixed32 reads a 32-byte field (a SHA-256 hash) into an array: the
// field's type can convert it, so no caller copies.
func (d *Decoder) Fixed32() [32]byte {
	var v [32]byte
	copy(v[:], d.Fixed(len(v)))
	return v
}

// Bytes reads a length-prefixed byte string of at most max bytes. The
// result aliases the message.
func (d *Decoder) Bytes(what string, max int) []byte {
	n := d.Bounded(what+" length", uint64(max))
	return d.Fixed(int(n))
}

// String reads a length-prefixed string of at most max bytes, whatever
// its encoding (paths are bytes).
func (d *Decoder) String(what string, max int) string {
	return string(d.Bytes(what, max))
}

// UTF8 is String for human-facing text (error messages, features): it
// must be valid UTF-8.
func (d *Decoder) UTF8(what string, max int) string {
	s := d.String(what, max)
	if d.err == nil && !utf8.ValidString(s) {
		d.Fail("%s is not UTF-8", what)
	}
	return s
}

// Decode runs fn, a decoder of another package that returns what it did
// not consume (watermark.DecodeCursor), on the bytes left; its error is
// this decoder's failure.
func (d *Decoder) Decode(fn func(p []byte) (rest []byte, err error)) {
	if d.err != nil {
		return
	}
	rest, err := fn(d.b)
	if err != nil {
		d.Fail("%v", err)
		return
	}
	d.b = rest
}
