package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/wsync/wsync/workspace/client"
)

func runStat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("stat", "stat [--json] PATH", "  workspace-server stat /src/main.go\n  workspace-server stat --json /src/main.go | jq -r .sha256\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, `print one {"path","type","mode","size","mtime","target","sha256"} object`)
	return c.clientVerb(ctx, args, cf, onePath, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		fi, err := ws.Stat(ctx, pos[0], true)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(fi)
		}
		fmt.Fprintf(stdout, "path:   %s\ntype:   %s\nmode:   %04o (%s)\nsize:   %d\nmtime:  %s\n",
			fi.Path, fi.Type, fi.Mode, modeString(fi), fi.Size, fi.Mtime.Local().Format(time.RFC3339Nano))
		if fi.Target != "" {
			fmt.Fprintf(stdout, "target: %s\n", fi.Target)
		}
		if fi.SHA256 != "" {
			fmt.Fprintf(stdout, "sha256: %s\n", fi.SHA256)
		}
		return nil
	})
}
