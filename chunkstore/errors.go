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
)
