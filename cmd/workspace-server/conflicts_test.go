package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/wsync/wsync/workspace"
)

func TestConflictsVerbs(t *testing.T) {
	c := newCLI(t, nil)
	c.ok("v0", "write", "/PLAN.md")
	c.ok("", "push")
	// The container edits PLAN.md, and so does the server before it pulls.
	if _, err := c.srv.Remotes.Fake("default").Container.WriteFile(context.Background(), "PLAN.md", []byte("container v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("server v1", "write", "/PLAN.md")
	r := c.run("", "exec", "--", "echo", "hi")
	if r.code != 0 || r.stdout != "hi\n" ||
		!strings.HasSuffix(r.stderr, "workspace-server: the pull after the command recorded 1 conflict (see: workspace-server conflicts)\n") {
		t.Fatalf("exec: %+v", r)
	}
	if out := c.ok("", "status"); !strings.Contains(out, "conflicts:  1 open") {
		t.Fatalf("status:\n%s", out)
	}

	out := c.ok("", "conflicts")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "PATH") || strings.Contains(lines[0], "STATE") {
		t.Fatalf("conflicts:\n%s", out)
	}
	for _, want := range []string{"/PLAN.md ", "both-modified", "default", "/PLAN.conflict-container-", ".md (container)"} {
		if !strings.Contains(lines[1], want) {
			t.Fatalf("conflicts line %q lacks %q", lines[1], want)
		}
	}
	var list []workspace.ConflictInfo
	if err := json.Unmarshal([]byte(c.ok("", "conflicts", "--json")), &list); err != nil || len(list) != 1 || list[0].Path != "/PLAN.md" {
		t.Fatalf("conflicts --json: %+v %v", list, err)
	}

	for _, x := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"conflicts", "resolve", "/PLAN.md"}, exitUsage, "--keep is required"},
		{[]string{"conflicts", "resolve", "/PLAN.md", "--keep", "mine"}, exitUsage, "want server, container or both"},
		{[]string{"conflicts", "resolve", "--keep", "server"}, exitUsage, "want one PATH"},
		{[]string{"conflicts", "resolve", "/other", "--keep", "server"}, exitError, "ENOENT"},
		{[]string{"conflicts", "policy", "newest-wins"}, exitUsage, "conflict policy"},
		{[]string{"conflicts", "extra"}, exitUsage, "takes no arguments"},
		{[]string{"serve", "--conflict-policy", "newest-wins"}, exitUsage, "--conflict-policy"},
	} {
		if r := c.run("", x.args...); r.code != x.code || !strings.Contains(r.stderr, x.says) {
			t.Errorf("%v: exit %d %q, want %d saying %q", x.args, r.code, r.stderr, x.code, x.says)
		}
	}

	if out := c.ok("", "conflicts", "resolve", "/PLAN.md", "--keep", "container"); out != "resolved /PLAN.md (both-modified, runtime default): kept container\n" {
		t.Fatalf("resolve: %q", out)
	}
	if got := c.ok("", "read", "/PLAN.md"); got != "container v1" {
		t.Fatalf("PLAN.md after keeping the container's: %q", got)
	}
	if out := c.ok("", "conflicts"); out != "no open conflicts\n" {
		t.Fatalf("conflicts after the resolve: %q", out)
	}
	if out := c.ok("", "conflicts", "--all"); !strings.Contains(out, "STATE") || !strings.Contains(out, "kept container") {
		t.Fatalf("conflicts --all:\n%s", out)
	}

	if out := c.ok("", "conflicts", "policy"); out != "keep-both\n" {
		t.Fatalf("policy: %q", out)
	}
	if out := c.ok("", "conflicts", "policy", "server-wins"); out != "server-wins\n" {
		t.Fatalf("policy server-wins: %q", out)
	}
	if out := c.ok("", "conflicts", "policy"); out != "server-wins\n" {
		t.Fatalf("policy after the change: %q", out)
	}
	c.ok("", "workspaces", "create", "proj", "--conflict-policy", "container-wins")
	if out := c.ok("", "conflicts", "policy", "--workspace", "proj"); out != "container-wins\n" {
		t.Fatalf("policy of a workspace created with one: %q", out)
	}
	if r := c.run("", "workspaces", "create", "proj2", "--conflict-policy", "newest"); r.code != exitUsage {
		t.Fatalf("create with a bad policy: %+v", r)
	}
}
