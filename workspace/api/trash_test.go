package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

func TestMassDeletePauseAndTrashRoutes(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	ctx := context.Background()
	st, b, _ := e.req(t, "POST", ws+"/push", nil) // builds the remote
	wantStatus(t, "push", st, 200, b)
	cont := e.remotes.Fake("default").Container
	if err := cont.MkdirPath(ctx, "gen", 0o755, false); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := cont.WriteFile(ctx, fmt.Sprintf("gen/f%d", i), []byte(fmt.Sprint("file ", i)), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	st, b, _ = e.req(t, "POST", ws+"/pull", nil)
	wantStatus(t, "pull", st, 200, b)
	if err := cont.RemovePath(ctx, "gen", true); err != nil {
		t.Fatal(err)
	}

	// The server's bounds (1,000 paths) let 11 deletes through; this
	// pull's own do not.
	st, b, _ = e.req(t, "POST", ws+"/pull?mass_delete_min=5&mass_delete_share=0.5", nil)
	wantStatus(t, "pull of the mass delete", st, 409, b)
	if got := errnoOf(t, b); got != "EMASS_DELETE" {
		t.Fatalf("errno %s, want EMASS_DELETE: %s", got, b)
	}
	st, b, _ = e.req(t, "GET", ws+"/files/gen/f3", nil)
	if st != 200 || string(b) != "file 3" {
		t.Fatalf("gen/f3 after the paused pull: %d %q (a deletion was applied)", st, b)
	}
	st, b, _ = e.req(t, "GET", ws+"/status", nil)
	wantStatus(t, "status", st, 200, b)
	var status workspace.Status
	if err := json.Unmarshal(b, &status); err != nil {
		t.Fatal(err)
	}
	if p := status.Pending; p == nil || p.State != workspace.PendingPaused || p.Deletes < 5 || !strings.Contains(p.Error, "allow-mass-delete") {
		t.Fatalf("status pending = %+v, want paused", status.Pending)
	}
	// Held back: a push is refused.
	st, b, _ = e.req(t, "POST", ws+"/push", nil)
	wantStatus(t, "push while paused", st, 409, b)

	st, b, _ = e.req(t, "POST", ws+"/pull?allow_mass_delete=1", nil)
	wantStatus(t, "confirmed pull", st, 200, b)
	st, b, _ = e.req(t, "GET", ws+"/files/gen/f3", nil)
	wantStatus(t, "gen/f3 after the confirmed pull", st, 404, b)
	st, b, _ = e.req(t, "GET", ws+"/status", nil)
	wantStatus(t, "status after the confirmed pull", st, 200, b)
	var after workspace.Status
	if err := json.Unmarshal(b, &after); err != nil || after.Pending != nil || after.Trash.Entries != 11 {
		t.Fatalf("status after the confirmed pull: %s", b)
	}

	st, b, _ = e.req(t, "GET", ws+"/trash?path=/gen&limit=3", nil)
	wantStatus(t, "trash list", st, 200, b)
	var list []workspace.TrashEntry
	if err := json.Unmarshal(b, &list); err != nil || len(list) != 3 || list[0].Origin != "sync" || list[0].Op != "delete" || !strings.HasPrefix(list[0].Path, "/gen") {
		t.Fatalf("trash list %s", b)
	}
	st, b, _ = e.req(t, "POST", ws+"/trash/restore", strings.NewReader(`{"path":"/gen"}`))
	wantStatus(t, "restore", st, 200, b)
	var rep workspace.RestoreReport
	if err := json.Unmarshal(b, &rep); err != nil || rep.Restored != 11 {
		t.Fatalf("restore answer %s", b)
	}
	st, b, _ = e.req(t, "GET", ws+"/fs/stat?path=/gen/f3", nil)
	if st != 200 || !strings.Contains(string(b), `"mode":416`) {
		t.Fatalf("gen/f3 after the restore: %d %s", st, b)
	}
	st, b, _ = e.req(t, "POST", ws+"/trash/restore", strings.NewReader(`{"path":"/gen"}`))
	wantStatus(t, "restore of nothing", st, 404, b)

	// A restore over a live file of other content is refused unless forced.
	st, b, _ = e.req(t, "PUT", ws+"/files/gen/f3", strings.NewReader("v2"))
	wantStatus(t, "overwrite", st, 200, b)
	st, b, _ = e.req(t, "PUT", ws+"/files/gen/f3", strings.NewReader("v3"))
	wantStatus(t, "overwrite", st, 200, b)
	st, b, _ = e.req(t, "POST", ws+"/trash/restore", strings.NewReader(`{"path":"/gen/f3"}`))
	wantStatus(t, "restore over a live file", st, 409, b)
	if got := errnoOf(t, b); got != "EEXIST" || !strings.Contains(string(b), "/gen/f3") {
		t.Fatalf("restore over a live file: %s", b)
	}
	st, b, _ = e.req(t, "POST", ws+"/trash/restore", strings.NewReader(`{"path":"/gen/f3","force":true}`))
	wantStatus(t, "forced restore", st, 200, b)
	st, b, _ = e.req(t, "GET", ws+"/files/gen/f3", nil)
	if st != 200 || string(b) != "v2" {
		t.Fatalf("gen/f3 after the forced restore: %d %q, want v2", st, b)
	}

	for _, c := range []struct{ what, method, path, body string }{
		{"limit 0", "GET", ws + "/trash?limit=0", ""},
		{"limit past the bound", "GET", ws + "/trash?limit=100001", ""},
		{"bad path", "GET", ws + "/trash?path=/a/../b", ""},
		{"bad allow", "POST", ws + "/pull?allow_mass_delete=yes", ""},
		{"bad share", "POST", ws + "/pull?mass_delete_share=2", ""},
		{"NaN share", "POST", ws + "/pull?mass_delete_share=NaN", ""},
		{"bad min", "POST", ws + "/pull?mass_delete_min=-3", ""},
		{"restore of a bad path", "POST", ws + "/trash/restore", `{"path":"a//b"}`},
		{"restore unknown field", "POST", ws + "/trash/restore", `{"path":"/a","when":1}`},
		{"purge a negative age", "POST", ws + "/trash/purge", `{"older_than_ns":-1}`},
	} {
		st, b, _ := e.req(t, c.method, c.path, strings.NewReader(c.body))
		wantStatus(t, c.what, st, 400, b)
		if got := errnoOf(t, b); got != "EINVAL" {
			t.Errorf("%s: errno %s, want EINVAL", c.what, got)
		}
	}

	st, b, _ = e.req(t, "POST", ws+"/trash/purge", strings.NewReader(`{"path":"/gen"}`))
	wantStatus(t, "purge", st, 200, b)
	var pr workspace.PurgeReport
	if err := json.Unmarshal(b, &pr); err != nil || pr.Entries != 2 {
		t.Fatalf("purge answer %s, want the 2 versions of gen/f3 (v1 overwritten, v3 replaced)", b)
	}
	st, b, _ = e.req(t, "GET", ws+"/trash", nil)
	if st != 200 || strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("trash after the purge: %d %s", st, b)
	}
}
