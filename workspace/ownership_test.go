package workspace_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// fakeOwnership plays package cluster for the Manager: who owns what is a
// map, and a test takes a lease away with lose.
type fakeOwnership struct {
	mu        sync.Mutex
	owns      map[string]bool
	lost      map[string]func(error)
	published map[string]workspace.Published
	claims    []string
	other     bool // Claim answers that another server owns the workspace
	opened    int
	closed    int
}

func newFakeOwnership() *fakeOwnership {
	return &fakeOwnership{owns: map[string]bool{}, lost: map[string]func(error){}, published: map[string]workspace.Published{}}
}

func (f *fakeOwnership) Create(ctx context.Context, name, dir string, lost func(error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.published[name]; ok {
		return workspace.ErrWorkspaceExists
	}
	f.owns[name], f.lost[name] = true, lost
	return nil
}

func (f *fakeOwnership) Claim(ctx context.Context, name, dir string, lost func(error)) (workspace.Published, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims = append(f.claims, name)
	p, ok := f.published[name]
	if !ok {
		return p, workspace.ErrNoWorkspace
	}
	if f.other {
		return p, &workspace.NotOwnerError{Name: name, Owner: "B", Address: "http://b.example:8080"}
	}
	f.owns[name], f.lost[name] = true, lost
	return p, nil
}

func (f *fakeOwnership) Owns(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owns[name]
}

func (f *fakeOwnership) Publish(p workspace.Published) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published[p.Config.Name] = p
}

func (f *fakeOwnership) StoreOptions(name string, o *vfs.Options) {}

func (f *fakeOwnership) Opened(ctx context.Context, name string, s *vfs.Store) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened++
	return closer(func() error { f.mu.Lock(); f.closed++; f.mu.Unlock(); return nil }), nil
}

func (f *fakeOwnership) Names(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.published {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeOwnership) Status(name string) *workspace.OwnershipStatus {
	return &workspace.OwnershipStatus{Owner: "A", Generation: 1}
}

// lose takes the lease away as a failed renewal would.
func (f *fakeOwnership) lose(name string) {
	f.mu.Lock()
	f.owns[name] = false
	lost := f.lost[name]
	f.mu.Unlock()
	lost(errors.New("lease lost (test)"))
}

type closer func() error

func (c closer) Close() error { return c() }

func openOwned(t *testing.T, data string, own *fakeOwnership, remotes *workspacetest.Remotes) *workspace.Manager {
	t.Helper()
	m, err := workspace.Open(context.Background(), workspace.Options{DataDir: data, Remote: remotes.Factory, NoSync: true, RetryBackoff: time.Hour, Ownership: own})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestOwnedWorkspaceLifecycle: a created workspace is published with its
// token; a lost lease stops serving it (its store and replication close,
// a push through an old handle is fenced), and the next call claims it
// again or names the owner.
func TestOwnedWorkspaceLifecycle(t *testing.T) {
	ctx := testutil.Context(t, time.Minute)
	own := newFakeOwnership()
	remotes := &workspacetest.Remotes{Dir: t.TempDir()}
	t.Cleanup(func() { remotes.Close() })
	m := openOwned(t, t.TempDir(), own, remotes)
	if _, err := m.Create(ctx, workspace.CreateOptions{Name: "proj", Endpoint: "ws://127.0.0.1:45678/sync", ComputerdToken: "tok-1"}); err != nil {
		t.Fatal(err)
	}
	w, err := m.Serve(ctx, "proj")
	if err != nil {
		t.Fatal(err)
	}
	write(t, w, "/a.txt", "one")
	if _, err := w.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if p := own.published["proj"]; p.Tokens[workspace.DefaultRuntime] != "tok-1" || p.Config.Endpoint != "ws://127.0.0.1:45678/sync" {
		t.Fatalf("published %+v", p)
	}
	if st, err := w.Status(ctx); err != nil || st.Ownership == nil || st.Ownership.Owner != "A" {
		t.Fatalf("status ownership %+v %v", st.Ownership, err)
	}
	if own.opened != 1 {
		t.Fatalf("replication started %d times", own.opened)
	}

	own.lose("proj")
	if own.closed != 1 {
		t.Fatalf("a lost lease closed replication %d times", own.closed)
	}
	if _, err := w.Push(ctx); !errors.Is(err, workspace.ErrNotOwner) {
		t.Fatalf("push through a workspace whose lease was lost: %v", err)
	}
	if code, status := workspace.APIError(&workspace.NotOwnerError{Name: "proj"}); code != "ENOT_OWNER" || status != 307 {
		t.Fatalf("API error of a not-owner: %s %d", code, status)
	}

	// Another server owns it now: Serve names it.
	own.other = true
	var no *workspace.NotOwnerError
	if _, err := m.Serve(ctx, "proj"); !errors.As(err, &no) || no.Address != "http://b.example:8080" {
		t.Fatalf("serve of a workspace another server owns: %v", err)
	}
	// It comes back: Serve claims it again with the registration.
	own.other = false
	w2, err := m.Serve(ctx, "proj")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, w2, "/a.txt"); got != "one" {
		t.Fatalf("a.txt after the claim: %q", got)
	}
	if tok, err := w2.Token(); err != nil || tok != "tok-1" {
		t.Fatalf("token after the claim: %q %v", tok, err)
	}
	names := m.Workspaces()
	if len(names) != 2 || names[1].Name != "proj" {
		t.Fatalf("workspaces %+v", names)
	}
}

// TestRestartReclaimsOwnedWorkspaces: a restarted server claims the
// workspaces its registry held, without waiting for a caller.
func TestRestartReclaimsOwnedWorkspaces(t *testing.T) {
	ctx := testutil.Context(t, time.Minute)
	own := newFakeOwnership()
	remotes := &workspacetest.Remotes{Dir: t.TempDir()}
	t.Cleanup(func() { remotes.Close() })
	data := t.TempDir()
	m := openOwned(t, data, own, remotes)
	if _, err := m.Create(ctx, workspace.CreateOptions{Name: "proj"}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	own2 := newFakeOwnership()
	own2.published = own.published
	openOwned(t, data, own2, remotes)
	testutil.WaitFor(t, "the restarted server to claim proj", 10*time.Second, func() bool {
		own2.mu.Lock()
		defer own2.mu.Unlock()
		return slices.Contains(own2.claims, "proj") && own2.owns["proj"]
	})
}
