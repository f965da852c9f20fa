package workspace_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/wsync/wsync/workspace"
)

// The pull after a command runs in slices (Options.PullSlice): with a
// slice of one batch a command that wrote 700 files is pulled in several
// FIFO turns, nothing lost, and the report adds them up.
func TestPullAfterCommandRunsInSlices(t *testing.T) {
	h, w := pulledWith(t, func(h *harness) { h.slice = workspace.Budget{Entries: 1} })
	ctx := context.Background()
	var script []string
	for i := range 700 {
		script = append(script, fmt.Sprintf("write /s/f%02d x%d", i, i))
	}
	rep, err := w.Exec(ctx, workspace.ExecSpec{Shell: strings.Join(script, " ; ")}, nil)
	must(t, err)
	if rep.Sync != workspace.SyncComplete {
		t.Fatalf("sync %q %q", rep.Sync, rep.SyncError)
	}
	if rep.Pulled.Entries < 700 || rep.Pulled.More {
		t.Fatalf("pulled %+v, want every file and no more", rep.Pulled)
	}
	pulls := 0
	for _, c := range h.remotes.Fake("default").Calls() {
		if c == "pull" {
			pulls++
		}
	}
	if pulls < 3 {
		t.Fatalf("%d pulls: the pull after the command was not sliced", pulls)
	}
	for i := range 700 {
		if got := read(t, w, fmt.Sprintf("/s/f%02d", i)); got != fmt.Sprintf("x%d", i) {
			t.Fatalf("f%02d = %q", i, got)
		}
	}
	settled(t, w)
}
