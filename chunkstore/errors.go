package chunkstore

import "errors"

var (
	// ErrHashMismatch: bytes handed to the store do not hash to the address
	// they were given under.
	ErrHashMismatch = errors.New("chunk bytes do not match their hash")
	// ErrUnknownHash: no stored or staged chunk has this address.
	ErrUnknownHash = errors.New("unknown chunk hash")
	// ErrBadHash: a hash that does not parse.
	ErrBadHash = errors.New("malformed hash")
	// ErrBadManifest: a manifest that does not decode or has ragged chunk
	// windows.
	ErrBadManifest = errors.New("malformed manifest")
	// ErrChunkTooLarge: a chunk over ChunkSize bytes.
	ErrChunkTooLarge = errors.New("chunk larger than the chunk size")
	// ErrEmptyChunk: a chunk of zero bytes (no manifest has one).
	ErrEmptyChunk = errors.New("empty chunk")
	// ErrSizeMismatch: a Ref's size disagrees with the stored chunk's size,
	// or with another Ref of the same hash.
	ErrSizeMismatch = errors.New("chunk size does not match")
	// ErrCorrupt: a stored chunk's bytes are missing or short.
	ErrCorrupt = errors.New("chunk bytes missing or damaged")
	// ErrReleased: a Put on a Stage after its Release.
	ErrReleased = errors.New("stage released")
	// ErrClosed: a call on a closed Store.
	ErrClosed = errors.New("chunk store closed")
)
