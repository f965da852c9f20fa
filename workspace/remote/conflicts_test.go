package remote_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// Factory gives each runtime's driver the workspace's conflict options:
// with real computerds (FUSE mounts), a path changed in a mount and on the
// server is a conflict whose copy is named after the runtime's side, the
// pull's push brings both versions into the mount, a resolve reaches the
// mount with the next push, and a policy change takes effect on the live
// sessions: a command running across it keeps running.
func TestConflictsWithRealComputerds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, a, b := twoRuntimes(ctx, t)
	serverWrite := func(p, data string) {
		t.Helper()
		if _, err := w.WriteFile(ctx, p, strings.NewReader(data), nil); err != nil {
			t.Fatal(err)
		}
	}
	serverWrite("/PLAN.md", "plan v0")
	if _, err := w.Tick(ctx); err != nil {
		t.Fatal(err)
	}

	for _, rt := range []struct {
		name, side string
		d          *computer.Daemon
	}{{workspace.DefaultRuntime, workspace.SideContainer, a}, {"b", "b", b}} {
		serverWrite("/PLAN.md", "server edit "+rt.name)
		writeMount(t, rt.d, "PLAN.md", "container edit "+rt.name)
		rep, err := w.On(rt.name).Pull(ctx)
		if err != nil || rep.Conflicts != 1 || len(rep.ConflictPaths) != 1 || rep.ConflictPaths[0] != "/PLAN.md" {
			t.Fatalf("pull from %s: %+v %v", rt.name, rep, err)
		}
		cs, err := w.Conflicts(ctx, false, 0)
		if err != nil || len(cs) != 1 {
			t.Fatalf("conflicts after the pull from %s: %+v %v", rt.name, cs, err)
		}
		c := cs[0]
		if c.Runtime != rt.name || c.CopySide != workspace.SideContainer || !strings.HasPrefix(c.Copy, "/PLAN.conflict-"+rt.side+"-") {
			t.Fatalf("conflict from %s: %+v", rt.name, c)
		}
		// The pull pushed in its turn: the mount has both versions.
		if got := readMount(t, rt.d, "PLAN.md"); got != "server edit "+rt.name {
			t.Fatalf("%s's PLAN.md = %q", rt.name, got)
		}
		if got := readMount(t, rt.d, c.Copy[1:]); got != "container edit "+rt.name {
			t.Fatalf("%s's copy = %q", rt.name, got)
		}
		if _, err := w.ResolveConflict(ctx, "/PLAN.md", workspace.SideContainer); err != nil {
			t.Fatal(err)
		}
		if _, err := w.On(rt.name).Push(ctx); err != nil {
			t.Fatal(err)
		}
		if got := readMount(t, rt.d, "PLAN.md"); got != "container edit "+rt.name {
			t.Fatalf("%s's PLAN.md after keeping its version = %q", rt.name, got)
		}
		if _, err := os.Stat(filepath.Join(rt.d.MountDir(), c.Copy[1:])); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s's copy after the resolve: %v", rt.name, err)
		}
		if _, err := w.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// server-wins, taken by the live session: a command running across the
	// change is not cut.
	started := make(chan struct{})
	var once bool
	done := make(chan error, 1)
	go func() {
		rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: `echo started; while [ ! -e stop ]; do sleep 0.02; done`}, func(ev workspace.ExecEvent) {
			if !once && strings.Contains(string(ev.Data), "started") {
				once = true
				close(started)
			}
		})
		if err == nil && rep.ExitCode != 0 {
			err = errors.New("the command exited " + rep.Sync)
		}
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the command ended before the policy change: %v", err)
	}
	if _, err := w.SetConflictPolicy(ctx, string(vfs.ServerWins)); err != nil {
		t.Fatal(err)
	}
	writeMount(t, a, "stop", "")
	if err := <-done; err != nil {
		t.Fatalf("a command running across the policy change: %v", err)
	}
	serverWrite("/PLAN.md", "server final")
	writeMount(t, a, "PLAN.md", "container final")
	if rep, err := w.Pull(ctx); err != nil || rep.Conflicts != 1 {
		t.Fatalf("pull under server-wins: %+v %v", rep, err)
	}
	if got := readMount(t, a, "PLAN.md"); got != "server final" {
		t.Fatalf("PLAN.md under server-wins = %q", got)
	}
	cs, err := w.Conflicts(ctx, false, 0)
	if err != nil || len(cs) != 1 || cs[0].Policy != vfs.ServerWins || cs[0].Copy != "" {
		t.Fatalf("conflicts under server-wins: %+v %v", cs, err)
	}
}
