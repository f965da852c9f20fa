package workspace

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// The regexps validName and validExecID replaced (issue 12): each must
// accept exactly the language its regexp did. Compiled here only, so the
// package's init does not pay for them.
var (
	oldNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	oldExecIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}:[1-9][0-9]{0,19}$`)
)

// nameCases: every boundary of [a-z0-9][a-z0-9_-]{0,62}.
func nameCases() []string {
	cases := []string{
		"", "a", "z", "0", "9", "default", "my-ws", "my_ws", "a-", "a_", "0-0",
		"-", "_", "-a", "_a", ".", "a.b", "A", "aB", "Ab", "a b", " a", "a ",
		"a\n", "\na", "a\x00", "a/b", "..", "a:b", "é", "aé", "a\xff", "\xff",
		"a\u212a", // Kelvin sign: folds to k under (?i), which the regexp does not use
		"server", "container",
	}
	for _, n := range []int{1, 2, 62, 63, 64, 65, 128} {
		cases = append(cases,
			strings.Repeat("a", n),
			"a"+strings.Repeat("-", n-1),
			"a"+strings.Repeat("_", n-1),
			strings.Repeat("9", n),
			"-"+strings.Repeat("a", n-1),
			strings.Repeat("a", n-1)+"A",
			strings.Repeat("a", n-1)+".",
		)
	}
	return cases
}

// execIDCases: every boundary of [A-Za-z0-9._-]{1,128}:[1-9][0-9]{0,19}.
func execIDCases() []string {
	cases := []string{
		"", ":", "a:", ":1", "a:1", "a:0", "a:01", "a:10", "a:007", "A:1", "Z.z_9-:1",
		"-:1", "-a:1", ".:1", "..:1", "_:1", "a::1", "a:1:", "a:1:2", "a:b:1", "a:-1",
		"a:+1", "a: 1", "a :1", "a:1 ", "a:1\n", "\na:1", "a/b:1", "é:1", "a\xff:1",
		"a:1a", "a:1.0", "a:１", // fullwidth digit one
		"abc-def.123_x:42",
	}
	id := func(n int) string { return strings.Repeat("r", n) }
	for _, n := range []int{0, 1, 2, 62, 63, 64, 127, 128, 129, 200} {
		cases = append(cases, id(n)+":1", id(n)+":0", id(n)+"-:12")
		cases = append(cases, strings.Repeat(".", n)+":9", strings.Repeat("-", n)+":9")
	}
	for _, n := range []int{0, 1, 2, 19, 20, 21, 22, 40} {
		cases = append(cases,
			"a:"+strings.Repeat("9", n),
			"a:1"+strings.Repeat("0", max(n-1, 0)),
			"a:0"+strings.Repeat("1", max(n-1, 0)),
			id(128)+":"+strings.Repeat("9", n),
			id(129)+":"+strings.Repeat("9", n),
		)
	}
	return cases
}

func TestValidNameMatchesRegexp(t *testing.T) {
	for _, s := range nameCases() {
		want := oldNameRE.MatchString(s)
		if got := validName(s); got != want {
			t.Errorf("validName(%q) = %v, regexp %v", s, got, want)
		}
		err := ValidateName(s)
		if (err == nil) != want || err != nil && (!errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), "(want [a-z0-9][a-z0-9_-]{0,62})")) {
			t.Errorf("ValidateName(%q) = %v; regexp match %v", s, err, want)
		}
		if err := ValidateRuntimeName(s); !want && !errors.Is(err, ErrBadRuntime) {
			t.Errorf("ValidateRuntimeName(%q) = %v, want ErrBadRuntime", s, err)
		}
	}
}

func TestValidExecIDMatchesRegexp(t *testing.T) {
	for _, s := range execIDCases() {
		want := oldExecIDRE.MatchString(s)
		if got := validExecID(s); got != want {
			t.Errorf("validExecID(%q) = %v, regexp %v", s, got, want)
		}
		err := ValidateExecID(s)
		if (err == nil) != want || err != nil && (!errors.Is(err, ErrBadExecID) || !strings.Contains(err.Error(), "(want RUNTIME:N)")) {
			t.Errorf("ValidateExecID(%q) = %v; regexp match %v", s, err, want)
		}
	}
}

func FuzzValidName(f *testing.F) {
	for _, s := range nameCases() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), oldNameRE.MatchString(s); got != want {
			t.Fatalf("validName(%q) = %v, regexp %v", s, got, want)
		}
	})
}

func FuzzValidExecID(f *testing.F) {
	for _, s := range execIDCases() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validExecID(s), oldExecIDRE.MatchString(s); got != want {
			t.Fatalf("validExecID(%q) = %v, regexp %v", s, got, want)
		}
	})
}
