package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/workspace"
)

// execLs is `exec ls --json`, by id.
func (p *pair) execLs() map[string]workspace.ExecInfo {
	p.t.Helper()
	var list workspace.ExecList
	if err := json.Unmarshal([]byte(p.ok("exec", "ls", "--json")), &list); err != nil {
		p.t.Fatalf("exec ls --json: %v", err)
	}
	out := make(map[string]workspace.ExecInfo)
	for _, e := range list.Execs {
		out[e.ExecID] = e
	}
	return out
}

// detach runs `exec --detach -- sh -c script` and returns the id it prints.
func (p *pair) detach(script string) string {
	p.t.Helper()
	id := strings.TrimSpace(p.ok("exec", "--detach", "--", "sh", "-c", script))
	if err := workspace.ValidateExecID(id); err != nil {
		p.t.Fatalf("exec --detach printed %q: %v", id, err)
	}
	return id
}

// A detached command outlives the client that started it and a SIGKILL of
// the server: the restarted server re-attaches to it by id, makes the pull
// after it (its files arrive), and its output is complete, replayable from
// any offset.
func TestDetachedExecSurvivesClientAndServerRestart(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	// The command waits for a file the test makes once the server is back:
	// it is running through the whole restart.
	gate := filepath.Join(t.TempDir(), "go")
	const n = 50
	id := p.detach(fmt.Sprintf(`echo begin; while [ ! -e %s ]; do sleep 0.05; done; mkdir -p out; i=1; while [ $i -le %d ]; do echo "file $i" > out/$i; i=$((i+1)); done; echo end`, gate, n))
	if e := p.execLs()[id]; e.State != workspace.ExecStateRunning || !e.Detached {
		t.Fatalf("listed after the client exited: %+v, want running and detached", e)
	}

	p.server.kill()
	p.startServer()
	if e := p.execLs()[id]; e.State != workspace.ExecStateRunning {
		t.Fatalf("listed after the restart: %+v, want running", e)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := p.cli("", "exec", "wait", id); r.code != 0 {
		t.Fatalf("exec wait: exit %d: %s", r.code, r.stderr)
	}
	// wait answers after the pull the re-attached follower made.
	for _, i := range []int{1, n} {
		if got, want := p.ok("read", fmt.Sprintf("/out/%d", i)), fmt.Sprintf("file %d\n", i); got != want {
			t.Errorf("/out/%d = %q, want %q", i, got, want)
		}
	}
	e := p.execLs()[id]
	if e.State != workspace.ExecStateExited || e.Sync != workspace.SyncComplete || e.OutputBytes != 10 || e.Result == nil || e.Result.ExitCode != 0 {
		t.Errorf("listed at the end: %+v, want exited 0, its pull complete, 10 bytes of output", e)
	}
	if got := p.ok("exec", "attach", id); got != "begin\nend\n" {
		t.Errorf("attach from 0: %q, want begin and end", got)
	}
	if got := p.ok("exec", "attach", id, "--from", "6"); got != "end\n" {
		t.Errorf("attach --from 6: %q, want end", got)
	}
}

// kill ends a detached command (wait exits 128+n); the workspace's limit
// refuses a command beyond it with EEXEC_BUSY; an id of a computerd that
// was replaced is reported lost.
func TestDetachedExecKillBusyAndLost(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk", serverArgs: []string{"--max-execs", "2", "--retry-backoff", "50ms"}})
	a := p.detach("sleep 60")
	b := p.detach("echo up; sleep 60")
	r := p.cli("", "exec", "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "EEXEC_BUSY") {
		t.Fatalf("a third command at --max-execs 2: exit %d %q, want 1 naming EEXEC_BUSY", r.code, r.stderr)
	}
	p.ok("exec", "kill", a, "--signal", "TERM")
	if r := p.cli("", "exec", "wait", a); r.code != 143 {
		t.Fatalf("wait for the killed command: exit %d %s, want 143", r.code, r.stderr)
	}
	if e := p.execLs()[a]; e.State != workspace.ExecStateKilled {
		t.Errorf("killed command listed as %+v", e)
	}
	waitFor(t, "the slot of the killed command", 30*time.Second, func() bool { return p.cli("", "exec", "--", "true").code == 0 })

	p.cd.kill() // its commands die with it (Pdeathsig); the next computerd is another runtime
	syscallUnmount(p.mount)
	p.startComputerd()
	r = p.cli("", "exec", "wait", b)
	if r.code != 1 || !strings.Contains(r.stderr, "EEXEC_LOST") {
		t.Fatalf("wait for a command of the replaced computerd: exit %d %q, want 1 naming EEXEC_LOST", r.code, r.stderr)
	}
	if e := p.execLs()[b]; e.State != workspace.ExecStateLost || e.Error == "" {
		t.Errorf("command of the replaced computerd listed as %+v, want lost", e)
	}
	if r := p.cli("", "exec", "attach", b); r.code != 1 || !strings.Contains(r.stderr, "EEXEC_LOST") {
		t.Errorf("attach to it: exit %d %q, want EEXEC_LOST", r.code, r.stderr)
	}
}

// A foreground command whose output outruns its reader still ends with its
// exit code and its last output: the stream skips what computerd's bounded
// log dropped, and the CLI says how much was lost where (the stream ended
// ELOG_TRUNCATED with no result after 8-16 MiB of fast output).
func TestForegroundExecWithFloodingOutputEnds(t *testing.T) {
	p := newPair(t, pairOpts{})
	const size = 64 << 20
	r := p.cli("", "exec", "--log-cap", "65536", "--", "sh", "-c",
		fmt.Sprintf("head -c %d /dev/zero; echo end; exit 7", size))
	if r.code != 7 {
		t.Fatalf("exit %d, want the command's 7\nstderr: %.2000s", r.code, r.stderr)
	}
	if !strings.HasSuffix(r.stdout, "end\n") {
		t.Errorf("stdout (%d bytes) does not end with the command's last line", len(r.stdout))
	}
	lost := len(r.stdout) < size+4
	if said := strings.Contains(r.stderr, "of the command's output were lost here"); said != lost {
		t.Errorf("%d of %d bytes arrived; stderr says lost: %v\nstderr: %.2000s", len(r.stdout), size+4, said, r.stderr)
	}
}
