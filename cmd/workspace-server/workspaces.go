package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

func runWorkspaces(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "create" {
		return runWorkspacesCreate(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "set-quota" {
		return runWorkspacesSetQuota(ctx, args[1:], stdout, stderr)
	}
	c := newCommand("workspaces", "workspaces [--json] | workspaces create NAME [flags] | workspaces set-quota NAME [flags]",
		"  workspace-server workspaces\n  workspace-server workspaces create proj --computerd ws://10.0.0.7:45678/sync --computerd-token-file /etc/wsync/proj.token\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the list as JSON")
	pos, code, ok := c.parse(args, true)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError("unexpected %q", pos[0])
	}
	cl, err := cf.client()
	if err != nil {
		return c.fail(err)
	}
	list, err := cl.Workspaces(ctx)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCOMPUTERD\tIGNORE")
	for _, w := range list {
		ig := "[node_modules] (default)" // what /.wsyncignore adds: workspace-server ignore
		if w.Ignore != nil {
			ig = "[" + strings.Join(w.Ignore, ", ") + "]"
		}
		ep := w.Endpoint
		if ep == "" {
			ep = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", w.Name, ep, ig)
	}
	tw.Flush()
	return exitOK
}

func runWorkspacesCreate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("workspaces create", "workspaces create NAME [--computerd URL] [--computerd-token-file FILE] [--ignore a,b] [--conflict-policy POLICY]\n"+
		"                             [--max-bytes SIZE] [--max-entries N] [--max-file-size SIZE]",
		"  workspace-server workspaces create proj --computerd ws://10.0.0.7:45678/sync --computerd-token-file /etc/wsync/proj.token\n"+
			"  workspace-server workspaces create proj --max-bytes 10GiB --max-entries 200000 --max-file-size 1GiB\n"+
			"  workspace-server workspaces create web --computerd ws://10.0.0.8:45678/sync --ignore 'node_modules,dist/,*.log,!keep.log'\n", stdout, stderr)
	cf := c.clientFlags()
	endpoint := c.fs.String("computerd", "", "the workspace's computerd sync URL (ws://HOST:45678/sync)")
	token := c.computerdTokenFlag()
	ignore := c.fs.String("ignore", "", `comma-separated gitignore patterns replacing the default "node_modules" ("-" ignores nothing; change them later with "workspace-server ignore")`)
	policy := c.fs.String("conflict-policy", "", "keep-both (the default), server-wins or container-wins")
	qf := c.quotaFlags(true)
	pos, code, ok := c.checkArgs(args, oneWorkspaceName)
	if !ok {
		return code
	}
	if _, err := vfs.ParseConflictPolicy(*policy); err != nil {
		return c.usageError("--conflict-policy: %v", err)
	}
	quota, err := qf.apply(vfs.Quota{}, true)
	if err != nil {
		return c.usageError("%v", err)
	}
	tok, err := token()
	if err != nil {
		return c.fail(err)
	}
	o := workspace.CreateOptions{Name: pos[0], Endpoint: *endpoint, ComputerdToken: tok, ConflictPolicy: vfs.ConflictPolicy(*policy), Quota: quota}
	switch *ignore {
	case "":
	case "-":
		o.Ignore = []string{}
	default:
		o.Ignore = strings.Split(*ignore, ",")
		if err := vfs.ValidateIgnore(o.Ignore); err != nil {
			return c.usageError("--ignore: %v", err)
		}
	}
	cl, err := cf.client()
	if err != nil {
		return c.fail(err)
	}
	if _, err := cl.CreateWorkspace(ctx, o); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// oneWorkspaceName is the check of a verb that takes one workspace NAME.
func oneWorkspaceName(pos []string) error {
	if len(pos) != 1 {
		return errors.New("want NAME")
	}
	return workspace.ValidateName(pos[0])
}
