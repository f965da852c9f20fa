package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/wsync/wsync/workspace"
)

// exec --detach prints the id; attach replays (from 0, an offset, the
// end) and exits with the command's code; wait exits with it once the
// pull after it is done; ls lists it, with --json too; kill ends one.
func TestExecByIDVerbs(t *testing.T) {
	c := newCLI(t, nil)
	id := strings.TrimSpace(c.ok("", "exec", "--detach", "--log-cap", "4096", "--", "echo", "hello", ";", "write", "/d.txt", "det", ";", "exit", "4"))
	if err := workspace.ValidateExecID(id); err != nil {
		t.Fatalf("exec --detach printed %q: %v", id, err)
	}
	if r := c.run("", "exec", "attach", id); r.code != 4 || r.stdout != "hello\n" {
		t.Fatalf("attach: %+v, want hello and exit 4", r)
	}
	if r := c.run("", "exec", "attach", id, "--from", "3"); r.code != 4 || r.stdout != "lo\n" {
		t.Fatalf("attach --from 3: %+v", r)
	}
	if r := c.run("", "exec", "attach", "--from", "end", id); r.code != 4 || r.stdout != "" {
		t.Fatalf("attach --from end: %+v", r)
	}
	if r := c.run("", "exec", "wait", id); r.code != 4 {
		t.Fatalf("wait: %+v, want exit 4", r)
	}
	if got := c.ok("", "read", "/d.txt"); got != "det" {
		t.Fatalf("d.txt after wait: %q", got)
	}

	long := strings.TrimSpace(c.ok("", "exec", "--detach", "--", "sleep", "60"))
	out := c.ok("", "exec", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], id) || !strings.Contains(lines[1], "exited") ||
		!strings.Contains(lines[1], "complete") || !strings.Contains(lines[2], long) || !strings.Contains(lines[2], "running") || !strings.Contains(lines[2], "sleep 60") {
		t.Fatalf("exec ls:\n%s", out)
	}
	var list workspace.ExecList
	if err := json.Unmarshal([]byte(c.ok("", "exec", "ls", "--json")), &list); err != nil || len(list.Execs) != 2 || list.Execs[0].LogCap != 4096 {
		t.Fatalf("exec ls --json: %+v, %v", list, err)
	}
	c.ok("", "exec", "kill", long, "--signal", "KILL")
	if r := c.run("", "exec", "wait", long); r.code != 137 {
		t.Fatalf("wait for the killed command: %+v, want 137", r)
	}
}

// Bad usage is exit 2 before any call; a lost id is exit 1 naming
// EEXEC_LOST; `exec -- ls` still runs a command called ls.
func TestExecByIDUsage(t *testing.T) {
	c := newCLI(t, nil)
	for _, args := range [][]string{
		{"exec", "attach"},
		{"exec", "attach", "not-an-id"},
		{"exec", "attach", "rt:1", "--from", "-3"},
		{"exec", "attach", "rt:1", "--from", "soon"},
		{"exec", "kill", "rt:1", "--signal", "NOPE"},
		{"exec", "wait", "rt:1", "rt:2"},
		{"exec", "ls", "extra"},
		{"exec", "--log-cap", "-1", "--", "echo"},
	} {
		if r := c.run("", args...); r.code != 2 {
			t.Errorf("%q: exit %d (%s), want 2", args, r.code, r.stderr)
		}
	}
	if r := c.run("", "exec", "wait", "gone-runtime:1"); r.code != 1 || !strings.Contains(r.stderr, "EEXEC_LOST") {
		t.Errorf("wait for a lost id: %+v, want exit 1 naming EEXEC_LOST", r)
	}
	if r := c.run("", "exec", "--", "ls"); r.code != 127 || !strings.Contains(r.stderr, "ls: not found") {
		t.Errorf("exec -- ls: %+v, want the fake's command not found", r)
	}
	if r := c.run("", "exec", "ls", "--help"); r.code != 0 || !strings.Contains(r.stdout, "workspace-server exec ls") {
		t.Errorf("exec ls --help: %+v", r)
	}
}
