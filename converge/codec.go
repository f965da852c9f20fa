package converge

import (
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// The convergence messages are written with rpc.Encoder and read with
// rpc.Decoder (the primitives of docs/PROTOCOL.md: uvarints,
// length-prefixed strings, raw 32-byte hashes); ignore lists are
// syncwire's (AppendIgnore, DecodeIgnore). A decoder's first failure
// sticks (later reads return zero values) and is ErrMalformed; every
// decoder reads straight through and checks once, so none can be driven
// past its message or into an allocation the message could not hold.

// newDecoder reads p; its failures are ErrMalformed.
func newDecoder(p []byte) rpc.Decoder {
	return rpc.NewDecoderFunc(p, func(msg string) error { return malformed("%s", msg) })
}

// readPath reads a store-form path; allowRoot admits "".
func readPath(d *rpc.Decoder, allowRoot bool) string {
	p := d.String("path", vfs.MaxPathLen)
	if d.Err() != nil || (p == "" && allowRoot) {
		return p
	}
	if err := vfs.ValidatePath(p); err != nil {
		d.Fail("path: %v", err)
		return ""
	}
	return p
}

// readName reads one path segment; allowEmpty admits "".
func readName(d *rpc.Decoder, allowEmpty bool) string {
	s := d.String("name", vfs.MaxNameLen)
	if d.Err() != nil || (s == "" && allowEmpty) {
		return s
	}
	if err := vfs.ValidateName(s); err != nil {
		d.Fail("name: %v", err)
		return ""
	}
	return s
}

// uvarints encodes a body of uvarints (the snapshot methods' counts and
// revs).
func uvarints(vs ...uint64) []byte {
	var e rpc.Encoder
	for _, v := range vs {
		e.PutUvarint(v)
	}
	return e.Bytes()
}
