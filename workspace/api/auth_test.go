package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/remote"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// sink is an endpoint a caller controls: it records every request's
// Authorization header and refuses the upgrade.
type sink struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newSink(t *testing.T) *sink {
	s := &sink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		http.Error(w, "no", http.StatusForbidden)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// realEnv is the API over a Manager whose workspaces dial for real
// (workspace/remote), with opts for the Manager.
func realEnv(t *testing.T, mo workspace.Options) *env {
	t.Helper()
	mo.Remote = remote.Factory(nil)
	srv, m := workspacetest.Serve(t, mo, api.Options{Token: token})
	return &env{srv: srv, m: m}
}

// Issue 9 item 3, the reproduction: a caller names a host file as the
// token file and an endpoint it controls. The server must not read the file
// and the endpoint must receive nothing of it.
func TestCreateNeverReadsAHostPath(t *testing.T) {
	secret := "host-secret-" + strings.Repeat("x", 16)
	hostFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(hostFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ep := newSink(t)
	e := realEnv(t, workspace.Options{})
	url := "ws" + strings.TrimPrefix(ep.URL, "http") + "/sync"

	body, _ := json.Marshal(map[string]any{"name": "evil", "endpoint": url, "token_file": hostFile})
	st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(string(body)))
	wantStatus(t, "create with token_file", st, 400, b)
	if got := errnoOf(t, b); got != "EINVAL" || !strings.Contains(string(b), "computerd_token") {
		t.Fatalf("refusal %s, want EINVAL saying to send computerd_token", b)
	}
	if _, err := e.m.Workspace("evil"); err == nil {
		t.Fatal("the refused workspace was registered")
	}
	// The old by-value field is refused the same way.
	st, b, _ = e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"evil","endpoint":"`+url+`","token":"x"}`))
	wantStatus(t, "create with token", st, 400, b)

	// Registered without a token, a push dials the endpoint with nothing.
	st, b, _ = e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"evil","endpoint":"`+url+`"}`))
	wantStatus(t, "create", st, 201, b)
	st, b, _ = e.req(t, "POST", "/v1/workspaces/evil/push", nil)
	if st == 200 {
		t.Fatalf("push to the sink succeeded: %s", b)
	}
	seen := ep.seen()
	if len(seen) == 0 {
		t.Fatal("the push never dialled the endpoint: the test proves nothing")
	}
	for _, a := range seen {
		if strings.Contains(a, secret) || a != "" {
			t.Fatalf("the endpoint received Authorization %q", a)
		}
	}
}

// A token given by value reaches its endpoint, is stored 0600 under the
// data dir, and never shows in the listing, the registration or the
// registry; the default workspace's operator-given token file path does
// not show either.
func TestTokenByValueStoredAndNeverShown(t *testing.T) {
	opFile := filepath.Join(t.TempDir(), "operator-computerd.token")
	if err := os.WriteFile(opFile, []byte("operator-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ep := newSink(t)
	url := "ws" + strings.TrimPrefix(ep.URL, "http") + "/sync"
	e := realEnv(t, workspace.Options{DefaultEndpoint: "ws://127.0.0.1:45678/sync", DefaultTokenFile: opFile})
	st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"proj","endpoint":"`+url+`","computerd_token":"by-value-secret"}`))
	wantStatus(t, "create", st, 201, b)
	var info workspace.Info
	if err := json.Unmarshal(b, &info); err != nil || !info.HasToken || info.Endpoint != url {
		t.Fatalf("created %s (%v)", b, err)
	}
	for _, p := range []string{"/v1/workspaces", "/v1/workspaces/proj", "/v1/workspaces/default", "/v1/workspaces/default/status"} {
		st, b, _ := e.req(t, "GET", p, nil)
		wantStatus(t, p, st, 200, b)
		for _, leak := range []string{"by-value-secret", "operator-secret", opFile, "computerd.token", "token_file"} {
			if strings.Contains(string(b), leak) {
				t.Errorf("GET %s shows %q: %s", p, leak, b)
			}
		}
	}
	w, err := e.m.Workspace("proj")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(w.Dir(), "computerd.token")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("stored token mode %v, want %v", got, want)
	}
	reg, err := os.ReadFile(filepath.Join(filepath.Dir(w.Dir()), "workspaces.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"by-value-secret", "operator-secret", opFile} {
		if strings.Contains(string(reg), leak) {
			t.Errorf("registry holds %q:\n%s", leak, reg)
		}
	}
	e.req(t, "POST", "/v1/workspaces/proj/push", nil)
	if seen := ep.seen(); len(seen) == 0 || seen[0] != "Bearer by-value-secret" {
		t.Fatalf("endpoint saw %q, want the token given by value", seen)
	}
}

func TestCreateRefusesBadTokensAndEndpoints(t *testing.T) {
	e := realEnv(t, workspace.Options{})
	for _, body := range []string{
		`{"name":"a","endpoint":"ws://h:1/sync","computerd_token":""}`,
		`{"name":"a","endpoint":"ws://h:1/sync","computerd_token":"  "}`,
		`{"name":"a","endpoint":"ws://h:1/sync","computerd_token":"two words"}`,
		`{"name":"a","endpoint":"ws://h:1/sync","computerd_token":"line\nbreak"}`,
		`{"name":"a","endpoint":"ws://h:1/sync","computerd_token":"` + strings.Repeat("t", workspace.MaxTokenLen+1) + `"}`,
		`{"name":"a","endpoint":"http://h:1/sync"}`,
		`{"name":"a","endpoint":"file:///etc/passwd"}`,
		`{"name":"a","endpoint":"ws://user:pw@h:1/sync"}`,
		`{"name":"a","endpoint":"ws:///sync"}`,
		`{"name":"a","endpoint":"ws://h:99999/sync"}`,
		`{"name":"a","endpoint":"ws://h:/sync"}`,
		`{"name":"a","endpoint":"ws://h:1/sync?x=1"}`,
		`{"name":"a","endpoint":"ws://h:1/sync#f"}`,
		`{"name":"a","endpoint":"ws:h"}`,
	} {
		st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(body))
		if st != 400 || errnoOf(t, b) != "EINVAL" {
			t.Errorf("%.80s: %d %s, want 400 EINVAL", body, st, b)
		}
	}
	if got := e.m.Workspaces(); len(got) != 1 {
		t.Fatalf("refused creates registered workspaces: %+v", got)
	}
}

// serve --allow-endpoint: globs over host:port, the port filled in from
// the scheme.
func TestAllowEndpoint(t *testing.T) {
	e := realEnv(t, workspace.Options{AllowEndpoints: []string{"10.0.0.*:45678", "*.sandbox.internal:443"}})
	for _, tc := range []struct {
		endpoint string
		status   int
	}{
		{"ws://10.0.0.7:45678/sync", 201},
		{"wss://box1.sandbox.internal/sync", 201},
		{"ws://10.0.1.7:45678/sync", 403},
		{"ws://10.0.0.7:45679/sync", 403},
		{"ws://127.0.0.1:45678/sync", 403},
		{"ws://box1.sandbox.internal/sync", 403}, // port 80
		{"wss://evil.example/sync", 403},
		{"wss://BOX2.Sandbox.Internal:443/sync", 201},
	} {
		name := "w" + strings.NewReplacer(".", "", ":", "", "/", "").Replace(tc.endpoint)
		name = strings.ToLower(name)
		if len(name) > 60 {
			name = name[:60]
		}
		body := `{"name":"` + name + `","endpoint":"` + tc.endpoint + `"}`
		st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(body))
		if st != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.endpoint, st, b, tc.status)
		}
		if st == 403 && (errnoOf(t, b) != "EPERM" || !strings.Contains(string(b), "allow-endpoint")) {
			t.Errorf("%s: refusal %s does not say why", tc.endpoint, b)
		}
	}
	// A bad pattern stops the server from starting.
	if _, err := workspace.Open(context.Background(), workspace.Options{DataDir: t.TempDir(), AllowEndpoints: []string{"[10.0.0.1"}}); err == nil {
		t.Fatal("a malformed --allow-endpoint pattern was accepted")
	}
}
