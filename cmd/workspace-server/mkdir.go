package main

import (
	"context"
	"io"

	"github.com/wsync/wsync/workspace/api"
)

func runMkdir(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("mkdir", "mkdir [-p] [--mode 0755] PATH", "  workspace-server mkdir -p /src/pkg/util\n", stdout, stderr)
	cf := c.clientFlags()
	parents := c.fs.Bool("p", false, "make missing parents; an existing directory is not an error")
	modeStr := c.fs.String("mode", "0755", "permission bits in octal")
	path, code, ok := c.onePath(args)
	if !ok {
		return code
	}
	mode, err := api.ParseMode(*modeStr)
	if err != nil {
		return c.usageError("--mode: %v", err)
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if _, err := ws.Mkdir(ctx, path, mode, *parents); err != nil {
		return c.fail(err)
	}
	return exitOK
}
