package computer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/execrpc"
	"github.com/wsync/wsync/internal/computertest"
	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

func serverStore(t *testing.T) *vfs.Store {
	t.Helper()
	s, err := vfs.Open(context.Background(), filepath.Join(t.TempDir(), "server.db"), vfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func driver(t *testing.T, d *computer.Daemon, server *vfs.Store, token string) (*syncwire.Driver, *rpc.Client) {
	t.Helper()
	c := rpc.NewClient(rpc.ClientOptions{Config: rpc.Config{ID: server.ID()}, URL: d.SyncURL(), Token: token})
	t.Cleanup(func() { c.Close() })
	return syncwire.NewDriver(server, "computerd", c, syncwire.DriverOptions{}), c
}

// startPair starts a computerd with token and a server store with a
// driver (and its client) syncing the two.
func startPair(t *testing.T, token string) (*computer.Daemon, *vfs.Store, *syncwire.Driver, *rpc.Client) {
	t.Helper()
	d := computertest.Start(t, computer.Config{Token: token})
	server := serverStore(t)
	drv, c := driver(t, d, server, token)
	return d, server, drv, c
}

// pushFile writes data to path (store form) on the server and pushes once.
func pushFile(t *testing.T, ctx context.Context, drv *syncwire.Driver, server *vfs.Store, path, data string) {
	t.Helper()
	if _, err := server.WriteFile(ctx, path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := drv.PushOnce(ctx); err != nil {
		t.Fatal(err)
	}
}

// session opens c's session, for execs.
func session(t *testing.T, ctx context.Context, c *rpc.Client) *rpc.Session {
	t.Helper()
	sess, _, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// execOut runs req through sess and returns its output; an exit other than
// 0 fails t.
func execOut(t *testing.T, ctx context.Context, sess *rpc.Session, req execrpc.Request) string {
	t.Helper()
	st, err := execrpc.Start(ctx, sess, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	defer st.Close()
	var out string
	for {
		switch ev, err := st.Next(ctx); {
		case errors.Is(err, io.EOF):
			return out
		case err != nil:
			t.Fatalf("exec %q: %v", req.Argv, err)
		case ev.Exit != nil && ev.Exit.Code != 0:
			t.Fatalf("exec %q exited %+v", req.Argv, ev.Exit)
		default:
			out += string(ev.Data)
		}
	}
}

// pulledFile pulls once and reads path (store form) on the server.
func pulledFile(t *testing.T, drv *syncwire.Driver, server *vfs.Store, path string) string {
	t.Helper()
	if _, err := drv.PullOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := server.ReadFile(context.Background(), path)
	if err != nil {
		t.Fatalf("server read %s: %v", path, err)
	}
	return string(b)
}

func TestMountedPairSyncsBothWays(t *testing.T) {
	d, server, drv, _ := startPair(t, "secret")
	ctx := context.Background()

	// Server to container: visible to cat inside the mount at once.
	pushFile(t, ctx, drv, server, "from-server.txt", "hello container\n")
	out, err := exec.Command("cat", filepath.Join(d.MountDir(), "from-server.txt")).Output()
	if err != nil || string(out) != "hello container\n" {
		t.Fatalf("cat in the mount = %q, %v", out, err)
	}

	// Container to server: a write through the mount arrives with a pull.
	if err := os.WriteFile(filepath.Join(d.MountDir(), "from-container.txt"), []byte("hello server\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := pulledFile(t, drv, server, "from-container.txt"); got != "hello server\n" {
		t.Fatalf("server read = %q", got)
	}
}

func TestPullSeesFileStillOpenInARunningProcess(t *testing.T) {
	d, server, drv, _ := startPair(t, "")
	f, err := os.Create(filepath.Join(d.MountDir(), "open.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("line 1\n"); err != nil {
		t.Fatal(err)
	}
	if got := pulledFile(t, drv, server, "open.log"); got != "line 1\n" {
		t.Errorf("pull of a file still open for writing = %q", got)
	}
}

func TestExecRunsInsideTheMount(t *testing.T) {
	d, _, _, c := startPair(t, "")
	ctx := context.Background()
	stdout := execOut(t, ctx, session(t, ctx, c), execrpc.Request{Shell: "mkdir -p sub && cd sub && echo made > f && pwd"})
	if strings.TrimSpace(stdout) != filepath.Join(d.MountDir(), "sub") {
		t.Errorf("pwd = %q, want the mount's sub directory", stdout)
	}
	if b, err := os.ReadFile(filepath.Join(d.MountDir(), "sub", "f")); err != nil || string(b) != "made\n" {
		t.Errorf("file written by the exec = %q, %v", b, err)
	}
}

func TestRoutesNeedTheToken(t *testing.T) {
	d := computertest.Start(t, computer.Config{Token: "tok"})
	base := "http://" + d.Addr()
	for _, route := range []string{"/info", "/stats", "/watermarks", "/metrics", "/sync"} {
		for _, auth := range []string{"", "Bearer wrong"} {
			status, body, _ := testutil.Request(t, "GET", base+route, auth, nil)
			if status != http.StatusUnauthorized || strings.Contains(string(body), "tok") {
				t.Errorf("GET %s with %q: %d %q, want an opaque 401", route, auth, status, body)
			}
		}
	}
	resp, err := http.Get(base + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health without a token: %v %v", resp, err)
	}
	resp.Body.Close()
	if status, body, _ := testutil.Request(t, "GET", base+"/stats", "Bearer tok", nil); status != 200 {
		t.Fatalf("stats with the token: %d %s", status, body)
	}
}

func TestRefusesNonLoopbackWithoutToken(t *testing.T) {
	fusetest.RequireFUSE(t)
	_, err := computer.Start(context.Background(), computer.Config{Listen: "0.0.0.0:0", Mount: t.TempDir(), State: vfs.Memory})
	if err == nil || !strings.Contains(err.Error(), "without a token") {
		t.Fatalf("non-loopback listen without a token: %v", err)
	}
}

func TestRestartKeepsFilesAndCleansStaleMount(t *testing.T) {
	if os.Getenv("WSYNC_COMPUTER_CHILD") != "" {
		childDaemon(t)
		return
	}
	fusetest.RequireFUSE(t)
	mnt := filepath.Join(t.TempDir(), "ws")
	state := filepath.Join(t.TempDir(), "state.db")
	// A computerd killed with SIGKILL leaves a dead mount behind: run one
	// in a child process and kill it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestRestartKeepsFilesAndCleansStaleMount$")
	cmd.Env = append(os.Environ(), "WSYNC_COMPUTER_CHILD=1", "WSYNC_CHILD_MOUNT="+mnt, "WSYNC_CHILD_STATE="+state)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(stdout, buf, len("ready\n"))
	if !strings.HasPrefix(string(buf[:n]), "ready") {
		t.Fatalf("child said %q", buf[:n])
	}
	cmd.Process.Kill()
	cmd.Wait()
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after SIGKILL, stat of the mount = %v, want ENOTCONN (a dead mount)", err)
	}
	d := computertest.Start(t, computer.Config{Mount: mnt, State: state})
	b, err := os.ReadFile(filepath.Join(d.MountDir(), "kept.txt"))
	if err != nil || string(b) != "kept\n" {
		t.Errorf("after restart, kept.txt = %q, %v", b, err)
	}
}

// childDaemon is the child of TestRestartKeepsFilesAndCleansStaleMount: it
// writes a file through its mount and waits to be killed.
func childDaemon(t *testing.T) {
	mnt, state := os.Getenv("WSYNC_CHILD_MOUNT"), os.Getenv("WSYNC_CHILD_STATE")
	d, err := computer.Start(context.Background(), computer.Config{Listen: "127.0.0.1:0", Mount: mnt, State: state, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = d
	// fsynced: what a SIGKILL may not lose (docs/ARCHITECTURE.md
	// "Durability"; a closed file not yet fsynced may wait in a group).
	f, err := os.Create(filepath.Join(mnt, "kept.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("kept\n"); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	select {} // until the parent's SIGKILL
}

// TestExecsInsideTheMountSurviveGarbageCollection runs many commands whose
// working directory, binary or script is inside the mount while the
// collector runs continuously in this process, which serves the mount. A
// vfork child that touched the mount before its execve would wait on the
// mount while the collector waits on the forking thread (see execrun's
// exec.go): the command's directory is entered by the forking thread, and
// binaries in the mount start through the shim.
func TestExecsInsideTheMountSurviveGarbageCollection(t *testing.T) {
	trueBin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"cwd", []string{"true"}},
		{"binary", []string{"./true"}},
		{"script", []string{"./run.sh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, server, drv, c := startPair(t, "")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := server.MkdirPath(ctx, "sub/dir", 0o755, true); err != nil {
				t.Fatal(err)
			}
			for name, data := range map[string][]byte{"true": trueBin, "run.sh": []byte("#!/bin/sh\nexit 0\n")} {
				if _, err := server.WriteFile(ctx, "sub/dir/"+name, data, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			stop := make(chan struct{})
			gcDone := make(chan struct{})
			go func() {
				defer close(gcDone)
				for {
					select {
					case <-stop:
						return
					default:
						runtime.GC()
					}
				}
			}()
			defer func() { close(stop); <-gcDone }()
			sess := session(t, ctx, c)
			for i := range 200 {
				// An upstream change in the working directory invalidates its
				// cached entries and attributes, so the chdir must ask the mount.
				pushFile(t, ctx, drv, server, fmt.Sprintf("sub/dir/f%d", i), "x")
				execOut(t, ctx, sess, execrpc.Request{Argv: tc.argv, Cwd: "sub/dir"})
			}
		})
	}
}

// TestExecSeesPushedBytesAtOnce: the kernel holds a file's old bytes and
// attributes; a push replaces them and the next command must read the new
// ones, not what the kernel cached (execs wait for the push's
// invalidations to reach the kernel).
func TestExecSeesPushedBytesAtOnce(t *testing.T) {
	_, server, drv, c := startPair(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess := session(t, ctx, c)
	for i := range 50 {
		want := fmt.Sprintf("version %d\n", i)
		pushFile(t, ctx, drv, server, "f", want)
		if got := execOut(t, ctx, sess, execrpc.Request{Argv: []string{"cat", "f"}}); got != want {
			t.Fatalf("round %d: the command read %q, want %q (stale kernel cache)", i, got, want)
		}
	}
}
