package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// cli runs verbs in-process against a test server backed by a Manager
// whose remotes are fakes (package workspacetest).
type cli struct {
	t   *testing.T
	srv *workspacetest.Server
}

func newCLI(t *testing.T, run workspacetest.RunFunc) *cli {
	srv := workspacetest.NewServer(t, run)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(srv.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WSYNC_SERVER", srv.URL)
	t.Setenv("WSYNC_TOKEN_FILE", tok)
	t.Setenv("WSYNC_WORKSPACE", "")
	return &cli{t: t, srv: srv}
}

type result struct {
	code           int
	stdout, stderr string
}

func (c *cli) run(stdin string, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func (c *cli) ok(stdin string, args ...string) string {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.code != 0 {
		c.t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func TestParseInterspersedFlags(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		interspersed bool
		wantPos      []string
		wantJSON     bool
	}{
		{[]string{"--json", "/src"}, true, []string{"/src"}, true},
		{[]string{"/src", "--json"}, true, []string{"/src"}, true},
		{[]string{"/a", "/b"}, true, []string{"/a", "/b"}, false},
		{[]string{"--", "--json"}, true, []string{"--json"}, false},
		{[]string{"/a", "--", "--json"}, true, []string{"/a", "--json"}, false},
		{[]string{"--json", "sh", "-c", "x --json"}, false, []string{"sh", "-c", "x --json"}, true},
		{[]string{"sh", "--json"}, false, []string{"sh", "--json"}, false},
		{[]string{"--json", "--", "ls", "-l"}, false, []string{"ls", "-l"}, true},
	} {
		c := newCommand("t", "t", "", &bytes.Buffer{}, &bytes.Buffer{})
		j := c.fs.Bool("json", false, "")
		pos, code, ok := c.parse(tc.args, tc.interspersed)
		if !ok || code != 0 {
			t.Errorf("%q: parse failed (%d)", tc.args, code)
			continue
		}
		if !slices.Equal(pos, tc.wantPos) || *j != tc.wantJSON {
			t.Errorf("%q: pos %q json %v, want %q %v", tc.args, pos, *j, tc.wantPos, tc.wantJSON)
		}
	}
}

func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		in       string
		uid      uint32
		gid      int64 // -1: none
		wantFail bool
	}{
		{"1000", 1000, -1, false},
		{"1000:100", 1000, 100, false},
		{"0:0", 0, 0, false},
		{"root", 0, 0, true},
		{"1000:", 0, 0, true},
		{":1", 0, 0, true},
		{"-1", 0, 0, true},
		{"4294967296", 0, 0, true},
	} {
		u, err := parseUser(tc.in)
		if tc.wantFail {
			if err == nil {
				t.Errorf("parseUser(%q) = %+v, want an error", tc.in, u)
			}
			continue
		}
		if err != nil || u.Uid != tc.uid || (tc.gid < 0) != (u.Gid == nil) || (u.Gid != nil && int64(*u.Gid) != tc.gid) {
			t.Errorf("parseUser(%q) = %+v, %v", tc.in, u, err)
		}
	}
}

func TestUsageAndHelp(t *testing.T) {
	c := newCLI(t, nil)
	for _, args := range [][]string{{"--help"}, {"ls", "--help"}, {"exec", "-h"}, {"serve", "--help"}} {
		r := c.run("", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Example") {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"read"}, {"read", "/a", "/b"}, {"ls", "--bogus"}, {"mv", "/a"},
		{"exec"}, {"exec", "--env", "NOEQUALS", "--", "true"}, {"exec", "--user", "bob", "--", "true"}, {"read", "/a/../b"},
		{"write", "--mode", "999", "/a"}, {"push", "extra"}} {
		if r := c.run("", args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, r.code, r.stderr)
		}
	}
}

func TestFileVerbs(t *testing.T) {
	c := newCLI(t, nil)
	c.ok("", "mkdir", "-p", "/src/pkg")
	c.ok("package main\n", "write", "/src/main.go")
	c.ok("#!/bin/sh\n", "write", "--mode", "0755", "/src/run.sh")
	if got := c.ok("", "read", "/src/main.go"); got != "package main\n" {
		t.Fatalf("read %q", got)
	}
	local := filepath.Join(t.TempDir(), "f")
	os.WriteFile(local, []byte("from a file"), 0o644)
	c.ok("", "write", "/src/f.txt", local)
	if got := c.ok("", "read", "src/f.txt"); got != "from a file" {
		t.Fatalf("read %q", got)
	}
	c.ok("", "symlink", "main.go", "/src/link")
	if got, want := c.ok("", "ls", "/src"), "f.txt\nlink -> main.go\nmain.go\npkg/\nrun.sh\n"; got != want {
		t.Fatalf("ls:\n%s\nwant:\n%s", got, want)
	}
	if got, want := c.ok("", "ls", "/src/main.go"), "/src/main.go\n"; got != want {
		t.Fatalf("ls of a file: %q", got)
	}

	var ls []map[string]any
	if err := json.Unmarshal([]byte(c.ok("", "ls", "/", "--json", "-R")), &ls); err != nil {
		t.Fatal(err)
	}
	if len(ls) != 6 {
		t.Fatalf("ls -R --json: %d entries", len(ls))
	}
	for _, o := range ls {
		var keys []string
		for k := range o {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if want := []string{"mode", "mtime", "path", "sha256", "size", "target", "type"}; !slices.Equal(keys, want) {
			t.Fatalf("keys %v", keys)
		}
		if o["type"] == "file" && len(o["sha256"].(string)) != 64 {
			t.Fatalf("file without sha256: %v", o)
		}
	}
	var st workspace.FileInfo
	if err := json.Unmarshal([]byte(c.ok("", "stat", "--json", "/src/run.sh")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode != 0o755 || st.Type != "file" || st.Path != "/src/run.sh" {
		t.Fatalf("stat %+v", st)
	}
	if out := c.ok("", "stat", "/src/link"); !strings.Contains(out, "target: main.go") {
		t.Fatalf("stat symlink:\n%s", out)
	}

	c.ok("", "mv", "/src", "/lib")
	r := c.run("", "rm", "/lib")
	if r.code != 1 || !strings.Contains(r.stderr, "ENOTEMPTY") {
		t.Fatalf("rm of a full dir: %+v", r)
	}
	c.ok("", "rm", "-r", "/lib")
	c.ok("", "rm", "-f", "/lib")
	r = c.run("", "read", "/lib/main.go")
	if r.code != 1 || !strings.Contains(r.stderr, "ENOENT") {
		t.Fatalf("read missing: %+v", r)
	}
	r = c.run("", "mkdir", "/a/b")
	if r.code != 1 || !strings.Contains(r.stderr, "ENOENT") {
		t.Fatalf("mkdir without -p: %+v", r)
	}
}

func TestEnvTwinsAndFlags(t *testing.T) {
	c := newCLI(t, nil)
	if _, err := c.srv.Manager.Create(context.Background(), workspace.CreateOptions{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	c.ok("b", "write", "--workspace", "other", "/x")
	t.Setenv("WSYNC_WORKSPACE", "other")
	if got := c.ok("", "read", "/x"); got != "b" {
		t.Fatalf("WSYNC_WORKSPACE: %q", got)
	}
	if r := c.run("", "read", "--workspace", "default", "/x"); r.code != 1 {
		t.Fatalf("default sees other's file: %+v", r)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("wrong"), 0o600)
	r := c.run("", "ls", "--token-file", bad)
	if r.code != 1 || !strings.Contains(r.stderr, "EAUTH") {
		t.Fatalf("wrong token: %+v", r)
	}
	t.Setenv("WSYNC_SERVER", "http://127.0.0.1:1")
	if r := c.run("", "ls"); r.code != 1 {
		t.Fatalf("unreachable server: %+v", r)
	}
	c.ok("", "ls", "--server", c.srv.URL)
}

// signalWriter closes first on the first Write.
type signalWriter struct {
	bytes.Buffer
	first chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if w.Len() == 0 {
		defer close(w.first)
	}
	return w.Buffer.Write(p)
}

func TestExecVerb(t *testing.T) {
	firstSeen := make(chan struct{})
	fakeRun := func(ctx context.Context, cs *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
		if spec.Argv[0] != "live" {
			return workspacetest.Commands(ctx, cs, spec, out)
		}
		out(workspace.ExecEvent{Stream: workspace.Stdout, Data: []byte("first\n")})
		select { // the CLI must print the line before the command ends
		case <-firstSeen:
		case <-ctx.Done():
			return workspace.ExecResult{}, ctx.Err()
		}
		out(workspace.ExecEvent{Stream: workspace.Stdout, Data: []byte("second\n")})
		return workspace.ExecResult{}, nil
	}
	c := newCLI(t, fakeRun)
	sw := &signalWriter{first: firstSeen}
	var errb bytes.Buffer
	if code := run(context.Background(), []string{"exec", "--", "live"}, strings.NewReader(""), sw, &errb); code != 0 {
		t.Fatalf("live: exit %d %s", code, errb.String())
	}
	if sw.String() != "first\nsecond\n" {
		t.Fatalf("live output %q", sw.String())
	}

	c.ok("server side", "write", "/in")
	r := c.run("", "exec", "--env", "A=1", "--cwd", "/sub", "--timeout", "5s", "--", "cat", "/in", ";", "warn", "to stderr", ";", "env", ";", "write", "/out", "x", ";", "exit", "3")
	if r.code != 3 || !strings.HasPrefix(r.stdout, "server side") || !strings.Contains(r.stdout, "A=1\ncwd=/sub\n") || r.stderr != "to stderr\n" {
		t.Fatalf("exec: %+v", r)
	}
	if got := c.ok("", "read", "/out"); got != "x" {
		t.Fatalf("exec's write: %q", got)
	}
	if r := c.run("", "exec", "--", "kill", "9"); r.code != 137 {
		t.Fatalf("killed by 9: exit %d", r.code)
	}
	if got := c.ok("piped in", "exec", "--", "exit", "0"); got != "piped in" {
		t.Fatalf("stdin: %q", got)
	}
	if got := c.ok("piped in", "exec", "-n", "--", "exit", "0"); got != "" {
		t.Fatalf("stdin with -n: %q", got)
	}

	fake := c.srv.Remotes.Fake("default")
	fake.FailPush(errors.New("computerd unreachable"))
	r = c.run("", "exec", "--", "echo", "never")
	if r.code != 1 || strings.Contains(r.stdout, "never") || !strings.Contains(r.stderr, "computerd unreachable") {
		t.Fatalf("exec after failed push: %+v", r)
	}
	fake.FailPull(errors.New("stream reset"))
	r = c.run("", "exec", "--", "write", "/late", "y", ";", "exit", "5")
	if r.code != 5 || !strings.Contains(r.stderr, "stream reset") {
		t.Fatalf("exec with failed pull: %+v", r)
	}
	if out := c.ok("", "status"); !strings.Contains(out, "PENDING") {
		t.Fatalf("status does not show the pending pull:\n%s", out)
	}
	if out := c.ok("", "pull"); !strings.HasPrefix(out, "pulled 1 entries") {
		t.Fatalf("pull: %q", out)
	}
	if got := c.ok("", "read", "/late"); got != "y" {
		t.Fatalf("after retry: %q", got)
	}
}

func TestSyncVerbs(t *testing.T) {
	c := newCLI(t, nil)
	c.ok("1", "write", "/a")
	r := c.run("", "verify")
	if r.code != 3 || !strings.Contains(r.stdout, "/a") {
		t.Fatalf("verify before push: %+v", r)
	}
	if out := c.ok("", "push"); !strings.HasPrefix(out, "pushed 1 entries") {
		t.Fatalf("push: %q", out)
	}
	c.ok("", "verify")
	var rep workspace.VerifyReport
	if err := json.Unmarshal([]byte(c.ok("", "verify", "--json")), &rep); err != nil || !rep.Converged {
		t.Fatalf("verify --json: %+v %v", rep, err)
	}
	c.ok("", "tick")
	var st workspace.Status
	if err := json.Unmarshal([]byte(c.ok("", "status", "--json")), &st); err != nil || st.Remote == nil || st.LastPush == nil {
		t.Fatalf("status --json: %+v %v", st, err)
	}
	c.srv.Remotes.Fake("default").FailVerify(workspace.ErrNotSupported)
	if r := c.run("", "verify"); r.code != 1 || !strings.Contains(r.stderr, "EOPNOTSUPP") {
		t.Fatalf("verify unsupported: %+v", r)
	}
	c.ok("", "workspaces", "create", "proj", "--computerd", "ws://127.0.0.1:9/sync", "--ignore", "dist,node_modules")
	if out := c.ok("", "workspaces"); !strings.Contains(out, "proj") || !strings.Contains(out, "[dist, node_modules]") {
		t.Fatalf("workspaces:\n%s", out)
	}
}

// startServe runs serve in the background until the test ends and returns
// its address and a function that stops it and returns its result.
func startServe(t *testing.T, args ...string) (string, func() result) {
	t.Helper()
	addr := make(chan string, 1)
	onListen = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}, args...), strings.NewReader(""), &out, &errb)
		done <- result{code, out.String(), errb.String()}
	}()
	var once result
	stopped := false
	stop := func() result {
		if !stopped {
			cancel()
			once, stopped = <-done, true
		}
		return once
	}
	t.Cleanup(func() { stop(); onListen = nil })
	select {
	case a := <-addr:
		return a, stop
	case r := <-done:
		stopped, once = true, r
		t.Fatalf("serve ended early: %+v", r)
	}
	return "", stop
}

// withHooks replaces the serve hooks for one test.
func withHooks(t *testing.T, remote func(*slog.Logger) workspace.RemoteFactory,
	embedded func(ctx context.Context, mountDir, dataDir string) (string, string, func() error, error)) {
	oldR, oldE := newRemote, startEmbedded
	newRemote, startEmbedded = remote, embedded
	t.Cleanup(func() { newRemote, startEmbedded = oldR, oldE })
}

// absentComputerd stands in for the embedded computerd: serve gets an
// endpoint no one listens on, so the files API works and every sync fails
// with computerd unavailable.
func absentComputerd(context.Context, string, string) (string, string, func() error, error) {
	return "ws://127.0.0.1:9/sync", "absent-token", func() error { return nil }, nil
}

func TestServeWithoutComputerd(t *testing.T) {
	withHooks(t, newRemote, absentComputerd)
	data := t.TempDir()
	a, stop := startServe(t, "--data", data, "--mount", t.TempDir())
	tok, err := os.ReadFile(filepath.Join(data, "token"))
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(data, "token"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v", fi.Mode().Perm())
	}
	cl, err := client.New("http://"+a, strings.TrimSpace(string(tok)))
	if err != nil {
		t.Fatal(err)
	}
	ws := cl.Workspace("default")
	if _, err := ws.WriteFile(context.Background(), "/hello", strings.NewReader("hi"), nil); err != nil {
		t.Fatal(err)
	}
	// The pull owed before the first push cannot reach computerd, so the
	// push is refused naming that.
	if _, err := ws.Push(context.Background()); !errors.Is(err, workspace.ErrPendingPull) || !strings.Contains(err.Error(), "no session with it") {
		t.Fatalf("push without a computerd: %v, want a refusal naming computerd unavailable", err)
	}
	r := stop()
	if r.code != 0 {
		t.Fatalf("serve exit %d: %s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, strings.TrimSpace(string(tok))) || strings.Contains(r.stderr, "absent-token") {
		t.Fatal("serve logged a token")
	}
}

func TestServeUsesHooks(t *testing.T) {
	remotes := &workspacetest.Remotes{Dir: t.TempDir()}
	t.Cleanup(func() { remotes.Close() })
	var gotMount, gotEndpoint, gotToken string
	stopped := make(chan struct{})
	withHooks(t,
		func(*slog.Logger) workspace.RemoteFactory {
			return func(ws *workspace.Workspace, rt workspace.Runtime) (workspace.Remote, error) {
				gotEndpoint = rt.Endpoint
				gotToken, _ = rt.Token()
				return remotes.Factory(ws, rt)
			}
		},
		func(ctx context.Context, mountDir, dataDir string) (string, string, func() error, error) {
			gotMount = mountDir
			return "ws://127.0.0.1:1/sync", "embedded-secret", func() error { close(stopped); return nil }, nil
		})
	data, mount := t.TempDir(), t.TempDir()
	tokFile := filepath.Join(t.TempDir(), "api.token")
	os.WriteFile(tokFile, []byte("api-secret\n"), 0o600)
	t.Setenv("WSYNC_TOKEN_FILE", tokFile)
	a, stop := startServe(t, "--data", data, "--mount", mount)
	cl, _ := client.New("http://"+a, "api-secret")
	rep, err := cl.Workspace("default").Exec(context.Background(), workspace.ExecSpec{Argv: []string{"write", "/x", "1"}}, nil)
	if err != nil || rep.Sync != workspace.SyncComplete || rep.Pulled.Entries != 1 {
		t.Fatalf("exec through the hooks: %+v %v", rep, err)
	}
	if gotMount != mount || gotEndpoint != "ws://127.0.0.1:1/sync" || gotToken != "embedded-secret" {
		t.Fatalf("hooks saw mount %q endpoint %q token %q", gotMount, gotEndpoint, gotToken)
	}
	if r := stop(); r.code != 0 {
		t.Fatalf("serve exit %d: %s", r.code, r.stderr)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the embedded computerd was not stopped")
	}
}

func TestExecInterrupted(t *testing.T) {
	killed := make(chan struct{})
	run := func(ctx context.Context, cs *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
		out(workspace.ExecEvent{Stream: workspace.Stdout, Data: []byte("started\n")})
		<-ctx.Done() // the CLI going away cancels the command
		close(killed)
		return workspace.ExecResult{}, ctx.Err()
	}
	newCLI(t, run)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan struct{})
	sw := &signalWriter{first: first}
	go func() { <-first; cancel() }()
	var errb bytes.Buffer
	if code := runCLI(ctx, []string{"exec", "--", "forever"}, sw, &errb); code != 130 {
		t.Fatalf("interrupted exec: exit %d, stderr %s", code, errb.String())
	}
	<-killed
}

func runCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, strings.NewReader(""), stdout, stderr)
}
