package syncwire

import (
	"fmt"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/watermark"
)

// enc is rpc.Encoder plus the sync protocol's own fields: raw hashes,
// revs and cursors (docs/PROTOCOL.md).
type enc struct{ rpc.Encoder }

func newEnc(b []byte) enc { return enc{rpc.NewEncoder(b)} }

func (e *enc) hash(h chunkstore.Hash) { e.PutFixed(h[:]) }

func (e *enc) rev(r int64) {
	if r < 0 {
		e.Fail(fmt.Errorf("encode: negative rev %d", r))
	}
	e.PutUvarint(uint64(r))
}

func (e *enc) cursor(c watermark.Cursor) { e.Append(c.AppendBinary) }

func (e *enc) manifest(m chunkstore.Manifest) {
	e.Append(func(b []byte) ([]byte, error) { return chunkstore.AppendManifest(b, m), nil })
}

// dec reads what enc wrote, with rpc.Decoder's sticky first failure
// (rpc.ErrProtocol with context).
type dec struct{ rpc.Decoder }

func newDec(p []byte) dec { return dec{rpc.NewDecoder(p)} }

func (d *dec) hash() chunkstore.Hash { return chunkstore.Hash(d.Fixed32()) }

func (d *dec) rev() int64 {
	return int64(d.Bounded("rev", 1<<62))
}

func (d *dec) cursor() watermark.Cursor {
	var c watermark.Cursor
	d.Decode(func(p []byte) (rest []byte, err error) {
		c, rest, err = watermark.DecodeCursor(p)
		return rest, err
	})
	return c
}

func (d *dec) manifest() chunkstore.Manifest {
	var m chunkstore.Manifest
	d.Decode(func(p []byte) (rest []byte, err error) {
		m, rest, err = chunkstore.DecodeManifest(p)
		return rest, err
	})
	return m
}
