package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

func runVerify(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("verify", "verify [--json]",
		"  workspace-server verify && echo same    # exit 0: converged, 3: the sides differ\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the verdict as JSON (the exit code still tells)")
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
	rep, err := ws.Verify(ctx)
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
