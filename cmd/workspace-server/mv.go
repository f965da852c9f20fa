package main

import (
	"context"
	"io"
)

func runMv(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("mv", "mv SRC DST", "  workspace-server mv /src/old.go /src/new.go\n", stdout, stderr)
	cf := c.clientFlags()
	pos, code, ok := c.parse(args, true)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return c.usageError("want SRC DST")
	}
	for _, p := range pos {
		if err := checkPath(p); err != nil {
			return c.usageError("%v", err)
		}
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if _, err := ws.Rename(ctx, pos[0], pos[1]); err != nil {
		return c.fail(err)
	}
	return exitOK
}
