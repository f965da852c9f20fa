package main

import (
	"context"
	"io"
	"os"

	"github.com/wsync/wsync/workspace/api"
)

func runWrite(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("write", "write [--mode 0644] PATH [FILE|-]",
		"  workspace-server write /src/main.go main.go\n  echo hello | workspace-server write --mode 0600 /notes.txt\n", stdout, stderr)
	cf := c.clientFlags()
	modeStr := c.fs.String("mode", "", "permission bits in octal (default: keep an existing file's, 0644 for a new one)")
	pos, code, ok := c.parse(args, true)
	if !ok {
		return code
	}
	if len(pos) < 1 || len(pos) > 2 {
		return c.usageError("want PATH [FILE|-]")
	}
	if err := checkPath(pos[0]); err != nil {
		return c.usageError("%v", err)
	}
	var mode *uint32
	if *modeStr != "" {
		m, err := api.ParseMode(*modeStr)
		if err != nil {
			return c.usageError("--mode: %v", err)
		}
		mode = &m
	}
	src := stdin
	if len(pos) == 2 && pos[1] != "-" {
		f, err := os.Open(pos[1])
		if err != nil {
			return c.fail(err)
		}
		defer f.Close()
		src = f
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if _, err := ws.WriteFile(ctx, pos[0], src, mode); err != nil {
		return c.fail(err)
	}
	return exitOK
}
