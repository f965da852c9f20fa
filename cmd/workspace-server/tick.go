package main

import (
	"context"
	"io"

	"github.com/wsync/wsync/workspace/client"
)

func runTick(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runSync(ctx, "tick", "pull from every runtime, then push to every runtime", false, args, stdout, stderr,
		func(ctx context.Context, ws *client.Workspace) (any, string, error) {
			rep, err := ws.Tick(ctx)
			return rep, "pulled " + describe(rep.Pulled) + "\npushed " + describe(rep.Pushed), err
		})
}
