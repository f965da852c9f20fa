package vfs

import (
	"fmt"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// Ignore patterns follow gitignore(5), all of them relative to the
// workspace root (one level: there is no .gitignore per directory).
//
// # The library, and why
//
// Each pattern is parsed and matched by go-git's plumbing/format/gitignore
// (maintained with go-git itself): it takes negation ("!"), directory-only
// patterns ("dist/"), anchoring (a slash at the start or in the middle ties a
// pattern to the root; a name without one matches at any depth), "**" and
// the fnmatch classes ("*", "?", "[a-z]", backslash escapes), and its Match
// takes whether the path is a directory. github.com/sabhiram/go-gitignore,
// the other candidate, turns each line into a regular expression over the
// path string: it cannot tell a directory from a file (so "dist/" cannot
// match the directory dist itself), escapes "?" into a literal, and has not
// changed since 2021.
//
// go-git's own Matcher is not git's rule, so it is not used: it asks each
// pattern whether it matches the path *or any ancestor*, and the last such
// pattern wins. Git walks top down instead, and at each level asks which
// pattern matches that level itself; the last one decides, and an excluded
// directory hides everything below it. The difference shows in the common
// "*", "!*/", "!*.go" whitelist: for src/x.txt, "!*/" matches the ancestor
// src and would win in go-git's Matcher, while git (and this package) sees
// that only "*" matches x.txt itself. So Ignore keeps go-git's patterns and
// composes them as git does:
//
//   - A pattern without a slash (but for a trailing one) is asked about the
//     last segment alone: git matches such a pattern against the base name.
//   - A pattern with one is anchored at the root and asked about the whole
//     path up to that level; go-git also says yes when it matches only a
//     shorter prefix, so each such pattern has a directory-only twin that
//     says yes exactly then ("matched with segments left over"), and a level
//     counts only when the pattern matches and the twin does not.
//   - A trailing "/**" ("abc/**": everything inside abc, not abc itself) is
//     given to go-git as "/**/*": go-git's "abc/**" also matches abc.
//     Runs of asterisks inside a segment ("foo**") are one "*", as git says;
//     go-git matches nothing with one in an anchored pattern.
//
// One difference from git remains: go-git matches "**" without
// backtracking, taking the first directory that fits, so "a/**/b" sees
// a/b/x/b as matched at a/b (its prefix) rather than at itself. Both say
// the path is ignored; they differ only when a later negation re-includes
// the shallower a/b/ and nothing else excludes a/b/x/b.
//
// # Directories
//
// A directory that is ignored hides everything below it, and no negation
// can re-include a path inside it (gitignore(5): "It is not possible to
// re-include a file if a parent directory of that file is excluded"): the
// feed, the files API and the Merkle trees never look below it.
//
// # Cost
//
// Match costs one question per level of the path for each name pattern,
// each O(1); an anchored pattern without "**" is asked only at the one
// level it can match, O(depth); one with "**" is bisected for the one
// level it can match, O(depth log depth) (see starEnds). Walkers that go top down
// (the Merkle trees, readdir) ask Excludes once per name, their parents
// known not to be ignored. MaxIgnore and MaxIgnorePatternLen bound a list.

// DefaultIgnore is the ignore list a puller uses when its caller gives none.
var DefaultIgnore = []string{"node_modules"}

// Ignore list bounds: a workspace's configured list, the lines of its
// .wsyncignore, and a list on the wire (the two together).
const (
	// MaxIgnore bounds the patterns of a list.
	MaxIgnore = 1024
	// MaxIgnorePatternLen bounds one pattern, in bytes.
	MaxIgnorePatternLen = 1024
)

// Ignore is a compiled list of gitignore patterns (see the package's
// ignore.go for the rules). The zero Ignore matches nothing.
type Ignore struct {
	list []string // as given, blank lines and comments included
	pats []ignorePattern
}

type ignorePattern struct {
	p gitignore.Pattern
	// glob patterns (a slash before any trailing one) are anchored: asked
	// about the whole path, with strict (the directory-only twin) telling
	// a match of a shorter prefix.
	glob   bool
	strict gitignore.Pattern
	// levels: for a glob without "**", the one depth it can match (0:
	// any depth from minLevel on).
	level, minLevel int
}

// NewIgnore builds a matcher from a list of patterns. A nil list means
// DefaultIgnore; an empty non-nil list disables ignoring. A caller's list
// replaces the default, it does not extend it. Blank lines and comments
// are skipped; a malformed pattern (one ValidateIgnorePattern refuses)
// matches nothing: the boundaries validate lists before they get here.
func NewIgnore(list []string) Ignore {
	if list == nil {
		list = DefaultIgnore
	}
	ig := Ignore{list: list}
	for _, line := range list {
		body, ok := patternBody(line)
		if !ok || ValidateIgnorePattern(line) != nil {
			continue
		}
		ig.pats = append(ig.pats, compile(body))
	}
	return ig
}

// patternBody is a line as go-git is given it: comments and blank lines
// dropped (false), trailing unescaped spaces trimmed, a trailing "/**"
// written "/**/*", runs of asterisks in a segment made one.
func patternBody(line string) (string, bool) {
	if strings.HasPrefix(line, "#") {
		return "", false
	}
	for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, `\ `) {
		line = line[:len(line)-1]
	}
	if line == "" || line == "!" {
		return "", false
	}
	neg := ""
	if strings.HasPrefix(line, "!") {
		neg, line = "!", line[1:]
	}
	dir := ""
	if strings.HasSuffix(line, "/") {
		dir, line = "/", strings.TrimSuffix(line, "/")
	}
	segs := strings.Split(line, "/")
	for i, s := range segs {
		if s != "**" && strings.Contains(s, "**") && !strings.Contains(s, `\`) {
			for strings.Contains(s, "**") {
				s = strings.ReplaceAll(s, "**", "*")
			}
			segs[i] = s
		}
	}
	if len(segs) > 1 && segs[len(segs)-1] == "**" {
		segs = append(segs, "*")
	}
	return neg + strings.Join(segs, "/") + dir, true
}

func compile(body string) ignorePattern {
	pt := ignorePattern{p: gitignore.ParsePattern(body, nil)}
	core := strings.TrimSuffix(strings.TrimPrefix(body, "!"), "/")
	if !strings.Contains(core, "/") {
		return pt
	}
	pt.glob = true
	pt.strict = pt.p
	if !strings.HasSuffix(body, "/") {
		pt.strict = gitignore.ParsePattern(body+"/", nil)
	}
	segs := strings.Split(strings.TrimPrefix(core, "/"), "/")
	stars := 0
	for _, s := range segs {
		if s == "**" {
			stars++
		}
	}
	if stars == 0 {
		pt.level = len(segs)
	}
	pt.minLevel = len(segs) - stars
	return pt
}

// ValidateIgnorePattern checks one line of an ignore list as the API, the
// CLI and the wire must: at most MaxIgnorePatternLen bytes, no NUL or line
// break, and every "[...]" class well formed. Blank lines and comments are
// valid (they match nothing).
func ValidateIgnorePattern(line string) error {
	switch {
	case len(line) > MaxIgnorePatternLen:
		return fmt.Errorf("ignore pattern of %d bytes: %w (at most %d)", len(line), ErrNameTooLong, MaxIgnorePatternLen)
	case strings.ContainsAny(line, "\x00\n\r"):
		return fmt.Errorf("ignore pattern %q: %w: contains NUL or a line break", line, ErrInvalid)
	}
	body, ok := patternBody(line)
	if !ok {
		return nil
	}
	for seg := range strings.SplitSeq(strings.TrimPrefix(body, "!"), "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("ignore pattern %q: %w: malformed (check its [...] classes and escapes)", line, ErrInvalid)
		}
	}
	return nil
}

// ValidateIgnore checks a whole list: at most MaxIgnore lines, each valid.
func ValidateIgnore(list []string) error {
	if len(list) > MaxIgnore {
		return fmt.Errorf("%w: %d ignore patterns (at most %d)", ErrInvalid, len(list), MaxIgnore)
	}
	for _, p := range list {
		if err := ValidateIgnorePattern(p); err != nil {
			return err
		}
	}
	return nil
}

// List returns the list as given, for the wire and status: nil for the
// zero Ignore.
func (ig Ignore) List() []string { return ig.list }

// Empty reports whether the matcher matches nothing.
func (ig Ignore) Empty() bool { return len(ig.pats) == 0 }

// Match reports whether the path p (store form, "a/b/c") is ignored: p or
// one of its ancestors (directories) is excluded by its own last matching
// pattern. isDir says whether p is a directory.
func (ig Ignore) Match(p string, isDir bool) bool {
	if len(ig.pats) == 0 || p == "" {
		return false
	}
	segs := strings.Split(p, "/")
	ends := ig.starEnds(segs)
	for k := 1; k <= len(segs); k++ {
		if ig.excludes(segs[:k], k < len(segs) || isDir, ends) {
			return true
		}
	}
	return false
}

// Excludes reports whether p itself is excluded, its ancestors left
// unasked: for walkers that go top down and never enter an ignored
// directory.
func (ig Ignore) Excludes(p string, isDir bool) bool {
	if len(ig.pats) == 0 || p == "" {
		return false
	}
	return ig.excludes(strings.Split(p, "/"), isDir, nil)
}

// starEnds finds, for each "**" pattern, the one level of segs it can
// match itself (0: none). go-git aligns such a pattern greedily, so once it
// matches a prefix it matches every longer one: the level is the shortest
// prefix it matches as a directory, found by bisection, so Match stays
// O(depth log depth) per "**" pattern instead of asking every level.
func (ig Ignore) starEnds(segs []string) []int {
	var ends []int
	for i := range ig.pats {
		pt := &ig.pats[i]
		if !pt.glob || pt.level != 0 || len(segs) < pt.minLevel {
			continue
		}
		if ends == nil {
			ends = make([]int, len(ig.pats))
		}
		lo, hi := pt.minLevel, len(segs)
		if pt.p.Match(segs, true) == gitignore.NoMatch {
			continue
		}
		for lo < hi {
			mid := (lo + hi) / 2
			if pt.p.Match(segs[:mid], true) != gitignore.NoMatch {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		ends[i] = lo
	}
	return ends
}

// excludes decides one level: the last pattern that matches segs itself.
// ends, when not nil, is starEnds of the whole path.
func (ig Ignore) excludes(segs []string, isDir bool, ends []int) bool {
	k := len(segs)
	for i := len(ig.pats) - 1; i >= 0; i-- {
		pt := &ig.pats[i]
		var r gitignore.MatchResult
		switch {
		case !pt.glob:
			r = pt.p.Match(segs[k-1:], isDir)
		case pt.level != 0 && k != pt.level, k < pt.minLevel:
			continue
		case pt.level == 0 && ends != nil:
			if ends[i] == k {
				r = pt.p.Match(segs, isDir)
			}
		default:
			if r = pt.p.Match(segs, isDir); r != gitignore.NoMatch && pt.strict.Match(segs, false) != gitignore.NoMatch {
				r = gitignore.NoMatch // it matched a shorter prefix, not segs
			}
		}
		if r != gitignore.NoMatch {
			return r == gitignore.Exclude
		}
	}
	return false
}

// IgnoresEntry reports whether a change entry stays on its side: its path
// is ignored as a directory for a dir entry, as a file for a file, symlink
// or delete entry. A delete does not say what it removed, so the receiver,
// which knows, asks again with its own node's kind before removing
// anything (Apply with ApplyOptions.Ignore): the delete of an ignored
// directory never removes the receiver's copy of it.
func (ig Ignore) IgnoresEntry(e ChangeEntry) bool { return ig.Match(e.Path, entryIsDir(e)) }

func entryIsDir(e ChangeEntry) bool { return e.Kind == EntryDir }

// ignoreMemo is Match for a run of paths that share parents (one page of
// the feed): each directory's verdict is decided once.
type ignoreMemo struct {
	ig   Ignore
	dirs map[string]bool // directory path -> ignored
}

func (m *ignoreMemo) match(p string, isDir bool) bool {
	if m.ig.Empty() || p == "" {
		return false
	}
	parent, _ := splitPath(p)
	return m.dir(parent) || m.ig.Excludes(p, isDir)
}

// dir reports whether the directory p (or one above it) is ignored.
func (m *ignoreMemo) dir(p string) bool {
	if p == "" {
		return false
	}
	if v, ok := m.dirs[p]; ok {
		return v
	}
	if m.dirs == nil {
		m.dirs = make(map[string]bool)
	}
	parent, _ := splitPath(p)
	v := m.dir(parent) || m.ig.Excludes(p, true)
	m.dirs[p] = v
	return v
}
