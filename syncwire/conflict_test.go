package syncwire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wsync/wsync/internal/metrics"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// The detection rules of docs/ARCHITECTURE.md "Conflicts", through the
// real driver, server and stores: the server's store (p.server) detects,
// the container's (p.cont) fences.

var conflictAt = time.Date(2026, 12, 2, 5, 15, 0, 0, time.UTC)

func conflictPair(t *testing.T, policy vfs.ConflictPolicy) *pair {
	t.Helper()
	return newPair(t, DriverOptions{Conflicts: &vfs.ConflictOptions{Policy: policy, Now: func() time.Time { return conflictAt }}})
}

// copyOf is the keep-both copy name of path for side at conflictAt.
func copyOf(path, side string) string { return vfs.ConflictCopyName(path, side, conflictAt, 1) }

func read(t *testing.T, s *vfs.Store, p string) string {
	t.Helper()
	b, err := s.ReadFile(t.Context(), p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func absentAt(t *testing.T, s *vfs.Store, p string) {
	t.Helper()
	if _, err := s.Stat(t.Context(), p); err == nil {
		t.Fatalf("%s exists, want absent", p)
	}
}

func conflictsOf(t *testing.T, s *vfs.Store) []vfs.Conflict {
	t.Helper()
	cs, err := s.Conflicts(t.Context(), false, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// settled ticks until a tick moves nothing, at most n times, and checks
// both trees are equal.
func settled(t *testing.T, p *pair) {
	t.Helper()
	for range 4 {
		tr := p.tick()
		if tr.Pull.Applied == 0 && tr.Push.Applied == 0 && tr.Push.Deferred == 0 && len(tr.Pull.Conflicts) == 0 {
			assertSameTree(t, p.server, p.cont)
			return
		}
	}
	t.Fatal("the pair does not settle within four ticks")
}

// baseline writes the files on the server and syncs them to the container.
func baseline(t *testing.T, p *pair, files map[string]string) {
	t.Helper()
	for path, data := range files {
		write(t, p.server, path, []byte(data))
	}
	settled(t, p)
}

func wantOneConflict(t *testing.T, p *pair, path, kind, copyPath, copySide string) vfs.Conflict {
	t.Helper()
	cs := conflictsOf(t, p.server)
	if len(cs) != 1 {
		t.Fatalf("conflicts = %+v, want one at %s", cs, path)
	}
	c := cs[0]
	if c.Path != path || c.Kind != kind || c.Copy != copyPath || c.CopySide != copySide || !c.At.Equal(conflictAt) || !c.Resolved.IsZero() {
		t.Fatalf("conflict = %+v, want %s %s copy %q (%s) at %v", c, path, kind, copyPath, copySide, conflictAt)
	}
	return c
}

// conflictsCounted reads wsync_vfs_conflicts_total{keep-both,
// both-modified} from the default registry (what /metrics serves,
// internal/metrics).
func conflictsCounted(t *testing.T) float64 {
	t.Helper()
	mfs, err := metrics.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "wsync_vfs_conflicts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["policy"] == "keep-both" && labels["kind"] == "both-modified" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestConflictBothModifiedKeepsBoth(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"PLAN.md": "v0"})
	write(t, p.server, "PLAN.md", []byte("server v1"))
	write(t, p.cont, "PLAN.md", []byte("container v1"))
	counted := conflictsCounted(t)
	tr := p.tick()
	if len(tr.Pull.Conflicts) != 1 {
		t.Fatalf("pull conflicts = %+v, want 1", tr.Pull.Conflicts)
	}
	if got := conflictsCounted(t) - counted; got != 1 {
		t.Fatalf("wsync_vfs_conflicts_total{keep-both,both-modified} rose by %v, want 1", got)
	}
	settled(t, p)
	cp := copyOf("PLAN.md", vfs.SideContainer)
	if cp != "PLAN.conflict-container-20261202-051500.md" {
		t.Fatalf("copy name %q", cp)
	}
	for _, s := range []*vfs.Store{p.server, p.cont} {
		if got := read(t, s, "PLAN.md"); got != "server v1" {
			t.Fatalf("PLAN.md = %q, want the server's version", got)
		}
		if got := read(t, s, cp); got != "container v1" {
			t.Fatalf("%s = %q, want the container's version", cp, got)
		}
	}
	c := wantOneConflict(t, p, "PLAN.md", vfs.ConflictModified, cp, vfs.SideContainer)
	if c.Server.Type != "file" || c.Container.Type != "file" || c.Server.Size != 9 || c.Container.Size != 12 || c.Policy != vfs.KeepBoth {
		t.Fatalf("record states = %+v / %+v", c.Server, c.Container)
	}
}

func TestSameChangeOnBothSidesIsNoConflict(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"a": "v0"})
	write(t, p.server, "a", []byte("same"))
	write(t, p.cont, "a", []byte("same"))
	settled(t, p)
	if cs := conflictsOf(t, p.server); len(cs) != 0 {
		t.Fatalf("conflicts = %+v, want none", cs)
	}
}

func TestOneSidedChangesNeverConflict(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"s/a": "v0", "c/a": "v0"})
	for i := range 5 {
		write(t, p.server, "s/a", []byte{byte(i)})
		write(t, p.cont, "c/a", []byte{byte(i)})
		if i%2 == 0 {
			// Pulls without pushes between them, with server writes in
			// between: the bounce run moves on, the bases do not.
			if _, err := p.drv.PullOnce(testutil.Context(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			write(t, p.server, "s/other", []byte{byte(i)})
			continue
		}
		p.tick()
	}
	settled(t, p)
	if cs := conflictsOf(t, p.server); len(cs) != 0 {
		t.Fatalf("conflicts = %+v, want none", cs)
	}
}

func TestModifyBeatsDelete(t *testing.T) {
	t.Run("container deleted", func(t *testing.T) {
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"a.txt": "v0"})
		write(t, p.server, "a.txt", []byte("server v1"))
		if err := p.cont.RemovePath(t.Context(), "a.txt", false); err != nil {
			t.Fatal(err)
		}
		settled(t, p)
		if got := read(t, p.cont, "a.txt"); got != "server v1" {
			t.Fatalf("container a.txt = %q, want the server's modification back", got)
		}
		wantOneConflict(t, p, "a.txt", vfs.ConflictContainerDeleted, "", "")
	})
	t.Run("server deleted", func(t *testing.T) {
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"a.txt": "v0"})
		if err := p.server.RemovePath(t.Context(), "a.txt", false); err != nil {
			t.Fatal(err)
		}
		write(t, p.cont, "a.txt", []byte("container v1"))
		settled(t, p)
		if got := read(t, p.server, "a.txt"); got != "container v1" {
			t.Fatalf("server a.txt = %q, want the container's modification back", got)
		}
		wantOneConflict(t, p, "a.txt", vfs.ConflictServerDeleted, "", "")
	})
	t.Run("server removed a directory the container wrote into", func(t *testing.T) {
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"d/x": "v0", "d/y": "v0"})
		write(t, p.cont, "d/new", []byte("container"))
		if err := p.server.RemovePath(t.Context(), "d", true); err != nil {
			t.Fatal(err)
		}
		// The push alone must not take d/new with d.
		res, err := p.drv.PushOnce(testutil.Context(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if res.Deferred == 0 {
			t.Fatalf("push deferred nothing: %+v", res)
		}
		if got := read(t, p.cont, "d/new"); got != "container" {
			t.Fatalf("d/new = %q after the push", got)
		}
		settled(t, p)
		if got := read(t, p.server, "d/new"); got != "container" {
			t.Fatalf("server d/new = %q", got)
		}
		absentAt(t, p.server, "d/x")
	})
	t.Run("container removed a large directory nobody else changed", func(t *testing.T) {
		// More paths below it than any candidate list would hold: the
		// tombstones of what the container emptied are not changes of ours.
		p := conflictPair(t, vfs.KeepBoth)
		files := map[string]string{}
		for i := range 150 {
			files[fmt.Sprintf("big/d%d/f%d", i%7, i)] = "v0"
		}
		baseline(t, p, files)
		// As rm -r does through the mount: every file, then every
		// directory, each its own mutation (and rev).
		for f := range files {
			if err := p.cont.RemovePath(t.Context(), f, false); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 7 {
			if err := p.cont.RemovePath(t.Context(), fmt.Sprintf("big/d%d", i), false); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.cont.RemovePath(t.Context(), "big", false); err != nil {
			t.Fatal(err)
		}
		settled(t, p)
		absentAt(t, p.server, "big")
		absentAt(t, p.cont, "big")
		if cs := conflictsOf(t, p.server); len(cs) != 0 {
			t.Fatalf("conflicts = %+v", cs)
		}
	})
	t.Run("server removed a directory the container deleted in", func(t *testing.T) {
		// A local delete below the directory is no loss: the push removes
		// it at once.
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"d/x": "v0", "d/y": "v0"})
		if err := p.cont.RemovePath(t.Context(), "d/x", false); err != nil {
			t.Fatal(err)
		}
		if err := p.server.RemovePath(t.Context(), "d", true); err != nil {
			t.Fatal(err)
		}
		res, err := p.drv.PushOnce(testutil.Context(t, time.Minute))
		if err != nil || res.Deferred != 0 {
			t.Fatalf("push: %+v, %v: want nothing deferred", res, err)
		}
		absentAt(t, p.cont, "d")
		settled(t, p)
		if cs := conflictsOf(t, p.server); len(cs) != 0 {
			t.Fatalf("conflicts = %+v", cs)
		}
	})
	t.Run("container removed a directory the server wrote into", func(t *testing.T) {
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"d/x": "v0", "d/y": "v0"})
		write(t, p.server, "d/new", []byte("server"))
		write(t, p.server, "d/x", []byte("server v1"))
		if err := p.cont.RemovePath(t.Context(), "d", true); err != nil {
			t.Fatal(err)
		}
		settled(t, p)
		for _, s := range []*vfs.Store{p.server, p.cont} {
			if got := read(t, s, "d/new"); got != "server" {
				t.Fatalf("d/new = %q", got)
			}
			if got := read(t, s, "d/x"); got != "server v1" {
				t.Fatalf("d/x = %q", got)
			}
		}
		absentAt(t, p.server, "d/y") // unchanged here: the container's delete stands
	})
}

func TestTypeChangesKeepBoth(t *testing.T) {
	t.Run("server directory, container file", func(t *testing.T) {
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"a": "v0"})
		if err := p.server.RemovePath(t.Context(), "a", false); err != nil {
			t.Fatal(err)
		}
		write(t, p.server, "a/x", []byte("server"))
		write(t, p.cont, "a", []byte("container v1"))
		settled(t, p)
		cp := copyOf("a", vfs.SideContainer)
		if got := read(t, p.cont, "a/x"); got != "server" {
			t.Fatalf("a/x = %q", got)
		}
		if got := read(t, p.cont, cp); got != "container v1" {
			t.Fatalf("%s = %q", cp, got)
		}
		wantOneConflict(t, p, "a", vfs.ConflictType, cp, vfs.SideContainer)
	})
	t.Run("server file, container directory", func(t *testing.T) {
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"a": "v0"})
		write(t, p.server, "a", []byte("server v1"))
		if err := p.cont.RemovePath(t.Context(), "a", false); err != nil {
			t.Fatal(err)
		}
		write(t, p.cont, "a/x", []byte("container"))
		settled(t, p)
		cp := copyOf("a", vfs.SideServer)
		for _, s := range []*vfs.Store{p.server, p.cont} {
			if got := read(t, s, "a/x"); got != "container" {
				t.Fatalf("a/x = %q", got)
			}
			if got := read(t, s, cp); got != "server v1" {
				t.Fatalf("%s = %q", cp, got)
			}
		}
		cs := conflictsOf(t, p.server)
		if len(cs) != 1 || cs[0].Path != "a" || cs[0].Kind != vfs.ConflictType || cs[0].Copy != cp || cs[0].CopySide != vfs.SideServer {
			t.Fatalf("conflicts = %+v", cs)
		}
	})
	t.Run("symlink against file", func(t *testing.T) {
		p := conflictPair(t, vfs.KeepBoth)
		baseline(t, p, map[string]string{"l": "v0"})
		write(t, p.server, "l", []byte("server v1"))
		if err := p.cont.RemovePath(t.Context(), "l", false); err != nil {
			t.Fatal(err)
		}
		if err := p.cont.SymlinkPath(t.Context(), "target", "l"); err != nil {
			t.Fatal(err)
		}
		settled(t, p)
		cp := copyOf("l", vfs.SideContainer)
		if got := read(t, p.cont, "l"); got != "server v1" {
			t.Fatalf("l = %q", got)
		}
		if tg, err := p.cont.ReadLinkPath(t.Context(), cp); err != nil || tg != "target" {
			t.Fatalf("%s -> %q, %v", cp, tg, err)
		}
		wantOneConflict(t, p, "l", vfs.ConflictType, cp, vfs.SideContainer)
	})
}

func TestRenamedDirectoryWithAConflictingChild(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"d/x": "v0", "d/y": "v0"})
	write(t, p.server, "d/x", []byte("server v1"))
	if err := p.cont.RenamePath(t.Context(), "d", "e"); err != nil {
		t.Fatal(err)
	}
	settled(t, p)
	for _, s := range []*vfs.Store{p.server, p.cont} {
		if got := read(t, s, "d/x"); got != "server v1" {
			t.Fatalf("d/x = %q, want the server's edit kept", got)
		}
		if got := read(t, s, "e/x"); got != "v0" {
			t.Fatalf("e/x = %q, want the renamed original", got)
		}
		absentAt(t, s, "d/y")
	}
	wantOneConflict(t, p, "d/x", vfs.ConflictContainerDeleted, "", "")
}

func TestHardlinkNamesConflictOneByOne(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"a": "v0", "b": "v0"})
	// On the container a and b become one file, edited through a.
	if err := p.cont.RemovePath(t.Context(), "b", false); err != nil {
		t.Fatal(err)
	}
	if err := p.cont.LinkPath(t.Context(), "a", "b"); err != nil {
		t.Fatal(err)
	}
	write(t, p.cont, "a", []byte("container v1"))
	write(t, p.server, "b", []byte("server v1"))
	settled(t, p)
	if got := read(t, p.server, "a"); got != "container v1" {
		t.Fatalf("a = %q", got)
	}
	if got := read(t, p.server, "b"); got != "server v1" {
		t.Fatalf("b = %q", got)
	}
	cp := copyOf("b", vfs.SideContainer)
	if got := read(t, p.server, cp); got != "container v1" {
		t.Fatalf("%s = %q", cp, got)
	}
	wantOneConflict(t, p, "b", vfs.ConflictModified, cp, vfs.SideContainer)
}

func TestIgnoredPathsNeverConflict(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"src/a": "v0"})
	write(t, p.cont, "node_modules/x/index.js", []byte("container"))
	p.tick()
	p.tick()
	if cs := conflictsOf(t, p.server); len(cs) != 0 {
		t.Fatalf("conflicts = %+v", cs)
	}
	absentAt(t, p.server, "node_modules/x/index.js")
	if got := read(t, p.cont, "node_modules/x/index.js"); got != "container" {
		t.Fatalf("container's ignored file = %q", got)
	}
}

func TestPushFenceHoldsUnpulledChanges(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"a": "v0", "b": "v0", "f": "v0"})
	write(t, p.cont, "a", []byte("container v1"))
	write(t, p.server, "a", []byte("server v1"))
	write(t, p.server, "b", []byte("server v1"))
	// f is a file on the container the server turns into a directory.
	write(t, p.cont, "f", []byte("container f"))
	if err := p.server.RemovePath(t.Context(), "f", false); err != nil {
		t.Fatal(err)
	}
	write(t, p.server, "f/x", []byte("server"))
	res, err := p.drv.PushOnce(testutil.Context(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Deferred != 3 { // a, f and f/x
		t.Fatalf("deferred %d, want 3 (a, f, f/x): %+v", res.Deferred, res)
	}
	if got := read(t, p.cont, "a"); got != "container v1" {
		t.Fatalf("the push overwrote the container's unpulled a: %q", got)
	}
	if got := read(t, p.cont, "f"); got != "container f" {
		t.Fatalf("the push replaced the container's unpulled f: %q", got)
	}
	if got := read(t, p.cont, "b"); got != "server v1" {
		t.Fatalf("b = %q, want the server's (no local change)", got)
	}
	settled(t, p)
	if got := read(t, p.cont, "a"); got != "server v1" {
		t.Fatalf("a = %q after settling", got)
	}
	if got := read(t, p.cont, copyOf("a", vfs.SideContainer)); got != "container v1" {
		t.Fatalf("a's copy = %q", got)
	}
	if got := read(t, p.cont, "f/x"); got != "server" {
		t.Fatalf("f/x = %q", got)
	}
	if got := read(t, p.cont, copyOf("f", vfs.SideContainer)); got != "container f" {
		t.Fatalf("f's copy = %q", got)
	}
	if n := len(conflictsOf(t, p.server)); n != 2 {
		t.Fatalf("%d conflicts, want 2 (a and f)", n)
	}
}

func TestPoliciesStillRecord(t *testing.T) {
	for _, tc := range []struct {
		policy vfs.ConflictPolicy
		want   string
	}{{vfs.ServerWins, "server v1"}, {vfs.ContainerWins, "container v1"}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			p := conflictPair(t, tc.policy)
			baseline(t, p, map[string]string{"a.txt": "v0"})
			write(t, p.server, "a.txt", []byte("server v1"))
			write(t, p.cont, "a.txt", []byte("container v1"))
			settled(t, p)
			if got := read(t, p.cont, "a.txt"); got != tc.want {
				t.Fatalf("a.txt = %q, want %q", got, tc.want)
			}
			ls, err := p.server.List(t.Context(), "")
			if err != nil || len(ls) != 1 {
				t.Fatalf("server root = %+v, %v: want a.txt only (no copy)", ls, err)
			}
			c := wantOneConflict(t, p, "a.txt", vfs.ConflictModified, "", "")
			if c.Policy != tc.policy {
				t.Fatalf("policy %q", c.Policy)
			}
		})
	}
}

func TestReplacedContainerInventsNoConflicts(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	baseline(t, p, map[string]string{"a": "v0", "d/b": "v0"})
	write(t, p.server, "a", []byte("server v1")) // unpushed when the container goes
	p.cont = openStore(t, "container2")          // a restarted :memory: container
	p.serve(p.cont)
	settled(t, p)
	write(t, p.cont, "a", []byte("container v2")) // edits what it was given
	settled(t, p)
	if got := read(t, p.server, "a"); got != "container v2" {
		t.Fatalf("a = %q", got)
	}
	if cs := conflictsOf(t, p.server); len(cs) != 0 {
		t.Fatalf("conflicts after a container restart: %+v", cs)
	}
}

func TestConflictCopyNames(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		path, side string
		n          int
		want       string
	}{
		{"PLAN.md", "container", 1, "PLAN.conflict-container-20260102-030405.md"},
		{"dir/state.json", "b", 2, "dir/state.conflict-b-20260102-030405-2.json"},
		{".bashrc", "server", 1, ".bashrc.conflict-server-20260102-030405"},
		{"Makefile", "container", 1, "Makefile.conflict-container-20260102-030405"},
		{"a.tar.gz", "container", 1, "a.tar.conflict-container-20260102-030405.gz"},
	} {
		if got := vfs.ConflictCopyName(tc.path, tc.side, at, tc.n); got != tc.want {
			t.Errorf("ConflictCopyName(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
	long := string(bytes.Repeat([]byte("x"), 250)) + ".txt"
	got := vfs.ConflictCopyName(long, "container", at, 1)
	if len(got) != vfs.MaxNameLen || !strings.HasSuffix(got, "-20260102-030405.txt") {
		t.Fatalf("long name copy %d bytes: %q", len(got), got)
	}
	// A stem of two-byte characters is cut between characters.
	wide := strings.Repeat("é", 120) + ".md"
	got = vfs.ConflictCopyName(wide, "container", at, 1)
	if len(got) > vfs.MaxNameLen || !utf8.ValidString(got) || !strings.HasSuffix(got, ".md") {
		t.Fatalf("wide name copy %d bytes, valid UTF-8 %v: %q", len(got), utf8.ValidString(got), got)
	}
}

// deferLiar is a container store whose applies claim to have deferred a
// path the batch never had.
type deferLiar struct{ *vfs.Store }

func (d deferLiar) Apply(ctx context.Context, es []vfs.ChangeEntry, opts vfs.ApplyOptions) (vfs.ApplyResult, error) {
	res, err := d.Store.Apply(ctx, es, opts)
	res.Deferred = append(res.Deferred, "etc/passwd")
	return res, err
}

func TestPushRefusesDeferredPathsOutsideTheBatch(t *testing.T) {
	p := conflictPair(t, vfs.KeepBoth)
	p.serve(deferLiar{p.cont})
	write(t, p.server, "a", []byte("x"))
	rev := p.server.CurrentRev()
	_, err := p.drv.PushOnce(testutil.Context(t, time.Minute))
	if !errors.Is(err, rpc.ErrProtocol) {
		t.Fatalf("push to a peer deferring a path it was not sent: %v, want EPROTOCOL", err)
	}
	if _, err := p.server.Stat(t.Context(), "etc/passwd"); err == nil || p.server.CurrentRev() != rev {
		t.Fatalf("the server stamped the peer's path (rev %d -> %d)", rev, p.server.CurrentRev())
	}
}
