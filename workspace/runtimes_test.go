package workspace_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// attach attaches runtime name to the default workspace with a fake
// computerd (the harness's remotes) and a token.
func (h *harness) attach(t *testing.T, name string) *workspace.Workspace {
	t.Helper()
	w := h.ws(t, workspace.DefaultName)
	if _, err := w.Attach(context.Background(), workspace.AttachOptions{Name: name, Endpoint: "ws://127.0.0.1:45679/sync", ComputerdToken: "tok-" + name}); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestRuntimePeerAndSide(t *testing.T) {
	for _, c := range []struct {
		rt         workspace.Runtime
		peer, side string
	}{
		{workspace.Runtime{}, "computerd", "container"},
		{workspace.Runtime{Name: workspace.DefaultRuntime}, "computerd", "container"},
		{workspace.Runtime{Name: "gpu"}, "computerd@gpu", "gpu"},
	} {
		if got, want := c.rt.Peer(), c.peer; got != want {
			t.Errorf("%q: Peer() = %q, want %q", c.rt.Name, got, want)
		}
		if got, want := c.rt.Side(), c.side; got != want {
			t.Errorf("%q: Side() = %q, want %q", c.rt.Name, got, want)
		}
	}
}

func TestAttachRefusals(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	w := h.attach(t, "b")
	m, err := workspace.Open(ctx, workspace.Options{DataDir: t.TempDir(), NoSync: true, AllowEndpoints: []string{"10.0.0.*:45678"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	strict, err := m.Workspace(workspace.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	ok := "ws://10.0.0.7:45678/sync"
	for _, c := range []struct {
		name string
		w    *workspace.Workspace
		o    workspace.AttachOptions
		want error
		says string
	}{
		{"bad name", w, workspace.AttachOptions{Name: "Bad!", Endpoint: ok}, workspace.ErrBadRuntime, "[a-z0-9]"},
		{"empty name", w, workspace.AttachOptions{Endpoint: ok}, workspace.ErrBadRuntime, "want"},
		{"reserved server", w, workspace.AttachOptions{Name: "server", Endpoint: ok}, workspace.ErrBadRuntime, "reserved"},
		{"reserved container", w, workspace.AttachOptions{Name: "container", Endpoint: ok}, workspace.ErrBadRuntime, "reserved"},
		{"default", w, workspace.AttachOptions{Name: "default", Endpoint: ok}, workspace.ErrBadRuntime, "primary"},
		{"duplicate", w, workspace.AttachOptions{Name: "b", Endpoint: ok}, workspace.ErrRuntimeExists, `"b"`},
		{"no endpoint", w, workspace.AttachOptions{Name: "c"}, vfs.ErrInvalid, "no endpoint"},
		{"bad endpoint", w, workspace.AttachOptions{Name: "c", Endpoint: "http://10.0.0.7/"}, vfs.ErrInvalid, "ws://"},
		{"disallowed endpoint", strict, workspace.AttachOptions{Name: "c", Endpoint: "ws://127.0.0.1:45678/sync"}, workspace.ErrEndpointNotAllowed, "--allow-endpoint"},
		{"blank token", w, workspace.AttachOptions{Name: "c", Endpoint: ok, ComputerdToken: "  "}, vfs.ErrInvalid, "empty"},
		{"token with a space", w, workspace.AttachOptions{Name: "c", Endpoint: ok, ComputerdToken: "a b"}, vfs.ErrInvalid, "white space"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.w.Attach(ctx, c.o)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Attach(%+v) = %v, want %v saying %q", c.o, err, c.want, c.says)
			}
		})
	}
	if _, err := strict.Attach(ctx, workspace.AttachOptions{Name: "c", Endpoint: ok}); err != nil {
		t.Fatalf("an allowed endpoint: %v", err)
	}
	if got, want := len(w.Runtimes()), 2; got != want {
		t.Fatalf("%d runtimes after the refusals, want %d", got, want)
	}
	if err := w.Detach(ctx, workspace.DefaultRuntime); !errors.Is(err, workspace.ErrBadRuntime) {
		t.Fatalf("detach default: %v", err)
	}
	if _, err := w.On("nope").Push(ctx); !errors.Is(err, workspace.ErrNoRuntime) || !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("push to an unknown runtime: %v, want ErrNoRuntime", err)
	}
	if _, err := w.On("Bad!").Push(ctx); !errors.Is(err, workspace.ErrBadRuntime) {
		t.Fatalf("push to a bad runtime name: %v, want ErrBadRuntime", err)
	}
	if err := w.Detach(ctx, "nope"); !errors.Is(err, workspace.ErrNoRuntime) {
		t.Fatalf("detach unknown: %v", err)
	}
	if code, _ := workspace.APIError(workspace.ErrNoRuntime); code != "ENORUNTIME" {
		t.Fatalf("ErrNoRuntime answers %s", code)
	}
}

// A write in one runtime's container reaches another's through the server:
// pulled from the first, pushed to the second. A tick pulls from every
// runtime before it pushes to any, so writes in both meet in one tick.
func TestRuntimesSyncThroughTheServer(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	w := h.attach(t, "b")
	if _, err := w.Exec(ctx, workspace.ExecSpec{Argv: []string{"write", "/from-a", "hello"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.On("b").Push(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := h.remotes.Fake("default"), h.remotes.FakeOf("default", "b")
	if got := readStore(t, b.Container, "from-a"); got != "hello" {
		t.Fatalf("b holds %q, want hello", got)
	}
	writeStore(t, a.Container, "left/x", "from a")
	writeStore(t, b.Container, "right/y", "from b")
	rep, err := w.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*vfs.Store{a.Container, b.Container} {
		if got := readStore(t, c, "left/x") + "|" + readStore(t, c, "right/y"); got != "from a|from b" {
			t.Fatalf("after one tick a container holds %q", got)
		}
	}
	if got := len(rep.Runtimes); got != 2 || rep.Runtimes[0].Runtime != "default" || rep.Runtimes[1].Runtime != "b" {
		t.Fatalf("tick report runtimes %+v, want default then b", rep.Runtimes)
	}
	if rep.Pulled.Entries == 0 || rep.Pushed.Entries == 0 {
		t.Fatalf("tick report's top level is not the default runtime's: %+v", rep)
	}
	// Each runtime is its own peer of the server's store.
	for _, peer := range []string{"computerd", "computerd@b"} {
		wm, err := a.Server.Watermarks(ctx, peer)
		if err != nil || wm.Push.Rev == 0 {
			t.Fatalf("server watermarks for %s: %+v %v", peer, wm, err)
		}
	}
	st, err := w.On("b").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Runtime != "b" || st.Remote == nil || len(st.Runtimes) != 2 || st.Runtimes[1].Peer != "computerd@b" || st.Runtimes[1].Side != "b" || st.Runtimes[0].Side != "container" {
		t.Fatalf("status of b: %+v", st)
	}
}

func TestDetachStopsSyncing(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	w := h.attach(t, "b")
	if _, err := w.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	b := h.remotes.FakeOf("default", "b")
	if err := w.Detach(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.data, "default", "runtimes", "b.token")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("token after detach: %v", err)
	}
	calls := len(b.Calls())
	if _, err := w.Exec(ctx, workspace.ExecSpec{Argv: []string{"write", "/after", "x"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(b.Calls()); got != calls {
		t.Fatalf("a detached runtime was called: %v", b.Calls()[calls:])
	}
	if _, err := b.Container.Stat(ctx, "after"); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("a detached runtime got a write: %v", err)
	}
	if _, err := w.On("b").Pull(ctx); !errors.Is(err, workspace.ErrNoRuntime) {
		t.Fatalf("pull from a detached runtime: %v", err)
	}
	if got := len(w.Runtimes()); got != 1 {
		t.Fatalf("%d runtimes after detach", got)
	}
}

// The registry keeps attached runtimes and their pending pulls across a
// restart, and never a token; a version 2 registry's single pending pull
// is the default runtime's.
func TestRuntimeRegistryRoundTrip(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	w := h.attach(t, "b")
	if _, err := w.On("b").Pull(ctx); err != nil {
		t.Fatal(err)
	}
	h.remotes.FakeOf("default", "b").FailPull(errors.New("stream reset"))
	if _, err := w.On("b").Pull(ctx); err == nil {
		t.Fatal("the injected pull failure did not fail")
	}
	reg, err := os.ReadFile(filepath.Join(h.data, "workspaces.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(reg), "tok-b") {
		t.Fatalf("the registry holds a token:\n%s", reg)
	}
	tok := filepath.Join(h.data, "default", "runtimes", "b.token")
	if fi, err := os.Stat(tok); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	h.m.Close()
	m := h.open(t)
	w2, err := m.Workspace(workspace.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	rts := w2.Runtimes()
	if len(rts) != 2 || rts[0].Name != "default" || rts[1].Name != "b" || rts[1].Endpoint != "ws://127.0.0.1:45679/sync" || !rts[1].HasToken {
		t.Fatalf("runtimes after a restart: %+v", rts)
	}
	if got, err := rts[1].Token(); got != "tok-b" || err != nil {
		t.Fatalf("b's token after a restart: %q %v", got, err)
	}
	st, err := w2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != nil || st.Runtimes[1].Pending == nil || !strings.Contains(st.Runtimes[1].Pending.Error, "stream reset") {
		t.Fatalf("pending pulls after a restart: default %+v, b %+v", st.Pending, st.Runtimes[1].Pending)
	}
	if info := w2.Info(); len(info.Runtimes) != 1 || info.Runtimes[0].Name != "b" {
		t.Fatalf("info runtimes: %+v", info.Runtimes)
	}
	m.Close()

	// A version 2 registry: one pending pull, the default runtime's.
	data := t.TempDir()
	v2 := `{"version":2,"workspaces":[{"name":"default","ignore":null,"created":"2026-12-01T00:00:00Z","pending":{"exec_id":"r:1","runtime_id":"r","error":"lost","since":"2026-12-01T00:00:00Z"}}]}`
	if err := os.WriteFile(filepath.Join(data, "workspaces.json"), []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err = workspace.Open(ctx, workspace.Options{DataDir: data, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w3, _ := m.Workspace(workspace.DefaultName)
	if st, err := w3.Status(ctx); err != nil || st.Pending == nil || st.Pending.ExecID != "r:1" {
		t.Fatalf("a version 2 pending pull: %+v %v", st.Pending, err)
	}
}

func writeStore(t *testing.T, s *vfs.Store, p, data string) {
	t.Helper()
	ctx := context.Background()
	if dir := filepath.Dir(p); dir != "." {
		if err := s.MkdirPath(ctx, dir, 0o755, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.WriteFile(ctx, p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readStore(t *testing.T, s *vfs.Store, p string) string {
	t.Helper()
	b, err := s.ReadFile(context.Background(), p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

// One runtime whose remote cannot be built fails alone: a tick still syncs
// the others and names the broken one.
func TestTickSyncsTheRuntimesThatWork(t *testing.T) {
	ctx := context.Background()
	remotes := &workspacetest.Remotes{Dir: t.TempDir()}
	t.Cleanup(func() { remotes.Close() })
	m, err := workspace.Open(ctx, workspace.Options{DataDir: t.TempDir(), DefaultEndpoint: "ws://127.0.0.1:45678/sync", NoSync: true,
		Remote: func(ws *workspace.Workspace, rt workspace.Runtime) (workspace.Remote, error) {
			if rt.Name == "broken" {
				return nil, errors.New("its token file is unreadable")
			}
			return remotes.Factory(ws, rt)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	w, err := m.Workspace(workspace.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b", "broken"} {
		if _, err := w.Attach(ctx, workspace.AttachOptions{Name: name, Endpoint: "ws://127.0.0.1:45679/sync", ComputerdToken: "tok"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Push(ctx); err != nil { // the default's remote exists from here
		t.Fatal(err)
	}
	writeStore(t, remotes.Fake("default").Container, "from-default", "x")
	rep, err := w.Tick(ctx)
	if err == nil || !strings.Contains(err.Error(), `runtime "broken"`) {
		t.Fatalf("tick error = %v, want one naming runtime broken", err)
	}
	if got := readStore(t, remotes.FakeOf("default", "b").Container, "from-default"); got != "x" {
		t.Fatalf("b holds %q after the tick, want the default's write", got)
	}
	if len(rep.Runtimes) != 3 || rep.Runtimes[1].Runtime != "b" || rep.Runtimes[1].Error != "" || rep.Runtimes[2].Error == "" {
		t.Fatalf("tick report %+v", rep.Runtimes)
	}
}
