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
	return runSync(ctx, "pull", "fetch the container's changes (and retry a pending pull)", true, args, stdout, stderr,
		func(ctx context.Context, ws *client.Workspace) (any, string, error) {
			rep, err := ws.Pull(ctx)
			return rep, "pulled " + describe(rep), err
		})
}

// runSync is push, pull and tick: one call, a one-line summary or --json.
// perRuntime: the call syncs with one runtime, which --runtime names.
func runSync(ctx context.Context, name, what string, perRuntime bool, args []string, stdout, stderr io.Writer,
	call func(context.Context, *client.Workspace) (any, string, error)) int {
	synopsis, example := name+" [--json] [--quiet]", "  workspace-server "+name+"    # "+what+"\n"
	if perRuntime {
		synopsis = name + " [--runtime NAME] [--json] [--quiet]"
		example += "  workspace-server " + name + " --runtime gpu\n"
	}
	example += "  workspace-server " + name + " --json 2>/dev/null | jq .    # progress goes to stderr: entries, bytes, rate\n"
	c := newCommand(name, synopsis, example, stdout, stderr)
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
