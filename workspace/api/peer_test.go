package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/client"
)

// peerEnv is realEnv with its default workspace on the computerd at
// endpoint, with the computerd token cdToken, and a client for it.
func peerEnv(t *testing.T, endpoint, cdToken string) (*env, *client.Workspace) {
	t.Helper()
	e := realEnv(t, workspace.Options{DefaultEndpoint: endpoint, DefaultToken: cdToken})
	c, err := client.New(e.srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return e, c.Workspace("default")
}

// answer decodes an error answer.
func answer(t *testing.T, b []byte) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	return e
}

// computerd refusing the server's token is computerd's failure, not the
// API caller's: 502 EPEER_AUTH naming computerd, never the 401 EAUTH that
// tells the caller their own token is wrong.
func TestPeerRefusingTheServersTokenIsNot401(t *testing.T) {
	d := computertest.Start(t, computer.Config{Token: "computerd-token"})
	e, ws := peerEnv(t, d.SyncURL(), "another-token")

	for _, route := range []string{"pull", "verify"} {
		st, b, _ := e.req(t, "POST", "/v1/workspaces/default/"+route, nil)
		wantStatus(t, route, st, 502, b)
		if a := answer(t, b); a.Errno != "EPEER_AUTH" || !strings.Contains(a.Error, "computerd failed: it refused the server's token") {
			t.Errorf("%s: %+v, want EPEER_AUTH with a message naming computerd", route, a)
		}
	}
	// A push (and an exec's) first owes the pull that failed: refused,
	// naming the pull's failure.
	st, b, _ := e.req(t, "POST", "/v1/workspaces/default/exec", strings.NewReader(`{"argv":["true"]}`))
	wantStatus(t, "exec", st, 409, b)
	if a := answer(t, b); a.Errno != "EPENDING" || !strings.Contains(a.Error, "computerd failed: it refused the server's token") {
		t.Errorf("exec: %+v, want EPENDING naming computerd's refusal", a)
	}

	_, err := ws.Pull(context.Background())
	if !errors.Is(err, workspace.ErrPeerAuth) || !errors.Is(err, workspace.ErrPeer) || errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("pull through the client: %v, want workspace.ErrPeerAuth and not client.ErrUnauthorized", err)
	}
}

// A computerd that goes away is unavailable (503 EPEER_UNAVAILABLE, the
// next call dials again), not the manager's ErrClosed.
func TestPeerGoneIsUnavailableNotClosed(t *testing.T) {
	const cdToken = "computerd-token"
	d := computertest.Start(t, computer.Config{Token: cdToken})
	p := newProxy(t, d.Addr())
	e, ws := peerEnv(t, "ws://"+p.addr()+"/sync", cdToken)

	st, b, _ := e.req(t, "POST", "/v1/workspaces/default/push", nil)
	wantStatus(t, "push through the proxy", st, 200, b)
	p.cut()
	for _, route := range []string{"pull", "verify"} {
		st, b, _ := e.req(t, "POST", "/v1/workspaces/default/"+route, nil)
		wantStatus(t, route+" after the cut", st, 503, b)
		if a := answer(t, b); a.Errno != "EPEER_UNAVAILABLE" || !strings.Contains(a.Error, "computerd") {
			t.Errorf("%s after the cut: %+v, want EPEER_UNAVAILABLE with a message naming computerd", route, a)
		}
	}
	_, err := ws.Pull(context.Background())
	if !errors.Is(err, workspace.ErrPeerUnavailable) || errors.Is(err, workspace.ErrClosed) {
		t.Errorf("pull through the client: %v, want workspace.ErrPeerUnavailable and not workspace.ErrClosed", err)
	}
}

// proxy forwards TCP connections to a computerd until cut, which closes
// its listener and every connection it carries.
type proxy struct {
	ln net.Listener

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(out, in); out.Close() })
			p.wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
