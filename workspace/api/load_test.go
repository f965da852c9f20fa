package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

// loadEnv is the API over a Manager whose default workspace syncs with a
// real computerd (real FUSE mount, real sync wire on loopback).
type loadEnv struct {
	*env
	d *computer.Daemon
}

func newLoadEnv(t *testing.T) *loadEnv {
	t.Helper()
	const cdToken = "load-computerd-token"
	d := computertest.Start(t, computer.Config{Token: cdToken})
	e := realEnv(t, workspace.Options{DefaultEndpoint: d.SyncURL(), DefaultToken: cdToken})
	return &loadEnv{env: e, d: d}
}

// outcome of one call under load.
type outcome struct {
	kind   string
	status int
	errno  string
	msg    string
}

// call sends one request and classifies the answer. An exec's NDJSON
// stream counts as ok only when it ends in a result frame.
func (e *loadEnv) call(ctx context.Context, hc *http.Client, kind, method, path, body string) outcome {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, _ := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(r)
	if err != nil {
		return outcome{kind: kind, msg: "transport: " + err.Error()}
	}
	defer resp.Body.Close()
	o := outcome{kind: kind, status: resp.StatusCode}
	if resp.StatusCode/100 != 2 {
		var ae api.Error
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &ae) == nil {
			o.errno, o.msg = ae.Errno, ae.Error
		} else {
			o.msg = string(b)
		}
		return o
	}
	if kind != "exec" {
		io.Copy(io.Discard, resp.Body)
		return o
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var last api.ExecFrame
	for sc.Scan() {
		last = api.ExecFrame{}
		json.Unmarshal(sc.Bytes(), &last)
	}
	switch last.Type {
	case api.FrameResult:
		if last.Result.Sync != workspace.SyncComplete {
			o.errno, o.msg = "EPENDING", "exec ended with sync "+last.Result.Sync+": "+last.Result.SyncError
		}
	case api.FrameError:
		o.status, o.errno, o.msg = 0, last.Errno, "error frame: "+last.Error
	default:
		o.status, o.msg = 0, "exec stream cut"
	}
	return o
}

// Sessions survive load (issue 9): 1,000 concurrent API calls on one
// workspace (reads, writes, status, execs) through the real HTTP server
// and a real computerd all complete or get a clear busy error (429 with an
// errno and a message), and afterwards the session still works: an exec
// and a pull succeed and every acknowledged write reaches the container.
func TestThousandConcurrentCallsOneWorkspace(t *testing.T) {
	e := newLoadEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 8 {
		st, b, _ := e.req(t, "PUT", fmt.Sprintf("/v1/workspaces/default/files/r%d", i), strings.NewReader(strings.Repeat("r", 1000+i)))
		wantStatus(t, "seed write", st, 200, b)
	}
	st, b, _ := e.req(t, "POST", "/v1/workspaces/default/push", nil)
	wantStatus(t, "seed push", st, 200, b)

	n := 1000
	if os.Getenv("WSYNC_LONG") == "1" {
		n = 4000
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}}
	t.Cleanup(hc.CloseIdleConnections)
	start := time.Now()
	out := make([]outcome, n)
	var wg sync.WaitGroup
	var gate sync.WaitGroup
	gate.Add(1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gate.Wait()
			p := "/v1/workspaces/default"
			if i%10 == 9 {
				// A caller that gives up: its calls on the session are
				// abandoned while computerd still works on them.
				actx, cancel := context.WithTimeout(ctx, time.Duration(i%7)*time.Millisecond)
				defer cancel()
				path, method, body := p+"/status", "GET", ""
				if i%20 == 19 {
					path, method, body = p+"/exec", "POST", `{"argv":["sleep","0.05"]}`
				}
				e.call(actx, hc, "abandoned", method, path, body)
				out[i] = outcome{kind: "abandoned"}
				return
			}
			switch i % 4 {
			case 0:
				out[i] = e.call(ctx, hc, "read", "GET", fmt.Sprintf("%s/files/r%d", p, i%8), "")
			case 1:
				out[i] = e.call(ctx, hc, "write", "PUT", fmt.Sprintf("%s/files/w%d", p, i), fmt.Sprintf("write %d", i))
			case 2:
				out[i] = e.call(ctx, hc, "status", "GET", p+"/status", "")
			case 3:
				out[i] = e.call(ctx, hc, "exec", "POST", p+"/exec", `{"argv":["cat","r1"]}`)
			}
		}()
	}
	gate.Done()
	wg.Wait()
	elapsed := time.Since(start)

	count := map[string]int{}
	var bad []outcome
	for _, o := range out {
		switch {
		case o.kind == "abandoned":
		case o.status/100 == 2 && o.errno == "":
			count[o.kind+" ok"]++
		case o.status == http.StatusTooManyRequests && (o.errno == "EBUSY" || o.errno == "EEXEC_BUSY") && o.msg != "":
			count[o.kind+" busy"]++
		default:
			bad = append(bad, o)
		}
	}
	t.Logf("%d calls in %v: %v", n, elapsed, count)
	for i, o := range bad {
		if i == 10 {
			t.Errorf("... and %d more", len(bad)-10)
			break
		}
		t.Errorf("%s: status %d errno %q: %s", o.kind, o.status, o.errno, o.msg)
	}
	for _, k := range []string{"read ok", "write ok", "status ok", "exec ok"} {
		if count[k] == 0 {
			t.Errorf("no %s: load shed everything of a kind", k)
		}
	}

	// The session stayed up: an exec and a pull work, and every write the
	// API acknowledged reaches the container.
	st, b, _ = e.req(t, "POST", "/v1/workspaces/default/exec", strings.NewReader(`{"shell":"echo after > after.txt"}`))
	wantStatus(t, "exec after the load", st, 200, b)
	if fr := frames(t, b); len(fr) == 0 || fr[len(fr)-1].Type != api.FrameResult || fr[len(fr)-1].Result.ExitCode != 0 ||
		fr[len(fr)-1].Result.Sync != workspace.SyncComplete {
		t.Fatalf("exec after the load: %s", b)
	}
	st, b, _ = e.req(t, "POST", "/v1/workspaces/default/pull", nil)
	wantStatus(t, "pull after the load", st, 200, b)
	st, b, _ = e.req(t, "GET", "/v1/workspaces/default/files/after.txt", nil)
	if st != 200 || string(b) != "after\n" {
		t.Fatalf("after.txt on the server: %d %q", st, b)
	}
	for i, o := range out {
		if o.kind != "write" || o.status != 200 {
			continue
		}
		got, err := os.ReadFile(filepath.Join(e.d.MountDir(), fmt.Sprintf("w%d", i)))
		if err != nil || string(got) != fmt.Sprintf("write %d", i) {
			t.Fatalf("acknowledged write w%d in the container: %q %v", i, got, err)
		}
	}
}
