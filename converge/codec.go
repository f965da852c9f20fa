package converge

import (
	"encoding/binary"
	"unicode/utf8"

	"github.com/wsync/wsync/vfs"
)

// The convergence messages use the primitives of docs/PROTOCOL.md:
// uvarints, length-prefixed strings and raw 32-byte hashes. Every decoder
// reads through a reader whose first failure sticks (later reads return
// zero values) and checks once at the end, so no decoder can be driven past
// its message or into an allocation the message could not hold.

type writer struct{ b []byte }

func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) byte(v byte)      { w.b = append(w.b, v) }
func (w *writer) hash(h Hash)      { w.b = append(w.b, h[:]...) }
func (w *writer) str(s string) {
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}

// ignore writes an ignore list: 0 for nil (the default list), 1 and the
// segments otherwise.
func (w *writer) ignore(list []string) {
	if list == nil {
		w.byte(0)
		return
	}
	w.byte(1)
	w.uvarint(uint64(len(list)))
	for _, s := range list {
		w.str(s)
	}
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = malformed(format, args...)
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bounded(what string, max uint64) uint64 {
	v := r.uvarint()
	if v > max {
		r.fail("%s %d exceeds %d", what, v, max)
		return 0
	}
	return v
}

// count reads an element count bounded by max and by what the remaining
// bytes could hold at minSize bytes an element.
func (r *reader) count(what string, max, minSize int) int {
	n := r.bounded(what, uint64(max))
	if r.err == nil && n > uint64(len(r.b)/minSize) {
		r.fail("%s %d in %d bytes", what, n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) raw(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.fail("truncated: want %d bytes, have %d", n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) hash() Hash {
	var h Hash
	copy(h[:], r.raw(len(h)))
	return h
}

func (r *reader) bytes(what string, max int) []byte {
	return r.raw(int(r.bounded(what+" length", uint64(max))))
}

func (r *reader) str(what string, max int) string { return string(r.bytes(what, max)) }

// path reads a store-form path; allowRoot admits "".
func (r *reader) path(allowRoot bool) string {
	p := r.str("path", vfs.MaxPathLen)
	if r.err != nil || (p == "" && allowRoot) {
		return p
	}
	if err := vfs.ValidatePath(p); err != nil {
		r.fail("path: %v", err)
		return ""
	}
	return p
}

// name reads one path segment; allowEmpty admits "".
func (r *reader) name(allowEmpty bool) string {
	s := r.str("name", vfs.MaxNameLen)
	if r.err != nil || (s == "" && allowEmpty) {
		return s
	}
	if err := vfs.ValidateName(s); err != nil {
		r.fail("name: %v", err)
		return ""
	}
	return s
}

// maxIgnore bounds an ignore list.
const maxIgnore = 1024

func (r *reader) ignore() []string {
	switch r.byte() {
	case 0:
		return nil
	case 1:
	default:
		r.fail("bad ignore flag")
		return nil
	}
	n := r.count("ignore segments", maxIgnore, 1)
	out := make([]string, 0, n)
	for range n {
		s := r.str("ignore segment", vfs.MaxNameLen)
		if r.err == nil && s != "" && (vfs.ValidateName(s) != nil || !utf8.ValidString(s)) {
			r.fail("bad ignore segment")
		}
		out = append(out, s)
	}
	return out
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}
