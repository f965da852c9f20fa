package tests

import (
	"strings"
	"testing"
)

// TestGitignorePatterns runs the workspace's gitignore patterns through
// real binaries: dist/ and *.log stay in the container, the negated
// keep.log syncs, a /.wsyncignore written in the container adds a pattern,
// and changing the patterns loses nothing: un-ignored paths arrive with
// the next pull, and the container's delete of a directory that is ignored
// leaves the server's copy.
func TestGitignorePatterns(t *testing.T) {
	p := newPair(t, pairOpts{})
	if got := p.ok("ignore", "dist/", "*.log", "!keep.log"); got != "dist/\n*.log\n!keep.log\n" {
		t.Fatalf("ignore set printed %q", got)
	}
	p.sh(`mkdir -p dist src/dist2 && echo a > dist/app.js && echo k2 > dist/keep.log && echo l > run.log && echo k > keep.log ` +
		`&& echo s > src/main.js && echo f > src/dist && echo n > src/dist2/debug.log`)
	for path, want := range map[string]string{"/src/main.js": "s\n", "/keep.log": "k\n", "/src/dist": "f\n"} {
		if got := p.ok("read", path); got != want {
			t.Errorf("read %s = %q, want %q", path, got, want)
		}
	}
	for _, path := range []string{"/dist", "/dist/app.js", "/dist/keep.log", "/run.log", "/src/dist2/debug.log"} {
		if _, ok := p.stat(path); ok {
			t.Errorf("%s is on the server", path)
		}
	}

	// A .wsyncignore from the container adds its lines once the server has it.
	p.sh(`printf '# scratch space\ntmp/\n' > .wsyncignore`)
	if got := p.ok("ignore"); got != "dist/\n*.log\n!keep.log\ntmp/\n" {
		t.Errorf("patterns in force = %q, want the configured ones and tmp/", got)
	}
	p.sh(`mkdir tmp && echo t > tmp/t`)
	if _, ok := p.stat("/tmp/t"); ok {
		t.Error("/tmp/t is on the server: .wsyncignore did not add tmp/")
	}
	if got := p.ok("read", "/.wsyncignore"); got != "# scratch space\ntmp/\n" {
		t.Errorf(".wsyncignore did not sync like any file: %q", got)
	}
	// The files API refuses a .wsyncignore it would not use whole.
	if r := p.cli("src/[z-\n", "write", "/.wsyncignore", "-"); r.code == 0 || !strings.Contains(r.stderr, "line 1") {
		t.Errorf("a malformed .wsyncignore was written: %+v", r)
	}
	if r := p.cli("", "ignore", "src/[z-"); r.code != 2 {
		t.Errorf("a malformed pattern: exit %d, want 2 (bad usage): %s", r.code, r.stderr)
	}
	// Everything stays in the container; the sides agree under the patterns.
	if got := p.sh(`cat dist/app.js run.log tmp/t`); got != "a\nl\nt\n" {
		t.Errorf("container lost ignored files: %q", got)
	}
	p.ok("verify")

	// Un-ignoring: nothing had crossed, and the next pull brings it all.
	p.ok("ignore", "--none")
	if _, ok := p.stat("/dist/app.js"); ok {
		t.Fatal("/dist/app.js was on the server before the un-ignore's pull")
	}
	p.ok("pull")
	for path, want := range map[string]string{"/dist/app.js": "a\n", "/dist/keep.log": "k2\n", "/run.log": "l\n", "/src/dist2/debug.log": "n\n"} {
		if got := p.ok("read", path); got != want {
			t.Errorf("after the un-ignore's pull: read %s = %q, want %q", path, got, want)
		}
	}
	if _, ok := p.stat("/tmp/t"); ok {
		t.Error("/tmp/t arrived: the .wsyncignore's tmp/ still applies")
	}

	// Ignoring dist/ again, then removing it in the container: the delete
	// of an ignored directory does not cross, the server's copy stays.
	p.ok("ignore", "dist/")
	p.sh(`rm -rf dist`)
	p.ok("ignore", "--none")
	if got := p.ok("read", "/dist/app.js"); got != "a\n" {
		t.Errorf("the container's rm -rf of an ignored dist/ reached the server: %q", got)
	}
}
