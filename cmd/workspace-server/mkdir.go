package main

import (
	"context"
	"fmt"
	"io"

	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/client"
)

func runMkdir(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("mkdir", "mkdir [-p] [--mode 0755] PATH", "  workspace-server mkdir -p /src/pkg/util\n", stdout, stderr)
	cf := c.clientFlags()
	parents := c.fs.Bool("p", false, "make missing parents; an existing directory is not an error")
	modeStr := c.fs.String("mode", "0755", "permission bits in octal")
	var mode uint32
	check := func(pos []string) error {
		if err := onePath(pos); err != nil {
			return err
		}
		m, err := api.ParseMode(*modeStr)
		if err != nil {
			return fmt.Errorf("--mode: %v", err)
		}
		mode = m
		return nil
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		_, err := ws.Mkdir(ctx, pos[0], mode, *parents)
		return err
	})
}
