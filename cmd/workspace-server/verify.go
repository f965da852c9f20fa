package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

func runVerify(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("verify", "verify [--repair] [--json]",
		"  workspace-server verify && echo same    # exit 0: converged, 3: the sides differ\n"+
			"  workspace-server verify --repair        # re-send the winning side of every differing path\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the verdict as JSON (the exit code still tells)")
	repair := c.fs.Bool("repair", false, "repair the drift (the server wins unless only the container changed a path since the last sync), then report")
	pos, code, ok := c.parse(args, true)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError("takes no arguments")
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	verify := ws.Verify
	if *repair {
		verify = ws.Repair
	}
	rep, err := verify(ctx)
	if err != nil {
		return c.fail(err)
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	case rep.Converged:
		fmt.Fprintf(stdout, "converged (root %s)\n", rep.ServerRoot)
	default:
		fmt.Fprintf(stdout, "diverged: server root %s, container root %s; first differing paths:\n", rep.ServerRoot, rep.ContainerRoot)
		for _, p := range rep.Differences {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
	}
	if !rep.Converged {
		return exitDiverged
	}
	return exitOK
}
