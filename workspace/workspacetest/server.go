package workspacetest

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

// Token is the API token of a test Server.
const Token = "workspacetest-token"

// Server is the HTTP API over a Manager in a temp dir whose workspaces
// sync with Fakes. The default workspace is bound to a made-up endpoint
// (nothing dials it: the fakes stand in).
type Server struct {
	URL     string
	Token   string
	Manager *workspace.Manager
	Remotes *Remotes
	HTTP    *httptest.Server
}

// NewServer starts a Server that t's cleanup stops; run nil is Commands.
func NewServer(t testing.TB, run RunFunc) *Server {
	t.Helper()
	remotes := &Remotes{Dir: t.TempDir(), Run: run}
	t.Cleanup(func() { remotes.Close() })
	hs, m := Serve(t, workspace.Options{DefaultEndpoint: "ws://127.0.0.1:45678/sync", Remote: remotes.Factory}, api.Options{Token: Token})
	return &Server{URL: hs.URL, Token: Token, Manager: m, Remotes: remotes, HTTP: hs}
}

// Serve starts the API (with ao, its Manager set here) over a Manager
// opened with mo in a temp dir, without fsync; t's cleanup closes the
// server, then the Manager.
func Serve(t testing.TB, mo workspace.Options, ao api.Options) (*httptest.Server, *workspace.Manager) {
	t.Helper()
	mo.DataDir, mo.NoSync = t.TempDir(), true
	m, err := workspace.Open(context.Background(), mo)
	if err != nil {
		t.Fatal(err)
	}
	ao.Manager = m
	a, err := api.New(ao)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	a.Configure(hs.Config)
	hs.Start()
	t.Cleanup(func() {
		a.EndStreams() // httptest's Close waits for every request
		hs.Close()
		m.Close()
	})
	return hs, m
}
