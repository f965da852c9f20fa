package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/workspacetest"
)

const execs = "/v1/workspaces/default/execs"

// startDetached starts spec through POST .../execs and returns its id.
func (e *env) startDetached(t *testing.T, spec string) string {
	t.Helper()
	st, b, _ := e.req(t, "POST", execs, strings.NewReader(spec))
	wantStatus(t, "start "+spec, st, http.StatusCreated, b)
	var rep api.ExecStartResponse
	if err := json.Unmarshal(b, &rep); err != nil || rep.ExecID == "" || rep.State != workspace.ExecStateRunning || !rep.Detached {
		t.Fatalf("start answer %s (%v): want a running detached exec with an id", b, err)
	}
	return rep.ExecID
}

// outputFrames reads an output stream's frames.
func outputFrames(t *testing.T, b []byte) []api.ExecOutputFrame {
	t.Helper()
	var out []api.ExecOutputFrame
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var f api.ExecOutputFrame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", sc.Text(), err)
		}
		out = append(out, f)
	}
	return out
}

// The routes of a detached exec: start answers its id at once, output
// replays (from 0 or an offset) and follows to the result, wait answers
// once the pull after it is done, get and the list describe it.
func TestDetachedExecRoutes(t *testing.T) {
	e := newEnv(t, api.Options{})
	id := e.startDetached(t, `{"shell":"echo hello ; sleep 0.2 ; write /x.txt from-detached ; echo world ; exit 5"}`)

	st, b, hdr := e.req(t, "GET", execs+"/"+id+"/output?from=0", nil)
	wantStatus(t, "output", st, 200, b)
	if ct := hdr.Get("Content-Type"); ct != api.NDJSON {
		t.Errorf("output content type %q", ct)
	}
	frames := outputFrames(t, b)
	var text strings.Builder
	next := int64(0)
	for _, f := range frames[:len(frames)-1] {
		if f.Type != api.FrameStdout || f.Offset != next {
			t.Errorf("frame %+v, want stdout at offset %d", f, next)
		}
		next += int64(len(f.Data))
		text.Write(f.Data)
	}
	last := frames[len(frames)-1]
	if text.String() != "hello\nworld\n" || last.Type != api.FrameResult || last.Result == nil || last.Result.ExitCode != 5 || last.Result.OutputBytes != 12 {
		t.Fatalf("output %q, last frame %+v: want hello, world and exit 5 after 12 bytes", text.String(), last)
	}
	st, b, _ = e.req(t, "GET", execs+"/"+id+"/output?from=6", nil)
	wantStatus(t, "output from 6", st, 200, b)
	if f := outputFrames(t, b); len(f) != 2 || string(f[0].Data) != "world\n" || f[0].Offset != 6 {
		t.Errorf("replay from 6: %+v", f)
	}
	st, b, _ = e.req(t, "GET", execs+"/"+id+"/output?from=end", nil)
	if f := outputFrames(t, b); st != 200 || len(f) != 1 || f[0].Type != api.FrameResult {
		t.Errorf("output from the end: %d %s, want the result frame alone", st, b)
	}

	st, b, _ = e.req(t, "GET", execs+"/"+id+"/wait", nil)
	wantStatus(t, "wait", st, 200, b)
	var info workspace.ExecInfo
	if err := json.Unmarshal(b, &info); err != nil || info.State != workspace.ExecStateExited || info.Result.ExitCode != 5 || info.Sync != workspace.SyncComplete {
		t.Fatalf("wait answered %s: want exited 5, its pull complete", b)
	}
	st, b, _ = e.req(t, "GET", "/v1/workspaces/default/files/x.txt", nil)
	if st != 200 || string(b) != "from-detached" {
		t.Errorf("x.txt after wait: %d %q", st, b)
	}
	st, b, _ = e.req(t, "GET", execs+"/"+id, nil)
	if err := json.Unmarshal(b, &info); st != 200 || err != nil || info.ExecID != id || info.OutputBytes != 12 || !info.Detached {
		t.Errorf("get: %d %s", st, b)
	}
	st, b, _ = e.req(t, "GET", execs, nil)
	var list workspace.ExecList
	if err := json.Unmarshal(b, &list); st != 200 || err != nil || len(list.Execs) != 1 || list.Execs[0].ExecID != id {
		t.Errorf("list: %d %s", st, b)
	}
}

// Kill sends the signal its body names (TERM by default); the exec ends
// by it.
func TestKillRoute(t *testing.T) {
	e := newEnv(t, api.Options{})
	id := e.startDetached(t, `{"shell":"sleep 60"}`)
	st, b, _ := e.req(t, "POST", execs+"/"+id+"/kill", strings.NewReader(`{"signal":"SIGINT"}`))
	wantStatus(t, "kill", st, 200, b)
	st, b, _ = e.req(t, "GET", execs+"/"+id+"/wait", nil)
	var info workspace.ExecInfo
	if err := json.Unmarshal(b, &info); st != 200 || err != nil || info.State != workspace.ExecStateKilled || info.Result.Signal != 2 {
		t.Fatalf("wait after kill: %d %s, want killed by signal 2", st, b)
	}
}

// Ids, offsets and signals are checked at the boundary; an unknown id is
// 404, one of a replaced container 410.
func TestExecRoutesRefuseBadInput(t *testing.T) {
	e := newEnv(t, api.Options{})
	id := e.startDetached(t, `{"shell":"echo hi"}`)
	e.req(t, "GET", execs+"/"+id+"/wait", nil)
	rt := workspace.ExecRuntimeID(id)
	for _, c := range []struct {
		method, path, body string
		status             int
		errno              string
	}{
		{"GET", execs + "/not-an-id", "", 400, "EINVAL"},
		{"GET", execs + "/rt:0/output", "", 400, "EINVAL"},
		{"GET", execs + "/" + strings.Repeat("r", 200) + ":1/wait", "", 400, "EINVAL"},
		{"GET", execs + "/" + id + "/output?from=-1", "", 400, "EINVAL"},
		{"GET", execs + "/" + id + "/output?from=abc", "", 400, "EINVAL"},
		{"GET", execs + "/" + id + "/output?from=99999999999999999999", "", 400, "EINVAL"},
		{"GET", execs + "/" + id + "/output?from=" + fmt.Sprint(int64(1)<<62+1), "", 400, "EINVAL"},
		{"GET", execs + "/" + id + "/output?from=1000000", "", 400, "EINVAL"}, // past the end
		{"POST", execs + "/" + id + "/kill", `{"signal":"NOPE"}`, 400, "EINVAL"},
		{"POST", execs + "/" + id + "/kill", `{"signal":"0"}`, 400, "EINVAL"},
		{"POST", execs + "/" + id + "/kill", `{"sig":"TERM"}`, 400, "EINVAL"},
		{"POST", execs, `{"shell":"echo","log_cap":-1}`, 400, "EINVAL"},
		{"POST", execs, `{"shell":"echo","log_cap":16777216}`, 400, "EINVAL"}, // above the container's cap
		{"POST", execs, `{}`, 400, "EINVAL"},
		{"GET", execs + "/" + rt + ":999", "", 404, "ENOENT"},
		{"GET", execs + "/" + rt + ":999/output", "", 404, "ENOENT"},
		{"GET", execs + "/other-runtime:1/wait", "", 410, "EEXEC_LOST"},
		{"POST", execs + "/other-runtime:1/kill", "", 410, "EEXEC_LOST"},
	} {
		st, b, _ := e.req(t, c.method, c.path, strings.NewReader(c.body))
		if st != c.status || errnoOf(t, b) != c.errno {
			t.Errorf("%s %s %s: %d %s, want %d %s", c.method, c.path, c.body, st, b, c.status, c.errno)
		}
	}
}

// Commands beyond the workspace's limit are refused with 429 EEXEC_BUSY
// and Retry-After, foreground and detached alike.
func TestExecBusyRoute(t *testing.T) {
	remotes := &workspacetest.Remotes{Dir: t.TempDir()}
	t.Cleanup(func() { remotes.Close() })
	srv, m := workspacetest.Serve(t, workspace.Options{DefaultEndpoint: "ws://127.0.0.1:45678/sync", Remote: remotes.Factory, MaxExecs: 1}, api.Options{Token: token})
	e := &env{srv: srv, m: m, remotes: remotes}
	e.startDetached(t, `{"shell":"sleep 60"}`)
	for _, path := range []string{execs, "/v1/workspaces/default/exec"} {
		st, b, hdr := e.req(t, "POST", path, strings.NewReader(`{"shell":"echo hi"}`))
		if st != 429 || errnoOf(t, b) != "EEXEC_BUSY" || hdr.Get("Retry-After") == "" {
			t.Errorf("POST %s at the limit: %d %s (Retry-After %q), want 429 EEXEC_BUSY", path, st, b, hdr.Get("Retry-After"))
		}
	}
}
