package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/crashpoint"
)

// TestCrashDuringBulkInstall SIGKILLs computerd inside a transaction of a
// snapshot install into its empty store (vfs.apply.bulk: the rows of a
// batch written in bulk, not committed), in the first transaction and in
// the second (the first committed). The restarted computerd must finish
// the install from its staging before it serves: the mount shows the
// whole tree at once, with no sync in between, the staging is gone, the
// next push moves no entry the container lacks, and at rest every chunk's
// count is what the manifests name, with no hold left.
func TestCrashDuringBulkInstall(t *testing.T) {
	for _, hit := range []int{1, 2} {
		t.Run(fmt.Sprintf("hit=%d", hit), func(t *testing.T) {
			p := newPair(t, pairOpts{separate: "disk"})
			c := p.client()
			m := treeModel{}
			rng := rand.New(rand.NewPCG(uint64(hit), 0xb01d))
			side := apiSide{t: t, c: c}
			// Enough records for several install transactions (256, 512,
			// ...): the workload's tree plus 1,500 small files.
			genPhase(rng, m, side, 1, 0)
			side.mkdir("/bulk")
			m["/bulk"] = "dir"
			for i := range 1500 {
				data := []byte(strings.Repeat(strconv.Itoa(i), 1+i%7))
				side.write(fmt.Sprintf("/bulk/f%04d", i), data)
				m[fmt.Sprintf("/bulk/f%04d", i)] = "file:" + sum(data)
			}
			p.sync("push")

			victim := p.restartArmed("computerd", "install", crashpoint.Env+"=vfs.apply.bulk:"+strconv.Itoa(hit))
			r := p.cli("", "push")
			t.Logf("push during the crash: exit %d %s", r.code, strings.TrimSpace(r.stderr))
			select {
			case <-victim.done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("computerd never reached vfs.apply.bulk:%d", hit)
			}
			if want := "crashpoint: vfs.apply.bulk hit"; !strings.Contains(victim.output(), want) {
				t.Fatalf("computerd died (%v) but not at its crash point:\n%s", victim.err, victim.output())
			}

			syscallUnmount(p.mount)
			p.startComputerd()
			// Before any sync: the restart finished the install.
			m.check(t, "container after the restart", mountTree(t, p.mount))
			if fi, err := os.Stat(p.cdState + ".snapshot"); err == nil {
				t.Errorf("staging still on disk after the restart (%d bytes)", fi.Size())
			}
			rep := p.sync("push")
			if rep.Entries != 0 {
				t.Errorf("push after the finished install applied %d entries, want 0", rep.Entries)
			}
			if r := p.cli("", "verify"); r.code != 0 {
				t.Errorf("verify after recovery: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			m.check(t, "server", serverTree(t, c))
			m.check(t, "container", mountTree(t, p.mount))
			// The batches took over the holds of their chunks, the one
			// killed too once it ran again: at rest every count is the
			// manifests' and no hold is left.
			p.cd.stop(15)
			syscallUnmount(p.mount)
			checkChunkStore(t, p.cdState)
		})
	}
}
