package api_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/workspacetest"
)

const token = "test-token-0123456789"

type env struct {
	srv     *httptest.Server
	m       *workspace.Manager
	remotes *workspacetest.Remotes
}

func newEnv(t *testing.T, opts api.Options) *env {
	t.Helper()
	remotes := &workspacetest.Remotes{Dir: t.TempDir()}
	t.Cleanup(func() { remotes.Close() })
	opts.Token = token
	srv, m := workspacetest.Serve(t, workspace.Options{DefaultEndpoint: "ws://127.0.0.1:45678/sync", Remote: remotes.Factory}, opts)
	return &env{srv: srv, m: m, remotes: remotes}
}

// store is the default workspace's server store.
func (e *env) store(t *testing.T) *vfs.Store {
	t.Helper()
	w, err := e.m.Workspace("default")
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Store(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// req sends an authenticated request and returns status and body.
func (e *env) req(t *testing.T, method, path string, body io.Reader, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	return testutil.Request(t, method, e.srv.URL+path, "Bearer "+token, body, hdr...)
}

func wantStatus(t *testing.T, what string, got, want int, body []byte) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status %d, want %d; body %s", what, got, want, body)
	}
}

func errnoOf(t *testing.T, body []byte) string {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("not a JSON error: %s", body)
	}
	return e.Errno
}

// routes lists one request per route, for the auth table.
var routes = []struct{ method, path, body string }{
	{"GET", "/metrics", ""},
	{"GET", "/v1/workspaces", ""},
	{"POST", "/v1/workspaces", `{"name":"x"}`},
	{"GET", "/v1/workspaces/default", ""},
	{"GET", "/v1/workspaces/default/files/a", ""},
	{"HEAD", "/v1/workspaces/default/files/a", ""},
	{"PUT", "/v1/workspaces/default/files/a", "data"},
	{"DELETE", "/v1/workspaces/default/files/a", ""},
	{"GET", "/v1/workspaces/default/fs/stat?path=/", ""},
	{"GET", "/v1/workspaces/default/fs/ls?path=/", ""},
	{"POST", "/v1/workspaces/default/fs/mkdir", `{"path":"/d"}`},
	{"POST", "/v1/workspaces/default/fs/mv", `{"src":"/a","dst":"/b"}`},
	{"POST", "/v1/workspaces/default/fs/symlink", `{"target":"a","path":"/l"}`},
	{"POST", "/v1/workspaces/default/fs/chmod", `{"path":"/a","mode":420}`},
	{"POST", "/v1/workspaces/default/exec", `{"argv":["echo","hi"]}`},
	{"POST", "/v1/workspaces/default/push", ""},
	{"POST", "/v1/workspaces/default/pull", ""},
	{"POST", "/v1/workspaces/default/tick", ""},
	{"GET", "/v1/workspaces/default/status", ""},
	{"POST", "/v1/workspaces/default/verify", ""},
	{"GET", "/v1/workspaces/default/runtimes", ""},
	{"POST", "/v1/workspaces/default/runtimes", `{"name":"b","endpoint":"ws://127.0.0.1:9/sync"}`},
	{"DELETE", "/v1/workspaces/default/runtimes/b", ""},
	{"GET", "/v1/workspaces/default/conflicts", ""},
	{"POST", "/v1/workspaces/default/conflicts/resolve", `{"path":"/a","keep":"both"}`},
	{"PUT", "/v1/workspaces/default/conflict-policy", `{"policy":"keep-both"}`},
	{"GET", "/v1/workspaces/default/quota", ""},
	{"PUT", "/v1/workspaces/default/quota", `{"max_bytes":1000}`},
	{"GET", "/v1/workspaces/default/trash", ""},
	{"POST", "/v1/workspaces/default/trash/restore", `{"path":"/a"}`},
	{"POST", "/v1/workspaces/default/trash/purge", `{}`},
	{"GET", "/v1/workspaces/default/events?after=not-an-id", ""}, // a stream with a good one: it would not end
	{"POST", "/v1/workspaces/default/execs", `{"argv":["echo","hi"]}`},
	{"GET", "/v1/workspaces/default/execs", ""},
	{"GET", "/v1/workspaces/default/execs/rt:1", ""},
	{"GET", "/v1/workspaces/default/execs/rt:1/output?from=0", ""},
	{"POST", "/v1/workspaces/default/execs/rt:1/kill", `{"signal":"TERM"}`},
	{"GET", "/v1/workspaces/default/execs/rt:1/wait", ""},
	{"GET", "/v1/nothing-here", ""},
}

func TestEveryRouteButHealthNeedsTheToken(t *testing.T) {
	e := newEnv(t, api.Options{})
	for _, auth := range []string{"", "Bearer wrong-token", "Bearer " + token + "x", "Basic " + token, token} {
		for _, rt := range routes {
			status, b, _ := testutil.Request(t, rt.method, e.srv.URL+rt.path, auth, strings.NewReader(rt.body))
			if status != http.StatusUnauthorized {
				t.Errorf("%s %s with auth %q: status %d, want 401", rt.method, rt.path, auth, status)
				continue
			}
			if rt.method != "HEAD" && errnoOf(t, b) != "EAUTH" {
				t.Errorf("%s %s: body %s", rt.method, rt.path, b)
			}
		}
	}
	// Nothing was done on the refused calls.
	if _, err := e.m.Workspace("x"); err == nil {
		t.Error("an unauthenticated create went through")
	}
	resp, err := http.Get(e.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health without a token: %d", resp.StatusCode)
	}
	// With the token every route answers something other than 401.
	for _, rt := range routes {
		st, b, _ := e.req(t, rt.method, rt.path, strings.NewReader(rt.body))
		if st == http.StatusUnauthorized {
			t.Errorf("%s %s with the token: 401 %s", rt.method, rt.path, b)
		}
	}
}

func TestFilesRoundTrip(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	st, b, _ := e.req(t, "PUT", ws+"/files/src/a.txt", strings.NewReader("x"))
	wantStatus(t, "PUT without parent", st, 404, b)
	if got := errnoOf(t, b); got != "ENOENT" {
		t.Fatalf("errno %s", got)
	}
	st, b, _ = e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader(`{"path":"/src/deep","parents":true}`))
	wantStatus(t, "mkdir -p", st, 200, b)
	st, b, _ = e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader(`{"path":"/src"}`))
	wantStatus(t, "mkdir existing", st, 409, b)

	content := "hello, range world"
	st, b, _ = e.req(t, "PUT", ws+"/files/src/a%20b.txt?mode=0640", strings.NewReader(content))
	wantStatus(t, "PUT", st, 200, b)
	st, b, hdr := e.req(t, "GET", ws+"/files/src/a%20b.txt", nil)
	wantStatus(t, "GET", st, 200, b)
	if string(b) != content || hdr.Get("X-Wsync-Mode") != "0640" {
		t.Fatalf("GET: %q mode %s", b, hdr.Get("X-Wsync-Mode"))
	}
	st, b, hdr = e.req(t, "GET", ws+"/files/src/a%20b.txt", nil, "Range", "bytes=7-11")
	wantStatus(t, "Range", st, 206, b)
	if got, want := string(b), "range"; got != want || hdr.Get("Content-Range") != "bytes 7-11/18" {
		t.Fatalf("Range: %q (%s), want %q", got, hdr.Get("Content-Range"), want)
	}
	st, b, _ = e.req(t, "GET", ws+"/files/src/a%20b.txt", nil, "Range", "bytes=100-")
	wantStatus(t, "Range past the end", st, 416, b)

	// stat: exactly the keys docs/API.md lists.
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path=/src/a%20b.txt", nil)
	wantStatus(t, "stat", st, 200, b)
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got, want := keys, []string{"mode", "mtime", "path", "sha256", "size", "target", "type"}; !slices.Equal(got, want) {
		t.Fatalf("stat keys %v, want %v", got, want)
	}
	sum := sha256.Sum256([]byte(content))
	if obj["path"] != "/src/a b.txt" || obj["type"] != "file" || obj["mode"] != float64(0o640) ||
		obj["size"] != float64(len(content)) || obj["sha256"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("stat %s", b)
	}

	st, b, _ = e.req(t, "POST", ws+"/fs/symlink", strings.NewReader(`{"target":"../etc/passwd","path":"/src/l"}`))
	wantStatus(t, "symlink", st, 200, b)
	st, b, _ = e.req(t, "GET", ws+"/fs/ls?path=/&recursive=1", nil)
	wantStatus(t, "ls -R", st, 200, b)
	var ls []workspace.FileInfo
	if err := json.Unmarshal(b, &ls); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, fi := range ls {
		paths = append(paths, fi.Path+" "+fi.Type+" "+fi.Target)
	}
	if got, want := paths, []string{"/src dir ", "/src/a b.txt file ", "/src/deep dir ", "/src/l symlink ../etc/passwd"}; !slices.Equal(got, want) {
		t.Fatalf("ls -R %q, want %q", got, want)
	}
	// A symlink is data: reading it does not follow it.
	st, b, _ = e.req(t, "GET", ws+"/files/src/l", nil)
	wantStatus(t, "GET symlink", st, 400, b)

	st, b, _ = e.req(t, "DELETE", ws+"/files/src", nil)
	wantStatus(t, "rm non-empty", st, 409, b)
	if got := errnoOf(t, b); got != "ENOTEMPTY" {
		t.Fatalf("errno %s", got)
	}
	st, b, _ = e.req(t, "POST", ws+"/fs/mv", strings.NewReader(`{"src":"/src","dst":"/lib"}`))
	wantStatus(t, "mv", st, 200, b)
	st, b, _ = e.req(t, "DELETE", ws+"/files/lib?recursive=1", nil)
	wantStatus(t, "rm -r", st, 204, b)
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path=/lib", nil)
	wantStatus(t, "stat removed", st, 404, b)

	for _, bad := range []string{"/fs/stat?path=/a/../b", "/fs/stat?path=a//b", "/fs/ls?recursive=maybe"} {
		st, b, _ = e.req(t, "GET", ws+bad, nil)
		wantStatus(t, bad, st, 400, b)
		if got := errnoOf(t, b); got != "EINVAL" {
			t.Errorf("%s: errno %s", bad, got)
		}
	}
	st, b, _ = e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader(`{"path":"/x","parentz":true}`))
	wantStatus(t, "unknown field", st, 400, b)
	st, b, _ = e.req(t, "GET", "/v1/workspaces/nope/fs/stat?path=/", nil)
	wantStatus(t, "missing workspace", st, 404, b)
	st, b, _ = e.req(t, "GET", "/v1/workspaces/Bad..Name/fs/stat?path=/", nil)
	wantStatus(t, "bad workspace name", st, 400, b)
}

func TestRequestLimits(t *testing.T) {
	e := newEnv(t, api.Options{MaxWrite: 1 << 10, MaxJSON: 64})
	const ws = "/v1/workspaces/default"
	st, b, _ := e.req(t, "PUT", ws+"/files/big", bytes.NewReader(make([]byte, 4<<10)))
	wantStatus(t, "big PUT", st, 413, b)
	// The same with no Content-Length (chunked): cut off while streaming,
	// and nothing is left behind.
	st, b, _ = e.req(t, "PUT", ws+"/files/big", io.MultiReader(bytes.NewReader(make([]byte, 4<<10))))
	wantStatus(t, "big chunked PUT", st, 413, b)
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path=/big", nil)
	wantStatus(t, "stat after refused PUT", st, 404, b)
	st, b, _ = e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader(`{"path":"/`+strings.Repeat("a", 100)+`"}`))
	wantStatus(t, "big JSON", st, 413, b)
}

func TestIgnoredPathsInvisibleOverHTTP(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	w, _ := e.m.Workspace("default")
	s, err := w.Store(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MkdirPath(context.Background(), "node_modules/pkg", 0o755, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteFile(context.Background(), "node_modules/pkg/index.js", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/files/node_modules/pkg/index.js", "/fs/stat?path=/node_modules", "/fs/ls?path=/node_modules/pkg"} {
		st, b, _ := e.req(t, "GET", ws+p, nil)
		wantStatus(t, p, st, 404, b)
	}
	st, b, _ := e.req(t, "GET", ws+"/fs/ls?path=/", nil)
	wantStatus(t, "ls /", st, 200, b)
	if string(bytes.TrimSpace(b)) != "[]" {
		t.Fatalf("ls / shows %s", b)
	}
}

// frames reads an NDJSON exec stream.
func frames(t *testing.T, body []byte) []api.ExecFrame {
	t.Helper()
	var out []api.ExecFrame
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var f api.ExecFrame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", sc.Bytes(), err)
		}
		out = append(out, f)
	}
	return out
}

func TestExecStream(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	st, b, hdr := e.req(t, "POST", ws+"/exec", strings.NewReader(`{"shell":"echo one ; warn two ; write /made hi ; exit 4"}`))
	wantStatus(t, "exec", st, 200, b)
	if hdr.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("content type %s", hdr.Get("Content-Type"))
	}
	fs := frames(t, b)
	var got []string
	for _, f := range fs {
		got = append(got, f.Type+":"+string(f.Data))
	}
	if want := []string{"stdout:one\n", "stderr:two\n", "result:"}; !slices.Equal(got, want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
	res := fs[len(fs)-1].Result
	if res.ExitCode != 4 || res.Sync != workspace.SyncComplete || res.Pulled.Entries != 1 || len(res.Events) != 0 {
		t.Fatalf("result %+v", res)
	}
	st, b, _ = e.req(t, "GET", ws+"/files/made", nil)
	wantStatus(t, "read what exec wrote", st, 200, b)

	e.remotes.Fake("default").FailPush(errors.New("dial tcp: connection refused"))
	st, b, _ = e.req(t, "POST", ws+"/exec", strings.NewReader(`{"argv":["echo","never"]}`))
	if st != 500 || strings.Contains(string(b), "never") || !strings.Contains(string(b), "connection refused") {
		t.Fatalf("exec after failed push: %d %s", st, b)
	}
	st, b, _ = e.req(t, "POST", ws+"/exec", strings.NewReader(`{"argv":["a"],"shell":"b"}`))
	wantStatus(t, "argv and shell", st, 400, b)
}

func TestSyncRoutesAndWorkspaces(t *testing.T) {
	e := newEnv(t, api.Options{})
	st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"two","endpoint":"ws://127.0.0.1:9/sync"}`))
	wantStatus(t, "create", st, 201, b)
	st, b, _ = e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"two"}`))
	wantStatus(t, "create again", st, 409, b)
	st, b, _ = e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"local"}`))
	wantStatus(t, "create without endpoint", st, 201, b)

	st, b, _ = e.req(t, "PUT", "/v1/workspaces/two/files/f", strings.NewReader("2"))
	wantStatus(t, "write in two", st, 200, b)
	st, b, _ = e.req(t, "GET", "/v1/workspaces/default/files/f", nil)
	wantStatus(t, "default does not see two's file", st, 404, b)

	st, b, _ = e.req(t, "POST", "/v1/workspaces/two/push", nil)
	wantStatus(t, "push", st, 200, b)
	var rep workspace.SyncReport
	if err := json.Unmarshal(b, &rep); err != nil || rep.Entries != 1 {
		t.Fatalf("push report %s", b)
	}
	st, b, _ = e.req(t, "POST", "/v1/workspaces/two/tick", nil)
	wantStatus(t, "tick", st, 200, b)
	st, b, _ = e.req(t, "GET", "/v1/workspaces/two/status", nil)
	wantStatus(t, "status", st, 200, b)
	var status workspace.Status
	if err := json.Unmarshal(b, &status); err != nil || status.Remote == nil || !status.Remote.Connected || status.LastPush == nil {
		t.Fatalf("status %s", b)
	}
	st, b, _ = e.req(t, "POST", "/v1/workspaces/two/verify", nil)
	wantStatus(t, "verify", st, 200, b)

	st, b, _ = e.req(t, "POST", "/v1/workspaces/local/push", nil)
	wantStatus(t, "push without remote", st, 503, b)
	if got := errnoOf(t, b); got != "ENOTCONN" {
		t.Fatalf("errno %s", got)
	}
	e.remotes.Fake("two").FailVerify(workspace.ErrNotSupported)
	st, b, _ = e.req(t, "POST", "/v1/workspaces/two/verify", nil)
	wantStatus(t, "verify unsupported", st, 501, b)

	st, b, _ = e.req(t, "GET", "/metrics", nil)
	wantStatus(t, "metrics", st, 200, b)
	if !bytes.Contains(b, []byte("wsync_workspace_syncs_total")) || !bytes.Contains(b, []byte("wsync_api_requests_total")) {
		t.Fatalf("metrics lack wsync series")
	}
	if bytes.Contains(b, []byte(token)) {
		t.Fatal("metrics leak the token")
	}
}
