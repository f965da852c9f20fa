package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

func TestConflictRoutes(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	st, b, _ := e.req(t, "PUT", ws+"/files/PLAN.md", strings.NewReader("v0"))
	wantStatus(t, "write", st, 200, b)
	st, b, _ = e.req(t, "POST", ws+"/push", nil)
	wantStatus(t, "push", st, 200, b)
	if _, err := e.remotes.Fake("default").Container.WriteFile(context.Background(), "PLAN.md", []byte("container v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, b, _ = e.req(t, "PUT", ws+"/files/PLAN.md", strings.NewReader("server v1"))
	wantStatus(t, "write again", st, 200, b)
	st, b, _ = e.req(t, "POST", ws+"/pull", nil)
	wantStatus(t, "pull", st, 200, b)
	var rep workspace.SyncReport
	if err := json.Unmarshal(b, &rep); err != nil || rep.Conflicts != 1 || len(rep.ConflictPaths) != 1 || rep.ConflictPaths[0] != "/PLAN.md" {
		t.Fatalf("pull report %s", b)
	}
	st, b, _ = e.req(t, "GET", ws+"/status", nil)
	wantStatus(t, "status", st, 200, b)
	if !strings.Contains(string(b), `"conflicts":1`) {
		t.Fatalf("status %s lacks the open conflict", b)
	}

	st, b, _ = e.req(t, "GET", ws+"/conflicts", nil)
	wantStatus(t, "list", st, 200, b)
	var list []workspace.ConflictInfo
	if err := json.Unmarshal(b, &list); err != nil || len(list) != 1 || list[0].Path != "/PLAN.md" || list[0].Runtime != "default" ||
		list[0].CopySide != "container" || !strings.HasPrefix(list[0].Copy, "/PLAN.conflict-container-") || strings.Contains(string(b), "resolved_at") {
		t.Fatalf("list %s", b)
	}

	for _, q := range []string{"?limit=0", "?limit=x", "?limit=-1", "?limit=100001"} {
		st, b, _ = e.req(t, "GET", ws+"/conflicts"+q, nil)
		wantStatus(t, "list "+q, st, 400, b)
	}
	st, b, _ = e.req(t, "GET", ws+"/conflicts?limit=1", nil)
	wantStatus(t, "list ?limit=1", st, 200, b)

	for _, c := range []struct {
		name, body string
		status     int
		errno      string
	}{
		{"bad keep", `{"path":"/PLAN.md","keep":"mine"}`, 400, "EINVAL"},
		{"no conflict there", `{"path":"/other","keep":"server"}`, 404, "ENOENT"},
		{"unknown field", `{"path":"/PLAN.md","keep":"server","force":true}`, 400, "EINVAL"},
	} {
		st, b, _ = e.req(t, "POST", ws+"/conflicts/resolve", strings.NewReader(c.body))
		wantStatus(t, c.name, st, c.status, b)
		if got := errnoOf(t, b); got != c.errno {
			t.Fatalf("%s: errno %s, want %s", c.name, got, c.errno)
		}
	}
	st, b, _ = e.req(t, "POST", ws+"/conflicts/resolve", strings.NewReader(`{"path":"/PLAN.md","keep":"container"}`))
	wantStatus(t, "resolve", st, 200, b)
	var settled workspace.ConflictInfo
	if err := json.Unmarshal(b, &settled); err != nil || settled.ID != list[0].ID || settled.Resolution != "container" || settled.ResolvedAt.IsZero() {
		t.Fatalf("resolve answer %s", b)
	}
	st, b, _ = e.req(t, "GET", ws+"/files/PLAN.md", nil)
	if st != 200 || string(b) != "container v1" {
		t.Fatalf("PLAN.md after keeping the container's: %d %q", st, b)
	}
	st, b, _ = e.req(t, "GET", ws+"/conflicts", nil)
	if st != 200 || strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("open conflicts after the resolve: %d %s", st, b)
	}
	st, b, _ = e.req(t, "GET", ws+"/conflicts?all=1", nil)
	if err := json.Unmarshal(b, &list); st != 200 || err != nil || len(list) != 1 || list[0].Resolution != "container" {
		t.Fatalf("all conflicts: %d %s", st, b)
	}

	st, b, _ = e.req(t, "PUT", ws+"/conflict-policy", strings.NewReader(`{"policy":"newest-wins"}`))
	wantStatus(t, "bad policy", st, 400, b)
	st, b, _ = e.req(t, "PUT", ws+"/conflict-policy", strings.NewReader(`{}`))
	wantStatus(t, "no policy", st, 400, b)
	st, b, _ = e.req(t, "PUT", ws+"/conflict-policy", strings.NewReader(`{"policy":"server-wins"}`))
	wantStatus(t, "set policy", st, 200, b)
	if strings.TrimSpace(string(b)) != `{"policy":"server-wins"}` {
		t.Fatalf("set policy answer %s", b)
	}
	st, b, _ = e.req(t, "GET", ws, nil)
	if st != 200 || !strings.Contains(string(b), `"conflict_policy":"server-wins"`) {
		t.Fatalf("workspace after the change: %d %s", st, b)
	}

	st, b, _ = e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"p","conflict_policy":"sometimes"}`))
	wantStatus(t, "create with a bad policy", st, 400, b)
	st, b, _ = e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"p","conflict_policy":"container-wins"}`))
	wantStatus(t, "create", st, 201, b)
	var info workspace.Info
	if err := json.Unmarshal(b, &info); err != nil || info.ConflictPolicy != vfs.ContainerWins {
		t.Fatalf("create answer %s", b)
	}
	st, b, _ = e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"q"}`))
	if err := json.Unmarshal(b, &info); st != 201 || err != nil || info.ConflictPolicy != vfs.KeepBoth {
		t.Fatalf("create without a policy: %d %s", st, b)
	}
}
