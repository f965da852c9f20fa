package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

func TestQuotaOverTheAPI(t *testing.T) {
	e := newEnv(t, api.Options{})
	// Bad quotas are refused at the boundary, and no workspace is made.
	for _, body := range []string{
		`{"name":"q","quota":{"max_bytes":-1}}`,
		`{"name":"q","quota":{"max_entries":1099511627777}}`,
		`{"name":"q","quota":{"max_file_size":99999999999999999}}`,
		`{"name":"q","quota":{"max_bytes":1e30}}`,
	} {
		st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(body))
		wantStatus(t, body, st, 400, b)
	}
	if _, err := e.m.Workspace("q"); err == nil {
		t.Fatal("a refused create made the workspace")
	}
	st, b, _ := e.req(t, "POST", "/v1/workspaces", strings.NewReader(`{"name":"q","quota":{"max_bytes":1000,"max_entries":3,"max_file_size":600}}`))
	wantStatus(t, "create with a quota", st, 201, b)
	var info workspace.Info
	if err := json.Unmarshal(b, &info); err != nil || info.Quota != (vfs.Quota{MaxBytes: 1000, MaxEntries: 3, MaxFileSize: 600}) {
		t.Fatalf("created %s", b)
	}
	ws := "/v1/workspaces/q"
	st, b, _ = e.req(t, "PUT", ws+"/files/a", strings.NewReader(strings.Repeat("a", 500)))
	wantStatus(t, "write within the quota", st, 200, b)
	st, b, _ = e.req(t, "PUT", ws+"/files/big", strings.NewReader(strings.Repeat("b", 601)))
	wantStatus(t, "write past the max file size", st, 413, b)
	if got := errnoOf(t, b); got != "EFBIG" {
		t.Errorf("past the max file size: errno %s, want EFBIG", got)
	}
	st, b, _ = e.req(t, "PUT", ws+"/files/b", strings.NewReader(strings.Repeat("b", 501)))
	wantStatus(t, "write past the max bytes", st, 413, b)
	if got := errnoOf(t, b); got != "EDQUOT" {
		t.Errorf("past the quota: errno %s, want EDQUOT", got)
	}
	st, b, _ = e.req(t, "GET", ws+"/files/a", nil)
	if st != 200 || string(b) != strings.Repeat("a", 500) {
		t.Errorf("the file written before the quota: %d %q", st, b)
	}
	st, b, _ = e.req(t, "GET", ws+"/files/b", nil)
	wantStatus(t, "a refused write leaves nothing", st, 404, b)
	st, b, _ = e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader(`{"path":"/d1"}`))
	wantStatus(t, "mkdir", st, 200, b)
	st, b, _ = e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader(`{"path":"/d2"}`))
	wantStatus(t, "mkdir", st, 200, b)
	st, b, _ = e.req(t, "POST", ws+"/fs/mkdir", strings.NewReader(`{"path":"/d3"}`))
	wantStatus(t, "mkdir past max entries", st, 413, b)
	if got := errnoOf(t, b); got != "EDQUOT" {
		t.Errorf("past max entries: errno %s, want EDQUOT", got)
	}

	// Status shows the usage against the quota.
	st, b, _ = e.req(t, "GET", ws+"/status", nil)
	wantStatus(t, "status", st, 200, b)
	var status workspace.Status
	if err := json.Unmarshal(b, &status); err != nil || status.Quota == nil ||
		status.Quota.Used != (vfs.Usage{Bytes: 500, Entries: 3}) || status.Quota.MaxBytes != 1000 {
		t.Fatalf("status quota: %s", b)
	}

	// Lowered below the usage: kept, new writes refused; bad values refused.
	st, b, _ = e.req(t, "PUT", ws+"/quota", strings.NewReader(`{"max_bytes":100}`))
	wantStatus(t, "lower the quota", st, 200, b)
	var qs workspace.QuotaStatus
	if err := json.Unmarshal(b, &qs); err != nil || qs.Quota != (vfs.Quota{MaxBytes: 100}) || qs.Used.Bytes != 500 {
		t.Fatalf("set quota answered %s", b)
	}
	st, b, _ = e.req(t, "PUT", ws+"/files/c", strings.NewReader("c"))
	wantStatus(t, "write over a lowered quota", st, 413, b)
	st, b, _ = e.req(t, "PUT", ws+"/quota", strings.NewReader(`{"max_bytes":-5}`))
	wantStatus(t, "negative quota", st, 400, b)
	st, b, _ = e.req(t, "GET", ws+"/quota", nil)
	wantStatus(t, "get quota", st, 200, b)
	if err := json.Unmarshal(b, &qs); err != nil || qs.Quota != (vfs.Quota{MaxBytes: 100}) {
		t.Fatalf("a refused quota changed it: %s", b)
	}
	st, b, _ = e.req(t, "GET", "/metrics", nil)
	wantStatus(t, "metrics", st, 200, b)
	for _, want := range []string{`wsync_workspace_quota_limit{resource="bytes",workspace="q"} 100`,
		`wsync_workspace_quota_used{resource="bytes",workspace="q"} 500`, `wsync_workspace_quota_used{resource="entries",workspace="q"} 3`,
		`wsync_vfs_quota_refusals_total{limit="bytes"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, in := range e.m.Workspaces() {
		if in.Name == "q" && in.Quota != (vfs.Quota{MaxBytes: 100}) {
			t.Errorf("listing shows quota %+v, want the lowered one", in.Quota)
		}
	}
}
