package chunkstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"iter"
	"sort"
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

// Ref names one chunk of a manifest: its address and length. A Ref whose
// Hash is HoleHash is a hole instead: Size bytes of zeros, nothing stored.
type Ref struct {
	Hash Hash
	Size uint32
}

// HoleHash marks a hole ref. No chunk has it as its address (finding bytes
// whose sha256 is all zeros is out of reach), so a manifest can use it to
// mean "zeros here" without ambiguity.
var HoleHash Hash

// IsHole reports whether r is a hole: zeros, no stored bytes, no reference
// count, never probed, fetched or sent.
func (r Ref) IsHole() bool { return r.Hash == HoleHash }

const (
	// MaxHoleRun is the longest hole one ref covers: the largest multiple
	// of ChunkSize that fits the uint32 Size.
	MaxHoleRun = (1<<32 - 1) / ChunkSize * ChunkSize
	// MaxFileSize is the largest file the system keeps (4 TiB). A write or
	// truncate past it fails (EFBIG through the mount).
	MaxFileSize = 1 << 42
	// MaxManifestChunks bounds a manifest's refs: one per chunk of the
	// largest file.
	MaxManifestChunks = MaxFileSize / ChunkSize
)

// Manifest is a file's content: its chunks in order. Chunk i covers bytes
// [i*ChunkSize, (i+1)*ChunkSize) of the file; a data ref is one chunk, a
// hole ref a run of whole chunks (or the file's tail), so ref k is chunk k
// only in a manifest without holes. Index maps chunk indices to refs.
type Manifest []Ref

// Size is the file length the manifest describes.
func (m Manifest) Size() int64 {
	var n int64
	for _, r := range m {
		n += int64(r.Size)
	}
	return n
}

// HasHoles reports whether any ref is a hole.
func (m Manifest) HasHoles() bool {
	for _, r := range m {
		if r.IsHole() {
			return true
		}
	}
	return false
}

// DataRefs returns the refs with stored bytes, in order, holes left out:
// what reference counting, probing and fetching deal with. Without holes
// it returns m itself.
func (m Manifest) DataRefs() []Ref {
	if !m.HasHoles() {
		return m
	}
	out := make([]Ref, 0, len(m))
	for _, r := range m {
		if !r.IsHole() {
			out = append(out, r)
		}
	}
	return out
}

// Hashes returns the hashes of m's data refs, in order, holes left out
// (repeats kept).
func (m Manifest) Hashes() []Hash {
	out := make([]Hash, 0, len(m))
	for _, r := range m {
		if !r.IsHole() {
			out = append(out, r.Hash)
		}
	}
	return out
}

// Runs yields each ref with the file offset it starts at.
func (m Manifest) Runs() iter.Seq2[int64, Ref] {
	return func(yield func(int64, Ref) bool) {
		var off int64
		for _, r := range m {
			if !yield(off, r) {
				return
			}
			off += int64(r.Size)
		}
	}
}

// Validate checks the chunk windows: every data ref but the last is exactly
// ChunkSize bytes and the last is 1..ChunkSize bytes; a hole is 1..
// MaxHoleRun bytes, a multiple of ChunkSize unless it is the last ref; an
// empty file has no refs; the total is at most MaxFileSize.
func (m Manifest) Validate() error {
	if len(m) > MaxManifestChunks {
		return fmt.Errorf("%w: %d refs", ErrBadManifest, len(m))
	}
	var total int64
	for i, r := range m {
		last := i == len(m)-1
		switch {
		case r.Size == 0:
			return fmt.Errorf("chunk %d: %w: empty chunk", i, ErrBadManifest)
		case r.IsHole() && r.Size > MaxHoleRun:
			return fmt.Errorf("chunk %d: %w: hole of %d bytes exceeds the longest run", i, ErrBadManifest, r.Size)
		case r.IsHole() && !last && r.Size%ChunkSize != 0:
			return fmt.Errorf("chunk %d: %w: ragged hole of %d bytes before the last ref", i, ErrBadManifest, r.Size)
		case !r.IsHole() && r.Size > ChunkSize:
			return fmt.Errorf("chunk %d: %w: %d bytes exceeds the chunk size", i, ErrBadManifest, r.Size)
		case !r.IsHole() && !last && r.Size != ChunkSize:
			return fmt.Errorf("chunk %d: %w: ragged window of %d bytes before the last chunk", i, ErrBadManifest, r.Size)
		}
		if total += int64(r.Size); total > MaxFileSize {
			return fmt.Errorf("chunk %d: %w: more than %d bytes", i, ErrBadManifest, int64(MaxFileSize))
		}
	}
	return nil
}

// Append appends r in canonical form: a hole merges into a hole that ends
// m (split into runs of at most MaxHoleRun). The caller keeps the windows
// valid: only the file's last ref may be short.
func (m Manifest) Append(r Ref) Manifest {
	if !r.IsHole() {
		return append(m, r)
	}
	return m.AppendHole(int64(r.Size))
}

// AppendHole appends n bytes of zeros as hole refs, merged with a hole that
// ends m.
func (m Manifest) AppendHole(n int64) Manifest {
	if k := len(m) - 1; k >= 0 && m[k].IsHole() {
		n += int64(m[k].Size)
		m = m[:k]
	}
	for n > 0 {
		run := min(n, MaxHoleRun)
		m = append(m, Ref{Hash: HoleHash, Size: uint32(run)})
		n -= run
	}
	return m
}

// Index maps chunk indices to a manifest's refs. It costs nothing for a
// manifest without holes (ref k is chunk k) and one int64 per ref with.
type Index struct {
	m      Manifest
	starts []int64 // first chunk index of each ref; nil without holes
}

// Index returns m's chunk index.
func (m Manifest) Index() Index {
	if !m.HasHoles() {
		return Index{m: m}
	}
	starts := make([]int64, len(m))
	var c int64
	for k, r := range m {
		starts[k] = c
		c += (int64(r.Size) + ChunkSize - 1) / ChunkSize
	}
	return Index{m: m, starts: starts}
}

// Manifest is the indexed manifest.
func (x Index) Manifest() Manifest { return x.m }

// Chunk returns the ref holding chunk i: its data ref, or for a hole a hole
// ref of chunk i's length (ChunkSize, or the tail's). ok is false past the
// manifest's end.
func (x Index) Chunk(i int64) (r Ref, ok bool) {
	if i < 0 {
		return Ref{}, false
	}
	if x.starts == nil {
		if i >= int64(len(x.m)) {
			return Ref{}, false
		}
		return x.m[i], true
	}
	// The last ref whose first chunk is at or before i.
	k := sort.Search(len(x.starts), func(k int) bool { return x.starts[k] > i }) - 1
	if k < 0 {
		return Ref{}, false
	}
	r = x.m[k]
	within := (i - x.starts[k]) * ChunkSize
	if within >= int64(r.Size) {
		return Ref{}, false
	}
	if !r.IsHole() {
		return r, true
	}
	return Ref{Hash: HoleHash, Size: uint32(min(int64(r.Size)-within, ChunkSize))}, true
}

// AppendChunks appends chunks [lo, hi) of the indexed manifest to m in
// canonical form (a hole merges with a hole ending m), reading the refs in
// the range once: a run of holes costs one step, not one per chunk. The
// range must lie within the manifest.
func (x Index) AppendChunks(m Manifest, lo, hi int64) Manifest {
	if lo >= hi {
		return m
	}
	k, first := lo, lo
	if x.starts != nil {
		k = int64(sort.Search(len(x.starts), func(k int) bool { return x.starts[k] > lo }) - 1)
		first = x.starts[k]
	}
	for ; lo < hi && k < int64(len(x.m)); k++ {
		r := x.m[k]
		end := min(first+(int64(r.Size)+ChunkSize-1)/ChunkSize, hi)
		if r.IsHole() {
			m = m.AppendHole(min(int64(r.Size), (end-first)*ChunkSize) - (lo-first)*ChunkSize)
		} else {
			m = append(m, r)
		}
		lo, first = end, end
	}
	return m
}

// IsZero reports whether b is all zeros: the test that turns a chunk into
// a hole, far cheaper than hashing it.
func IsZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeros [16 << 10]byte

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
// windows, and returns the rest of b. The refs it allocates are bounded by
// b's length (33 bytes at least per ref).
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
		limit := uint64(ChunkSize)
		if m[i].IsHole() {
			limit = MaxHoleRun
		}
		if k <= 0 || size > limit {
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
