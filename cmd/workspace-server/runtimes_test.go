package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wsync/wsync/workspace"
)

func TestRuntimesVerbs(t *testing.T) {
	c := newCLI(t, nil)
	tok := filepath.Join(t.TempDir(), "b.token")
	if err := os.WriteFile(tok, []byte("b-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("", "runtimes", "attach", "b", "--endpoint", "ws://127.0.0.1:9/sync", "--computerd-token-file", tok)
	out := c.ok("", "runtimes")
	if !strings.Contains(out, "computerd@b") || !strings.Contains(out, "ws://127.0.0.1:9/sync") || strings.Contains(out, "b-secret") {
		t.Fatalf("runtimes:\n%s", out)
	}
	var list []workspace.Runtime
	if err := json.Unmarshal([]byte(c.ok("", "runtimes", "--json")), &list); err != nil || len(list) != 2 || list[1].Name != "b" || !list[1].HasToken {
		t.Fatalf("runtimes --json: %+v %v", list, err)
	}
	for _, x := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"runtimes", "attach", "b", "--endpoint", "ws://127.0.0.1:9/sync"}, exitError, "EEXIST"},
		{[]string{"runtimes", "attach", "server", "--endpoint", "ws://127.0.0.1:9/sync"}, exitUsage, "reserved"},
		{[]string{"runtimes", "attach", "c"}, exitUsage, "--endpoint is required"},
		{[]string{"runtimes", "detach", "nope"}, exitError, "ENORUNTIME"},
		{[]string{"push", "--runtime", "nope"}, exitError, "ENORUNTIME"},
	} {
		if r := c.run("", x.args...); r.code != x.code || !strings.Contains(r.stderr, x.says) {
			t.Errorf("%v: exit %d %q, want %d saying %q", x.args, r.code, r.stderr, x.code, x.says)
		}
	}

	c.ok("x", "write", "/f")
	if out := c.ok("", "push", "--runtime", "b"); !strings.HasPrefix(out, "pushed 1 entries") {
		t.Fatalf("push --runtime b: %q", out)
	}
	if c.srv.Remotes.FakeOf("default", "b") == nil || c.srv.Remotes.Fake("default") != nil {
		t.Fatal("push --runtime b did not go to b alone")
	}
	t.Setenv("WSYNC_RUNTIME", "b")
	var st workspace.Status
	if err := json.Unmarshal([]byte(c.ok("", "status", "--json")), &st); err != nil || st.Runtime != "b" || st.LastPush == nil {
		t.Fatalf("status with WSYNC_RUNTIME=b: %+v %v", st, err)
	}
	c.ok("", "verify")
	if out := c.ok("", "exec", "--", "echo", "hi"); out != "hi\n" {
		t.Fatalf("exec on b: %q", out)
	}
	if got := c.srv.Remotes.FakeOf("default", "b").Calls(); !strings.Contains(strings.Join(got, " "), "exec") {
		t.Fatalf("b's calls %v lack the exec", got)
	}
	t.Setenv("WSYNC_RUNTIME", "")
	c.ok("", "runtimes", "detach", "b")
	if out := c.ok("", "runtimes"); strings.Contains(out, "computerd@b") {
		t.Fatalf("runtimes after detach:\n%s", out)
	}
	if r := c.run("", "pull", "--runtime", "b"); r.code != exitError || !strings.Contains(r.stderr, "ENORUNTIME") {
		t.Fatalf("pull from a detached runtime: %+v", r)
	}
}
