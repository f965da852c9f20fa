package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

func runRuntimes(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "attach":
			return runRuntimesAttach(ctx, args[1:], stdout, stderr)
		case "detach":
			return runRuntimesDetach(ctx, args[1:], stdout, stderr)
		}
	}
	c := newCommand("runtimes", "runtimes [--json] | runtimes attach NAME [flags] | runtimes detach NAME",
		"  workspace-server runtimes\n"+
			"  workspace-server runtimes attach gpu --endpoint ws://10.0.0.8:45678/sync --computerd-token-file /etc/wsync/gpu.token\n"+
			"  workspace-server runtimes detach gpu\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the list as JSON")
	return c.clientVerb(ctx, args, cf, noArgs, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		list, err := ws.Runtimes(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.writeJSON(list)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCOMPUTERD\tPEER\tTOKEN")
		for _, rt := range list {
			ep, tok := rt.Endpoint, "no"
			if ep == "" {
				ep = "-"
			}
			if rt.HasToken {
				tok = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rt.Name, ep, rt.Peer(), tok)
		}
		return tw.Flush()
	})
}

func runRuntimesAttach(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("runtimes attach", "runtimes attach NAME --endpoint URL [--computerd-token-file FILE]",
		"  workspace-server runtimes attach gpu --endpoint ws://10.0.0.8:45678/sync --computerd-token-file /etc/wsync/gpu.token\n", stdout, stderr)
	cf := c.clientFlags()
	endpoint := c.fs.String("endpoint", "", "the runtime's computerd sync URL (ws://HOST:45678/sync)")
	token := c.computerdTokenFlag()
	check := func(pos []string) error {
		if len(pos) != 1 {
			return errors.New("want NAME")
		}
		if *endpoint == "" {
			return errors.New("--endpoint is required")
		}
		return workspace.ValidateRuntimeName(pos[0])
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		tok, err := token()
		if err != nil {
			return err
		}
		_, err = ws.Attach(ctx, workspace.AttachOptions{Name: pos[0], Endpoint: *endpoint, ComputerdToken: tok})
		return err
	})
}

func runRuntimesDetach(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("runtimes detach", "runtimes detach NAME", "  workspace-server runtimes detach gpu\n", stdout, stderr)
	cf := c.clientFlags()
	check := func(pos []string) error {
		if len(pos) != 1 {
			return errors.New("want NAME")
		}
		return workspace.ValidateRuntimeName(pos[0])
	}
	return c.clientVerb(ctx, args, cf, check, func(ctx context.Context, ws *client.Workspace, pos []string) error {
		return ws.Detach(ctx, pos[0])
	})
}
