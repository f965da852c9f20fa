package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

func runConflicts(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "resolve":
			return runConflictsResolve(ctx, args[1:], stdout, stderr)
		case "policy":
			return runConflictsPolicy(ctx, args[1:], stdout, stderr)
		}
	}
	c := newCommand("conflicts", "conflicts [--all] [--json] [--limit N] | conflicts resolve PATH --keep SIDE | conflicts policy [POLICY]",
		"  workspace-server conflicts                                # the open ones\n"+
			"  workspace-server conflicts --all --json\n"+
			"  workspace-server conflicts resolve /PLAN.md --keep container\n"+
			"  workspace-server conflicts policy server-wins\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the records as JSON")
	all := c.fs.Bool("all", false, "list the resolved conflicts too")
	limit := c.fs.Int("limit", workspace.DefaultConflictList, fmt.Sprintf("list at most the newest N (up to %d)", workspace.MaxConflictList))
	return c.clientVerb(ctx, args, cf, noArgs, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		list, err := ws.Conflicts(ctx, *all, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(list)
		}
		if len(list) == 0 {
			if *all {
				fmt.Fprintln(stdout, "no conflicts recorded")
			} else {
				fmt.Fprintln(stdout, "no open conflicts")
			}
			return nil
		}
		printConflicts(stdout, list, *all, time.Now())
		return nil
	})
}

// printConflicts is the table of `conflicts`: one line per record, with
// its state when resolved ones are listed too.
func printConflicts(w io.Writer, list []workspace.ConflictInfo, withState bool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "PATH\tKIND\tRUNTIME\tCOPY\tAGE"
	if withState {
		head += "\tSTATE"
	}
	fmt.Fprintln(tw, head)
	for _, ci := range list {
		cp := "-"
		if ci.Copy != "" {
			cp = ci.Copy + " (" + ci.CopySide + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", ci.Path, ci.Kind, ci.Runtime, cp, now.Sub(ci.At).Round(time.Second))
		if withState {
			state := "open"
			if !ci.ResolvedAt.IsZero() {
				state = "kept " + ci.Resolution
			}
			fmt.Fprintf(tw, "\t%s", state)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
