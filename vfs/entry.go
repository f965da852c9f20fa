package vfs

import (
	"fmt"

	"github.com/wsync/wsync/chunkstore"
)

// EntryKind is the kind of a change entry.
type EntryKind uint8

const (
	EntryFile EntryKind = iota + 1
	EntryDir
	EntrySymlink
	EntryDelete
)

func (k EntryKind) String() string {
	switch k {
	case EntryFile:
		return "file"
	case EntryDir:
		return "dir"
	case EntrySymlink:
		return "symlink"
	case EntryDelete:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ChangeEntry is the state of one path as the change feed materialises it
// and Apply consumes it. Entries carry chunk hashes, never bytes.
type ChangeEntry struct {
	Kind EntryKind
	Rev  int64  // the sender's rev that last touched the path
	Path string // store form: relative, no leading slash
	// Mode holds the permission bits (mode & 07777) of files, dirs and symlinks.
	Mode uint32
	// Mtime is nanoseconds since the Unix epoch.
	Mtime  int64
	Size   int64               // files: total length
	Chunks chunkstore.Manifest // files: chunk windows
	Target string              // symlinks: link target
}

// MaxTargetLen bounds a symlink target.
const MaxTargetLen = MaxPathLen

// Validate checks an entry as Apply does at every boundary: a valid path, a
// known kind, and for files chunk windows that are well-formed and add up to
// Size.
func (e *ChangeEntry) Validate() error {
	if err := ValidatePath(e.Path); err != nil {
		return err
	}
	if e.Mode&^07777 != 0 {
		return fmt.Errorf("%w: mode %o has bits outside 07777", ErrInvalid, e.Mode)
	}
	switch e.Kind {
	case EntryFile:
		if err := e.Chunks.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if got := e.Chunks.Size(); got != e.Size {
			return fmt.Errorf("%w: chunks cover %d bytes, size is %d", ErrInvalid, got, e.Size)
		}
	case EntrySymlink:
		if e.Target == "" || len(e.Target) > MaxTargetLen {
			return fmt.Errorf("%w: symlink target of %d bytes", ErrInvalid, len(e.Target))
		}
		for i := 0; i < len(e.Target); i++ {
			if e.Target[i] == 0 {
				return fmt.Errorf("%w: symlink target contains NUL", ErrInvalid)
			}
		}
	case EntryDir, EntryDelete:
	default:
		return fmt.Errorf("%w: entry kind %d", ErrInvalid, e.Kind)
	}
	if e.Kind != EntryFile && (e.Size != 0 || len(e.Chunks) != 0) {
		return fmt.Errorf("%w: %s entry carries chunks", ErrInvalid, e.Kind)
	}
	return nil
}
