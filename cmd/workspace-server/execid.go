package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

// execVerbs are exec's verbs by id; anything else after exec is a command
// (run `exec -- ls` to run a command called ls).
var execVerbs = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"attach": runExecAttach,
	"ls":     runExecLs,
	"kill":   runExecKill,
	"wait":   runExecWait,
}

// oneExecID is the check of a verb that takes one exec ID.
func oneExecID(pos []string) error {
	if len(pos) != 1 {
		return errors.New("want one exec ID (see: workspace-server exec ls)")
	}
	return workspace.ValidateExecID(pos[0])
}

func runExecAttach(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("exec attach", "exec attach ID [--from OFFSET|end] [--runtime NAME]",
		"  id=$(workspace-server exec --detach -- npm run dev)\n"+
			"  workspace-server exec attach \"$id\"              # its output from the start, then live, until it exits\n"+
			"  workspace-server exec attach \"$id\" --from 4096  # from byte 4096 of its output\n"+
			"  workspace-server exec attach \"$id\" --from end   # only what comes next\n"+
			"\nExits with the command's code once it ends. Interrupting stops following; the command runs on.\n", stdout, stderr)
	cf := c.clientFlags()
	c.runtimeFlag(cf)
	from := c.fs.String("from", "0", "byte offset of its output to replay from (stdout and stderr together), or end")
	pos, code, ok := c.checkArgs(args, oneExecID)
	if !ok {
		return code
	}
	off, err := workspace.ParseExecFrom(*from)
	if err != nil {
		return c.usageError("--from: %v", err)
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	out := outputTo{stdout: stdout, stderr: stderr, next: off} // "end" is negative: the first offset is whatever comes
	res, err := ws.AttachExec(ctx, pos[0], off, out.write)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "workspace-server exec attach: interrupted; %s runs on\n", pos[0])
			return exitInterrupted
		}
		return c.fail(err)
	}
	return exitCode(res)
}

func runExecLs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("exec ls", "exec ls [--json]",
		"  workspace-server exec ls\n"+
			"  workspace-server exec ls --json | jq '.execs[] | select(.state == \"running\") | .exec_id'\n"+
			"\nLists the running and recent commands of every runtime of the workspace: ID, STATE, CODE,\n"+
			"OUTPUT (bytes), STARTED, SYNC (the pull after a detached command), COMMAND.\n", stdout, stderr)
	cf := c.clientFlags()
	asJSON := c.fs.Bool("json", false, "print the list as JSON")
	return c.clientVerb(ctx, args, cf, noArgs, func(ctx context.Context, ws *client.Workspace, _ []string) error {
		list, err := ws.Execs(ctx)
		if err != nil {
			return err
		}
		for _, u := range list.Unreachable {
			fmt.Fprintf(stderr, "workspace-server exec ls: runtime %s not reachable (its detached commands as last recorded): %s\n", u.Runtime, u.Error)
		}
		if *asJSON {
			return c.writeJSON(list)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tCODE\tOUTPUT\tSTARTED\tSYNC\tCOMMAND")
		for _, e := range list.Execs {
			code, sync := "-", "-"
			if e.Result != nil {
				code = strconv.Itoa(exitCode(*e.Result))
			}
			if e.Detached {
				sync = e.Sync
				if sync == "" {
					sync = "after exit"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.ExecID, e.State, code, e.OutputBytes,
				e.Started.Local().Format(time.DateTime), sync, commandLine(e))
		}
		return tw.Flush()
	})
}

// commandLine is an exec's command for a table: its argv (or shell
// script), cut to one line of at most 60 characters.
func commandLine(e workspace.ExecInfo) string {
	s := e.Shell
	if len(e.Argv) > 0 {
		s = strings.Join(e.Argv, " ")
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 || e.ArgvTruncated {
		s = s[:min(len(s), 57)] + "..."
	}
	return s
}

func runExecKill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("exec kill", "exec kill ID [--signal SIG] [--runtime NAME]",
		"  workspace-server exec kill 4b1d...:7                 # SIGTERM to its process group\n"+
			"  workspace-server exec kill 4b1d...:7 --signal KILL\n", stdout, stderr)
	cf := c.clientFlags()
	c.runtimeFlag(cf)
	signal := c.fs.String("signal", "TERM", "signal by name (TERM, KILL, INT, HUP, ...) or number")
	pos, code, ok := c.checkArgs(args, oneExecID)
	if !ok {
		return code
	}
	sig, err := workspace.ParseSignal(*signal)
	if err != nil {
		return c.usageError("--signal: %v", err)
	}
	return c.onWorkspace(ctx, cf, func(ctx context.Context, ws *client.Workspace) error {
		return ws.KillExec(ctx, pos[0], sig)
	})
}

func runExecWait(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("exec wait", "exec wait ID [--json] [--runtime NAME]",
		"  id=$(workspace-server exec --detach -- make test)\n"+
			"  workspace-server exec wait \"$id\"; echo \"make exited $?\"\n"+
			"\nWaits until the command has ended and, for a detached one, the pull after it is done (or,\n"+
			"with --sync defer, owed to the server's background puller); exits with the command's code.\n", stdout, stderr)
	cf := c.clientFlags()
	c.runtimeFlag(cf)
	asJSON := c.fs.Bool("json", false, "print the exec as JSON")
	pos, code, ok := c.checkArgs(args, oneExecID)
	if !ok {
		return code
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	info, err := ws.WaitExec(ctx, pos[0])
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "workspace-server exec wait: interrupted; %s runs on\n", pos[0])
			return exitInterrupted
		}
		return c.fail(err)
	}
	if *asJSON {
		if err := c.writeJSON(info); err != nil {
			return c.fail(err)
		}
	}
	if info.State == workspace.ExecStateLost || info.Result == nil {
		return c.fail(fmt.Errorf("exec %s was lost: %s (%s)", pos[0], info.Error, "EEXEC_LOST"))
	}
	if info.Sync == workspace.SyncPending {
		fmt.Fprintf(stderr, "workspace-server exec wait: warning: the pull after the command did not finish; the server goes on with it in the background (see: workspace-server status): %s\n", info.SyncError)
	}
	return exitCode(*info.Result)
}
