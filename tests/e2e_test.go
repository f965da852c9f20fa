package tests

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExecWriteArrivesOnServer(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh("echo hi > a")
	if got := p.ok("read", "/a"); got != "hi\n" {
		t.Errorf("read /a = %q", got)
	}
}

func TestAPIWriteVisibleInContainer(t *testing.T) {
	p := newPair(t, pairOpts{})
	if r := p.cli("from the api\n", "write", "/docs/b.txt", "-"); r.code != 0 {
		// write needs the parent: make it and retry.
		p.ok("mkdir", "-p", "/docs")
		if r := p.cli("from the api\n", "write", "/docs/b.txt", "-"); r.code != 0 {
			t.Fatalf("write: %d %s", r.code, r.stderr)
		}
	}
	if got := p.sh("cat docs/b.txt"); got != "from the api\n" {
		t.Errorf("exec cat = %q", got)
	}
	// And the mount itself shows it (the container's view).
	if b, err := os.ReadFile(filepath.Join(p.mount, "docs", "b.txt")); err != nil || string(b) != "from the api\n" {
		t.Errorf("mount read = %q, %v", b, err)
	}
}

func TestDeletesRenamesBothWays(t *testing.T) {
	p := newPair(t, pairOpts{})
	// Container side: a file rename, a 1,000-entry directory rename, a delete.
	p.sh(`mkdir -p big && for i in $(seq 1 1000); do echo $i > big/f$i; done; echo x > old; mv old new; echo gone > g`)
	if got := p.ok("read", "/big/f777"); got != "777\n" {
		t.Fatalf("read /big/f777 = %q", got)
	}
	p.sh(`mv big moved && rm g`)
	if _, ok := p.stat("/big"); ok {
		t.Error("/big survives its rename on the server")
	}
	if got := p.ok("read", "/moved/f1000"); got != "1000\n" {
		t.Errorf("read /moved/f1000 = %q", got)
	}
	if n := len(p.ls("/moved", false)); n != 1000 {
		t.Errorf("ls /moved has %d entries, want 1000", n)
	}
	if _, ok := p.stat("/g"); ok {
		t.Error("/g survives rm in the container")
	}
	if got := p.ok("read", "/new"); got != "x\n" {
		t.Errorf("/new = %q", got)
	}
	// Server side: mv and rm through the API reach the container.
	p.ok("mv", "/new", "/newer")
	p.ok("rm", "-r", "/moved")
	if got := p.sh(`ls; test -e moved && echo moved-still-there; cat newer`); got != "newer\nx\n" {
		t.Errorf("container after server mv/rm: %q", got)
	}
}

func TestSymlinksHardlinksAndModes(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh(`echo data > f && ln -s f link && ln f hard && echo '#!/bin/sh' > run.sh && chmod +x run.sh`)
	if fi, ok := p.stat("/link"); !ok || fi.Type != "symlink" || fi.Target != "f" {
		t.Errorf("stat /link = %+v", fi)
	}
	if got := p.ok("read", "/hard"); got != "data\n" {
		t.Errorf("hardlink name /hard = %q", got)
	}
	if fi, _ := p.stat("/run.sh"); fi.Mode&0o111 == 0 {
		t.Errorf("chmod +x in the container lost: mode %o", fi.Mode)
	}
	// The server never follows the symlink: a symlink to /etc/passwd is data.
	p.sh(`ln -s /etc/passwd evil`)
	if r := p.cli("", "read", "/evil"); r.code == 0 && strings.Contains(r.stdout, "root:") {
		t.Error("the server followed a workspace symlink on its host")
	}
	// Server to container: symlink and chmod.
	p.ok("symlink", "run.sh", "/alias")
	p.cli("echo server\n", "write", "/tool.sh", "-")
	// chmod through write's mode is not a CLI verb; use exec to check mode after a server write.
	if got := p.sh(`readlink alias; cat tool.sh`); got != "run.sh\necho server\n" {
		t.Errorf("container view of server symlink/write: %q", got)
	}
}

func TestTypeChangesBothWays(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh(`echo file > x`)
	p.sh(`rm x && mkdir -p x/inner && echo deep > x/inner/y`)
	if got := p.ok("read", "/x/inner/y"); got != "deep\n" {
		t.Fatalf("file to dir in the container: read = %q", got)
	}
	p.ok("rm", "-r", "/x")
	p.cli("now a file\n", "write", "/x", "-")
	if got := p.sh(`cat x`); got != "now a file\n" {
		t.Errorf("dir to file on the server: container sees %q", got)
	}
}

func TestIgnoredPathsStayInContainer(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh(`mkdir -p node_modules/pkg src/node_modules && echo m > node_modules/pkg/index.js && echo s > src/main.js && echo n > src/node_modules/x`)
	if _, ok := p.stat("/node_modules"); ok {
		t.Error("node_modules reached the server")
	}
	if _, ok := p.stat("/src/node_modules/x"); ok {
		t.Error("a nested node_modules reached the server")
	}
	if got := p.ok("read", "/src/main.js"); got != "s\n" {
		t.Errorf("/src/main.js = %q", got)
	}
	// Still there for the container's own commands.
	if got := p.sh(`cat node_modules/pkg/index.js`); got != "m\n" {
		t.Errorf("container lost its node_modules: %q", got)
	}
}

func TestExecBehaviour(t *testing.T) {
	p := newPair(t, pairOpts{})
	if r := p.cli("", "exec", "--", "sh", "-c", "echo out; echo err >&2; exit 7"); r.code != 7 || r.stdout != "out\n" || !strings.Contains(r.stderr, "err\n") {
		t.Errorf("exit code/streams: %+v", r)
	}
	if got := p.ok("exec", "--env", "GREETING=hello", "--", "sh", "-c", `echo $GREETING`); got != "hello\n" {
		t.Errorf("--env: %q", got)
	}
	p.sh("mkdir -p sub/dir")
	if got := p.ok("exec", "--cwd", "/sub/dir", "--", "pwd"); got != filepath.Join(p.mount, "sub", "dir")+"\n" {
		t.Errorf("--cwd: %q", got)
	}
	if r := p.cli("piped input\n", "exec", "--", "cat"); r.stdout != "piped input\n" {
		t.Errorf("stdin: %+v", r)
	}
	if r := p.cli("", "exec", "--timeout", "1s", "--", "sleep", "30"); r.code == 0 {
		t.Errorf("--timeout 1s of sleep 30 exited 0: %+v", r)
	}
	if r := p.cli("", "exec", "--", "sh", "-c", "kill -9 $$"); r.code != 128+9 {
		t.Errorf("killed by SIGKILL: exit %d, want 137", r.code)
	}
	if r := p.cli("", "exec", "--cwd", "/../..", "--", "true"); r.code == 0 {
		t.Errorf("a cwd outside the workspace was accepted")
	}
}

func TestAuthOnEveryRoute(t *testing.T) {
	p := newPair(t, pairOpts{})
	routes := []string{"/v1/workspaces", "/v1/workspaces/default/status", "/metrics"}
	for _, route := range routes {
		for _, auth := range []string{"", "Bearer nope"} {
			req, _ := http.NewRequest("GET", p.url+route, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with %q = %d, want 401", route, auth, resp.StatusCode)
			}
		}
	}
	// The CLI with a wrong token fails with exit 1.
	bad := filepath.Join(p.dir, "bad-token")
	os.WriteFile(bad, []byte("wrong"), 0o600)
	if r := p.cli("", "ls", "--token-file", bad, "/"); r.code != 1 {
		t.Errorf("ls with a wrong token: exit %d", r.code)
	}
}

func TestLsAndStatJSON(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh(`mkdir d && printf abc > d/f`)
	fi, ok := p.stat("/d/f")
	// sha256("abc")
	if !ok || fi.Path != "/d/f" || fi.Type != "file" || fi.Size != 3 || fi.Sha256 != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("stat --json /d/f = %+v", fi)
	}
	all := p.ls("/", true)
	var names []string
	for _, e := range all {
		names = append(names, e.Path+":"+e.Type)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "/d:dir") || !strings.Contains(got, "/d/f:file") {
		t.Errorf("ls -R --json / = %s", got)
	}
	if r := p.cli("", "stat", "/nope"); r.code != 1 || !strings.Contains(r.stderr, "ENOENT") {
		t.Errorf("stat of a missing path: %+v", r)
	}
	if r := p.cli("", "frobnicate"); r.code != 2 {
		t.Errorf("unknown verb: exit %d, want 2", r.code)
	}
}

func TestManyFilesRoundTrip(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.sh(`mkdir -p gen && i=0; while [ $i -lt 500 ]; do printf "file %d\n" $i > gen/$i.txt; i=$((i+1)); done`)
	if n := len(p.ls("/gen", false)); n != 500 {
		t.Fatalf("server has %d of 500 files", n)
	}
	for _, i := range []int{0, 250, 499} {
		if got := p.ok("read", fmt.Sprintf("/gen/%d.txt", i)); got != fmt.Sprintf("file %d\n", i) {
			t.Errorf("gen/%d.txt = %q", i, got)
		}
	}
}

func TestChmodFromServerReachesContainer(t *testing.T) {
	p := newPair(t, pairOpts{})
	if r := p.cli("#!/bin/sh\necho ran\n", "write", "--mode", "0755", "/tool.sh", "-"); r.code != 0 {
		t.Fatalf("write --mode: %+v", r)
	}
	if got := p.sh(`test -x tool.sh && ./tool.sh`); got != "ran\n" {
		t.Errorf("server-side mode 0755 in the container: %q", got)
	}
	if r := p.cli("#!/bin/sh\n", "write", "--mode", "0644", "/tool.sh", "-"); r.code != 0 {
		t.Fatalf("write --mode 0644: %+v", r)
	}
	if got := p.sh(`test -x tool.sh && echo still-executable || echo plain`); got != "plain\n" {
		t.Errorf("chmod -x from the server: %q", got)
	}
}

func TestInterruptedExecKillsTheCommand(t *testing.T) {
	p := newPair(t, pairOpts{})
	// A duration no other process on the machine runs: the check below
	// looks for it machine-wide.
	sleep := fmt.Sprintf("sleep %d", 300000+os.Getpid()%100000)
	cmd := exec.Command(bin.server, "exec", "--", "sh", "-c", "echo started > started; exec "+sleep)
	cmd.Env = append(os.Environ(), p.env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command to start", time.Minute, func() bool {
		_, err := os.Stat(filepath.Join(p.mount, "started"))
		return err == nil
	})
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("interrupted exec exited %v, want 130", err)
	}
	waitFor(t, "the sleep to be killed", time.Minute, func() bool {
		out, _ := exec.Command("pgrep", "-fx", sleep).Output()
		return len(strings.TrimSpace(string(out))) == 0
	})
}

// TestDemoScript runs the README's first command as a newcomer would (in
// its non-interactive form) and checks that the file written in the
// container arrives on the server.
func TestDemoScript(t *testing.T) {
	p := newPair(t, pairOpts{}) // only for the FUSE requirement and cleanup helpers
	p.server.stop(syscall.SIGTERM)
	addr := freePort(t)
	cmd := exec.Command("../scripts/demo.sh", "--once")
	cmd.Env = append(os.Environ(), "WSYNC_DEMO_PORT="+addr[strings.LastIndexByte(addr, ':')+1:])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh --once: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "== on the server: workspace-server read /hello.txt\nhello from the container\n") {
		t.Errorf("demo output does not show the file arriving on the server:\n%s", out)
	}
}
