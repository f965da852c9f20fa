package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/fusetest"
	"github.com/wsync/wsync/internal/testutil"
)

// bin holds the binaries TestMain built.
var bin struct {
	server, computerd string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wsync-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.server = filepath.Join(dir, "workspace-server")
	bin.computerd = filepath.Join(dir, "computerd")
	for out, pkg := range map[string]string{bin.server: "../cmd/workspace-server", bin.computerd: "../cmd/computerd"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", pkg, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a daemon under test. Its output goes to a file, not a pipe, so
// waiting for it never depends on a grandchild closing an inherited pipe.
type proc struct {
	t       testing.TB
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// start runs a daemon, recording its output, and stops it (SIGTERM, then
// SIGKILL) at cleanup.
func start(t testing.TB, name string, args []string, env ...string) *proc {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p := &proc{t: t, name: name, logPath: logf.Name(), done: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.output())
		}
	})
	return p
}

// stop signals the daemon and waits for it, escalating to SIGKILL.
func (p *proc) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// kill SIGKILLs the daemon.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

func waitHealthy(t testing.TB, url string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.output())
		default:
		}
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	t.Fatalf("%s not healthy at %s within 30s:\n%s", p.name, url, p.output())
}

// pair is a workspace-server (with embedded or separate computerd) and the
// environment the CLI needs to reach it.
type pair struct {
	t          testing.TB
	dir        string // scratch: data, mount, token
	addr       string
	url        string
	token      string
	mount      string
	data       string
	server     *proc
	cd         *proc // a separate computerd, when not embedded
	cdState    string
	cdAddr     string
	env        []string
	serverArgs []string
}

type pairOpts struct {
	// separate runs computerd as its own process: "disk" for on-disk state
	// in the scratch dir, or a --state value (vfs.Memory); "" is embedded.
	separate string
	// serverArgs are extra flags for serve.
	serverArgs []string
	// stateTmpfs and dataTmpfs, when not zero, put computerd's state
	// directory (with separate "disk") and the server's data directory on
	// a tmpfs of that many bytes, mounted for the test.
	stateTmpfs, dataTmpfs int64
}

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	fusetest.RequireFUSE(t)
	dir := t.TempDir()
	p := &pair{t: t, dir: dir, serverArgs: o.serverArgs, token: "e2e-secret-token", mount: filepath.Join(dir, "workspace"), data: filepath.Join(dir, "data")}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(p.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A leftover mount breaks the next run: detach whatever remains.
		syscall.Unmount(p.mount, syscall.MNT_DETACH)
	})
	p.env = []string{"WSYNC_TOKEN_FILE=" + tokenFile}
	if o.dataTmpfs > 0 {
		testutil.MountTmpfs(t, p.data, o.dataTmpfs)
	}
	switch o.separate {
	case "":
	case "disk":
		p.cdState = filepath.Join(dir, "computerd.db")
		if o.stateTmpfs > 0 {
			testutil.MountTmpfs(t, filepath.Join(dir, "state"), o.stateTmpfs)
			p.cdState = filepath.Join(dir, "state", "computerd.db")
		}
		p.startComputerd()
	default:
		p.cdState = o.separate
		p.startComputerd()
	}
	p.startServer()
	return p
}

func (p *pair) tokenFile() string { return filepath.Join(p.dir, "token") }

func (p *pair) startComputerd() {
	p.t.Helper()
	p.launchComputerd()
	waitHealthy(p.t, "http://"+p.cdAddr, p.cd)
}

// launchComputerd starts computerd with extra environment (a crash point)
// and does not wait for it to be healthy: it may be meant to die first.
func (p *pair) launchComputerd(env ...string) {
	p.t.Helper()
	if p.cdAddr == "" {
		p.cdAddr = freePort(p.t)
	}
	p.cd = start(p.t, "computerd", []string{bin.computerd, "--listen", p.cdAddr, "--mount", p.mount, "--state", p.cdState, "--token-file", p.tokenFile()}, env...)
}

func (p *pair) startServer() {
	p.t.Helper()
	p.launchServer()
	waitHealthy(p.t, p.url, p.server)
}

// launchServer starts workspace-server with extra environment and does not
// wait for it to be healthy.
func (p *pair) launchServer(env ...string) {
	p.t.Helper()
	if p.addr == "" {
		p.addr = freePort(p.t)
		p.url = "http://" + p.addr
		p.env = append(p.env, "WSYNC_SERVER="+p.url)
	}
	args := []string{bin.server, "serve", "--listen", p.addr, "--data", p.data, "--token-file", p.tokenFile()}
	if p.cd != nil {
		args = append(args, "--computerd", "ws://"+p.cdAddr+"/sync", "--computerd-token-file", p.tokenFile())
	} else {
		args = append(args, "--mount", p.mount)
	}
	p.server = start(p.t, "workspace-server", append(args, p.serverArgs...), env...)
}

// result is one CLI run.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs a workspace-server client verb.
func (p *pair) cli(stdin string, args ...string) result {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.server, args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil && p.server != nil {
		// A hang: have the server dump its goroutines into its log, which
		// the cleanup prints for the failed test.
		p.server.cmd.Process.Signal(syscall.SIGQUIT)
		<-p.server.done
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		p.t.Fatalf("run %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// ok runs a verb that must succeed and returns its stdout.
func (p *pair) ok(args ...string) string {
	p.t.Helper()
	r := p.cli("", args...)
	if r.code != 0 {
		p.t.Fatalf("workspace-server %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// sh runs a shell command in the container through exec and returns stdout.
func (p *pair) sh(script string) string {
	p.t.Helper()
	return p.ok("exec", "--", "sh", "-c", script)
}

// fileInfo is one object of ls --json / stat --json.
type fileInfo struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size"`
	Target string `json:"target"`
	Sha256 string `json:"sha256"`
}

func (p *pair) stat(path string) (fileInfo, bool) {
	p.t.Helper()
	r := p.cli("", "stat", "--json", path)
	if r.code != 0 {
		return fileInfo{}, false
	}
	var fi fileInfo
	if err := json.Unmarshal([]byte(r.stdout), &fi); err != nil {
		p.t.Fatalf("stat --json %s: %v: %q", path, err, r.stdout)
	}
	return fi, true
}

func (p *pair) ls(path string, recursive bool) []fileInfo {
	p.t.Helper()
	args := []string{"ls", "--json"}
	if recursive {
		args = append(args, "-R")
	}
	var out []fileInfo
	if err := json.Unmarshal([]byte(p.ok(append(args, path)...)), &out); err != nil {
		p.t.Fatal(err)
	}
	return out
}

func syscallUnmount(dir string) { syscall.Unmount(dir, syscall.MNT_DETACH) }

// replaceContainer stands for the platform replacing the container:
// computerd stops, and comes back with an empty store at the same path.
func (p *pair) replaceContainer() {
	p.t.Helper()
	p.dropContainer()
	p.startComputerd()
}

// dropContainer stops computerd and removes its state.
func (p *pair) dropContainer() {
	p.t.Helper()
	p.stopContainer()
	removeState(p.t, p.cdState)
}

// stopContainer stops computerd (SIGTERM) and detaches its mount; its
// state stays.
func (p *pair) stopContainer() {
	p.t.Helper()
	p.cd.stop(syscall.SIGTERM)
	syscallUnmount(p.mount)
}

// removeState removes a computerd state path and what lies beside it (the
// store's WAL, chunks and staging).
func removeState(t testing.TB, path string) {
	t.Helper()
	olds, _ := filepath.Glob(path + "*")
	for _, f := range olds {
		if err := os.RemoveAll(f); err != nil {
			t.Fatal(err)
		}
	}
}
