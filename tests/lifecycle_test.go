package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace/client"
)

// syncReport is push/pull --json.
type syncReport struct {
	Entries     int   `json:"entries"`
	Skipped     int   `json:"skipped"`
	Objects     int   `json:"objects"`
	Bytes       int64 `json:"bytes"`
	Rebaselined bool  `json:"rebaselined"`
}

func (p *pair) sync(verb string) syncReport {
	p.t.Helper()
	var r syncReport
	if err := json.Unmarshal([]byte(p.ok(verb, "--json")), &r); err != nil {
		p.t.Fatal(err)
	}
	return r
}

func (p *pair) client() *client.Workspace {
	p.t.Helper()
	c, err := client.New(p.url, p.token)
	if err != nil {
		p.t.Fatal(err)
	}
	return c.Workspace("default")
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, d, cond)
}

func countDir(dir string) int {
	es, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	return len(es)
}

func TestServerRestartKeepsWatermarks(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`mkdir -p d && for i in $(seq 1 50); do echo $i > d/$i; done`)
	p.server.stop(15)
	p.startServer()
	// Nothing changed on either side: the syncs after a restart move nothing.
	if r := p.sync("pull"); r.Entries+r.Skipped != 0 || r.Rebaselined {
		t.Errorf("pull after a server restart = %+v, want nothing (watermarks persisted)", r)
	}
	if r := p.sync("push"); r.Entries+r.Skipped != 0 || r.Rebaselined {
		t.Errorf("push after a server restart = %+v, want nothing", r)
	}
	p.sh(`echo changed > d/7`)
	if got := p.ok("read", "/d/7"); got != "changed\n" {
		t.Errorf("/d/7 = %q", got)
	}
}

func TestComputerdRestartWithDiskStateIsIncremental(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`for i in $(seq 1 100); do echo $i > f$i; done`)
	p.cd.stop(15)
	p.startComputerd()
	if r := p.sync("push"); r.Entries != 0 || r.Rebaselined {
		t.Errorf("push after a computerd restart with its state kept = %+v, want nothing", r)
	}
	if got := p.sh(`cat f42`); got != "42\n" {
		t.Errorf("container lost f42: %q", got)
	}
}

func TestComputerdRestartInMemoryRebaselines(t *testing.T) {
	p := newPair(t, pairOpts{separate: vfs.Memory})
	p.sh(`mkdir -p src && for i in $(seq 1 100); do echo $i > src/f$i; done`)
	p.cli("server side\n", "write", "/server.txt", "-")
	p.ok("push")
	p.cd.stop(15)
	p.startComputerd() // an empty store: the invariant must notice
	r := p.sync("push")
	if !r.Rebaselined {
		t.Errorf("push to a reset container = %+v, want a re-baseline", r)
	}
	if !strings.Contains(p.server.output(), "bootstrapped an empty container") {
		t.Error("the empty container was not bootstrapped from a snapshot")
	}
	if got := p.sh(`cat src/f99 server.txt`); got != "99\nserver side\n" {
		t.Errorf("container after re-baseline: %q", got)
	}
	// Nothing the server held was lost.
	if n := len(p.ls("/src", false)); n != 100 {
		t.Errorf("server has %d of 100 files after the container reset", n)
	}
	p.sh(`echo after > after.txt`)
	if got := p.ok("read", "/after.txt"); got != "after\n" {
		t.Errorf("sync after re-baseline: %q", got)
	}
}

func TestServerKilledMidPullResumes(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	const n = 5000
	// The command writes the files; the exec's own pull is what we kill.
	done := make(chan result, 1)
	go func() {
		done <- p.cli("", "exec", "--", "sh", "-c", fmt.Sprintf(`mkdir gen && i=0; while [ $i -lt %d ]; do echo "file $i" > gen/$i; i=$((i+1)); done`, n))
	}()
	c := p.client()
	waitFor(t, "the pull to be under way", 2*time.Minute, func() bool {
		es, err := c.List(context.Background(), "/gen", false, false)
		return err == nil && len(es) > 0
	})
	p.server.kill()
	<-done
	p.startServer()
	es, _ := c.List(context.Background(), "/gen", false, false)
	before := len(es)
	r := p.sync("pull")
	if r.Skipped > 256 {
		t.Errorf("resumed pull re-fetched %d already-applied entries, want at most 256", r.Skipped)
	}
	es, err := c.List(context.Background(), "/gen", false, false)
	if err != nil || len(es) != n {
		t.Fatalf("after resume the server has %d of %d files (%d before): %v", len(es), n, before, err)
	}
	if before >= n {
		t.Fatalf("the kill came after the pull finished (%d files already there): resume not exercised", before)
	}
	t.Logf("killed with %d of %d files pulled; the resumed pull applied %d and skipped %d", before, n, r.Entries, r.Skipped)
	if got := p.ok("read", "/gen/4999"); got != "file 4999\n" {
		t.Errorf("/gen/4999 = %q", got)
	}
}

func TestComputerdKilledMidPushShowsNoHalfBatch(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	c := p.client()
	ctx := context.Background()
	const n = 3000
	if _, err := c.Mkdir(ctx, "/gen", 0o755, false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := c.WriteFile(ctx, fmt.Sprintf("/gen/%04d", i), strings.NewReader(fmt.Sprintf("file %d\n", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	pushed := make(chan result, 1)
	go func() { pushed <- p.cli("", "push") }()
	gen := filepath.Join(p.mount, "gen")
	waitFor(t, "the push to be under way", 2*time.Minute, func() bool { return countDir(gen) > 0 })
	p.cd.kill()
	<-pushed
	syscallUnmount(p.mount)
	p.startComputerd()
	// What the container holds is whole batches, a prefix of the push order.
	got := countDir(gen)
	if got < 0 {
		got = 0
	}
	for i := range got {
		b, err := os.ReadFile(filepath.Join(gen, fmt.Sprintf("%04d", i)))
		if err != nil || string(b) != fmt.Sprintf("file %d\n", i) {
			t.Fatalf("after the crash the container holds %d files but %04d is %q, %v", got, i, b, err)
		}
	}
	// The batch holding /gen also holds 255 files; later batches hold 256.
	if got != 0 && got != n && (got+1)%256 != 0 {
		t.Errorf("container holds %d files after the crash: not a whole number of 256-entry batches", got)
	}
	p.ok("push")
	if c := countDir(gen); c != n {
		t.Errorf("after the next push the container has %d of %d files", c, n)
	}
}

func TestTwoWorkspacesStayApart(t *testing.T) {
	p := newPair(t, pairOpts{})
	// A second workspace bound to a computerd of its own.
	other := &pair{t: t, dir: p.dir, mount: filepath.Join(p.dir, "other-mount"), cdState: filepath.Join(p.dir, "other.db")}
	other.startComputerd()
	t.Cleanup(func() { syscallUnmount(other.mount) })
	p.ok("workspaces", "create", "two", "--computerd", "ws://"+other.cdAddr+"/sync", "--computerd-token-file", p.tokenFile(), "--ignore", "build")
	p.sh(`echo one > only-in-default`)
	p.ok("exec", "--workspace", "two", "--", "sh", "-c", "echo two > only-in-two")
	if _, ok := p.stat("/only-in-two"); ok {
		t.Error("workspace two's file appears in default")
	}
	if r := p.cli("", "read", "--workspace", "two", "/only-in-default"); r.code == 0 {
		t.Error("default's file appears in workspace two")
	}
	if got := p.ok("read", "--workspace", "two", "/only-in-two"); got != "two\n" {
		t.Errorf("two's file = %q", got)
	}
	if _, err := os.Stat(filepath.Join(p.mount, "only-in-two")); err == nil {
		t.Error("two's file reached default's mount")
	}
	// Workspace two's ignore list ("build") replaces the default: its
	// node_modules syncs, its build stays in the container.
	p.ok("exec", "--workspace", "two", "--", "sh", "-c", "mkdir -p node_modules build && echo m > node_modules/m && echo b > build/b")
	if got := p.ok("read", "--workspace", "two", "/node_modules/m"); got != "m\n" {
		t.Errorf("node_modules under a replaced ignore list: %q", got)
	}
	if r := p.cli("", "read", "--workspace", "two", "/build/b"); r.code == 0 {
		t.Error("build/ reached the server though workspace two ignores it")
	}
}

func TestOpenFileWhileAnotherExecPulls(t *testing.T) {
	p := newPair(t, pairOpts{})
	// One exec keeps a file open and writes to it; a second exec's pull
	// must see what it wrote so far.
	done := make(chan result, 1)
	go func() {
		done <- p.cli("", "exec", "--timeout", "60s", "--", "sh", "-c", `exec 3>held.log; echo first >&3; while [ ! -e release ]; do sleep 0.05; done; echo second >&3`)
	}()
	waitFor(t, "the held file to exist", time.Minute, func() bool {
		b, err := os.ReadFile(filepath.Join(p.mount, "held.log"))
		return err == nil && string(b) == "first\n"
	})
	p.sh(`true`)
	if got := p.ok("read", "/held.log"); got != "first\n" {
		t.Errorf("while held open, server has %q, want what was written so far", got)
	}
	p.sh(`touch release`)
	if r := <-done; r.code != 0 {
		t.Fatalf("holder exec: %+v", r)
	}
	if got := p.ok("read", "/held.log"); got != "first\nsecond\n" {
		t.Errorf("after close, server has %q", got)
	}
}

func TestVerifyFindsAndRepairsDrift(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`mkdir -p a/b && echo one > a/b/f && echo two > g && chmod 600 g`)
	if r := p.cli("", "verify"); r.code != 0 || !strings.Contains(r.stdout, "converged") {
		t.Fatalf("verify of a synced pair: %+v", r)
	}
	// Drift that no revision describes: change a mode in the server's
	// database behind its back.
	p.server.stop(15)
	db := filepath.Join(p.data, "default", "store.db")
	out, err := exec.Command("sqlite3", db, `UPDATE nodes SET mode = 448 WHERE ino = (SELECT child FROM dirents WHERE name = 'f')`).CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3: %v: %s", err, out)
	}
	p.startServer()
	r := p.cli("", "verify")
	if r.code != 3 || !strings.Contains(r.stdout, "/a/b/f") {
		t.Fatalf("verify after drift: exit %d, want 3 naming /a/b/f:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := p.cli("", "verify", "--repair"); r.code != 0 {
		t.Fatalf("verify --repair: %+v", r)
	}
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("verify after repair: %+v", r)
	}
}

func TestVerifyAfterSyncReportsInStatus(t *testing.T) {
	p := newPair(t, pairOpts{serverArgs: []string{"--verify-after-sync"}})
	p.sh(`mkdir d && echo x > d/y`)
	var st struct {
		LastVerify *struct {
			Converged bool `json:"converged"`
		} `json:"last_verify"`
	}
	if err := json.Unmarshal([]byte(p.ok("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.LastVerify == nil || !st.LastVerify.Converged {
		t.Errorf("status after an exec with --verify-after-sync: last_verify = %+v, want converged", st.LastVerify)
	}
}
