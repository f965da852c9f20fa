package events

import (
	"fmt"
	"slices"
	"strings"
)

// Bounds of a filter list a caller gives.
const (
	maxFilterLen     = 1024
	maxFilterEntries = 32
)

// Filter selects events by type: each entry is a type ("sync.finished")
// or a family, the part of a type before its first dot ("sync" selects
// sync.started, sync.progress, ...). The zero Filter selects everything;
// gap events pass every filter, so a filtered subscriber is still told
// what it missed.
type Filter struct {
	entries []string
}

// ParseFilter reads a comma-separated list of types and families ("sync,
// exec.exited"). An entry that names none of the known types, neither as a
// type nor as a family, is refused (ErrBadFilter): a misspelt filter would
// otherwise select nothing, silently.
func ParseFilter(list string, known []string) (Filter, error) {
	var f Filter
	if len(list) > maxFilterLen {
		return f, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadFilter, len(list), maxFilterLen)
	}
	for e := range strings.SplitSeq(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !slices.ContainsFunc(known, func(t string) bool { return matches(e, t) }) {
			return Filter{}, fmt.Errorf("%w: no event type %q (want one of %s, or a family: the part before the dot)",
				ErrBadFilter, e, strings.Join(known, ", "))
		}
		if len(f.entries) == maxFilterEntries {
			return Filter{}, fmt.Errorf("%w: more than %d entries", ErrBadFilter, maxFilterEntries)
		}
		f.entries = append(f.entries, e)
	}
	return f, nil
}

// Match reports whether f selects events of type typ.
func (f Filter) Match(typ string) bool {
	if len(f.entries) == 0 || typ == TypeGap {
		return true
	}
	return slices.ContainsFunc(f.entries, func(e string) bool { return matches(e, typ) })
}

// matches reports whether the filter entry e selects type typ.
func matches(e, typ string) bool {
	fam, _, _ := strings.Cut(typ, ".")
	return e == typ || e == fam
}
