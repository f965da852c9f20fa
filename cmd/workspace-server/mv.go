package main

import (
	"context"
	"errors"
	"io"

	"github.com/wsync/wsync/workspace/client"
)

func runMv(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("mv", "mv SRC DST", "  workspace-server mv /src/old.go /src/new.go\n", stdout, stderr)
	cf := c.clientFlags()
	check := func(pos []string) error {
		if len(pos) != 2 {
			return errors.New("want SRC DST")
		}
		if err := checkPath(pos[0]); err != nil {
			return err
		}
		return checkPath(pos[1])
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		_, err := ws.Rename(ctx, pos[0], pos[1])
		return err
	})
}
