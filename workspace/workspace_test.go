package workspace_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/workspacetest"
)

// harness is a Manager over a temp data dir whose workspaces sync with
// fakes (package workspacetest), not with a computerd.
type harness struct {
	m       *workspace.Manager
	remotes *workspacetest.Remotes
	data    string
	// backoff is the background puller's first retry wait: an hour unless
	// a test sets it, so a failed pull is retried only where a test asks.
	backoff time.Duration
	slice   workspace.Budget
	// maxExecs and execHistory are the exec limits (0: the defaults).
	maxExecs, execHistory int
	massDelete            workspace.MassDeleteOptions
}

func newHarness(t *testing.T, run workspacetest.RunFunc) *harness {
	t.Helper()
	h := &harness{remotes: &workspacetest.Remotes{Dir: t.TempDir(), Run: run}, data: t.TempDir()}
	h.m = h.open(t)
	t.Cleanup(func() { h.remotes.Close() })
	return h
}

func (h *harness) open(t *testing.T) *workspace.Manager {
	t.Helper()
	m, err := workspace.Open(context.Background(), workspace.Options{
		DataDir:         h.data,
		DefaultEndpoint: "ws://127.0.0.1:45678/sync",
		Remote:          h.remotes.Factory,
		NoSync:          true,
		RetryBackoff:    cmp.Or(h.backoff, time.Hour),
		PullSlice:       h.slice,
		MaxExecs:        h.maxExecs,
		ExecHistory:     h.execHistory,
		MassDelete:      h.massDelete,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func (h *harness) ws(t *testing.T, name string) *workspace.Workspace {
	t.Helper()
	w, err := h.m.Workspace(name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// newDefault is a harness and its default workspace.
func newDefault(t *testing.T) (*harness, *workspace.Workspace) {
	t.Helper()
	h := newHarness(t, nil)
	return h, h.ws(t, "default")
}

// pushed writes data to path on the server and pushes it.
func pushed(t *testing.T, w *workspace.Workspace, path, data string) {
	t.Helper()
	write(t, w, path, data)
	_, err := w.Push(context.Background())
	must(t, err)
}

// containerFile reads path (store form) in the fake's container.
func containerFile(t *testing.T, fake *workspacetest.Fake, path string) string {
	t.Helper()
	b, err := fake.Container.ReadFile(context.Background(), path)
	must(t, err)
	return string(b)
}

// fencedPush checks the push fence: with a pull owed, and the pull the
// push makes first failing, the push fails with ErrPendingPull and the
// container's file at path (store form) is still want.
func fencedPush(t *testing.T, w *workspace.Workspace, fake *workspacetest.Fake, path, want string) {
	t.Helper()
	fake.FailPull(errors.New("pull still failing"))
	if _, err := w.Push(context.Background()); !errors.Is(err, workspace.ErrPendingPull) {
		t.Fatalf("push with a pull owed: %v, want ErrPendingPull", err)
	}
	if got := containerFile(t, fake, path); got != want {
		t.Fatalf("a push with a pull owed wrote the container: %s = %q, want %q", path, got, want)
	}
}

// pushPulls checks that a push with a pull owed completes the pull first,
// now that it works, when the server wrote path (store form) too: the pull
// records a conflict (keep-both), the server's version server keeps the
// name, and the container's write, want, is in the conflict copy on both
// sides.
func pushPulls(t *testing.T, w *workspace.Workspace, fake *workspacetest.Fake, path, server, want string) {
	t.Helper()
	_, err := w.Push(context.Background())
	must(t, err)
	cs, err := w.Conflicts(context.Background(), false, 0)
	must(t, err)
	if len(cs) != 1 || cs[0].Path != "/"+path || cs[0].CopySide != workspace.SideContainer {
		t.Fatalf("conflicts %+v, want one at /%s with the container's copy", cs, path)
	}
	if got := containerFile(t, fake, path); got != server {
		t.Fatalf("container %s = %q after the push, want the server's %q", path, got, server)
	}
	if got := read(t, w, cs[0].Copy); got != want {
		t.Fatalf("server %s = %q, want the container's write pulled (%q)", cs[0].Copy, got, want)
	}
	if got := containerFile(t, fake, cs[0].Copy[1:]); got != want {
		t.Fatalf("container %s = %q, want %q", cs[0].Copy, got, want)
	}
}

// settled checks that w owes no pull.
func settled(t *testing.T, w *workspace.Workspace) {
	t.Helper()
	st, err := w.Status(context.Background())
	must(t, err)
	if st.Pending != nil {
		t.Fatalf("still pending: %+v", st.Pending)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, w *workspace.Workspace, path, data string) {
	t.Helper()
	if _, err := w.WriteFile(context.Background(), path, strings.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, w *workspace.Workspace, path string) string {
	t.Helper()
	r, fi, err := w.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, fi.Size)
	if _, err := r.ReadAt(b, 0); err != nil && fi.Size > 0 {
		t.Fatal(err)
	}
	return string(b)
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"default", true},
		{"a", true},
		{"0abc_d-e", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"_a", false},
		{"-a", false},
		{"A", false},
		{"a/b", false},
		{"..", false},
		{"a.b", false},
		{"a b", false},
	} {
		err := workspace.ValidateName(tc.name)
		if got := err == nil; got != tc.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, vfs.ErrInvalid) {
			t.Errorf("ValidateName(%q): %v is not EINVAL", tc.name, err)
		}
	}
}

func TestRegistryPersistsAndKeepsSecretsOut(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	_, err := h.m.Create(ctx, workspace.CreateOptions{Name: "proj", Endpoint: "ws://10.0.0.2:45678/sync", ComputerdToken: "s3cret", Ignore: []string{}})
	must(t, err)
	if _, err := h.m.Create(ctx, workspace.CreateOptions{Name: "proj"}); !errors.Is(err, workspace.ErrWorkspaceExists) || !errors.Is(err, vfs.ErrExist) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := h.m.Create(ctx, workspace.CreateOptions{Name: "Bad"}); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := h.m.Create(ctx, workspace.CreateOptions{Name: "x", Endpoint: "ftp://h/"}); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("bad endpoint: %v", err)
	}
	if _, err := h.m.Workspace("nope"); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("missing workspace: %v", err)
	}

	reg, err := os.ReadFile(filepath.Join(h.data, "workspaces.json"))
	must(t, err)
	if bytes.Contains(reg, []byte("s3cret")) {
		t.Fatalf("registry holds the token:\n%s", reg)
	}
	tokFile := filepath.Join(h.data, "proj", "computerd.token")
	fi, err := os.Stat(tokFile)
	must(t, err)
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("token file mode %v, want %v", got, want)
	}

	must(t, h.m.Close())
	m2 := h.open(t)
	var names []string
	for _, c := range m2.Workspaces() {
		names = append(names, c.Name)
	}
	if got, want := names, []string{"default", "proj"}; !slices.Equal(got, want) {
		t.Fatalf("after reopen: %v, want %v", got, want)
	}
	w, err := m2.Workspace("proj")
	must(t, err)
	tok, err := w.Token()
	must(t, err)
	if tok != "s3cret" {
		t.Fatalf("token %q", tok)
	}
	if got := w.IgnoreList(); got == nil || len(got) != 0 {
		t.Fatalf("ignore list %#v, want empty non-nil (ignore nothing)", got)
	}
	def, err := m2.Workspace("default")
	must(t, err)
	if got, want := def.Config().Endpoint, "ws://127.0.0.1:45678/sync"; got != want {
		t.Fatalf("default endpoint %q, want %q", got, want)
	}
}

func TestExecBracketPushesRunsAndPulls(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	write(t, w, "/in.txt", "from the server")

	var out bytes.Buffer
	rep, err := w.Exec(ctx, workspace.ExecSpec{Argv: []string{"cat", "/in.txt", ";", "write", "/out/result.txt", "done", ";", "exit", "3"}},
		func(ev workspace.ExecEvent) { out.Write(ev.Data) })
	must(t, err)
	if got, want := out.String(), "from the server"; got != want {
		t.Errorf("command saw %q, want %q", got, want)
	}
	if rep.ExitCode != 3 || rep.Sync != workspace.SyncComplete {
		t.Errorf("report: code %d sync %q", rep.ExitCode, rep.Sync)
	}
	if rep.Pushed.Entries != 1 {
		t.Errorf("pushed %d entries, want 1", rep.Pushed.Entries)
	}
	if rep.Pulled.Entries != 2 { // out/ and out/result.txt
		t.Errorf("pulled %d entries, want 2", rep.Pulled.Entries)
	}
	if got := read(t, w, "/out/result.txt"); got != "done" {
		t.Errorf("server has %q", got)
	}
	// The first push after a start pulls first (see TestFirstPushAfterStartPullsFirst).
	if got, want := h.remotes.Fake("default").Calls(), []string{"pull", "push", "exec", "pull"}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}

	// Nothing changed: the next bracket moves nothing either way.
	rep, err = w.Exec(ctx, workspace.ExecSpec{Shell: "exit 0"}, nil)
	must(t, err)
	if rep.Pushed.Entries != 0 || rep.Pulled.Entries != 0 {
		t.Errorf("idle bracket moved %d/%d entries", rep.Pushed.Entries, rep.Pulled.Entries)
	}
}

func TestExecFailedPushSpawnsNothing(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	must(t, w.Mkdir(ctx, "/d", 0, false)) // builds nothing remote yet
	_, _ = w.Status(ctx)                  // builds the fake
	fake := h.remotes.Fake("default")
	fake.FailPush(errors.New("container unreachable"))

	ran := false
	_, err := w.Exec(ctx, workspace.ExecSpec{Argv: []string{"echo", "hi"}}, func(workspace.ExecEvent) { ran = true })
	if !errors.Is(err, workspace.ErrPushFailed) || !strings.Contains(err.Error(), "container unreachable") {
		t.Fatalf("got %v, want ErrPushFailed wrapping the push error", err)
	}
	if ran || slices.Contains(fake.Calls(), "exec") {
		t.Fatalf("command ran after a failed push: calls %v", fake.Calls())
	}
	// The failure did not poison the queue.
	rep, err := w.Exec(ctx, workspace.ExecSpec{Argv: []string{"echo", "hi"}}, nil)
	must(t, err)
	if len(rep.Events) != 1 || string(rep.Events[0].Data) != "hi\n" {
		t.Fatalf("events %+v", rep.Events)
	}
}

func TestExecPullFailureIsPendingAndRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry func(ctx context.Context, w *workspace.Workspace) error
	}{
		{"explicit pull", func(ctx context.Context, w *workspace.Workspace) error { _, err := w.Pull(ctx); return err }},
		{"next push", func(ctx context.Context, w *workspace.Workspace) error { _, err := w.Push(ctx); return err }},
		{"next exec", func(ctx context.Context, w *workspace.Workspace) error {
			_, err := w.Exec(ctx, workspace.ExecSpec{Shell: "exit 0"}, nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			ctx := context.Background()
			w := h.ws(t, "default")
			_, err := w.Pull(ctx) // the first push after a start pulls first
			must(t, err)
			fake := h.remotes.Fake("default")
			fake.FailPull(errors.New("connection reset"))

			rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: "write /a.txt hello ; exit 7"}, nil)
			must(t, err)
			if rep.ExitCode != 7 {
				t.Errorf("exit code %d, want the command's 7", rep.ExitCode)
			}
			if rep.Sync != workspace.SyncPending || !strings.Contains(rep.SyncError, "connection reset") {
				t.Errorf("sync %q %q, want pending with the pull error", rep.Sync, rep.SyncError)
			}
			st, err := w.Status(ctx)
			must(t, err)
			if st.Pending == nil || st.Pending.ExecID != rep.ExecID || st.Pending.RuntimeID != rep.RuntimeID {
				t.Fatalf("status pending %+v, want exec %s", st.Pending, rep.ExecID)
			}
			if _, err := w.Stat(ctx, "/a.txt", false); !errors.Is(err, vfs.ErrNotExist) {
				t.Fatalf("a.txt before the retry: %v", err)
			}

			must(t, tc.retry(ctx, w))
			if got := read(t, w, "/a.txt"); got != "hello" {
				t.Fatalf("after retry: %q", got)
			}
			settled(t, w)
		})
	}
}

func TestPendingPullFencedToRuntime(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	_, err := w.Pull(ctx)
	must(t, err)
	fake := h.remotes.Fake("default")
	fake.FailPull(errors.New("lost"))
	_, err = w.Exec(ctx, workspace.ExecSpec{Shell: "write /a x"}, nil)
	must(t, err)
	fake.SetRuntime("fake-runtime-2")
	_, err = w.Pull(ctx)
	must(t, err)
	st, err := w.Status(ctx)
	must(t, err)
	if st.Pending != nil || st.Abandoned == nil || st.Abandoned.RuntimeID != "fake-runtime-1" {
		t.Fatalf("pending %+v abandoned %+v: want the old runtime's pull abandoned", st.Pending, st.Abandoned)
	}
}

func TestExecOutputStreamsInOrder(t *testing.T) {
	// The command emits one event, then waits until the caller has seen it:
	// a bracket that buffered output until the end would deadlock here.
	seen := make(chan string, 10)
	run := func(ctx context.Context, c *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
		for i, s := range []string{"one\n", "two\n", "three\n"} {
			stream := workspace.Stdout
			if i == 1 {
				stream = workspace.Stderr
			}
			out(workspace.ExecEvent{Stream: stream, Data: []byte(s)})
			select {
			case got := <-seen:
				if got != s {
					return workspace.ExecResult{}, errors.New("caller saw " + got + " for " + s)
				}
			case <-ctx.Done():
				return workspace.ExecResult{}, ctx.Err()
			}
		}
		return workspace.ExecResult{}, nil
	}
	h := newHarness(t, run)
	w := h.ws(t, "default")
	var streams []string
	_, err := w.Exec(context.Background(), workspace.ExecSpec{Argv: []string{"x"}}, func(ev workspace.ExecEvent) {
		streams = append(streams, ev.Stream)
		seen <- string(ev.Data)
	})
	must(t, err)
	if got, want := streams, []string{"stdout", "stderr", "stdout"}; !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v", got, want)
	}
}

func TestCommandDoesNotHoldTheFIFO(t *testing.T) {
	running := make(chan struct{})
	finish := make(chan struct{})
	run := func(ctx context.Context, c *vfs.Store, spec workspace.ExecSpec, out func(workspace.ExecEvent)) (workspace.ExecResult, error) {
		close(running)
		<-finish
		return workspace.ExecResult{}, nil
	}
	h := newHarness(t, run)
	ctx := context.Background()
	w := h.ws(t, "default")
	errc := make(chan error, 1)
	go func() {
		_, err := w.Exec(ctx, workspace.ExecSpec{Argv: []string{"long"}}, nil)
		errc <- err
	}()
	<-running
	write(t, w, "/while.txt", "x")
	rep, err := w.Push(ctx) // would deadlock if the command held the FIFO
	must(t, err)
	if rep.Entries != 1 {
		t.Errorf("push during the command: %d entries", rep.Entries)
	}
	close(finish)
	must(t, <-errc)
}

func TestIgnoredPathsAreInvisible(t *testing.T) {
	_, w := newDefault(t)
	ctx := context.Background()
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: "write /app/node_modules/x/index.js y ; write /app/main.js z"}, nil)
	must(t, err)
	if rep.Pulled.Entries != 2 { // app/ and app/main.js
		t.Errorf("pulled %d entries, want 2", rep.Pulled.Entries)
	}
	// Even when the server store holds an ignored path (written below the
	// files API), the API does not show it.
	s, err := w.Store(ctx)
	must(t, err)
	must(t, s.MkdirPath(ctx, "app/node_modules", 0o755, true))
	_, err = s.WriteFile(ctx, "app/node_modules/y", []byte("hidden"), 0o644)
	must(t, err)

	for _, p := range []string{"/app/node_modules", "/app/node_modules/y", "/app/node_modules/x/index.js"} {
		if _, err := w.Stat(ctx, p, false); !errors.Is(err, vfs.ErrNotExist) {
			t.Errorf("stat %s: %v, want ENOENT", p, err)
		}
		if _, _, err := w.Open(ctx, p); !errors.Is(err, vfs.ErrNotExist) {
			t.Errorf("open %s: %v, want ENOENT", p, err)
		}
	}
	if _, err := w.WriteFile(ctx, "/app/node_modules/z", strings.NewReader("x"), nil); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("write into an ignored dir: %v", err)
	}
	ls, err := w.List(ctx, "/", true, false)
	must(t, err)
	var paths []string
	for _, fi := range ls {
		paths = append(paths, fi.Path)
	}
	if got, want := paths, []string{"/app", "/app/main.js"}; !slices.Equal(got, want) {
		t.Errorf("ls -R %v, want %v", got, want)
	}
}

func TestCustomIgnoreListReplacesDefault(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	w, err := h.m.Create(ctx, workspace.CreateOptions{Name: "py", Endpoint: "ws://127.0.0.1:1/sync", Ignore: []string{"__pycache__"}})
	must(t, err)
	_, err = w.Exec(ctx, workspace.ExecSpec{Shell: "write /node_modules/a 1 ; write /__pycache__/b 2"}, nil)
	must(t, err)
	if _, err := w.Stat(ctx, "/node_modules/a", false); err != nil {
		t.Errorf("node_modules with a custom list: %v", err)
	}
	if _, err := w.Stat(ctx, "/__pycache__/b", false); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("__pycache__: %v, want ENOENT", err)
	}
}

func TestTwoWorkspacesStayApart(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	a := h.ws(t, "default")
	b, err := h.m.Create(ctx, workspace.CreateOptions{Name: "other", Endpoint: "ws://127.0.0.1:2/sync"})
	must(t, err)
	write(t, a, "/only-a", "a")
	_, err = b.Exec(ctx, workspace.ExecSpec{Shell: "write /only-b b"}, nil)
	must(t, err)
	_, err = a.Push(ctx)
	must(t, err)
	if _, err := b.Stat(ctx, "/only-a", false); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("b sees a's file: %v", err)
	}
	if _, err := a.Stat(ctx, "/only-b", false); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("a sees b's file: %v", err)
	}
	if _, err := h.remotes.Fake("other").Container.Stat(ctx, "only-a"); !errors.Is(err, vfs.ErrNotExist) {
		t.Errorf("b's container got a's push: %v", err)
	}
}

func TestFilesAPI(t *testing.T) {
	_, w := newDefault(t)
	ctx := context.Background()
	mode := uint32(0o755)
	fi, err := w.WriteFile(ctx, "/bin/run.sh", strings.NewReader("#!/bin/sh\n"), &mode)
	if !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("write without parent: %v %+v", err, fi)
	}
	must(t, w.Mkdir(ctx, "/bin", 0, false))
	if err := w.Mkdir(ctx, "/bin", 0, false); !errors.Is(err, vfs.ErrExist) {
		t.Fatalf("mkdir twice: %v", err)
	}
	must(t, w.Mkdir(ctx, "/bin", 0, true))
	_, err = w.WriteFile(ctx, "/bin/run.sh", strings.NewReader("#!/bin/sh\n"), &mode)
	must(t, err)
	// Rewriting without a mode keeps the file's mode.
	fi, err = w.WriteFile(ctx, "/bin/run.sh", strings.NewReader("#!/bin/sh\necho hi\n"), nil)
	must(t, err)
	if fi.Mode != 0o755 {
		t.Errorf("mode %o after rewrite, want 755", fi.Mode)
	}
	fi, err = w.Stat(ctx, "bin/run.sh", true)
	must(t, err)
	sum := sha256.Sum256([]byte("#!/bin/sh\necho hi\n"))
	if fi.SHA256 != hex.EncodeToString(sum[:]) || fi.Path != "/bin/run.sh" || fi.Type != "file" || fi.Size != 18 {
		t.Errorf("stat %+v", fi)
	}
	must(t, w.Symlink(ctx, "bin/run.sh", "/link"))
	fi, err = w.Stat(ctx, "/link", true)
	must(t, err)
	if fi.Type != "symlink" || fi.Target != "bin/run.sh" || fi.SHA256 != "" {
		t.Errorf("symlink stat %+v", fi)
	}
	_, err = w.Rename(ctx, "/bin", "/tools")
	must(t, err)
	if got := read(t, w, "/tools/run.sh"); !strings.HasPrefix(got, "#!/bin/sh") {
		t.Errorf("after mv: %q", got)
	}
	if err := w.Remove(ctx, "/tools", false); !errors.Is(err, vfs.ErrNotEmpty) {
		t.Errorf("rm of a full dir: %v", err)
	}
	must(t, w.Remove(ctx, "/tools", true))
	for _, p := range []string{"/a/../b", "a//b", "/a/./b", "a\x00b"} {
		if _, err := w.Stat(ctx, p, false); !errors.Is(err, vfs.ErrInvalid) {
			t.Errorf("stat %q: %v, want EINVAL", p, err)
		}
	}
}

func TestVerifyAndNoRemote(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	write(t, w, "/a", "1")
	rep, err := w.Verify(ctx)
	must(t, err)
	if rep.Converged || !slices.Equal(rep.Differences, []string{"/a"}) {
		t.Errorf("before push: %+v", rep)
	}
	_, err = w.Push(ctx)
	must(t, err)
	rep, err = w.Verify(ctx)
	must(t, err)
	if !rep.Converged {
		t.Errorf("after push: %+v", rep)
	}

	local, err := h.m.Create(ctx, workspace.CreateOptions{Name: "local"})
	must(t, err)
	if _, err := local.Push(ctx); !errors.Is(err, workspace.ErrNoRemote) {
		t.Errorf("push without endpoint: %v", err)
	}
	st, err := local.Status(ctx)
	must(t, err)
	if st.RemoteError == "" {
		t.Errorf("status without remote: %+v", st)
	}
}

func TestStoreAndRegistrySurviveReopen(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	write(t, w, "/kept", "across restarts")
	must(t, h.m.Close())
	h.m = h.open(t)
	if got := read(t, h.ws(t, "default"), "/kept"); got != "across restarts" {
		t.Fatalf("after reopen: %q", got)
	}
	if _, err := h.ws(t, "default").Stat(ctx, "/kept", false); err != nil {
		t.Fatal(err)
	}
}

func TestExecRefusesBadSpecs(t *testing.T) {
	h := newHarness(t, nil)
	w := h.ws(t, "default")
	for _, spec := range []workspace.ExecSpec{
		{},
		{Argv: []string{"a"}, Shell: "b"},
		{Argv: []string{"a"}, Cwd: "/../etc"},
		{Argv: []string{"a"}, Env: []string{"NOEQUALS"}},
		{Argv: []string{"a"}, Env: []string{"=v"}},
		{Argv: []string{"a"}, Timeout: -1},
		// Sizes the container refuses are refused before the push (docs/API.md, exec).
		{Argv: []string{"cat"}, Stdin: make([]byte, workspace.MaxExecStdin+1)},
		{Argv: make([]string, workspace.MaxExecArgs+1)},
		{Argv: []string{"a"}, Env: make([]string, workspace.MaxExecArgs+1)},
		{Argv: []string{"echo", strings.Repeat("x", workspace.MaxExecStrLen+1)}},
		{Shell: strings.Repeat("x", workspace.MaxExecStrLen+1)},
	} {
		if _, err := w.Exec(context.Background(), spec, nil); !errors.Is(err, vfs.ErrInvalid) {
			t.Errorf("%+v: %v, want EINVAL", spec, err)
		}
	}
	if calls := h.remotes.Fake("default"); calls != nil && len(calls.Calls()) != 0 {
		t.Errorf("a bad spec reached the remote: %v", calls.Calls())
	}
}

// An empty token is refused everywhere a workspace's computerd token is
// read (issue 9 item 8): the operator's --computerd-token-file, a token
// given by value, and a stored token file that became empty.
func TestEmptyComputerdTokenRefused(t *testing.T) {
	ctx := context.Background()
	empty := filepath.Join(t.TempDir(), "empty")
	must(t, os.WriteFile(empty, []byte("\n"), 0o600))
	if _, err := workspace.Open(ctx, workspace.Options{DataDir: t.TempDir(), DefaultEndpoint: "ws://127.0.0.1:1/sync", DefaultTokenFile: empty}); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("open with an empty --computerd-token-file: %v", err)
	}
	if _, err := workspace.Open(ctx, workspace.Options{DataDir: t.TempDir(), DefaultEndpoint: "ws://127.0.0.1:1/sync", DefaultToken: " "}); err == nil {
		t.Fatal("open with a blank in-memory token")
	}
	h := newHarness(t, nil)
	if _, err := h.m.Create(ctx, workspace.CreateOptions{Name: "a", Endpoint: "ws://h:1/sync", ComputerdToken: " \t"}); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("blank token by value: %v", err)
	}
	w, err := h.m.Create(ctx, workspace.CreateOptions{Name: "b", Endpoint: "ws://h:1/sync", ComputerdToken: "tok"})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(w.Dir(), "computerd.token"), nil, 0o600))
	if tok, err := w.Token(); err == nil {
		t.Fatalf("an emptied token file gave %q, want an error", tok)
	}
}

// A version 1 registry recorded a token file path that a caller could
// name. Loading trusts only the workspace's own file.
func TestLegacyRegistryTokenFile(t *testing.T) {
	data := t.TempDir()
	host := filepath.Join(t.TempDir(), "host-secret")
	must(t, os.WriteFile(host, []byte("host\n"), 0o600))
	own := filepath.Join(data, "own", "computerd.token")
	must(t, os.MkdirAll(filepath.Dir(own), 0o700))
	must(t, os.WriteFile(own, []byte("own-token\n"), 0o600))
	reg := `{"version":1,"workspaces":[
	 {"name":"evil","endpoint":"ws://h:1/sync","token_file":"` + host + `","ignore":null},
	 {"name":"own","endpoint":"ws://h:1/sync","token_file":"` + own + `","ignore":null}]}`
	must(t, os.WriteFile(filepath.Join(data, "workspaces.json"), []byte(reg), 0o644))
	m, err := workspace.Open(context.Background(), workspace.Options{DataDir: data, NoSync: true})
	must(t, err)
	defer m.Close()
	evil, err := m.Workspace("evil")
	must(t, err)
	if tok, err := evil.Token(); err != nil || tok != "" {
		t.Fatalf("legacy token_file outside the data dir was read: %q %v", tok, err)
	}
	ownWS, err := m.Workspace("own")
	must(t, err)
	if tok, err := ownWS.Token(); err != nil || tok != "own-token" {
		t.Fatalf("own token: %q %v", tok, err)
	}
	b, err := os.ReadFile(filepath.Join(data, "workspaces.json"))
	must(t, err)
	if bytes.Contains(b, []byte("token_file")) || bytes.Contains(b, []byte(host)) {
		t.Fatalf("the rewritten registry still names paths:\n%s", b)
	}
}

// Issue 9 item 5: after a pull that failed (pending), a push must not
// replace the container's newer file with the server's older one. The push
// first completes the pending pull; when that fails again the push fails
// and the container is not written. The pending record survives a server
// restart.
func TestPendingPullFencesPush(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	pushed(t, w, "/f", "base")
	fake := h.remotes.Fake("default")

	// The command rewrites f in the container; the pull after it fails, and
	// so does the retry the next push makes.
	fake.FailPull(errors.New("connection reset"), errors.New("connection reset again"))
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: "write /f container-new"}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncPending {
		t.Fatalf("sync %q, want pending", rep.Sync)
	}
	// An API write commits on the server and waits in the push queue.
	write(t, w, "/f", "server-older")

	_, err = w.Push(ctx)
	if !errors.Is(err, workspace.ErrPendingPull) || !strings.Contains(err.Error(), "connection reset again") {
		t.Fatalf("push with a pending pull that fails again: %v, want ErrPendingPull naming the pull's error", err)
	}
	if got := workspace.ErrnoName(err); got != "EPENDING" {
		t.Errorf("errno %s, want EPENDING", got)
	}
	if got := containerFile(t, fake, "f"); got != "container-new" {
		t.Fatalf("the fenced push wrote the container: f = %q", got)
	}
	if got := read(t, w, "/f"); got != "server-older" {
		t.Fatalf("the API write was lost on the server: %q", got)
	}
	// An exec's push is fenced the same way: nothing is spawned.
	fake.FailPull(errors.New("still down"))
	if _, err := w.Exec(ctx, workspace.ExecSpec{Shell: "echo hi"}, nil); !errors.Is(err, workspace.ErrPushFailed) || !errors.Is(err, workspace.ErrPendingPull) {
		t.Fatalf("exec with a pending pull that fails: %v", err)
	}
	if got := containerFile(t, fake, "f"); got != "container-new" {
		t.Fatalf("the fenced exec wrote the container: f = %q", got)
	}

	// A restart keeps the record: status shows it, and the fence holds.
	st, err := w.Status(ctx)
	must(t, err)
	before := st.Pending
	if before == nil || before.ExecID != rep.ExecID {
		t.Fatalf("pending %+v, want exec %s", before, rep.ExecID)
	}
	must(t, h.m.Close())
	h.m = h.open(t)
	w = h.ws(t, "default")
	st, err = w.Status(ctx)
	must(t, err)
	if st.Pending == nil || st.Pending.ExecID != before.ExecID || !st.Pending.Since.Equal(before.Since) {
		t.Fatalf("after restart pending %+v, want %+v", st.Pending, before)
	}
	fake = h.remotes.Fake("default")
	fencedPush(t, w, fake, "f", "container-new")

	// Once the pull works, the push completes it first: the container's
	// write reaches the server and nothing of it is lost, nor is the
	// server's concurrent write.
	pushPulls(t, w, fake, "f", "server-older", "container-new")
	settled(t, w)
	must(t, h.m.Close())
	h.m = h.open(t)
	st, err = h.ws(t, "default").Status(ctx)
	must(t, err)
	if st.Pending != nil {
		t.Fatalf("pending came back after a restart: %+v", st.Pending)
	}
}

// A failed explicit pull leaves the same fence as an exec's: the container
// may hold changes the server has not seen.
func TestFailedPullFencesPush(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	_, _ = w.Status(ctx)
	fake := h.remotes.Fake("default")
	_, err := fake.Container.WriteFile(ctx, "c", []byte("container"), 0o644)
	must(t, err)
	fake.FailPull(errors.New("reset"))
	if _, err := w.Pull(ctx); err == nil {
		t.Fatal("pull did not fail")
	}
	write(t, w, "/c", "server")
	fencedPush(t, w, fake, "c", "container")
}

// A server that stopped while a command ran never recorded the pull it
// owed: after a start, the first push pulls first, so what the container
// wrote meanwhile is not overwritten.
func TestFirstPushAfterStartPullsFirst(t *testing.T) {
	h, w := newDefault(t)
	ctx := context.Background()
	pushed(t, w, "/f", "base")
	fake := h.remotes.Fake("default")
	// The command wrote f; the server went down before its pull.
	_, err := fake.Container.WriteFile(ctx, "f", []byte("container-new"), 0o644)
	must(t, err)
	write(t, w, "/f", "server-older")
	must(t, h.m.Close())
	h.m = h.open(t)
	w = h.ws(t, "default")
	_, _ = w.Status(ctx)
	fake = h.remotes.Fake("default")
	fencedPush(t, w, fake, "f", "container-new")
	pushPulls(t, w, fake, "f", "server-older", "container-new")
	if got := fake.Calls(); !slices.Equal(got[len(got)-2:], []string{"pull", "push"}) {
		t.Fatalf("calls %v, want a pull before the push", got)
	}
}

// TestHashOfASparseFileStopsWithTheCaller: stat and ls hash a file's bytes,
// and a 1 TiB sparse file is a terabyte of zeros to hash (minutes of CPU),
// so the hash stops when the caller's context ends instead of running on
// after the client went away. A small sparse file hashes like its zeros.
func TestHashOfASparseFileStopsWithTheCaller(t *testing.T) {
	_, w := newDefault(t)
	ctx := context.Background()
	s, err := w.Store(ctx)
	must(t, err)
	put := func(path string, size int64) {
		m := chunkstore.Manifest{}.AppendHole(size - 3).Append(chunkstore.Ref{Hash: chunkstore.Sum([]byte("end")), Size: 3})
		st := s.Chunks().NewStage()
		defer st.Release()
		must(t, st.Put(ctx, chunkstore.Sum([]byte("end")), []byte("end")))
		_, err := s.Apply(ctx, []vfs.ChangeEntry{{Kind: vfs.EntryFile, Path: path, Mode: 0o644, Mtime: 1, Chunks: m, Size: m.Size()}}, vfs.ApplyOptions{Source: vfs.Local, Stage: st})
		must(t, err)
	}
	put("small", 2*chunkstore.ChunkSize+3)
	fi, err := w.Stat(ctx, "/small", true)
	must(t, err)
	sum := sha256.Sum256(append(make([]byte, 2*chunkstore.ChunkSize), "end"...))
	if fi.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 of a sparse file: %s, want %x", fi.SHA256, sum)
	}

	put("huge", 1<<40+3)
	// The caller goes away after the hash has started (its context reports
	// cancellation from the 64th check on, 32 MiB into the file).
	cctx := &goneAfter{Context: ctx, checks: 64}
	if _, err := w.Stat(cctx, "/huge", true); !errors.Is(err, context.Canceled) {
		t.Fatalf("stat of a 1 TiB file after the caller went away: %v, want context.Canceled", err)
	}
	if cctx.n.Load() > 64+16 {
		t.Errorf("the hash checked its context %d times after the caller left", cctx.n.Load()-64)
	}
}

// goneAfter is a context whose Err reports cancellation once it has been
// asked checks times: a caller leaving in the middle of a long call.
type goneAfter struct {
	context.Context
	checks int64
	n      atomic.Int64
}

func (c *goneAfter) Err() error {
	if c.n.Add(1) > c.checks {
		return context.Canceled
	}
	return nil
}
