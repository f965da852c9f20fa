package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/wsync/wsync/workspace"
)

// multiFlag collects a repeatable flag (--env K=V ...).
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// maxStdin bounds what -i sends (the server's exec request limit).
const maxStdin = 15 << 20

func runExec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if v, ok := execVerbs[args[0]]; ok {
			return v(ctx, args[1:], stdout, stderr)
		}
	}
	c := newCommand("exec", "exec [--runtime NAME] [--cwd DIR] [--env K=V]... [--timeout 30s] [--user UID[:GID]] [--sync wait|defer] [--log-cap BYTES] [--detach] [-n] [--quiet] -- CMD [ARG...]\n"+
		"  workspace-server exec attach ID [--from OFFSET|end] | exec ls [--json] | exec kill ID [--signal SIG] | exec wait ID",
		"  workspace-server exec --cwd /src --env CI=1 --timeout 5m -- make test\n"+
			"  workspace-server exec --sync defer -- npm install   # answers when npm exits; its files come back after\n"+
			"  workspace-server exec -- sh -c 'npm install && npm run build'\n"+
			"  workspace-server exec --runtime gpu -- nvidia-smi\n"+
			"  id=$(workspace-server exec --detach --timeout 1h -- npm run dev)   # prints its id; survives this client and a server restart\n"+
			"  workspace-server exec attach \"$id\" --from 0; workspace-server exec ls; workspace-server exec kill \"$id\"; workspace-server exec wait \"$id\"\n"+
			"  workspace-server exec -- ls   # runs ls: \"exec ls\" lists the commands\n"+
			"\nA foreground exec streams the command's output and exits with its code; interrupting it kills the\n"+
			"command. A detached one (--detach) prints its id at once and runs on; the server makes the pull after\n"+
			"it when it exits. At most --max-execs commands run at once per workspace (EEXEC_BUSY beyond).\n", stdout, stderr)
	cf := c.clientFlags()
	c.runtimeFlag(cf)
	cwd := c.fs.String("cwd", "", "working directory, a workspace path (default the workspace root)")
	var envs multiFlag
	c.fs.Var(&envs, "env", "K=V added to the command's environment (repeatable)")
	timeout := c.fs.Duration("timeout", 0, "kill the command after this long (default: computerd's, 10m)")
	user := c.fs.String("user", "", "run as UID[:GID] (numeric)")
	syncMode := c.fs.String("sync", env("WSYNC_EXEC_SYNC", workspace.SyncWait), "when to answer: wait (after the pull that brings back what the command wrote) or defer (at once; the pull runs after) (env WSYNC_EXEC_SYNC)")
	noStdin := c.fs.Bool("n", false, "do not send standard input to the command (as ssh -n); a terminal is never sent")
	quiet := c.quietFlag()
	detach := c.fs.Bool("detach", false, "start the command and print its id at once; it runs on after this client exits (see exec attach, ls, kill, wait)")
	logCap := c.fs.Int64("log-cap", 0, "bytes of output computerd keeps for exec attach (default: its cap, 8 MiB, also the most)")
	argv, code, ok := c.parse(args, false)
	if !ok {
		return code
	}
	if len(argv) == 0 {
		return c.usageError("no command given")
	}
	if *syncMode != workspace.SyncWait && *syncMode != workspace.SyncDefer {
		return c.usageError("--sync %q: want wait or defer", *syncMode)
	}
	if *logCap < 0 {
		return c.usageError("--log-cap %d: must not be negative", *logCap)
	}
	spec := workspace.ExecSpec{Argv: argv, Cwd: *cwd, Timeout: *timeout, Sync: *syncMode, LogCap: *logCap}
	for _, e := range envs {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return c.usageError("--env %q: want K=V", e)
		}
		spec.Env = append(spec.Env, e)
	}
	if *timeout < 0 {
		return c.usageError("--timeout %v: must not be negative", *timeout)
	}
	if *user != "" {
		u, err := parseUser(*user)
		if err != nil {
			return c.usageError("%v", err)
		}
		spec.User = u
	}
	if *cwd != "" {
		if err := checkPath(*cwd); err != nil {
			return c.usageError("--cwd: %v", err)
		}
	}
	// Piped or redirected input goes to the command: it is read to EOF before
	// the command starts (the API takes stdin whole), so it is bounded.
	if !*noStdin && !isCharDevice(stdin) {
		b, err := io.ReadAll(io.LimitReader(stdin, maxStdin+1))
		if err != nil {
			return c.fail(fmt.Errorf("read stdin: %w", err))
		}
		if len(b) > maxStdin {
			return c.usageError("standard input is over %d bytes", maxStdin)
		}
		spec.Stdin = b
	}
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if *detach {
		rep, err := ws.StartExec(ctx, spec)
		if err != nil {
			return c.fail(err)
		}
		if rep.Warning != "" {
			fmt.Fprintf(stderr, "workspace-server exec: warning: %s\n", rep.Warning)
		}
		fmt.Fprintln(stdout, rep.ExecID)
		return exitOK
	}
	// The push before the command and the pull after it show progress on
	// stderr; a push's bar ends before the command's output starts.
	m := newMeter(stderr, *quiet)
	out := outputTo{stdout: stdout, stderr: stderr}
	rep, err := ws.Exec(m.context(ctx), spec, func(ev workspace.ExecEvent) {
		m.end()
		out.write(ev)
	})
	m.end()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "workspace-server exec: interrupted; the command was killed")
			return exitInterrupted
		}
		return c.fail(err)
	}
	if rep.Sync == workspace.SyncPending {
		fmt.Fprintf(stderr, "workspace-server exec: warning: the pull after the command did not finish; the server goes on with it in the background (see: workspace-server status): %s\n", rep.SyncError)
	}
	if rep.Conflicts > 0 {
		fmt.Fprintf(stderr, "workspace-server: the pull after the command recorded %s (see: workspace-server conflicts)\n", conflictCount(rep.Conflicts))
	}
	return exitCode(rep.ExecResult)
}

// outputTo writes a command's output to stdout and stderr, and says on
// stderr where some was lost: an event whose offset is past the end of the
// one before. computerd's stream skips what its bounded log (--log-cap)
// dropped while the reader was behind, so the exit still comes.
type outputTo struct {
	stdout, stderr io.Writer
	next           int64 // the offset the next event should have; < 0: not known yet
}

func (o *outputTo) write(ev workspace.ExecEvent) {
	if o.next >= 0 && ev.Offset > o.next {
		fmt.Fprintf(o.stderr, "\nworkspace-server: %d bytes of the command's output were lost here: it wrote faster than they could be read, past what computerd keeps (--log-cap)\n", ev.Offset-o.next)
	}
	o.next = ev.Offset + int64(len(ev.Data))
	if ev.Stream == workspace.Stderr {
		o.stderr.Write(ev.Data)
	} else {
		o.stdout.Write(ev.Data)
	}
}

// isCharDevice reports whether r is a terminal or a device such as
// /dev/null: nothing to forward.
func isCharDevice(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// exitCode is the command's exit code, 128+n for signal n.
func exitCode(r workspace.ExecResult) int {
	if r.Signal != 0 && r.ExitCode == 0 {
		return 128 + r.Signal
	}
	return r.ExitCode
}

// parseUser parses --user UID[:GID].
func parseUser(s string) (*workspace.ExecUser, error) {
	us, gs, hasGid := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--user %q: want numeric UID[:GID]", s)
	}
	u := &workspace.ExecUser{Uid: uint32(uid)}
	if hasGid {
		gid, err := strconv.ParseUint(gs, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--user %q: want numeric UID[:GID]", s)
		}
		g := uint32(gid)
		u.Gid = &g
	}
	return u, nil
}
