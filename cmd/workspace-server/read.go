package main

import (
	"context"
	"io"

	"github.com/wsync/wsync/workspace/client"
)

func runRead(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("read", "read PATH", "  workspace-server read /src/main.go > main.go\n", stdout, stderr)
	cf := c.clientFlags()
	return c.clientVerb(ctx, args, cf, onePath, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		rc, err := ws.Open(ctx, pos[0])
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(stdout, rc)
		return err
	})
}
