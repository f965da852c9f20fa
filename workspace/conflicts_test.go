package workspace_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// The fakes run the real driver with the workspace's conflict options, so
// these conflicts are the server store's own, detected in the pull's apply.

// conflictAt makes both sides change path (store form) from v0: the
// container to theirs (nil: it removes the path), the server to ours (nil:
// it removes it); then pulls, and returns the pull's report and the
// runtime's fake.
func conflictAt(t *testing.T, h *harness, w *workspace.Workspace, path string, ours, theirs func(s *vfs.Store)) (workspace.SyncReport, *workspacetest.Fake) {
	t.Helper()
	pushed(t, w, "/"+path, "v0")
	fake := h.remotes.Fake(w.Name())
	theirs(fake.Container)
	s, err := w.Store(context.Background())
	must(t, err)
	ours(s)
	rep, err := w.Pull(context.Background())
	must(t, err)
	return rep, fake
}

func writes(t *testing.T, path, data string) func(s *vfs.Store) {
	return func(s *vfs.Store) { writeStore(t, s, path, data) }
}

func removes(t *testing.T, path string) func(s *vfs.Store) {
	return func(s *vfs.Store) { must(t, s.RemovePath(context.Background(), path, true)) }
}

// bothModified is the README's conflict: server and container edit PLAN.md.
func bothModified(t *testing.T, h *harness, w *workspace.Workspace) (workspace.SyncReport, *workspacetest.Fake) {
	t.Helper()
	return conflictAt(t, h, w, "PLAN.md", writes(t, "PLAN.md", "server v1"), writes(t, "PLAN.md", "container v1"))
}

func oneConflict(t *testing.T, w *workspace.Workspace) workspace.ConflictInfo {
	t.Helper()
	cs, err := w.Conflicts(context.Background(), false, 0)
	must(t, err)
	if len(cs) != 1 {
		t.Fatalf("open conflicts %+v, want one", cs)
	}
	return cs[0]
}

func absentIn(t *testing.T, s *vfs.Store, path string) {
	t.Helper()
	if _, err := s.Stat(context.Background(), path); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("%s: %v, want absent", path, err)
	}
}

func TestConflictIsReportedListedAndPushed(t *testing.T) {
	h, w := newDefault(t)
	rep, fake := bothModified(t, h, w)
	if rep.Conflicts != 1 || !slices.Equal(rep.ConflictPaths, []string{"/PLAN.md"}) {
		t.Fatalf("pull report %+v, want one conflict at /PLAN.md", rep)
	}
	c := oneConflict(t, w)
	if c.Path != "/PLAN.md" || c.Runtime != workspace.DefaultRuntime || c.Policy != vfs.KeepBoth || c.Kind != vfs.ConflictModified ||
		c.CopySide != workspace.SideContainer || !strings.HasPrefix(c.Copy, "/PLAN.conflict-container-") || !strings.HasSuffix(c.Copy, ".md") ||
		c.Server.Type != "file" || c.Container.Type != "file" || !c.ResolvedAt.IsZero() || c.Resolution != "" {
		t.Fatalf("conflict %+v", c)
	}
	if got := read(t, w, c.Copy); got != "container v1" {
		t.Fatalf("server copy = %q", got)
	}
	// The pull pushed in the same turn: the container has both versions.
	if got := fake.Calls(); !slices.Equal(got[len(got)-2:], []string{"pull", "push"}) {
		t.Fatalf("calls %v, want the pull followed by a push", got)
	}
	if got := containerFile(t, fake, "PLAN.md"); got != "server v1" {
		t.Fatalf("container PLAN.md = %q, want the server's", got)
	}
	if got := containerFile(t, fake, c.Copy[1:]); got != "container v1" {
		t.Fatalf("container copy = %q", got)
	}
	st, err := w.Status(context.Background())
	must(t, err)
	if st.Conflicts != 1 {
		t.Fatalf("status conflicts %d, want 1", st.Conflicts)
	}
}

func TestExecReportCarriesConflicts(t *testing.T) {
	var w *workspace.Workspace
	// The command edits PLAN.md in the container while an API call edits it
	// on the server.
	run := func(ctx context.Context, c *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
		if _, err := c.WriteFile(ctx, "PLAN.md", []byte("container v1"), 0o644); err != nil {
			return workspace.ExecResult{}, err
		}
		_, err := w.WriteFile(ctx, "/PLAN.md", strings.NewReader("server v1"), nil)
		return workspace.ExecResult{}, err
	}
	h := newHarness(t, run)
	w = h.ws(t, workspace.DefaultName)
	write(t, w, "/PLAN.md", "v0")
	rep, err := w.Exec(context.Background(), workspace.ExecSpec{Argv: []string{"edit"}}, nil)
	must(t, err)
	if rep.Conflicts != 1 || rep.Pulled.Conflicts != 1 || !slices.Equal(rep.Pulled.ConflictPaths, []string{"/PLAN.md"}) || rep.Sync != workspace.SyncComplete {
		t.Fatalf("exec report %+v, want the pull's conflict", rep)
	}
	c := oneConflict(t, w)
	if got := containerFile(t, h.remotes.Fake(workspace.DefaultName), c.Copy[1:]); got != "container v1" {
		t.Fatalf("container copy = %q: the pull's push did not run", got)
	}
}

func TestResolveConflict(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		path  string
		make  func(t *testing.T) (ours, theirs func(*vfs.Store))
		keep  string
		check func(t *testing.T, s *vfs.Store, c workspace.ConflictInfo) // on the server, then the container after a push
	}{
		{"both stays as is", "PLAN.md", modified, workspace.ResolveBoth, func(t *testing.T, s *vfs.Store, c workspace.ConflictInfo) {
			if readStore(t, s, "PLAN.md") != "server v1" || readStore(t, s, c.Copy[1:]) != "container v1" {
				t.Fatal("keep both changed something")
			}
		}},
		{"the copy's side takes the name", "PLAN.md", modified, workspace.SideContainer, func(t *testing.T, s *vfs.Store, c workspace.ConflictInfo) {
			if got := readStore(t, s, "PLAN.md"); got != "container v1" {
				t.Fatalf("PLAN.md = %q", got)
			}
			absentIn(t, s, c.Copy[1:])
		}},
		{"the name's side drops the copy", "PLAN.md", modified, workspace.SideServer, func(t *testing.T, s *vfs.Store, c workspace.ConflictInfo) {
			if got := readStore(t, s, "PLAN.md"); got != "server v1" {
				t.Fatalf("PLAN.md = %q", got)
			}
			absentIn(t, s, c.Copy[1:])
		}},
		{"a copy replaces a directory", "a", func(t *testing.T) (ours, theirs func(*vfs.Store)) {
			return writes(t, "a", "server v1"), func(s *vfs.Store) {
				removes(t, "a")(s)
				writeStore(t, s, "a/x", "container")
			}
		}, workspace.SideServer, func(t *testing.T, s *vfs.Store, c workspace.ConflictInfo) {
			if c.CopySide != workspace.SideServer || c.Kind != vfs.ConflictType {
				t.Fatalf("record %+v, want the server's file beside the container's directory", c)
			}
			if got := readStore(t, s, "a"); got != "server v1" {
				t.Fatalf("a = %q", got)
			}
			absentIn(t, s, c.Copy[1:])
		}},
		{"keeping a deletion removes the path", "gone.txt", func(t *testing.T) (ours, theirs func(*vfs.Store)) {
			return writes(t, "gone.txt", "server v1"), removes(t, "gone.txt")
		}, workspace.SideContainer, func(t *testing.T, s *vfs.Store, c workspace.ConflictInfo) {
			if c.Kind != vfs.ConflictContainerDeleted || c.Copy != "" || c.Container.Type != "absent" {
				t.Fatalf("record %+v", c)
			}
			absentIn(t, s, "gone.txt")
		}},
		{"keeping the modification changes nothing", "gone.txt", func(t *testing.T) (ours, theirs func(*vfs.Store)) {
			return removes(t, "gone.txt"), writes(t, "gone.txt", "container v1")
		}, workspace.SideContainer, func(t *testing.T, s *vfs.Store, c workspace.ConflictInfo) {
			if c.Kind != vfs.ConflictServerDeleted || c.Server.Type != "absent" {
				t.Fatalf("record %+v", c)
			}
			if got := readStore(t, s, "gone.txt"); got != "container v1" {
				t.Fatalf("gone.txt = %q", got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, w := newDefault(t)
			ours, theirs := tc.make(t)
			_, fake := conflictAt(t, h, w, tc.path, ours, theirs)
			open := oneConflict(t, w)
			got, err := w.ResolveConflict(ctx, "/"+tc.path, tc.keep)
			must(t, err)
			if got.ID != open.ID || got.Resolution != tc.keep || got.ResolvedAt.IsZero() {
				t.Fatalf("resolved %+v, want %d keeping %s", got, open.ID, tc.keep)
			}
			s, err := w.Store(ctx)
			must(t, err)
			tc.check(t, s, got)
			_, err = w.Push(ctx)
			must(t, err)
			tc.check(t, fake.Container, got)
			if cs, err := w.Conflicts(ctx, false, 0); err != nil || len(cs) != 0 {
				t.Fatalf("open conflicts after the resolve: %+v %v", cs, err)
			}
			all, err := w.Conflicts(ctx, true, 0)
			must(t, err)
			if len(all) != 1 || all[0].Resolution != tc.keep {
				t.Fatalf("all conflicts %+v", all)
			}
		})
	}
}

func modified(t *testing.T) (ours, theirs func(*vfs.Store)) {
	return writes(t, "PLAN.md", "server v1"), writes(t, "PLAN.md", "container v1")
}

func TestResolveRefusals(t *testing.T) {
	ctx := context.Background()
	h, w := newDefault(t)
	bothModified(t, h, w)
	for _, tc := range []struct {
		path, keep string
		want       error
		says       string
	}{
		{"/PLAN.md", "mine", vfs.ErrInvalid, "want server, container or both"},
		{"/PLAN.md", "", vfs.ErrInvalid, "want server, container or both"},
		{"/other.md", workspace.SideServer, vfs.ErrNotExist, "no open conflict at that path"},
		{"/../x", workspace.SideServer, vfs.ErrInvalid, ""},
	} {
		_, err := w.ResolveConflict(ctx, tc.path, tc.keep)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("resolve %s keeping %q: %v, want %v saying %q", tc.path, tc.keep, err, tc.want, tc.says)
		}
	}
	_, err := w.ResolveConflict(ctx, "/PLAN.md", workspace.SideServer)
	must(t, err)
	if _, err := w.ResolveConflict(ctx, "/PLAN.md", workspace.SideServer); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("resolving a settled conflict again: %v, want ErrNotExist", err)
	}
}

func TestConflictPolicySetAtCreateAndChanged(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	if _, err := h.m.Create(ctx, workspace.CreateOptions{Name: "bad", ConflictPolicy: "newest-wins"}); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("create with a bad policy: %v, want ErrInvalid", err)
	}
	w, err := h.m.Create(ctx, workspace.CreateOptions{Name: "proj", Endpoint: "ws://127.0.0.1:45679/sync", ConflictPolicy: vfs.ServerWins})
	must(t, err)
	if got := w.Info().ConflictPolicy; got != vfs.ServerWins {
		t.Fatalf("info policy %q", got)
	}
	_, fake := bothModified(t, h, w)
	c := oneConflict(t, w)
	if c.Policy != vfs.ServerWins || c.Copy != "" || containerFile(t, fake, "PLAN.md") != "server v1" {
		t.Fatalf("server-wins: %+v, container PLAN.md %q", c, containerFile(t, fake, "PLAN.md"))
	}
	// The loser's version was not kept: it cannot be chosen.
	if _, err := w.ResolveConflict(ctx, "/PLAN.md", workspace.SideContainer); !errors.Is(err, vfs.ErrInvalid) || !strings.Contains(err.Error(), "server-wins") {
		t.Fatalf("keeping what server-wins dropped: %v, want ErrInvalid naming the policy", err)
	}
	_, err = w.ResolveConflict(ctx, "/PLAN.md", workspace.SideServer)
	must(t, err)

	if _, err := w.SetConflictPolicy(ctx, "sometimes"); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("set a bad policy: %v", err)
	}
	p, err := w.SetConflictPolicy(ctx, string(vfs.ContainerWins))
	must(t, err)
	if p != vfs.ContainerWins || w.Info().ConflictPolicy != vfs.ContainerWins {
		t.Fatalf("policy %q, info %q", p, w.Info().ConflictPolicy)
	}
	// The next conflict is settled by the new policy, on the same remote
	// (its session is not ended by the change).
	writeStore(t, fake.Container, "PLAN.md", "container v2")
	write(t, w, "/PLAN.md", "server v2")
	_, err = w.Pull(ctx)
	must(t, err)
	if h.remotes.Fake("proj") != fake {
		t.Fatal("the policy change replaced the remote")
	}
	c = oneConflict(t, w)
	if c.Policy != vfs.ContainerWins || read(t, w, "/PLAN.md") != "container v2" {
		t.Fatalf("container-wins: %+v, server PLAN.md %q", c, read(t, w, "/PLAN.md"))
	}

	// The registry keeps it.
	must(t, h.m.Close())
	h.m = h.open(t)
	if got := h.ws(t, "proj").Info().ConflictPolicy; got != vfs.ContainerWins {
		t.Fatalf("after a restart the policy is %q", got)
	}
	if got := h.ws(t, workspace.DefaultName).Info().ConflictPolicy; got != vfs.KeepBoth {
		t.Fatalf("the default workspace's policy is %q, want keep-both", got)
	}
}

func TestDefaultConflictPolicyOption(t *testing.T) {
	h := newHarness(t, nil)
	must(t, h.m.Close())
	for _, p := range []vfs.ConflictPolicy{vfs.ContainerWins, ""} {
		m, err := workspace.Open(context.Background(), workspace.Options{DataDir: h.data, Remote: h.remotes.Factory, NoSync: true, DefaultConflictPolicy: p})
		must(t, err)
		w, err := m.Workspace(workspace.DefaultName)
		must(t, err)
		// Without the option the registry's (the option's last value) stays.
		if got := w.ConflictPolicy(); got != vfs.ContainerWins {
			t.Errorf("DefaultConflictPolicy %q: the default workspace's policy is %q", p, got)
		}
		must(t, m.Close())
	}
	if _, err := workspace.Open(context.Background(), workspace.Options{DataDir: h.data, DefaultConflictPolicy: "mine"}); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("a bad default policy: %v", err)
	}
}

// A thousand callers resolving the same conflict at once: exactly one
// settles it, the others find no open conflict, and the copy's version
// takes the name once.
func TestResolveByAThousandCallers(t *testing.T) {
	h, w := newDefault(t)
	bothModified(t, h, w)
	var wg sync.WaitGroup
	var won, gone atomic.Int32
	for i := range 1000 {
		keep := []string{workspace.SideServer, workspace.SideContainer, workspace.ResolveBoth}[i%3]
		wg.Go(func() {
			_, err := w.ResolveConflict(context.Background(), "/PLAN.md", keep)
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, vfs.ErrNotExist):
				gone.Add(1)
			default:
				t.Errorf("resolve: %v", err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || gone.Load() != 999 {
		t.Fatalf("%d resolves succeeded and %d found nothing, want 1 and 999", won.Load(), gone.Load())
	}
	cs, err := w.Conflicts(context.Background(), true, 0)
	must(t, err)
	if len(cs) != 1 || cs[0].ResolvedAt.IsZero() {
		t.Fatalf("records %+v, want one resolved", cs)
	}
}

func TestConflictListIsBounded(t *testing.T) {
	h, w := newDefault(t)
	for _, p := range []string{"a", "b", "c"} {
		conflictAt(t, h, w, p, writes(t, p, "server v1"), writes(t, p, "container v1"))
	}
	cs, err := w.Conflicts(context.Background(), false, 2)
	must(t, err)
	if len(cs) != 2 || cs[0].Path != "/c" || cs[1].Path != "/b" {
		t.Fatalf("limit 2: %+v, want the newest two (/c, /b)", cs)
	}
	if cs, err = w.Conflicts(context.Background(), false, 0); err != nil || len(cs) != 3 {
		t.Fatalf("default limit: %d records, %v", len(cs), err)
	}
	for _, n := range []int{-1, workspace.MaxConflictList + 1} {
		if _, err := w.Conflicts(context.Background(), false, n); !errors.Is(err, vfs.ErrInvalid) {
			t.Fatalf("limit %d: %v, want ErrInvalid", n, err)
		}
	}
}
