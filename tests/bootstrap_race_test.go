package tests

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteDuringBootstrapIsKept: a process in a replaced, empty container
// writes in the mount while the server bootstraps the container from a
// snapshot: a file the snapshot lacks, and one it holds with other bytes.
// Neither write is lost (the install used to delete the first and
// overwrite the second): the push completes, the install having left the
// container's own changes and the push carrying on entry by entry, the
// next pull brings both to the server, and the file both sides wrote is a
// conflict, both versions kept.
func TestWriteDuringBootstrapIsKept(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`mkdir -p src && for i in $(seq 1 12000); do echo $i > src/f$i; done`)
	p.sync("pull")

	// The platform replaces the container with an empty one, again and
	// again: the first is bootstrapped alone, and leaves the server a fetch
	// cursor as far into that container's feed as the install of the next
	// will reach (no reset then tells the server it is stale).
	p.replaceContainer()
	if rep := p.sync("push"); !rep.Rebaselined {
		t.Fatalf("push to the first empty container: %+v, want a bootstrap", rep)
	}
	p.sync("pull")

	// One try: a new empty container, and the writes once the first of the
	// snapshot's pages is staged (12,000 records make two): after the begin
	// found the store empty, before the install, which comes after the last
	// page. On a loaded machine they may land after the install instead (a
	// plain local change then), and the container is replaced again.
	try := func() (syncReport, bool) {
		p.replaceContainer()
		done := make(chan result, 1)
		go func() { done <- p.cli("", "push", "--json") }()
		var staging *sql.DB
		waitFor(t, "the snapshot's first page", time.Minute, func() bool {
			if staging == nil {
				if _, err := os.Stat(p.cdState + ".snapshot"); err != nil {
					return false
				}
				staging = openStoreDB(t, p.cdState+".snapshot")
			}
			var n int
			err := staging.QueryRow(`SELECT count(*) FROM records`).Scan(&n)
			return err == nil && n > 0
		})
		for _, w := range []struct{ path, data string }{
			{"during.txt", "written during the bootstrap\n"},
			{"src/f7", "the container's f7\n"},
		} {
			f := filepath.Join(p.mount, w.path)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(w.data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r := <-done
		if r.code != 0 {
			t.Fatalf("push during the writes: exit %d\n%s", r.code, r.stderr)
		}
		var rep syncReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatal(err)
		}
		return rep, strings.Contains(p.cd.output(), "snapshot installed around the container's own changes")
	}
	var rep syncReport
	for attempt := 1; ; attempt++ {
		var hit bool
		if rep, hit = try(); hit {
			break
		}
		if attempt == 3 {
			t.Fatalf("in %d tries the writes never landed while the snapshot installed (last push %+v); computerd:\n%s", attempt, rep, p.cd.output())
		}
		t.Logf("try %d: the writes landed after the install; the container is replaced again", attempt)
	}
	t.Logf("push with the container writing: %+v", rep)

	if got := p.sh(`cat during.txt src/f7 src/f12000`); got != "written during the bootstrap\nthe container's f7\n12000\n" {
		t.Errorf("container after the push: %q", got)
	}
	p.sync("pull")
	c := p.client()
	if b, err := c.ReadFile(t.Context(), "/during.txt"); err != nil || string(b) != "written during the bootstrap\n" {
		t.Errorf("server's /during.txt: %q, %v", b, err)
	}
	if b, err := c.ReadFile(t.Context(), "/src/f7"); err != nil || string(b) != "7\n" {
		t.Errorf("server's /src/f7 (its version keeps the name): %q, %v", b, err)
	}
	var copies []string
	for _, fi := range p.ls("/src", false) {
		if strings.HasPrefix(filepath.Base(fi.Path), "f7.conflict-container-") {
			copies = append(copies, fi.Path)
		}
	}
	if len(copies) != 1 {
		t.Fatalf("conflict copies of /src/f7 on the server: %v, want one", copies)
	}
	if b, err := c.ReadFile(t.Context(), copies[0]); err != nil || string(b) != "the container's f7\n" {
		t.Errorf("server's %s: %q, %v", copies[0], b, err)
	}
	p.sync("push")
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
