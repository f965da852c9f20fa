package api_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// stallEnv is a server allowing one command at a time whose streams give a
// reader 200 ms per write and whose bodies must send within 200 ms.
func stallEnv(t *testing.T) *env {
	t.Helper()
	remotes := &workspacetest.Remotes{Dir: t.TempDir()}
	t.Cleanup(func() { remotes.Close() })
	srv, m := workspacetest.Serve(t,
		workspace.Options{DefaultEndpoint: "ws://127.0.0.1:45678/sync", Remote: remotes.Factory, MaxExecs: 1},
		api.Options{Token: token, StreamWriteTimeout: 200 * time.Millisecond, BodyReadTimeout: 200 * time.Millisecond})
	return &env{srv: srv, m: m, remotes: remotes}
}

// rawConn dials the test server with a small receive buffer, so a reader
// that stops reading stalls the server's writes soon.
func rawConn(t *testing.T, e *env) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	t.Cleanup(func() { c.Close() })
	return c
}

// A foreground exec whose caller stops reading its output is dropped after
// the stream write timeout and its command cancelled, as if the caller had
// hung up: the workspace's only command slot comes free, where it was held
// for as long as the connection stayed open.
func TestAStalledExecReaderFreesItsSlot(t *testing.T) {
	e := stallEnv(t)
	c := rawConn(t, e)
	body := `{"shell":"flood 4096"}`
	fmt.Fprintf(c, "POST /v1/workspaces/default/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", token, len(body), body)
	// The command is running once its first output arrives; then the
	// caller reads no more.
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, b, _ := e.req(t, "POST", "/v1/workspaces/default/exec", strings.NewReader(`{"shell":"echo free"}`))
		if st == http.StatusOK && strings.Contains(string(b), `"exit_code":0`) {
			return
		}
		if st != http.StatusTooManyRequests {
			t.Fatalf("second exec: %d %s", st, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled reader's command still holds the only slot after 20 s (the write timeout is 200 ms)")
		}
		time.Sleep(20 * time.Millisecond) // polling the outcome, not ordering events
	}
}

// A request whose body stops coming fails with 408 ETIMEDOUT after the body
// read timeout, where its handler waited for as long as the connection
// stayed open.
func TestAStalledRequestBodyTimesOut(t *testing.T) {
	e := stallEnv(t)
	for _, req := range []struct{ method, path string }{
		{"POST", "/v1/workspaces/default/fs/mkdir"},
		{"PUT", "/v1/workspaces/default/files/big.bin"},
	} {
		c := rawConn(t, e)
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{\"pa",
			req.method, req.path, token)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s %s with a stalled body: %v (no answer)", req.method, req.path, err)
		}
		var sb strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&sb)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(sb.String(), "ETIMEDOUT") {
			t.Errorf("%s %s with a stalled body: %d %s, want 408 ETIMEDOUT", req.method, req.path, resp.StatusCode, sb.String())
		}
	}
	// Nothing was written by the broken-off upload.
	st, _, _ := e.req(t, "GET", "/v1/workspaces/default/files/big.bin", nil)
	if st != http.StatusNotFound {
		t.Errorf("read of the broken-off upload: %d, want 404", st)
	}
}

// A PUT whose body ends before its Content-Length (the client went away)
// stores nothing: the file keeps what it had. net/http reports such a body
// with io.ErrUnexpectedEOF, which the chunking loop took for the ordinary
// end of a short last chunk, and the half upload replaced the file.
func TestABrokenOffUploadStoresNothing(t *testing.T) {
	e := stallEnv(t)
	st, b, _ := e.req(t, "PUT", "/v1/workspaces/default/files/f", strings.NewReader("the whole file"))
	if st != http.StatusOK {
		t.Fatalf("first write: %d %s", st, b)
	}
	c := rawConn(t, e)
	fmt.Fprintf(c, "PUT /v1/workspaces/default/files/f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\nhalf", token)
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("a PUT cut after 4 of 1000 bytes answered %d", resp.StatusCode)
		}
	}
	st, b, _ = e.req(t, "GET", "/v1/workspaces/default/files/f", nil)
	if st != http.StatusOK || string(b) != "the whole file" {
		t.Errorf("after the broken-off upload: %d %q, want the whole file as it was", st, b)
	}
}
