package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/client"
)

func runWrite(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("write", "write [--mode 0644] PATH [FILE|-]",
		"  workspace-server write /src/main.go main.go\n  echo hello | workspace-server write --mode 0600 /notes.txt\n", stdout, stderr)
	cf := c.clientFlags()
	modeStr := c.fs.String("mode", "", "permission bits in octal (default: keep an existing file's, 0644 for a new one)")
	var mode *uint32
	pos, code, ok := c.checkArgs(args, func(pos []string) error {
		if len(pos) < 1 || len(pos) > 2 {
			return errors.New("want PATH [FILE|-]")
		}
		if err := checkPath(pos[0]); err != nil {
			return err
		}
		if *modeStr != "" {
			m, err := api.ParseMode(*modeStr)
			if err != nil {
				return fmt.Errorf("--mode: %v", err)
			}
			mode = &m
		}
		return nil
	})
	if !ok {
		return code
	}
	// FILE is opened before the workspace: its failure is the one reported.
	src := stdin
	if len(pos) == 2 && pos[1] != "-" {
		f, err := os.Open(pos[1])
		if err != nil {
			return c.fail(err)
		}
		defer f.Close()
		src = f
	}
	return c.onWorkspace(ctx, cf, func(ctx context.Context, ws *client.Workspace) error {
		_, err := ws.WriteFile(ctx, pos[0], src, mode)
		return err
	})
}
