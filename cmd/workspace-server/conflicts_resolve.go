package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

func runConflictsResolve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("conflicts resolve", "conflicts resolve PATH --keep server|container|both",
		"  workspace-server conflicts resolve /PLAN.md --keep container   # the container's copy takes the name\n"+
			"  workspace-server conflicts resolve /PLAN.md --keep server      # the copy goes\n"+
			"  workspace-server conflicts resolve /PLAN.md --keep both        # leave both, mark it resolved\n", stdout, stderr)
	cf := c.clientFlags()
	keep := c.fs.String("keep", "", "the version to keep: server, container or both")
	check := func(pos []string) error {
		switch *keep {
		case workspace.SideServer, workspace.SideContainer, workspace.ResolveBoth:
		case "":
			return errors.New("--keep is required (server, container or both)")
		default:
			return fmt.Errorf("--keep %q: want server, container or both", *keep)
		}
		return onePath(pos)
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		ci, err := ws.ResolveConflict(ctx, pos[0], *keep)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resolved %s (%s, runtime %s): kept %s\n", ci.Path, ci.Kind, ci.Runtime, ci.Resolution)
		return nil
	})
}
