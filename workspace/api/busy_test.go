package api_test

import (
	"context"
	"errors"
	"testing"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/client"
)

// wireErr stands for a sync wire error from computerd (as
// workspace/remote's errors are).
func wireErr(code string) error {
	return &workspace.PeerError{Code: code, Err: errors.New("peer said " + code)}
}

// A busy peer is a 429 with Retry-After and a message, and a push fenced
// by a pending pull a 409 EPENDING; the Go client turns both back into the
// workspace sentinels.
func TestBusyAndPendingStatuses(t *testing.T) {
	e := newEnv(t, api.Options{})
	st, b, _ := e.req(t, "GET", "/v1/workspaces/default/status", nil) // builds the fake
	wantStatus(t, "status", st, 200, b)
	fake := e.remotes.Fake("default")
	cl, err := client.New(e.srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	ws := cl.Workspace("default")

	for _, code := range []string{"EBUSY", "EEXEC_BUSY"} {
		fake.FailPush(wireErr(code))
		st, b, hdr := e.req(t, "POST", "/v1/workspaces/default/push", nil)
		wantStatus(t, code, st, 429, b)
		if got := errnoOf(t, b); got != code || hdr.Get("Retry-After") == "" {
			t.Errorf("%s: errno %q Retry-After %q", code, got, hdr.Get("Retry-After"))
		}
		fake.FailPush(wireErr(code))
		if _, err := ws.Push(context.Background()); !errors.Is(err, workspace.ErrBusy) {
			t.Errorf("%s through the client: %v, want workspace.ErrBusy", code, err)
		}
	}

	fake.FailPull(errors.New("reset"), wireErr("ESHUTDOWN"))
	st, b, _ = e.req(t, "POST", "/v1/workspaces/default/pull", nil)
	if st == 200 {
		t.Fatalf("pull did not fail: %s", b)
	}
	st, b, _ = e.req(t, "POST", "/v1/workspaces/default/push", nil)
	wantStatus(t, "fenced push", st, 409, b)
	if got := errnoOf(t, b); got != "EPENDING" {
		t.Errorf("fenced push errno %q", got)
	}
	fake.FailPull(errors.New("reset"))
	if _, err := ws.Push(context.Background()); !errors.Is(err, workspace.ErrPendingPull) {
		t.Errorf("fenced push through the client: %v, want workspace.ErrPendingPull", err)
	}
	if _, err := ws.Push(context.Background()); err != nil {
		t.Errorf("push once the pull works: %v", err)
	}
}
