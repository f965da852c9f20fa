package sharedchunks

import (
	"context"
	"errors"
	"fmt"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/objstore"
)

// Key prefixes in the bucket (below the store's prefix).
const (
	ChunksPrefix = "chunks/"
	TrashPrefix  = "chunks-trash/"
)

// Key is where h's bytes live in the bucket.
func Key(h chunkstore.Hash) string { return keyUnder(ChunksPrefix, h) }

// TrashKey is where the collector sets h's bytes aside.
func TrashKey(h chunkstore.Hash) string { return keyUnder(TrashPrefix, h) }

func keyUnder(prefix string, h chunkstore.Hash) string {
	s := h.String()
	return prefix + s[:2] + "/" + s
}

// parseKey reads a hash back from a key under prefix.
func parseKey(prefix, key string) (chunkstore.Hash, bool) {
	rest, ok := cutPrefix(key, prefix)
	if !ok || len(rest) != 3+64 || rest[2] != '/' {
		return chunkstore.Hash{}, false
	}
	// Only the key Key gives: lowercase hex, its own first two digits
	// (another spelling of the hash names another object).
	h, err := chunkstore.ParseHash(rest[3:])
	if err != nil || h.String() != rest[3:] || rest[:2] != rest[3:5] {
		return chunkstore.Hash{}, false
	}
	return h, true
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return "", false
	}
	return s[len(prefix):], true
}

// Store is the chunk bytes of a bucket: a chunkstore.Remote.
type Store struct {
	st    *objstore.Store
	fence func() error // before every write; nil: none
}

var _ chunkstore.Remote = (*Store)(nil)

// New returns the chunks kept in st.
func New(st *objstore.Store) *Store { return &Store{st: st} }

// Fenced returns the same chunks written only while fence returns nil
// (the owner's lease is valid): a server that lost a workspace writes no
// more of its chunks. Reads are not fenced.
func (s *Store) Fenced(fence func() error) *Store { return &Store{st: s.st, fence: fence} }

// checkFence refuses a write once the fence says so.
func (s *Store) checkFence() error {
	if s.fence == nil {
		return nil
	}
	return s.fence()
}

// Has reports whether chunks/ holds h. Bytes set aside in the trash do
// not count: an uploader sends them again, which puts them back.
func (s *Store) Has(ctx context.Context, h chunkstore.Hash) (bool, error) {
	_, err := s.st.Head(ctx, Key(h))
	if errors.Is(err, objstore.ErrNotFound) {
		count("has", nil, true)
		return false, nil
	}
	count("has", err, false)
	if err != nil {
		return false, fmt.Errorf("shared chunk %s: %w", h, err)
	}
	return true, nil
}

// Put writes h's bytes (the caller checked them against h).
func (s *Store) Put(ctx context.Context, h chunkstore.Hash, data []byte) error {
	if len(data) > chunkstore.ChunkSize {
		return fmt.Errorf("put shared chunk %s: %w: %d bytes", h, objstore.ErrInvalid, len(data))
	}
	if err := s.checkFence(); err != nil {
		return fmt.Errorf("put shared chunk %s: %w", h, err)
	}
	_, err := s.st.Put(ctx, Key(h), data)
	count("put", err, false)
	if err != nil {
		return fmt.Errorf("put shared chunk %s: %w", h, err)
	}
	metricBytes.WithLabelValues("put").Add(float64(len(data)))
	return nil
}

// Get reads h's bytes, size of them. Bytes found only in the trash are
// put back under chunks/ first (the collector set them aside while a
// commit naming them was on its way to the bucket). The caller checks
// them against h.
func (s *Store) Get(ctx context.Context, h chunkstore.Hash, size int) ([]byte, error) {
	if size < 0 || size > chunkstore.ChunkSize {
		return nil, fmt.Errorf("get shared chunk %s: %w: size %d", h, objstore.ErrInvalid, size)
	}
	data, _, err := s.st.GetMax(ctx, Key(h), int64(size))
	if errors.Is(err, objstore.ErrInvalid) { // more bytes than the chunk has
		err = fmt.Errorf("%w: %w", chunkstore.ErrCorrupt, err)
	}
	missing := errors.Is(err, objstore.ErrNotFound)
	if missing {
		count("get", nil, true)
	} else {
		count("get", err, false)
	}
	if err == nil {
		metricBytes.WithLabelValues("get").Add(float64(len(data)))
		return data, nil
	}
	if !missing {
		return nil, fmt.Errorf("get shared chunk %s: %w", h, err)
	}
	data, _, terr := s.st.GetMax(ctx, TrashKey(h), int64(size))
	count("get_trash", terr, errors.Is(terr, objstore.ErrNotFound))
	if terr != nil {
		if errors.Is(terr, objstore.ErrNotFound) {
			return nil, fmt.Errorf("get shared chunk %s: %w", h, chunkstore.ErrRemoteMissing)
		}
		return nil, fmt.Errorf("get shared chunk %s from the trash: %w", h, terr)
	}
	// Put back where the next reader looks, unless fenced: the bytes are
	// this reader's either way.
	if len(data) == size && chunkstore.Sum(data) == h && s.checkFence() == nil {
		if err := s.Put(ctx, h, data); err != nil {
			return nil, fmt.Errorf("get shared chunk %s: put back from the trash: %w", h, err)
		}
	}
	return data, nil
}
