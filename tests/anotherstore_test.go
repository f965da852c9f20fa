package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnotherStoreBehindTheRuntime: the runtime's computerd comes back with
// another store, one with files of its own and more revs than the server
// has fetched of the old one (a platform that pools containers, or moves
// the state volume). The server must not take its fetch cursor, which
// counts the old store's revs, for this one's: nothing the new store holds
// may be overwritten unseen or left unfetched.
func TestAnotherStoreBehindTheRuntime(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk"})
	p.sh(`for i in $(seq 1 50); do echo old-$i > f$i; done`)
	p.sync("pull")

	// Another store: its own files, written through its mount before the
	// server talks to it.
	p.stopContainer()
	p.cdState = filepath.Join(p.dir, "other.db")
	p.startComputerd()
	for i := 1; i <= 200; i++ {
		if err := os.WriteFile(filepath.Join(p.mount, fmt.Sprintf("f%d", i)), []byte(fmt.Sprintf("other-%d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := p.cli("", "push")
	t.Logf("push to the other store: exit %d %s", r.code, strings.TrimSpace(r.stderr))
	p.sync("pull")
	// Every file the other store wrote is somewhere on the server: at its
	// name, or as a conflict copy beside the server's version.
	have := map[string]bool{}
	for _, fi := range p.ls("/", false) {
		if b, err := p.client().ReadFile(t.Context(), fi.Path); err == nil {
			have[string(b)] = true
		}
	}
	lost := 0
	for i := 1; i <= 200; i++ {
		if !have[fmt.Sprintf("other-%d\n", i)] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of the other store's 200 files are on the server neither at their name nor as a conflict copy", lost)
	}
	if r := p.cli("", "verify"); r.code != 0 {
		t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
