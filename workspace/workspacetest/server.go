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
	m, err := workspace.Open(context.Background(), workspace.Options{
		DataDir: t.TempDir(), DefaultEndpoint: "ws://127.0.0.1:45678/sync", Remote: remotes.Factory, NoSync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Options{Manager: m, Token: Token})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(a)
	t.Cleanup(func() {
		hs.Close()
		m.Close()
		remotes.Close()
	})
	return &Server{URL: hs.URL, Token: Token, Manager: m, Remotes: remotes, HTTP: hs}
}
