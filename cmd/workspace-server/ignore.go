package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace/api"
	"github.com/wsync/wsync/workspace/client"
)

func runIgnore(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("ignore", "ignore [--json] | ignore [--default | --none | PATTERN...]",
		"  workspace-server ignore                                  # the patterns in force, one a line\n"+
			"  workspace-server ignore 'dist/' '*.log' '!keep.log' node_modules\n"+
			"                                                           # replace the configured patterns (gitignore syntax)\n"+
			"  workspace-server ignore --default                        # back to the default: node_modules\n"+
			"  workspace-server ignore --none                           # ignore nothing (but what /.wsyncignore says)\n"+
			"A /.wsyncignore file in the workspace adds its lines to the configured patterns.\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the configured patterns and those in force as JSON")
	def := c.fs.Bool("default", false, "configure the default patterns (node_modules)")
	none := c.fs.Bool("none", false, "configure no patterns")
	check := func(pos []string) error {
		switch {
		case *def && *none, (*def || *none) && len(pos) > 0:
			return errors.New("give PATTERNs, --default or --none, one of them")
		}
		return vfs.ValidateIgnore(pos)
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		var res api.Ignore
		var err error
		switch {
		case *def:
			res, err = ws.SetIgnore(ctx, nil)
		case *none:
			res, err = ws.SetIgnore(ctx, []string{})
		case len(pos) > 0:
			res, err = ws.SetIgnore(ctx, pos)
		default:
			res, err = ws.Ignore(ctx)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(res)
		}
		for _, p := range res.Patterns {
			fmt.Fprintln(stdout, p)
		}
		if res.FileError != "" {
			fmt.Fprintf(stderr, "workspace-server ignore: warning: %s\n", strings.TrimSpace(res.FileError))
		}
		return nil
	})
}
