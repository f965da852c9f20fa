package main

import (
	"context"
	"io"
)

func runRead(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("read", "read PATH", "  workspace-server read /src/main.go > main.go\n", stdout, stderr)
	cf := c.clientFlags()
	path, code, ok := c.onePath(args)
	if !ok {
		return code
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	rc, err := ws.Open(ctx, path)
	if err != nil {
		return c.fail(err)
	}
	defer rc.Close()
	if _, err := io.Copy(stdout, rc); err != nil {
		return c.fail(err)
	}
	return exitOK
}
