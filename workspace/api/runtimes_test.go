package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

func TestRuntimeRoutes(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	for _, c := range []struct {
		name, body string
		status     int
		errno      string
	}{
		{"empty token", `{"name":"b","endpoint":"ws://127.0.0.1:9/sync","computerd_token":""}`, 400, "EINVAL"},
		{"reserved name", `{"name":"server","endpoint":"ws://127.0.0.1:9/sync"}`, 400, "EINVAL"},
		{"default", `{"name":"default","endpoint":"ws://127.0.0.1:9/sync"}`, 400, "EINVAL"},
		{"bad endpoint", `{"name":"b","endpoint":"http://127.0.0.1:9/"}`, 400, "EINVAL"},
		{"token file", `{"name":"b","endpoint":"ws://127.0.0.1:9/sync","token_file":"/etc/passwd"}`, 400, "EINVAL"},
	} {
		st, b, _ := e.req(t, "POST", ws+"/runtimes", strings.NewReader(c.body))
		wantStatus(t, c.name, st, c.status, b)
		if got := errnoOf(t, b); got != c.errno {
			t.Fatalf("%s: errno %s, want %s", c.name, got, c.errno)
		}
	}
	st, b, _ := e.req(t, "POST", ws+"/runtimes", strings.NewReader(`{"name":"b","endpoint":"ws://127.0.0.1:9/sync","computerd_token":"secret-b"}`))
	wantStatus(t, "attach", st, 201, b)
	var rt workspace.Runtime
	if err := json.Unmarshal(b, &rt); err != nil || rt.Name != "b" || !rt.HasToken || strings.Contains(string(b), "secret-b") {
		t.Fatalf("attach answer %s", b)
	}
	st, b, _ = e.req(t, "POST", ws+"/runtimes", strings.NewReader(`{"name":"b","endpoint":"ws://127.0.0.1:9/sync"}`))
	wantStatus(t, "attach again", st, 409, b)

	st, b, _ = e.req(t, "GET", ws+"/runtimes", nil)
	wantStatus(t, "list", st, 200, b)
	var list []workspace.Runtime
	if err := json.Unmarshal(b, &list); err != nil || len(list) != 2 || list[0].Name != "default" || list[1].Name != "b" || strings.Contains(string(b), "secret-b") {
		t.Fatalf("list %s", b)
	}

	st, b, _ = e.req(t, "PUT", ws+"/files/f", strings.NewReader("x"))
	wantStatus(t, "write", st, 200, b)
	st, b, _ = e.req(t, "POST", ws+"/push?runtime=b", nil)
	wantStatus(t, "push to b", st, 200, b)
	if got := e.remotes.FakeOf("default", "b"); got == nil || e.remotes.Fake("default") != nil {
		t.Fatal("the push did not go to b alone")
	}
	st, b, _ = e.req(t, "GET", ws+"/status?runtime=b", nil)
	wantStatus(t, "status of b", st, 200, b)
	var status workspace.Status
	if err := json.Unmarshal(b, &status); err != nil || status.Runtime != "b" || status.LastPush == nil || len(status.Runtimes) != 2 {
		t.Fatalf("status of b %s", b)
	}
	for _, c := range []struct{ method, path string }{
		{"POST", ws + "/push?runtime=nope"},
		{"POST", ws + "/pull?runtime=nope"},
		{"POST", ws + "/verify?runtime=nope"},
		{"GET", ws + "/status?runtime=nope"},
		{"POST", ws + "/exec?runtime=nope"},
	} {
		body := strings.NewReader(`{"argv":["echo","hi"]}`)
		st, b, _ = e.req(t, c.method, c.path, body)
		wantStatus(t, c.path, st, 404, b)
		if got := errnoOf(t, b); got != "ENORUNTIME" {
			t.Fatalf("%s: errno %s", c.path, got)
		}
	}

	st, b, _ = e.req(t, "DELETE", ws+"/runtimes/b", nil)
	wantStatus(t, "detach", st, 204, b)
	st, b, _ = e.req(t, "DELETE", ws+"/runtimes/b", nil)
	wantStatus(t, "detach again", st, 404, b)
	if got := errnoOf(t, b); got != "ENORUNTIME" {
		t.Fatalf("detach again: errno %s", got)
	}
	st, b, _ = e.req(t, "POST", ws+"/pull?runtime=b", nil)
	wantStatus(t, "pull from a detached runtime", st, 404, b)
}
