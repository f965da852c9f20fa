package vfs

import (
	"errors"
	"strings"
	"testing"
)

// TestIgnoreGitSemantics checks the matcher against what gitignore(5)
// says, one documented rule or example a case. A path ending in "/" is a
// directory.
func TestIgnoreGitSemantics(t *testing.T) {
	type check struct {
		path    string
		ignored bool
	}
	cases := []struct {
		name     string
		patterns []string
		checks   []check
	}{
		{"a blank line matches no files; a # line is a comment",
			[]string{"", "   ", "# *.go"},
			[]check{{"main.go", false}, {"# *.go", false}}},
		{"a backslash before the first hash makes it literal",
			[]string{`\#notes`},
			[]check{{"#notes", true}, {"notes", false}}},
		{"trailing spaces are ignored unless quoted with a backslash",
			[]string{"tmp   ", `space\ `},
			[]check{{"tmp", true}, {"tmp   ", false}, {"space ", true}, {"space", false}}},
		{"! re-includes a file excluded by a previous pattern",
			[]string{"*.log", "!keep.log"},
			[]check{{"debug.log", true}, {"keep.log", false}, {"logs/keep.log", false}, {"logs/a.log", true}}},
		{"a later pattern wins over an earlier negation",
			[]string{"!keep.log", "*.log"},
			[]check{{"keep.log", true}}},
		{"no re-include of a file whose parent directory is excluded",
			[]string{"build/", "!build/keep.txt", "!keep.log"},
			[]check{{"build/", true}, {"build/keep.txt", true}, {"build/sub/keep.log", true}}},
		{`a backslash before the first "!" makes it literal`,
			[]string{`\!important!.txt`},
			[]check{{"!important!.txt", true}, {"important!.txt", false}}},
		{"a name without a slash matches at any level",
			[]string{"node_modules"},
			[]check{{"node_modules/", true}, {"a/node_modules/", true}, {"a/node_modules/x/index.js", true},
				{"node_modules2/", false}, {"node_modules", true}}},
		{"a trailing slash matches directories only: frotz/ matches frotz and a/frotz that are directories",
			[]string{"frotz/"},
			[]check{{"frotz/", true}, {"a/frotz/", true}, {"frotz", false}, {"a/frotz", false}, {"frotz/x", true}}},
		{"doc/frotz/ matches the doc/frotz directory, but not a/doc/frotz",
			[]string{"doc/frotz/"},
			[]check{{"doc/frotz/", true}, {"doc/frotz/f.txt", true}, {"a/doc/frotz/", false}, {"doc/frotz", false}}},
		{"a leading slash anchors at the root: /hello.* matches hello.txt and hello.c but not a/hello.java",
			[]string{"/hello.*"},
			[]check{{"hello.txt", true}, {"hello.c", true}, {"a/hello.java", false}}},
		{"hello.* matches any file or directory whose name begins with hello.",
			[]string{"hello.*"},
			[]check{{"hello.txt", true}, {"a/hello.java", true}, {"a/hello.d/", true}, {"hello", false}}},
		{"doc/frotz and /doc/frotz have the same effect: a middle slash anchors",
			[]string{"doc/frotz"},
			[]check{{"doc/frotz", true}, {"doc/frotz/", true}, {"a/doc/frotz", false}}},
		{"  (the same with the leading slash)",
			[]string{"/doc/frotz"},
			[]check{{"doc/frotz", true}, {"doc/frotz/", true}, {"a/doc/frotz", false}}},
		{"/build is anchored at the root",
			[]string{"/build"},
			[]check{{"build/", true}, {"build/out.o", true}, {"src/build/", false}}},
		{"foo/* matches foo/test.json and the directory foo/bar, hence what is in it",
			[]string{"foo/*"},
			[]check{{"foo/test.json", true}, {"foo/bar/", true}, {"foo/bar/hello.c", true}, {"foo/", false}, {"a/foo/x", false}}},
		{"foo/* does not match foo/bar/hello.c itself: a negation of foo/bar/ re-includes it",
			[]string{"foo/*", "!foo/bar/"},
			[]check{{"foo/test.json", true}, {"foo/bar/", false}, {"foo/bar/hello.c", false}}},
		{"* matches anything but a slash; ? any one character but a slash; [a-z] a range",
			[]string{"*.pyc", "file?.txt", "[a-c].out"},
			[]check{{"x.pyc", true}, {"d/e/x.pyc", true}, {"file1.txt", true}, {"file12.txt", false},
				{"b.out", true}, {"d.out", false}}},
		{"a leading **/ matches in all directories: **/foo is the same as foo",
			[]string{"**/foo"},
			[]check{{"foo", true}, {"a/foo", true}, {"a/b/foo/", true}, {"a/foobar", false}}},
		{"**/foo/bar matches bar directly under a directory foo anywhere",
			[]string{"**/foo/bar"},
			[]check{{"foo/bar", true}, {"x/foo/bar", true}, {"x/y/foo/bar/", true}, {"foo/x/bar", false}, {"bar", false}}},
		{"a trailing /** matches everything inside: abc/** matches the files in abc at any depth, not abc",
			[]string{"abc/**"},
			[]check{{"abc/x", true}, {"abc/x/y/z", true}, {"abc/", false}, {"x/abc/y", false}}},
		{"  so a negation inside abc/** takes effect",
			[]string{"abc/**", "!abc/keep"},
			[]check{{"abc/keep", false}, {"abc/other", true}}},
		{"a/**/b matches a/b, a/x/b, a/x/y/b",
			[]string{"a/**/b"},
			[]check{{"a/b", true}, {"a/x/b", true}, {"a/x/y/b", true}, {"a/x/c", false}, {"b", false}}},
		{"**/.cache/ matches a .cache directory anywhere",
			[]string{"**/.cache/"},
			[]check{{".cache/", true}, {"home/u/.cache/", true}, {"home/u/.cache/pip/x", true}, {".cache", false}}},
		{"other consecutive asterisks are regular asterisks",
			[]string{"foo**bar"},
			[]check{{"foobar", true}, {"fooxbar", true}, {"foo/bar", false}}},
		{"the man page's example: exclude everything except directory foo/bar",
			[]string{"# exclude everything except directory foo/bar", "/*", "!/foo", "/foo/*", "!/foo/bar"},
			[]check{{"a.txt", true}, {"docs/", true}, {"foo/", false}, {"foo/x", true}, {"foo/bar/", false},
				{"foo/bar/baz.c", false}, {"foo/other/baz.c", true}}},
		{"a negation matches the path itself, not an ancestor: the *, !*/, !*.go whitelist",
			[]string{"*", "!*/", "!*.go"},
			[]check{{"src/", false}, {"src/x.txt", true}, {"src/x.go", false}, {"README", true}}},
		{"dist/ and *.log, with !keep.log",
			[]string{"dist/", "*.log", "!keep.log"},
			[]check{{"dist/", true}, {"dist/app.js", true}, {"web/dist/", true}, {"dist", false},
				{"run.log", true}, {"keep.log", false}, {"dist/keep.log", true}}},
	}
	for _, c := range cases {
		ig := NewIgnore(c.patterns)
		for _, ch := range c.checks {
			p, isDir := strings.CutSuffix(ch.path, "/")
			if got := ig.Match(p, isDir); got != ch.ignored {
				t.Errorf("%s: %q against %q: ignored %v, want %v", c.name, c.patterns, ch.path, got, ch.ignored)
			}
		}
	}
}

func TestIgnoreListSemantics(t *testing.T) {
	if !NewIgnore(nil).Match("a/node_modules/x", false) {
		t.Error("nil list: want the default node_modules")
	}
	if !NewIgnore([]string{}).Empty() || NewIgnore([]string{}).Match("node_modules", true) {
		t.Error("empty list: want nothing ignored")
	}
	if (Ignore{}).Match("x", false) {
		t.Error("zero Ignore matches")
	}
	if NewIgnore([]string{"src"}).Match("node_modules", true) {
		t.Error("a caller's list must replace the default")
	}
	if !NewIgnore([]string{"# only a comment", ""}).Empty() {
		t.Error("comments and blank lines must compile to nothing")
	}
}

func TestIgnoreExcludesAsksOneLevel(t *testing.T) {
	ig := NewIgnore([]string{"build/"})
	if ig.Excludes("build/x.o", false) {
		t.Error("Excludes asked an ancestor")
	}
	if !ig.Match("build/x.o", false) || !ig.Excludes("build", true) {
		t.Error("build/ not matched")
	}
	var m ignoreMemo
	m.ig = ig
	for _, c := range []struct {
		p    string
		dir  bool
		want bool
	}{{"build/x.o", false, true}, {"src/a.go", false, false}, {"build", true, true}, {"src/build/y", false, true}} {
		if got := m.match(c.p, c.dir); got != c.want {
			t.Errorf("memo %q: %v, want %v", c.p, got, c.want)
		}
	}
}

func TestValidateIgnorePattern(t *testing.T) {
	for _, p := range []string{"node_modules", "*.pyc", "dist/", "**/.cache/", "/build", "!keep.log", "# comment", "", `\#x`, "[a-z].o"} {
		if err := ValidateIgnorePattern(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"[a-", "a\x00b", "a\nb", strings.Repeat("x", MaxIgnorePatternLen+1), "src/[z-"} {
		if err := ValidateIgnorePattern(p); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
	if err := ValidateIgnore(make([]string, MaxIgnore+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("too long a list: %v", err)
	}
}

// BenchmarkIgnoreMatchDeep is a path at the depth bound against a list of
// mixed patterns: the cost stays proportional to depth times patterns.
func BenchmarkIgnoreMatchDeep(b *testing.B) {
	var list []string
	for i := range 100 {
		list = append(list, "name"+string(rune('a'+i%26)), "*.ext"+string(rune('a'+i%26)), "/anchored/dir/x", "**/deep/**/y")
	}
	ig := NewIgnore(list)
	p := strings.Repeat("a/", MaxPathLen/2-1) + "z"
	b.ResetTimer()
	for b.Loop() {
		ig.Match(p, false)
	}
}

// BenchmarkIgnoreMatchTypical is a project path against a
// .gitignore-sized list.
func BenchmarkIgnoreMatchTypical(b *testing.B) {
	ig := NewIgnore([]string{"node_modules", "dist/", "*.log", "!keep.log", "/build", "**/.cache/", "*.pyc", "coverage/", ".env", "tmp/**"})
	for b.Loop() {
		ig.Match("src/components/button/index.test.tsx", false)
	}
}
