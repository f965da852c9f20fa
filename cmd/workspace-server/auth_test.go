package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An empty token is refused by every client verb (issue 9 item 8): an
// empty --token-file, a WSYNC_TOKEN set to nothing, an empty
// --computerd-token-file for workspaces create. Before, the first two sent
// no token at all and the last registered a workspace without one.
func TestClientVerbsRefuseEmptyTokens(t *testing.T) {
	c := newCLI(t, nil)
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.run("", "status", "--token-file", empty)
	if r.code != exitError || !strings.Contains(r.stderr, "is empty") {
		t.Errorf("empty --token-file: exit %d %q", r.code, r.stderr)
	}
	t.Setenv("WSYNC_TOKEN_FILE", "")
	t.Setenv("WSYNC_TOKEN", " ")
	r = c.run("", "status")
	if r.code != exitError || !strings.Contains(r.stderr, "WSYNC_TOKEN is set but empty") {
		t.Errorf("blank WSYNC_TOKEN: exit %d %q", r.code, r.stderr)
	}
	t.Setenv("WSYNC_TOKEN", c.srv.Token)
	r = c.run("", "workspaces", "create", "proj", "--computerd", "ws://127.0.0.1:9/sync", "--computerd-token-file", empty)
	if r.code != exitError || !strings.Contains(r.stderr, "is empty") {
		t.Errorf("empty --computerd-token-file: exit %d %q", r.code, r.stderr)
	}
	if _, err := c.srv.Manager.Workspace("proj"); err == nil {
		t.Error("the workspace was created without its token")
	}
}

// workspaces create reads --computerd-token-file on the client and sends
// the token by value; the server keeps it in its own data dir.
func TestWorkspacesCreateSendsTokenByValue(t *testing.T) {
	c := newCLI(t, nil)
	tok := filepath.Join(t.TempDir(), "proj.token")
	if err := os.WriteFile(tok, []byte("proj-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("", "workspaces", "create", "proj", "--computerd", "ws://127.0.0.1:9/sync", "--computerd-token-file", tok)
	w, err := c.srv.Manager.Workspace("proj")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.Token(); err != nil || got != "proj-secret" {
		t.Fatalf("token %q %v", got, err)
	}
	if got := c.ok("", "workspaces", "--json"); strings.Contains(got, "proj-secret") || strings.Contains(got, tok) {
		t.Fatalf("listing shows the token or its file: %s", got)
	}
}

// serve refuses an empty --computerd-token-file, and --allow-endpoint (or
// WSYNC_ALLOW_ENDPOINT) restricts the endpoints a created workspace may
// name.
func TestServeTokenAndAllowEndpoint(t *testing.T) {
	withHooks(t, newRemote, absentComputerd)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	r := run(t.Context(), []string{"serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--computerd", "ws://127.0.0.1:9/sync",
		"--computerd-token-file", empty}, strings.NewReader(""), new(strings.Builder), new(strings.Builder))
	if r != exitError {
		t.Fatalf("serve with an empty --computerd-token-file: exit %d", r)
	}

	for _, viaEnv := range []bool{false, true} {
		data := t.TempDir()
		args := []string{"--data", data}
		t.Setenv("WSYNC_ALLOW_ENDPOINT", "")
		t.Setenv("WSYNC_TOKEN_FILE", "")
		if viaEnv {
			t.Setenv("WSYNC_ALLOW_ENDPOINT", "10.9.9.9:1, 127.0.0.*:45678")
		} else {
			args = append(args, "--allow-endpoint", "10.9.9.9:1", "--allow-endpoint", "127.0.0.*:45678")
		}
		addr, stop := startServe(t, args...)
		t.Setenv("WSYNC_SERVER", "http://"+addr)
		t.Setenv("WSYNC_TOKEN", "")
		os.Unsetenv("WSYNC_TOKEN")
		t.Setenv("WSYNC_TOKEN_FILE", filepath.Join(data, "token"))
		var out, errb strings.Builder
		if code := run(t.Context(), []string{"workspaces", "create", "ok", "--computerd", "ws://127.0.0.3:45678/sync"}, strings.NewReader(""), &out, &errb); code != exitOK {
			t.Errorf("env %v: allowed endpoint refused: %d %s", viaEnv, code, errb.String())
		}
		errb.Reset()
		if code := run(t.Context(), []string{"workspaces", "create", "no", "--computerd", "ws://10.0.0.1:45678/sync"}, strings.NewReader(""), &out, &errb); code != exitError || !strings.Contains(errb.String(), "EPERM") {
			t.Errorf("env %v: endpoint outside the patterns: %d %s", viaEnv, code, errb.String())
		}
		if res := stop(); res.code != 0 {
			t.Fatalf("serve: %+v", res)
		}
	}
}
