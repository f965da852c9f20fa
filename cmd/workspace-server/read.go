package main

import (
	"context"
	"io"
)

func runRead(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("read", "read PATH", "  workspace-server read /src/main.go > main.go\n", stdout, stderr)
	cf := c.clientFlags()
	pos, code, ok := c.parse(args, true)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError("want one PATH")
	}
	if err := checkPath(pos[0]); err != nil {
		return c.usageError("%v", err)
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	rc, err := ws.Open(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	defer rc.Close()
	if _, err := io.Copy(stdout, rc); err != nil {
		return c.fail(err)
	}
	return exitOK
}
