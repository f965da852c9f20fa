package vfs

import (
	"fmt"
	"strings"
)

// Path limits, as on Linux.
const (
	MaxNameLen = 255
	MaxPathLen = 4096
)

// ValidatePath checks a workspace path as every boundary (wire, HTTP, CLI,
// FUSE) must: relative to the workspace root ("src/main.go"), no empty, "."
// or ".." segments, no NUL, segments of at most MaxNameLen bytes, at most
// MaxPathLen bytes in all. The root itself is the empty path and is not valid
// here: callers that accept the root check for "" first.
func ValidatePath(p string) error {
	if p == "" {
		return fmt.Errorf("path %q: %w: empty", p, ErrInvalid)
	}
	if len(p) > MaxPathLen {
		return fmt.Errorf("path of %d bytes: %w", len(p), ErrNameTooLong)
	}
	for seg := range strings.SplitSeq(p, "/") {
		if err := ValidateName(seg); err != nil {
			return fmt.Errorf("path %q: %w", p, err)
		}
	}
	return nil
}

// ChildPathLen is the length of the path of name in a directory whose path
// is dirLen bytes long (0: the root).
func ChildPathLen(dirLen int, name string) int {
	if dirLen == 0 {
		return len(name)
	}
	return dirLen + 1 + len(name)
}

// checkNewPath refuses a name whose path would be longer than MaxPathLen:
// Linux bounds a path argument, not the depth of a tree, but a path the
// sync cannot carry (the wire refuses it, as every boundary does) would
// stop every pull after it. A directory that moves checks its deepest path
// too (deepest: the longest path below it, relative to it; 0 for none).
func checkNewPath(dirLen int, name string, deepest int) error {
	n := ChildPathLen(dirLen, name)
	if deepest > 0 {
		n += 1 + deepest
	}
	if n > MaxPathLen {
		return fmt.Errorf("path of %d bytes: %w (at most %d: the sync carries no longer path)", n, ErrNameTooLong, MaxPathLen)
	}
	return nil
}

// ValidateName checks one path segment.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty segment", ErrInvalid)
	case name == "." || name == "..":
		return fmt.Errorf("%w: segment %q", ErrInvalid, name)
	case len(name) > MaxNameLen:
		return fmt.Errorf("segment of %d bytes: %w", len(name), ErrNameTooLong)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%w: segment contains '/' or NUL", ErrInvalid)
	}
	return nil
}

// CleanAPIPath turns a user-facing workspace path ("/src/a.go", "src/a.go",
// "/") into the store's form ("src/a.go", "" for the root) and validates it.
// It does not resolve "." or "..": those are refused.
func CleanAPIPath(p string) (string, error) {
	p = strings.TrimPrefix(p, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if err := ValidatePath(p); err != nil {
		return "", err
	}
	return p, nil
}

// joinPath joins a parent path and a child name ("" is the root).
func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "/" + name
}

// splitPath splits "a/b/c" into "a/b" and "c".
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}
