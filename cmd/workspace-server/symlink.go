package main

import (
	"context"
	"io"
)

func runSymlink(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("symlink", "symlink TARGET PATH", "  workspace-server symlink ../shared/config.yaml /app/config.yaml\n", stdout, stderr)
	cf := c.clientFlags()
	pos, code, ok := c.parse(args, true)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return c.usageError("want TARGET PATH")
	}
	if pos[0] == "" {
		return c.usageError("empty TARGET")
	}
	if err := checkPath(pos[1]); err != nil {
		return c.usageError("%v", err)
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if _, err := ws.Symlink(ctx, pos[0], pos[1]); err != nil {
		return c.fail(err)
	}
	return exitOK
}
