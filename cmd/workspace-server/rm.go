package main

import (
	"context"
	"errors"
	"io"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace/client"
)

func runRm(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("rm", "rm [-r] [-f] PATH", "  workspace-server rm -r /build\n", stdout, stderr)
	cf := c.clientFlags()
	recursive := c.fs.Bool("r", false, "remove a directory and everything in it")
	force := c.fs.Bool("f", false, "a missing PATH is not an error")
	return c.clientVerb(ctx, args, cf, onePath, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		err := ws.Remove(ctx, pos[0], *recursive)
		if *force && errors.Is(err, vfs.ErrNotExist) {
			return nil
		}
		return err
	})
}
