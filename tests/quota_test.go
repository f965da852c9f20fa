package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
)

// The workspace's quota end to end with the real binaries: set-quota
// reaches the container's mount (df shows it, a write past it is EDQUOT),
// and a pull that would take the server past it stops before the batch
// that crosses it, says so in status, loses nothing on either side, and
// completes once the quota is raised.
func TestQuotaThroughTheMountAndAPull(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.ok("workspaces", "set-quota", "default", "--max-bytes", "1MiB", "--max-file-size", "800KiB")
	if r := p.cli("", "workspaces", "set-quota", "default", "--max-bytes", "-1"); r.code != 2 {
		t.Errorf("set-quota --max-bytes -1: exit %d, want 2 (bad usage)\n%s", r.code, r.stderr)
	}
	if r := p.cli("", "workspaces", "set-quota", "default", "--max-entries", "99999999999999999999"); r.code != 2 {
		t.Errorf("set-quota with a huge count: exit %d, want 2", r.code)
	}

	// The exec's push told the container: df inside the mount shows the quota.
	if got := strings.TrimSpace(p.sh("df -B1 --output=size . | tail -1")); got != "1048576" {
		t.Errorf("df size inside the mount %q, want the quota 1048576", got)
	}
	r := p.cli("", "exec", "--", "sh", "-c", "head -c 900000 /dev/urandom > big")
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "File too large") {
		t.Errorf("a file past the max file size in the mount: exit %d, %q; want EFBIG", r.code, r.stdout+r.stderr)
	}
	p.sh("rm -f big") // what the writes before the refused one left, on both sides

	// The server holds 400,000 bytes the container has not been sent; the
	// container writes 300 files of 2,500 bytes through its mount (its
	// usage stays under the quota). The pull's first batch (256 files)
	// fits the server's quota, the second does not.
	unpushed := bytes.Repeat([]byte("s"), 400000)
	if r := p.cli(string(unpushed), "write", "/server-only", "-"); r.code != 0 {
		t.Fatalf("write /server-only: %s", r.stderr)
	}
	gen := filepath.Join(p.mount, "gen")
	if err := os.Mkdir(gen, 0o755); err != nil {
		t.Fatal(err)
	}
	content := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 2500) }
	for i := range 300 {
		if err := os.WriteFile(filepath.Join(gen, fmt.Sprintf("f%03d", i)), content(i), 0o644); err != nil {
			t.Fatalf("write through the mount: %v", err)
		}
	}
	r = p.cli("", "pull")
	if r.code != 1 || !strings.Contains(r.stderr, "EDQUOT") {
		t.Fatalf("pull over the quota: exit %d, stderr %q; want 1 naming EDQUOT", r.code, r.stderr)
	}
	var st struct {
		Quota struct {
			MaxBytes int64 `json:"max_bytes"`
			Used     struct {
				Bytes int64 `json:"bytes"`
			} `json:"used"`
		} `json:"quota"`
		Pending *struct {
			State string `json:"state"`
			Error string `json:"error"`
		} `json:"pending"`
	}
	if err := json.Unmarshal([]byte(p.ok("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Pending == nil || st.Pending.State != "quota" || st.Quota.MaxBytes != 1<<20 || st.Quota.Used.Bytes > 1<<20 {
		t.Fatalf("status after the stopped pull: %+v", st)
	}
	if out := p.ok("status"); !strings.Contains(out, "quota:") || !strings.Contains(out, "stopped") {
		t.Errorf("status does not show the quota and the stopped pull:\n%s", out)
	}
	pulled := p.ls("/gen", false)
	if len(pulled) != 255 { // the first batch: gen itself and 255 files
		t.Errorf("the server has %d files of gen after the stopped pull, want 255 (one batch)", len(pulled))
	}
	// Nothing lost on either side.
	if got := p.ok("read", "/server-only"); got != string(unpushed) {
		t.Error("the server's own file changed")
	}
	ents, err := os.ReadDir(gen)
	if err != nil || len(ents) != 300 {
		t.Fatalf("the container has %d files of gen (%v), want 300", len(ents), err)
	}
	// A push is fenced while the pull is owed: the container keeps its files.
	if r := p.cli("", "push"); r.code == 0 {
		t.Error("a push went through with a pull the quota stopped")
	}

	// Raised: the background puller finishes the pull.
	out := p.ok("workspaces", "set-quota", "default", "--max-bytes", "10MiB")
	if !strings.Contains(out, "of 10 MiB") {
		t.Errorf("set-quota printed %q", out)
	}
	testutil.WaitFor(t, "the pull after raising the quota", 60*time.Second, func() bool {
		var s struct {
			Pending *struct{} `json:"pending"`
		}
		return json.Unmarshal([]byte(p.ok("status", "--json")), &s) == nil && s.Pending == nil
	})
	if n := len(p.ls("/gen", false)); n != 300 {
		t.Errorf("the server has %d files of gen after the quota was raised, want 300", n)
	}
	if got := p.ok("read", "/gen/f299"); got != string(content(299)) {
		t.Error("gen/f299 arrived wrong")
	}
	// And the server's file reaches the container on the next push.
	p.ok("push")
	if b, err := os.ReadFile(filepath.Join(p.mount, "server-only")); err != nil || !bytes.Equal(b, unpushed) {
		t.Errorf("server-only in the container: %d bytes, %v", len(b), err)
	}
}
