package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace/client"
)

func runConflictsPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("conflicts policy", "conflicts policy [keep-both|server-wins|container-wins]",
		"  workspace-server conflicts policy               # print the workspace's policy\n"+
			"  workspace-server conflicts policy server-wins   # change it (the remotes reconnect with it)\n", stdout, stderr)
	cf := c.clientFlags()
	check := func(pos []string) error {
		switch len(pos) {
		case 0:
			return nil
		case 1:
			_, err := vfs.ParseConflictPolicy(pos[0])
			return err
		}
		return errors.New("want at most one POLICY")
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		if len(pos) == 0 {
			info, err := ws.Info(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, info.ConflictPolicy)
			return nil
		}
		p, err := ws.SetConflictPolicy(ctx, pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, p)
		return nil
	})
}
