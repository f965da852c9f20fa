package main

import (
	"context"
	"fmt"
	"io"

	"github.com/wsync/wsync/workspace/client"
)

func runVerify(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("verify", "verify [--runtime NAME] [--repair] [--json] [--quiet]",
		"  workspace-server verify && echo same    # exit 0: converged, 3: the sides differ\n"+
			"  workspace-server verify --repair        # re-send the winning side of every differing path\n"+
			"  workspace-server verify --runtime gpu   # compare with an attached runtime's container\n", stdout, stderr)
	cf := c.clientFlags()
	c.runtimeFlag(cf)
	asJSON := c.fs.Bool("json", false, "print the verdict as JSON (the exit code still tells)")
	repair := c.fs.Bool("repair", false, "repair the drift (the server wins unless only the container changed a path since the last sync), then report; progress of what it moves goes to stderr")
	quiet := c.quietFlag()
	converged := false
	code := c.clientVerb(ctx, args, cf, noArgs, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		verify := ws.Verify
		if *repair {
			verify = ws.Repair
		}
		m := newMeter(c.stderr, *quiet)
		rep, err := verify(m.context(ctx))
		m.end()
		if err != nil {
			return err
		}
		converged = rep.Converged
		switch {
		case *asJSON:
			return c.writeJSON(rep)
		case rep.Converged:
			fmt.Fprintf(stdout, "converged (root %s)\n", rep.ServerRoot)
		default:
			fmt.Fprintf(stdout, "diverged: server root %s, container root %s; first differing paths:\n", rep.ServerRoot, rep.ContainerRoot)
			for _, p := range rep.Differences {
				fmt.Fprintf(stdout, "  %s\n", p)
			}
		}
		return nil
	})
	if code == exitOK && !converged {
		return exitDiverged
	}
	return code
}
