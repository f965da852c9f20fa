package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// streamed sends an authenticated request that accepts NDJSON and decodes
// the frames of its answer, checking its type.
func (e *env) streamed(t *testing.T, method, path, body string) []api.Frame[json.RawMessage] {
	t.Helper()
	st, b, hdr := e.req(t, method, path, strings.NewReader(body), "Accept", api.NDJSON)
	wantStatus(t, path, st, 200, b)
	if got := hdr.Get("Content-Type"); got != api.NDJSON {
		t.Fatalf("%s answered %q, want %s: %s", path, got, api.NDJSON, b)
	}
	var out []api.Frame[json.RawMessage]
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f api.Frame[json.RawMessage]
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("%s: frame %q: %v", path, sc.Bytes(), err)
		}
		out = append(out, f)
	}
	if len(out) == 0 || out[len(out)-1].Type != api.FrameResult {
		t.Fatalf("%s: frames %+v, want a result last", path, out)
	}
	return out
}

// progressOf is the progress frames' totals, in order, and the result.
func progressOf(t *testing.T, fs []api.Frame[json.RawMessage], result any) []workspace.Progress {
	t.Helper()
	var ps []workspace.Progress
	for _, f := range fs[:len(fs)-1] {
		if f.Type == api.FrameProgress {
			ps = append(ps, *f.Progress)
		}
	}
	if err := json.Unmarshal(*fs[len(fs)-1].Result, result); err != nil {
		t.Fatal(err)
	}
	return ps
}

// lastOf is the last progress of op, checking that op's totals only grew.
func lastOf(t *testing.T, ps []workspace.Progress, op string) workspace.Progress {
	t.Helper()
	var last workspace.Progress
	for _, p := range ps {
		if p.Op != op {
			continue
		}
		if p.Entries < last.Entries || p.Batches <= last.Batches || p.Bytes < last.Bytes {
			t.Errorf("%s progress went from %+v to %+v", op, last, p)
		}
		last = p
	}
	return last
}

func addsUp(t *testing.T, what string, p workspace.Progress, rep workspace.SyncReport) {
	t.Helper()
	if p.Entries != rep.Entries+rep.Skipped+rep.Deferred || p.Objects != rep.Objects || p.Bytes != rep.Bytes || p.Batches != rep.Batches || rep.Batches < 2 {
		t.Errorf("%s: last progress %+v, report %+v", what, p, rep)
	}
}

func writeMany(t *testing.T, s *vfs.Store, dir string, n int) {
	t.Helper()
	ctx := context.Background()
	if err := s.MkdirPath(ctx, dir, 0o755, true); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.WriteFile(ctx, fmt.Sprintf("%s/f%04d", dir, i), fmt.Appendf(nil, "%s %d", dir, i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSyncRoutesStreamProgress(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	st, b, _ := e.req(t, "GET", ws+"/status", nil) // builds the fake
	wantStatus(t, "status", st, 200, b)
	fake := e.remotes.Fake("default")

	writeMany(t, fake.Container, "in", 700)
	var pulled workspace.SyncReport
	ps := progressOf(t, e.streamed(t, "POST", ws+"/pull", ""), &pulled)
	addsUp(t, "pull", lastOf(t, ps, "pull"), pulled)

	writeMany(t, fake.Server, "out", 600)
	var pushed workspace.SyncReport
	ps = progressOf(t, e.streamed(t, "POST", ws+"/push", ""), &pushed)
	addsUp(t, "push", lastOf(t, ps, "push"), pushed)

	// Without the Accept header the answer is the report, as JSON.
	writeMany(t, fake.Container, "plain", 300)
	st, b, hdr := e.req(t, "POST", ws+"/pull", nil)
	wantStatus(t, "plain pull", st, 200, b)
	var rep workspace.SyncReport
	if err := json.Unmarshal(b, &rep); err != nil || rep.Entries != 301 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Errorf("plain pull: %s (%s), %v", b, hdr.Get("Content-Type"), err)
	}

	// A tick streams its pull's and its push's progress.
	writeMany(t, fake.Container, "tick-in", 300)
	writeMany(t, fake.Server, "tick-out", 300)
	var tick workspace.TickReport
	ps = progressOf(t, e.streamed(t, "POST", "/v1/workspaces/default/tick", ""), &tick)
	addsUp(t, "tick pull", lastOf(t, ps, "pull"), tick.Pulled)
	addsUp(t, "tick push", lastOf(t, ps, "push"), tick.Pushed)

	// A plain verify moves nothing: its result alone.
	var verdict workspace.VerifyReport
	if fs := e.streamed(t, "POST", ws+"/verify", ""); len(fs) != 1 {
		t.Errorf("verify frames %+v, want the result alone", fs)
	} else if progressOf(t, fs, &verdict); !verdict.Converged {
		t.Errorf("verify after a tick: %+v", verdict)
	}
}

// An exec that asks for NDJSON gets progress frames for its push before
// the command's output and for its pull after; one that does not, none.
func TestExecStreamsProgressWhenAsked(t *testing.T) {
	// gen writes 400 files in the container, as a build would.
	gen := func(ctx context.Context, c *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
		if spec.Argv[0] == "gen" {
			writeMany(t, c, spec.Argv[1], 400)
		}
		return workspacetest.Commands(ctx, c, workspace.ExecSpec{Argv: []string{"echo", "built"}}, out)
	}
	remotes := &workspacetest.Remotes{Dir: t.TempDir(), Run: gen}
	t.Cleanup(func() { remotes.Close() })
	srv, _ := workspacetest.Serve(t, workspace.Options{DefaultEndpoint: "ws://127.0.0.1:45678/sync", Remote: remotes.Factory}, api.Options{Token: token})
	e := &env{srv: srv, remotes: remotes}
	const ws = "/v1/workspaces/default"
	st, b, _ := e.req(t, "POST", ws+"/pull", nil) // the first pull, which a push would owe
	wantStatus(t, "pull", st, 200, b)
	writeMany(t, remotes.Fake("default").Server, "src", 400)
	fs := e.streamed(t, "POST", ws+"/exec", `{"argv":["gen","out"]}`)
	var rep workspace.ExecReport
	ps := progressOf(t, fs, &rep)
	var order []string
	for _, f := range fs {
		if len(order) == 0 || order[len(order)-1] != f.Type {
			order = append(order, f.Type)
		}
	}
	if want := []string{api.FrameProgress, api.FrameStdout, api.FrameProgress, api.FrameResult}; strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("frame order %q, want %q", order, want)
	}
	addsUp(t, "exec push", lastOf(t, ps, "push"), rep.Pushed)
	addsUp(t, "exec pull", lastOf(t, ps, "pull"), rep.Pulled)

	st, b, _ = e.req(t, "POST", ws+"/exec", strings.NewReader(`{"argv":["gen","more"]}`))
	wantStatus(t, "exec", st, 200, b)
	if bytes.Contains(b, []byte(`"type":"progress"`)) || !bytes.Contains(b, []byte(`"pulled":{"entries":401`)) {
		t.Errorf("an exec that did not ask for progress: %s", b)
	}
}

// A repair streams the batches it moves; an error before any frame is a
// plain JSON error even when the request asked for NDJSON.
func TestRepairStreamsProgressAndErrorsStayPlain(t *testing.T) {
	e := newEnv(t, api.Options{})
	const ws = "/v1/workspaces/default"
	st, b, _ := e.req(t, "POST", ws+"/pull", nil)
	wantStatus(t, "pull", st, 200, b)
	fake := e.remotes.Fake("default")
	writeMany(t, fake.Container, "drift", 300) // written behind the sync's back, as if the feed lost it
	var verdict workspace.VerifyReport
	ps := progressOf(t, e.streamed(t, "POST", ws+"/verify?repair=1", ""), &verdict)
	if len(ps) == 0 || !verdict.Converged {
		t.Errorf("repair: progress %+v, verdict %+v; want progress and a converged verdict", ps, verdict)
	}

	fake.FailPush(workspace.ErrBusy)
	st, b, hdr := e.req(t, "POST", ws+"/push", nil, "Accept", api.NDJSON)
	if st != 429 || hdr.Get("Content-Type") == api.NDJSON || errnoOf(t, b) != "EBUSY" {
		t.Errorf("failed push: %d %s (%s), want a JSON 429 EBUSY", st, b, hdr.Get("Content-Type"))
	}
}
