package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

func runPush(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runSync(ctx, "push", "send the server's changes to the container", true, args, stdout, stderr,
		func(ctx context.Context, ws *client.Workspace) (any, string, error) {
			rep, err := ws.Push(ctx)
			return rep, "pushed " + describe(rep), err
		})
}

func runPull(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runSyncWith(ctx, "pull", "fetch the container's changes (and retry a pending pull)", true, args, stdout, stderr,
		"[--allow-mass-delete] [--mass-delete-share F] [--mass-delete-min N] ",
		"  workspace-server pull --allow-mass-delete    # confirm a pull paused for deleting too much (see: status)\n",
		func(c *command) func(context.Context, *client.Workspace) (any, string, error) {
			var opts workspace.PullOptions
			c.fs.BoolVar(&opts.AllowMassDelete, "allow-mass-delete", false, "apply the pull's deletions however many: confirms a pull paused by the deletion safety")
			c.fs.Float64Var(&opts.MassDelete.Share, "mass-delete-share", 0, "pause this pull if it would delete more than this share of the workspace (0: the server's --mass-delete-share)")
			c.fs.IntVar(&opts.MassDelete.Min, "mass-delete-min", 0, "... and at least this many paths (0: the server's --mass-delete-min)")
			return func(ctx context.Context, ws *client.Workspace) (any, string, error) {
				rep, err := ws.PullWith(ctx, opts)
				return rep, "pulled " + describe(rep), err
			}
		})
}

// runSync is push, pull and tick: one call, a one-line summary or --json.
// perRuntime: the call syncs with one runtime, which --runtime names.
func runSync(ctx context.Context, name, what string, perRuntime bool, args []string, stdout, stderr io.Writer,
	call func(context.Context, *client.Workspace) (any, string, error)) int {
	return runSyncWith(ctx, name, what, perRuntime, args, stdout, stderr, "", "",
		func(*command) func(context.Context, *client.Workspace) (any, string, error) { return call })
}

// runSyncWith is runSync with flags of the verb's own: setup registers
// them (synopsis and example tell of them) and returns the call.
func runSyncWith(ctx context.Context, name, what string, perRuntime bool, args []string, stdout, stderr io.Writer,
	synopsisFlags, moreExample string, setup func(*command) func(context.Context, *client.Workspace) (any, string, error)) int {
	synopsis, example := name+" "+synopsisFlags+"[--json] [--quiet]", "  workspace-server "+name+"    # "+what+"\n"
	if perRuntime {
		synopsis = name + " " + synopsisFlags + "[--runtime NAME] [--json] [--quiet]"
		example += "  workspace-server " + name + " --runtime gpu\n"
	}
	example += "  workspace-server " + name + " --json 2>/dev/null | jq .    # progress goes to stderr: entries, bytes, rate\n" + moreExample
	c := newCommand(name, synopsis, example, stdout, stderr)
	call := setup(c)
	cf := c.clientFlags()
	if perRuntime {
		c.runtimeFlag(cf)
	}
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	quiet := c.quietFlag()
	return c.clientVerb(ctx, args, cf, noArgs, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		m := newMeter(stderr, *quiet)
		rep, summary, err := call(m.context(ctx), ws)
		m.end()
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(rep)
		}
		fmt.Fprintln(stdout, summary)
		return nil
	})
}

// describe summarises a sync report in one line.
func describe(r workspace.SyncReport) string {
	s := fmt.Sprintf("%d entries, %d objects (%s) in %v", r.Entries, r.Objects, humanBytes(r.Bytes), r.Duration.Round(time.Microsecond*100))
	if r.Rebaselined {
		s += " (re-baselined)"
	}
	if r.Conflicts > 0 {
		s += "; " + conflictCount(r.Conflicts) + " recorded (see: workspace-server conflicts)"
	}
	if r.Deferred > 0 {
		s += fmt.Sprintf("; %d deferred until the container's changes are pulled", r.Deferred)
	}
	return s
}

// conflictCount is "1 conflict" or "N conflicts".
func conflictCount(n int) string {
	if n == 1 {
		return "1 conflict"
	}
	return fmt.Sprintf("%d conflicts", n)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
