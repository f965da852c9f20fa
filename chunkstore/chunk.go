package chunkstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// ChunkSize is the fixed chunk size: every chunk of a file is exactly
// ChunkSize bytes except the last, and chunk i covers bytes
// [i*ChunkSize, (i+1)*ChunkSize).
const ChunkSize = 512 << 10

// Hash is the sha256 of a chunk's bytes, its address.
type Hash [32]byte

// Sum returns the address of b.
func Sum(b []byte) Hash { return sha256.Sum256(b) }

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ParseHash parses a 64-digit hex hash.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("parse hash %q: %w", s, ErrBadHash)
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("parse hash %q: %w", s, ErrBadHash)
	}
	return h, nil
}

// Ref names one chunk of a manifest: its address and length.
type Ref struct {
	Hash Hash
	Size uint32
}

// Manifest is a file's content: its chunks in order.
type Manifest []Ref

// Size is the file length the manifest describes.
func (m Manifest) Size() int64 {
	var n int64
	for _, r := range m {
		n += int64(r.Size)
	}
	return n
}

// Validate checks the chunk windows: every chunk but the last is exactly
// ChunkSize bytes, the last is 1..ChunkSize bytes, and an empty file has no
// chunks.
func (m Manifest) Validate() error {
	for i, r := range m {
		switch {
		case r.Size == 0:
			return fmt.Errorf("chunk %d: %w: empty chunk", i, ErrBadManifest)
		case r.Size > ChunkSize:
			return fmt.Errorf("chunk %d: %w: %d bytes exceeds the chunk size", i, ErrBadManifest, r.Size)
		case i < len(m)-1 && r.Size != ChunkSize:
			return fmt.Errorf("chunk %d: %w: ragged window of %d bytes before the last chunk", i, ErrBadManifest, r.Size)
		}
	}
	return nil
}

// MaxManifestChunks bounds a decoded manifest (a 1 TiB file).
const MaxManifestChunks = 1 << 21

// AppendManifest appends m's encoding: uvarint count, then per chunk the 32
// hash bytes and a uvarint size.
func AppendManifest(b []byte, m Manifest) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, r := range m {
		b = append(b, r.Hash[:]...)
		b = binary.AppendUvarint(b, uint64(r.Size))
	}
	return b
}

// DecodeManifest decodes a manifest from the front of b, validates its chunk
// windows, and returns the rest of b.
func DecodeManifest(b []byte) (Manifest, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, fmt.Errorf("decode manifest: %w: bad count", ErrBadManifest)
	}
	b = b[k:]
	if n > MaxManifestChunks || n > uint64(len(b))/33 {
		return nil, nil, fmt.Errorf("decode manifest: %w: %d chunks in %d bytes", ErrBadManifest, n, len(b))
	}
	m := make(Manifest, n)
	for i := range m {
		if len(b) < 33 {
			return nil, nil, fmt.Errorf("decode manifest: %w: truncated", ErrBadManifest)
		}
		copy(m[i].Hash[:], b)
		b = b[32:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > ChunkSize {
			return nil, nil, fmt.Errorf("decode manifest: %w: bad size of chunk %d", ErrBadManifest, i)
		}
		m[i].Size = uint32(size)
		b = b[k:]
	}
	if err := m.Validate(); err != nil {
		return nil, nil, fmt.Errorf("decode manifest: %w", err)
	}
	return m, b, nil
}
