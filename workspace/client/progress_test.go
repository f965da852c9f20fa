package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/client"
)

// The client asks for progress only when ctx carries an observer, and the
// observer hears totals that add up to the report.
func TestProgressThroughTheClient(t *testing.T) {
	ws, srv := newClient(t)
	ctx := context.Background()
	if _, err := ws.Pull(ctx); err != nil { // builds the fake, owes nothing
		t.Fatal(err)
	}
	fake := srv.Remotes.Fake("default")
	for i := range 600 {
		if _, err := fake.Container.WriteFile(ctx, fmt.Sprintf("f%03d", i), []byte("c"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := fake.Server.WriteFile(ctx, fmt.Sprintf("g%03d", i), []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var seen []workspace.Progress
	pctx := workspace.WithProgress(ctx, func(p workspace.Progress) { seen = append(seen, p) })
	last := func(op string) (p workspace.Progress) {
		for _, q := range seen {
			if q.Op == op {
				p = q
			}
		}
		return p
	}
	pulled, err := ws.Pull(pctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := last("pull"); p.Entries != pulled.Entries+pulled.Skipped || p.Batches != pulled.Batches || pulled.Batches < 3 {
		t.Errorf("pull: last progress %+v, report %+v", p, pulled)
	}
	seen = nil
	rep, err := ws.Exec(pctx, workspace.ExecSpec{Argv: []string{"echo", "hi"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := last("push"); p.Entries != rep.Pushed.Entries+rep.Pushed.Skipped+rep.Pushed.Deferred || p.Batches != rep.Pushed.Batches || len(rep.Events) != 1 {
		t.Errorf("exec: last push progress %+v, report %+v", p, rep)
	}
	seen = nil
	if _, err := ws.Verify(pctx); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 0 {
		t.Errorf("verify told progress %+v", seen)
	}
}

// A server that answers plain JSON to a request that asked for NDJSON (an
// older one) still gives the report; one whose stream breaks is an error.
func TestProgressFromServersThatDoNotStream(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/workspaces/default/pull":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(workspace.SyncReport{Entries: 7})
		case "/v1/workspaces/default/push":
			w.Header().Set("Content-Type", api.NDJSON)
			json.NewEncoder(w).Encode(api.Frame[struct{}]{Type: api.FrameProgress, Progress: &workspace.Progress{Op: "push", Entries: 1, Batches: 1}})
		case "/v1/workspaces/default/tick":
			w.Header().Set("Content-Type", api.NDJSON)
			json.NewEncoder(w).Encode(api.Frame[struct{}]{Type: api.FrameError, Error: "workspace busy", Errno: "EBUSY"})
		}
	}))
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL, "t")
	if err != nil {
		t.Fatal(err)
	}
	ws := c.Workspace("default")
	n := 0
	ctx := workspace.WithProgress(context.Background(), func(workspace.Progress) { n++ })
	if rep, err := ws.Pull(ctx); err != nil || rep.Entries != 7 {
		t.Errorf("plain answer: %+v, %v", rep, err)
	}
	if _, err := ws.Push(ctx); !errors.Is(err, io.ErrUnexpectedEOF) || n != 1 {
		t.Errorf("a stream that ends without a result: %v after %d progress calls", err, n)
	}
	if _, err := ws.Tick(ctx); !errors.Is(err, workspace.ErrBusy) {
		t.Errorf("an error frame: %v, want ErrBusy", err)
	}
}
