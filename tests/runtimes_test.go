package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wsync/wsync/vfs"
)

// The sync seed's "two containers sharing one Workspace" scenarios, with
// real binaries: a workspace-server with its embedded computerd (the
// default runtime, mount A) and a second computerd process (runtime b,
// mount B) attached to the same workspace. Agents are played by writes
// into the two mounts.

type twoContainers struct {
	*pair
	mountB string
}

func newTwoContainers(t *testing.T) *twoContainers {
	t.Helper()
	p := newPair(t, pairOpts{})
	mountB := filepath.Join(p.dir, "workspace-b")
	t.Cleanup(func() { syscallUnmount(mountB) })
	addr := freePort(t)
	cd := start(t, "computerd-b", []string{bin.computerd, "--listen", addr, "--mount", mountB,
		"--state", filepath.Join(p.dir, "computerd-b.db"), "--token-file", p.tokenFile()})
	waitHealthy(t, "http://"+addr, cd)
	p.ok("runtimes", "attach", "b", "--endpoint", "ws://"+addr+"/sync", "--computerd-token-file", p.tokenFile())
	return &twoContainers{pair: p, mountB: mountB}
}

func writeIn(t *testing.T, mount, rel, data string) {
	t.Helper()
	p := filepath.Join(mount, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readIn(t *testing.T, mount, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mount, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// put writes a file through the CLI.
func (p *pair) put(path, data string) {
	p.t.Helper()
	if r := p.cli(data, "write", path, "-"); r.code != 0 {
		p.t.Fatalf("write %s: exit %d: %s", path, r.code, r.stderr)
	}
}

// conflictRecord is what `conflicts --json` prints of one conflict.
type conflictRecord struct {
	ID       int64  `json:"id"`
	Path     string `json:"path"`
	Runtime  string `json:"runtime"`
	Kind     string `json:"kind"`
	Copy     string `json:"copy"`
	CopySide string `json:"copy_side"`
}

func (p *twoContainers) conflicts() []conflictRecord {
	p.t.Helper()
	var cs []conflictRecord
	if err := json.Unmarshal([]byte(p.ok("conflicts", "--json")), &cs); err != nil {
		p.t.Fatal(err)
	}
	return cs
}

// names lists a mount's root directory.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestTwoContainersEditingPlanKeepBoth(t *testing.T) {
	p := newTwoContainers(t)
	p.put("/PLAN.md", "# plan\n")
	p.ok("tick")
	if got := readIn(t, p.mountB, "PLAN.md"); got != "# plan\n" {
		t.Fatalf("B's PLAN.md = %q", got)
	}
	// Both agents edit the plan without seeing each other.
	writeIn(t, p.mount, "PLAN.md", "# plan\n- A: write the parser\n")
	writeIn(t, p.mountB, "PLAN.md", "# plan\n- B: write the tests\n")
	p.ok("tick")
	p.ok("tick")
	cs := p.conflicts()
	if len(cs) != 1 || cs[0].Path != "/PLAN.md" || cs[0].Runtime != "b" || cs[0].Kind != "both-modified" {
		t.Fatalf("conflicts = %+v, want one at /PLAN.md from runtime b", cs)
	}
	cp := strings.TrimPrefix(cs[0].Copy, "/")
	if !strings.HasPrefix(cp, "PLAN.conflict-b-") || !strings.HasSuffix(cp, ".md") {
		t.Fatalf("copy %q", cs[0].Copy)
	}
	for _, m := range []string{p.mount, p.mountB} {
		if got := readIn(t, m, "PLAN.md"); got != "# plan\n- A: write the parser\n" {
			t.Fatalf("%s PLAN.md = %q, want A's (pulled first)", m, got)
		}
		if got := readIn(t, m, cp); got != "# plan\n- B: write the tests\n" {
			t.Fatalf("%s %s = %q, want B's", m, cp, got)
		}
	}
	if got := p.ok("read", "/"+cp); got != "# plan\n- B: write the tests\n" {
		t.Fatalf("server %s = %q", cp, got)
	}
	// Settle it from the CLI: keep B's version under the name.
	p.ok("conflicts", "resolve", "/PLAN.md", "--keep", "container")
	p.ok("tick")
	if got := p.ok("read", "/PLAN.md"); got != "# plan\n- B: write the tests\n" {
		t.Fatalf("PLAN.md after resolve = %q", got)
	}
	if slices.Contains(names(t, p.mountB), cp) {
		t.Fatalf("the copy is still in B after resolving: %v", names(t, p.mountB))
	}
	if len(p.conflicts()) != 0 {
		t.Fatalf("open conflicts after resolve: %+v", p.conflicts())
	}
}

func TestReadModifyWriteCounterKeepsBothValues(t *testing.T) {
	p := newTwoContainers(t)
	p.put("/counter.txt", "5\n")
	p.ok("tick")
	// Both read 5 and write 6, each with its own note.
	writeIn(t, p.mount, "counter.txt", "6 (a)\n")
	writeIn(t, p.mountB, "counter.txt", "6 (b)\n")
	p.ok("tick")
	p.ok("tick")
	cs := p.conflicts()
	if len(cs) != 1 {
		t.Fatalf("conflicts = %+v, want one", cs)
	}
	for _, m := range []string{p.mount, p.mountB} {
		var all []string
		for _, n := range names(t, m) {
			if strings.HasPrefix(n, "counter") {
				all = append(all, strings.TrimSpace(readIn(t, m, n)))
			}
		}
		slices.Sort(all)
		if !slices.Equal(all, []string{"6 (a)", "6 (b)"}) {
			t.Fatalf("%s holds %q, want both values", m, all)
		}
	}
}

func TestDisjointSubtreesNeverConflict(t *testing.T) {
	p := newTwoContainers(t)
	for i := range 20 {
		n := string(rune('a' + i))
		writeIn(t, p.mount, "a/"+n, "from A "+n)
		writeIn(t, p.mountB, "b/"+n, "from B "+n)
	}
	for range 3 {
		p.ok("tick")
	}
	if cs := p.conflicts(); len(cs) != 0 {
		t.Fatalf("conflicts = %+v", cs)
	}
	if got := readIn(t, p.mount, "b/t"); got != "from B t" {
		t.Fatalf("A's b/t = %q", got)
	}
	if got := readIn(t, p.mountB, "a/t"); got != "from A t" {
		t.Fatalf("B's a/t = %q", got)
	}
}

func TestHandoffNeverConflicts(t *testing.T) {
	p := newTwoContainers(t)
	p.put("/PLAN.md", "v0\n")
	p.ok("tick")
	// A finishes its turn; the server pulls it.
	writeIn(t, p.mount, "PLAN.md", "v0\nA done\n")
	p.ok("pull")
	// B starts its turn from the server's state (a push to B), then edits.
	p.ok("push", "--runtime", "b")
	if got := readIn(t, p.mountB, "PLAN.md"); got != "v0\nA done\n" {
		t.Fatalf("B's PLAN.md after the handoff = %q", got)
	}
	writeIn(t, p.mountB, "PLAN.md", "v0\nA done\nB done\n")
	p.ok("pull", "--runtime", "b")
	p.ok("tick")
	if cs := p.conflicts(); len(cs) != 0 {
		t.Fatalf("conflicts = %+v", cs)
	}
	if got := readIn(t, p.mount, "PLAN.md"); got != "v0\nA done\nB done\n" {
		t.Fatalf("A's PLAN.md = %q", got)
	}
}

// A process holding a file open and writing while the server pushes its own
// version of it: the push waits (the fence), the pull brings the process's
// write, and both versions are kept.
func TestPushNeverOverwritesALiveWrite(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.put("/state.json", `{"v":0}`)
	p.ok("push")
	f, err := os.OpenFile(filepath.Join(p.mount, "state.json"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(`{"v":1,"by":"agent"}`); err != nil {
		t.Fatal(err)
	}
	p.put("/state.json", `{"v":1,"by":"api"}`)
	out := p.ok("push", "--json")
	var rep struct {
		Deferred int `json:"deferred"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Deferred != 1 {
		t.Fatalf("push = %s (%v), want one deferred entry", out, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	p.ok("tick")
	if got := p.ok("read", "/state.json"); got != `{"v":1,"by":"api"}` {
		t.Fatalf("state.json = %q, want the server's", got)
	}
	var cs []conflictRecord
	if err := json.Unmarshal([]byte(p.ok("conflicts", "--json")), &cs); err != nil || len(cs) != 1 {
		t.Fatalf("conflicts = %+v, %v", cs, err)
	}
	if got := p.ok("read", cs[0].Copy); got != `{"v":1,"by":"agent"}` {
		t.Fatalf("copy %s = %q, want the agent's write", cs[0].Copy, got)
	}
	if got := readIn(t, p.mount, strings.TrimPrefix(cs[0].Copy, "/")); got != `{"v":1,"by":"agent"}` {
		t.Fatalf("container copy = %q", got)
	}
}

// A container restarted with an empty :memory: store is re-baselined by a
// snapshot bootstrap: what it is then given and edits is no conflict,
// whatever the server's merge bases held for the old container.
func TestRestartedMemoryContainerInventsNoConflicts(t *testing.T) {
	p := newPair(t, pairOpts{separate: vfs.Memory})
	p.sh(`mkdir -p src && for i in 1 2 3; do echo $i > src/f$i; done`)
	p.put("/server.txt", "v0\n")
	p.ok("push")
	p.put("/server.txt", "v1 (unpushed when the container dies)\n")
	p.cd.kill()
	p.startComputerd()
	p.ok("tick")
	p.sh(`echo edited > src/f1 && echo "v2 from the new container" > server.txt`)
	p.ok("tick")
	var cs []conflictRecord
	if err := json.Unmarshal([]byte(p.ok("conflicts", "--json", "--all")), &cs); err != nil || len(cs) != 0 {
		t.Fatalf("conflicts after the restart = %+v, %v", cs, err)
	}
	if got := p.ok("read", "/server.txt"); got != "v2 from the new container\n" {
		t.Fatalf("server.txt = %q", got)
	}
	if got := p.ok("read", "/src/f1"); got != "edited\n" {
		t.Fatalf("src/f1 = %q", got)
	}
}
