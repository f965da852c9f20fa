package main

import (
	"context"
	"errors"
	"io"

	"github.com/wsync/wsync/workspace/client"
)

func runSymlink(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("symlink", "symlink TARGET PATH", "  workspace-server symlink ../shared/config.yaml /app/config.yaml\n", stdout, stderr)
	cf := c.clientFlags()
	check := func(pos []string) error {
		if len(pos) != 2 {
			return errors.New("want TARGET PATH")
		}
		if pos[0] == "" {
			return errors.New("empty TARGET")
		}
		return checkPath(pos[1])
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		_, err := ws.Symlink(ctx, pos[0], pos[1])
		return err
	})
}
