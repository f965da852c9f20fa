package vfs

import "strings"

// DefaultIgnore is the ignore list a puller uses when its caller gives none.
var DefaultIgnore = []string{"node_modules"}

// MaxIgnore bounds the segments of an ignore list: a workspace's, and one
// on the wire.
const MaxIgnore = 1024

// Ignore matches paths by whole segment: "node_modules" hides "node_modules",
// "a/node_modules/x" and everything below, but not "node_modules2". The zero
// Ignore matches nothing.
type Ignore struct {
	segs map[string]struct{}
}

// NewIgnore builds a matcher from a list of segment names. A nil list means
// DefaultIgnore; an empty non-nil list disables ignoring. A caller's list
// replaces the default, it does not extend it.
func NewIgnore(list []string) Ignore {
	if list == nil {
		list = DefaultIgnore
	}
	if len(list) == 0 {
		return Ignore{}
	}
	m := make(map[string]struct{}, len(list))
	for _, s := range list {
		if s != "" {
			m[s] = struct{}{}
		}
	}
	return Ignore{segs: m}
}

// List returns the segments, for the wire.
func (ig Ignore) List() []string {
	out := make([]string, 0, len(ig.segs))
	for s := range ig.segs {
		out = append(out, s)
	}
	return out
}

// Empty reports whether the matcher matches nothing.
func (ig Ignore) Empty() bool { return len(ig.segs) == 0 }

// Match reports whether any segment of p is ignored.
func (ig Ignore) Match(p string) bool {
	if len(ig.segs) == 0 {
		return false
	}
	for seg := range strings.SplitSeq(p, "/") {
		if _, ok := ig.segs[seg]; ok {
			return true
		}
	}
	return false
}

// MatchName reports whether a single segment is ignored.
func (ig Ignore) MatchName(name string) bool {
	_, ok := ig.segs[name]
	return ok
}
