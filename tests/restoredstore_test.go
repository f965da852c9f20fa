package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRestoredContainerStoreKeepsItsWrites: the platform restores the
// container's disk from a snapshot taken before the server pulled more of
// it (a sandbox rolled back, a volume restored). The restored store has
// the same id and stamps again the revs the server's fetch cursor counts
// as fetched; what it writes there before the server talks to it must
// reach the server, and what the server pulled from the history the
// restore undid must come back to the container.
func TestRestoredContainerStoreKeepsItsWrites(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`for i in $(seq 1 20); do echo base-$i > b$i; done`)
	p.sync("pull")

	// The platform snapshots the container's disk (computerd stopped, so
	// the copy is consistent).
	p.stopContainer()
	snap := filepath.Join(p.dir, "snapshot")
	copyState(t, p.cdState, snap)
	p.startComputerd()

	// After the snapshot: the server writes a file that is pushed to the
	// container (the revs its apply stamps move the server's fetch cursor
	// too), then the container writes 100 files and the server pulls them.
	if _, err := p.client().WriteFile(t.Context(), "/from-server", strings.NewReader("server\n"), nil); err != nil {
		t.Fatal(err)
	}
	p.sync("push")
	p.sh(`for i in $(seq 1 100); do echo undone-$i > u$i; done`)
	p.sync("pull")

	// A computerd killed and started again is the same history: the next
	// pull carries what it wrote since, not the whole feed.
	p.cd.stop(syscall.SIGKILL)
	syscallUnmount(p.mount)
	p.startComputerd()
	if err := os.WriteFile(filepath.Join(p.mount, "after-kill"), []byte("k\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := p.sync("pull"); r.Rebaselined || r.Entries != 1 {
		t.Errorf("pull after a restart: %+v, want one entry and no re-baseline", r)
	}
	// status shows what each side served: the container's is at or past
	// the server's fetch cursor, the server's at or past its push cursor.
	var st struct {
		Remote struct {
			Server struct {
				Served int64 `json:"served"`
				Push   struct {
					Rev int64 `json:"rev"`
				} `json:"push"`
				Fetch struct {
					Rev int64 `json:"rev"`
				} `json:"fetch"`
			} `json:"server"`
			Container struct {
				Served int64 `json:"served"`
			} `json:"container"`
		} `json:"remote"`
	}
	if err := json.Unmarshal([]byte(p.ok("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if srv, c := st.Remote.Server, st.Remote.Container; c.Served < srv.Fetch.Rev || srv.Fetch.Rev == 0 || srv.Served < srv.Push.Rev {
		t.Errorf("status: container served %d, server fetch %d; server served %d, push %d", c.Served, srv.Fetch.Rev, srv.Served, srv.Push.Rev)
	}

	// The platform restores the snapshot; the restored container writes
	// 200 files of its own before the server talks to it again: more revs
	// than the server fetched after the snapshot, so its current rev is
	// past the server's fetch cursor.
	p.stopContainer()
	copyState(t, snap, p.cdState)
	p.startComputerd()
	for i := 1; i <= 200; i++ {
		if err := os.WriteFile(filepath.Join(p.mount, fmt.Sprintf("n%d", i)), []byte(fmt.Sprintf("restored-%d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r := p.sync("push"); !r.Rebaselined {
		t.Errorf("push after the restore: %+v, want a re-baseline", r)
	}
	p.sync("pull")

	lost := 0
	for i := 1; i <= 200; i++ {
		name := fmt.Sprintf("/n%d", i)
		if b, err := p.client().ReadFile(t.Context(), name); err != nil || string(b) != fmt.Sprintf("restored-%d\n", i) {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of the restored container's 200 files are not on the server", lost)
	}
	for i := 1; i <= 100; i++ {
		name := filepath.Join(p.mount, fmt.Sprintf("u%d", i))
		if b, err := os.ReadFile(name); err != nil || string(b) != fmt.Sprintf("undone-%d\n", i) {
			t.Errorf("container %s = %q, %v: the server did not give back what the restore undid", name, b, err)
			break
		}
	}
	if b, err := os.ReadFile(filepath.Join(p.mount, "from-server")); err != nil || string(b) != "server\n" {
		t.Errorf("container /from-server = %q, %v: the server did not give back its own write the restore undid", b, err)
	}
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// copyState replaces what lies at dst (a computerd state path: the store
// and its WAL, chunks and staging beside it) with what lies at src.
func copyState(t *testing.T, src, dst string) {
	t.Helper()
	removeState(t, dst)
	news, _ := filepath.Glob(src + "*")
	if len(news) == 0 {
		t.Fatalf("no state at %s", src)
	}
	for _, f := range news {
		to := dst + strings.TrimPrefix(f, src)
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.IsDir() {
			err = os.CopyFS(to, os.DirFS(f))
		} else {
			var b []byte
			if b, err = os.ReadFile(f); err == nil {
				err = os.WriteFile(to, b, fi.Mode())
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestoredServerStoreGetsItsWritesBack: the server's data is restored
// from a backup taken before a file written through its API was pushed to
// the container. The container still holds the file, as an entry the
// server pushed (its bounce run keeps such entries out of the server's
// pulls); the restored server must get it back from the container rather
// than leave the two sides apart.
func TestRestoredServerStoreGetsItsWritesBack(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`for i in $(seq 1 20); do echo base-$i > b$i; done`)
	p.sync("pull")

	p.server.stop(syscall.SIGTERM)
	backup := filepath.Join(p.dir, "backup")
	if err := os.CopyFS(backup, os.DirFS(p.data)); err != nil {
		t.Fatal(err)
	}
	p.startServer()
	if _, err := p.client().WriteFile(t.Context(), "/late.txt", strings.NewReader("written after the backup\n"), nil); err != nil {
		t.Fatal(err)
	}
	if got := p.sh("cat late.txt"); got != "written after the backup\n" {
		t.Fatalf("the container's late.txt = %q", got)
	}

	p.server.stop(syscall.SIGTERM)
	if err := os.RemoveAll(p.data); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(p.data, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	p.startServer()
	p.sync("pull")
	if b, err := p.client().ReadFile(t.Context(), "/late.txt"); err != nil || string(b) != "written after the backup\n" {
		t.Errorf("server /late.txt = %q, %v: the container's copy did not come back", b, err)
	}
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestExecInARestoredContainerPullsItsWrites: the first command run in a
// restored container writes fewer revs than the server fetched after the
// snapshot. The exec's trailing pull must not be skipped on the server's
// old cursor, which covers the command's feed head: what the command
// wrote is on the server when the exec returns. (The exec's push
// reconciles first; here the restored store's rev is below the cursor, so
// either rule, that one or what it served, takes the cursor back.)
func TestExecInARestoredContainerPullsItsWrites(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`echo base > base`)
	p.stopContainer()
	snap := filepath.Join(p.dir, "snapshot")
	copyState(t, p.cdState, snap)
	p.startComputerd()
	// Each file written twice: more revs than the 50 entries the server
	// pushes back after the restore stamp, so the command's write after
	// them has a rev the server's old cursor covers.
	p.sh(`for i in $(seq 1 50); do echo undone > u$i; echo undone-$i > u$i; done`)

	p.stopContainer()
	copyState(t, snap, p.cdState)
	p.startComputerd()
	p.sh(`echo after the restore > new.txt`)
	if b, err := p.client().ReadFile(t.Context(), "/new.txt"); err != nil || string(b) != "after the restore\n" {
		t.Errorf("server /new.txt right after the exec = %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(p.mount, "u50")); err != nil || string(b) != "undone-50\n" {
		t.Errorf("container u50 = %q, %v", b, err)
	}
}

// TestBothSidesRestored: the server's data and the container's state are
// both restored from copies taken at different times, with writes on both
// sides synced between the two copies. Whichever copy is older, nothing
// either side wrote and the other still holds is lost: after a push and a
// pull both hold every file, and verify finds them converged.
func TestBothSidesRestored(t *testing.T) {
	for _, serverOlder := range []bool{true, false} {
		name := "container copy older"
		if serverOlder {
			name = "server copy older"
		}
		t.Run(name, func(t *testing.T) {
			p := newPair(t, pairOpts{separate: "disk"})
			p.sh(`echo base > base`)
			serverCopy, containerCopy := filepath.Join(p.dir, "server-copy"), filepath.Join(p.dir, "container-copy")
			copyServer := func() {
				p.server.stop(syscall.SIGTERM)
				if err := os.CopyFS(serverCopy, os.DirFS(p.data)); err != nil {
					t.Fatal(err)
				}
				p.startServer()
			}
			copyContainer := func() {
				p.stopContainer()
				copyState(t, p.cdState, containerCopy)
				p.startComputerd()
			}
			first, second := copyContainer, copyServer
			if serverOlder {
				first, second = copyServer, copyContainer
			}
			// Between the two copies, each side writes and the pair syncs.
			first()
			if _, err := p.client().WriteFile(t.Context(), "/from-server", strings.NewReader("server\n"), nil); err != nil {
				t.Fatal(err)
			}
			p.sh(`for i in $(seq 1 30); do echo c-$i > c$i; done`)
			second()

			// Both restored.
			p.server.stop(syscall.SIGTERM)
			p.stopContainer()
			if err := os.RemoveAll(p.data); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(p.data, os.DirFS(serverCopy)); err != nil {
				t.Fatal(err)
			}
			copyState(t, containerCopy, p.cdState)
			p.startComputerd()
			p.startServer()
			p.sync("push")
			p.sync("pull")

			want := map[string]string{"/base": "base\n", "/from-server": "server\n"}
			for i := 1; i <= 30; i++ {
				want[fmt.Sprintf("/c%d", i)] = fmt.Sprintf("c-%d\n", i)
			}
			for name, body := range want {
				if b, err := p.client().ReadFile(t.Context(), name); err != nil || string(b) != body {
					t.Errorf("server %s = %q, %v", name, b, err)
				}
				if b, err := os.ReadFile(filepath.Join(p.mount, name)); err != nil || string(b) != body {
					t.Errorf("container %s = %q, %v", name, b, err)
				}
			}
			if r := p.cli("", "verify"); r.code != 0 {
				t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}
