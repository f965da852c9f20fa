package main

import (
	"context"
	"errors"
	"io"

	"github.com/wsync/wsync/vfs"
)

func runRm(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("rm", "rm [-r] [-f] PATH", "  workspace-server rm -r /build\n", stdout, stderr)
	cf := c.clientFlags()
	recursive := c.fs.Bool("r", false, "remove a directory and everything in it")
	force := c.fs.Bool("f", false, "a missing PATH is not an error")
	path, code, ok := c.onePath(args)
	if !ok {
		return code
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if err := ws.Remove(ctx, path, *recursive); err != nil && !(*force && errors.Is(err, vfs.ErrNotExist)) {
		return c.fail(err)
	}
	return exitOK
}
