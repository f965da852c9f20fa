package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

func runStat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("stat", "stat [--json] PATH", "  workspace-server stat /src/main.go\n  workspace-server stat --json /src/main.go | jq -r .sha256\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, `print one {"path","type","mode","size","mtime","target","sha256"} object`)
	path, code, ok := c.onePath(args)
	if !ok {
		return code
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	fi, err := ws.Stat(ctx, path, true)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(fi)
	}
	fmt.Fprintf(stdout, "path:   %s\ntype:   %s\nmode:   %04o (%s)\nsize:   %d\nmtime:  %s\n",
		fi.Path, fi.Type, fi.Mode, modeString(fi), fi.Size, fi.Mtime.Local().Format(time.RFC3339Nano))
	if fi.Target != "" {
		fmt.Fprintf(stdout, "target: %s\n", fi.Target)
	}
	if fi.SHA256 != "" {
		fmt.Fprintf(stdout, "sha256: %s\n", fi.SHA256)
	}
	return exitOK
}
