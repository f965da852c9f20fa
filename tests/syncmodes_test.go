package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wsync/wsync/workspace"
)

// genScript writes n files of "file I" under gen/ in the container.
func genScript(n int) string {
	return fmt.Sprintf(`mkdir -p gen && i=0; while [ $i -lt %d ]; do echo "file $i" > gen/$i; i=$((i+1)); done`, n)
}

// serverFiles counts the files under /gen on the server (-1: none yet).
func (p *pair) serverFiles() int {
	es, err := p.client().List(context.Background(), "/gen", false, false)
	if err != nil {
		return -1
	}
	return len(es)
}

// --sync defer: the exec answers as soon as the command exits, before the
// pull after it has fetched anything; the server's background puller then
// brings every file in, in slices, with no call from a client.
func TestExecSyncDeferAnswersBeforeThePull(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk", serverArgs: []string{"--pull-slice", "200ms"}})
	const n = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := p.client().Exec(ctx, workspace.ExecSpec{Shell: genScript(n), Sync: workspace.SyncDefer}, func(workspace.ExecEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != 0 || rep.Sync != workspace.SyncDeferred || rep.Pulled.Entries != 0 {
		t.Fatalf("exec: code %d, sync %q, pulled %d entries: want 0, deferred, nothing pulled yet", rep.ExitCode, rep.Sync, rep.Pulled.Entries)
	}
	waitFor(t, "every file on the server", 3*time.Minute, func() bool { return p.serverFiles() == n })
	waitFor(t, "the pending pull to settle", time.Minute, func() bool {
		st, err := p.client().Status(ctx)
		return err == nil && st.Pending == nil
	})
	for _, i := range []int{0, n / 2, n - 1} {
		if got, want := p.ok("read", fmt.Sprintf("/gen/%d", i)), fmt.Sprintf("file %d\n", i); got != want {
			t.Errorf("/gen/%d = %q, want %q", i, got, want)
		}
	}
}

// A server SIGKILLed while a deferred pull is under way resumes it by
// itself when it starts again: every file arrives, none is lost, and no
// client has to ask.
func TestServerKilledDuringDeferredPullResumes(t *testing.T) {
	p := newPair(t, pairOpts{separate: "disk", serverArgs: []string{"--pull-slice", "100ms"}})
	const n = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := p.client().Exec(ctx, workspace.ExecSpec{Shell: genScript(n), Sync: workspace.SyncDefer}, func(workspace.ExecEvent) {})
	if err != nil || rep.Sync != workspace.SyncDeferred {
		t.Fatalf("exec: %+v, %v", rep, err)
	}
	waitFor(t, "the deferred pull to be under way", 2*time.Minute, func() bool { return p.serverFiles() > 0 })
	p.server.kill()
	p.startServer()
	before := p.serverFiles()
	waitFor(t, "the resumed pull to bring every file", 3*time.Minute, func() bool { return p.serverFiles() == n })
	if before >= n {
		t.Fatalf("the kill came after the pull finished (%d files already there): resume not exercised", before)
	}
	t.Logf("killed with %d of %d files pulled", before, n)
	st, err := p.client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pending pull to settle", time.Minute, func() bool {
		st, err = p.client().Status(ctx)
		return err == nil && st.Pending == nil
	})
	if got := p.ok("read", fmt.Sprintf("/gen/%d", n-1)); got != fmt.Sprintf("file %d\n", n-1) {
		t.Errorf("/gen/%d = %q", n-1, got)
	}
}
