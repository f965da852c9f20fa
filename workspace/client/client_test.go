package client_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
	"github.com/wsync/wsync/workspace/workspacetest"
)

func newClient(t *testing.T) (*client.Workspace, *workspacetest.Server) {
	t.Helper()
	srv := workspacetest.NewServer(t, nil)
	c, err := client.New(srv.URL, srv.Token)
	if err != nil {
		t.Fatal(err)
	}
	return c.Workspace("default"), srv
}

func TestErrorsKeepTheirErrno(t *testing.T) {
	ws, srv := newClient(t)
	ctx := context.Background()
	_, err := ws.Stat(ctx, "/missing", false)
	if !errors.Is(err, vfs.ErrNotExist) || workspace.ErrnoName(err) != "ENOENT" {
		t.Fatalf("stat missing: %v (errno %s)", err, workspace.ErrnoName(err))
	}
	if _, err := ws.Mkdir(ctx, "/d", 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Mkdir(ctx, "/d", 0, false); !errors.Is(err, vfs.ErrExist) {
		t.Fatalf("mkdir twice: %v", err)
	}
	if _, err := ws.WriteFile(ctx, "/d/f", strings.NewReader("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := ws.Remove(ctx, "/d", false); !errors.Is(err, vfs.ErrNotEmpty) {
		t.Fatalf("rm full dir: %v", err)
	}
	if _, err := ws.Stat(ctx, "/a/../b", false); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("bad path: %v", err)
	}
	bad, _ := client.New(srv.URL, "nope")
	if _, err := bad.Workspace("default").Status(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := bad.Workspaces(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
	if err := bad.Health(ctx); err != nil {
		t.Fatalf("health needs no token: %v", err)
	}
}

func TestReadWriteRange(t *testing.T) {
	ws, _ := newClient(t)
	ctx := context.Background()
	mode := uint32(0o600)
	fi, err := ws.WriteFile(ctx, "/weird name #1?.txt", strings.NewReader("0123456789"), &mode)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode != 0o600 || fi.Size != 10 || fi.Path != "/weird name #1?.txt" {
		t.Fatalf("write: %+v", fi)
	}
	b, err := ws.ReadFile(ctx, "weird name #1?.txt")
	if err != nil || string(b) != "0123456789" {
		t.Fatalf("read %q %v", b, err)
	}
	for _, tc := range []struct {
		off, n int64
		want   string
	}{{3, 4, "3456"}, {8, -1, "89"}, {0, 0, ""}, {20, 5, ""}} {
		rc, err := ws.OpenRange(ctx, "/weird name #1?.txt", tc.off, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != tc.want {
			t.Errorf("range %d+%d: %q, want %q", tc.off, tc.n, got, tc.want)
		}
	}
	ls, err := ws.List(ctx, "/", false, true)
	if err != nil || len(ls) != 1 || ls[0].SHA256 == "" {
		t.Fatalf("ls %+v %v", ls, err)
	}
}

func TestExecStreamsAndSyncs(t *testing.T) {
	ws, _ := newClient(t)
	ctx := context.Background()
	if _, err := ws.WriteFile(ctx, "/in", strings.NewReader("server data"), nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	rep, err := ws.Exec(ctx, workspace.ExecSpec{Shell: "cat /in ; warn oops ; write /out x ; kill 9"}, func(ev workspace.ExecEvent) {
		got = append(got, ev.Stream+":"+string(ev.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"stdout:server data", "stderr:oops\n"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("output %q, want %q", got, want)
	}
	if rep.ExitCode != 137 || rep.Signal != 9 || rep.Sync != workspace.SyncComplete {
		t.Fatalf("report %+v", rep)
	}
	if _, err := ws.Stat(ctx, "/out", false); err != nil {
		t.Fatalf("exec's write did not come back: %v", err)
	}
	// Without a callback the events land in the report.
	rep, err = ws.Exec(ctx, workspace.ExecSpec{Argv: []string{"echo", "hi"}}, nil)
	if err != nil || len(rep.Events) != 1 || string(rep.Events[0].Data) != "hi\n" {
		t.Fatalf("collected %+v %v", rep.Events, err)
	}
	st, err := ws.Status(ctx)
	if err != nil || st.Remote == nil || st.LastPull == nil {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestRuntimes(t *testing.T) {
	ws, srv := newClient(t)
	ctx := context.Background()
	if _, err := ws.Attach(ctx, workspace.AttachOptions{Name: "b", Endpoint: "ws://127.0.0.1:9/sync", ComputerdToken: "tok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Attach(ctx, workspace.AttachOptions{Name: "b", Endpoint: "ws://127.0.0.1:9/sync"}); !errors.Is(err, vfs.ErrExist) {
		t.Fatalf("attach twice: %v", err)
	}
	list, err := ws.Runtimes(ctx)
	if err != nil || len(list) != 2 || list[1].Name != "b" || list[1].Peer() != "computerd@b" {
		t.Fatalf("runtimes: %+v %v", list, err)
	}
	if _, err := ws.WriteFile(ctx, "/f", strings.NewReader("x"), nil); err != nil {
		t.Fatal(err)
	}
	if rep, err := ws.On("b").Push(ctx); err != nil || rep.Entries != 1 {
		t.Fatalf("push to b: %+v %v", rep, err)
	}
	if srv.Remotes.Fake("default") != nil {
		t.Fatal("a push to b reached the default runtime")
	}
	if st, err := ws.On("b").Status(ctx); err != nil || st.Runtime != "b" || st.LastPush == nil {
		t.Fatalf("status of b: %+v %v", st, err)
	}
	if _, err := ws.On("nope").Pull(ctx); !errors.Is(err, workspace.ErrNoRuntime) || workspace.ErrnoName(err) != "ENORUNTIME" {
		t.Fatalf("pull from an unknown runtime: %v", err)
	}
	if _, err := ws.On("nope").Exec(ctx, workspace.ExecSpec{Argv: []string{"echo"}}, nil); !errors.Is(err, workspace.ErrNoRuntime) {
		t.Fatalf("exec on an unknown runtime: %v", err)
	}
	if err := ws.Detach(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := ws.Detach(ctx, "b"); !errors.Is(err, workspace.ErrNoRuntime) {
		t.Fatalf("detach twice: %v", err)
	}
}

func TestConflicts(t *testing.T) {
	ws, srv := newClient(t)
	ctx := context.Background()
	if _, err := ws.WriteFile(ctx, "/PLAN.md", strings.NewReader("v0"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Push(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Remotes.Fake("default").Container.WriteFile(ctx, "PLAN.md", []byte("container v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.WriteFile(ctx, "/PLAN.md", strings.NewReader("server v1"), nil); err != nil {
		t.Fatal(err)
	}
	if rep, err := ws.Pull(ctx); err != nil || rep.Conflicts != 1 {
		t.Fatalf("pull: %+v %v", rep, err)
	}
	list, err := ws.Conflicts(ctx, false, 0)
	if err != nil || len(list) != 1 || list[0].Path != "/PLAN.md" || list[0].Policy != vfs.KeepBoth {
		t.Fatalf("conflicts: %+v %v", list, err)
	}
	if _, err := ws.ResolveConflict(ctx, "/PLAN.md", "mine"); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("resolve with a bad keep: %v", err)
	}
	ci, err := ws.ResolveConflict(ctx, "/PLAN.md", workspace.SideServer)
	if err != nil || ci.Resolution != workspace.SideServer || ci.ResolvedAt.IsZero() {
		t.Fatalf("resolve: %+v %v", ci, err)
	}
	if _, err := ws.ResolveConflict(ctx, "/PLAN.md", workspace.SideServer); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("resolve again: %v", err)
	}
	if _, err := ws.Stat(ctx, list[0].Copy, false); !errors.Is(err, vfs.ErrNotExist) {
		t.Fatalf("the copy after keeping the server's version: %v", err)
	}
	if all, err := ws.Conflicts(ctx, true, 0); err != nil || len(all) != 1 {
		t.Fatalf("all conflicts: %+v %v", all, err)
	}
	if p, err := ws.SetConflictPolicy(ctx, "container-wins"); err != nil || p != vfs.ContainerWins {
		t.Fatalf("set policy: %q %v", p, err)
	}
	if info, err := ws.Info(ctx); err != nil || info.ConflictPolicy != vfs.ContainerWins {
		t.Fatalf("info: %+v %v", info, err)
	}
	if _, err := ws.SetConflictPolicy(ctx, "newest"); !errors.Is(err, vfs.ErrInvalid) {
		t.Fatalf("set a bad policy: %v", err)
	}
}
