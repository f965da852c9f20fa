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
	mode, err := api.ParseMode(*modeStr)
	if err != nil {
		return c.usageError("--mode: %v", err)
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if _, err := ws.Mkdir(ctx, pos[0], mode, *parents); err != nil {
		return c.fail(err)
	}
	return exitOK
}
