package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

const usage = `workspace-server: the authoritative side of wsync

Usage:
  workspace-server serve [--listen 127.0.0.1:8080] [--data ./data] [--computerd ws://HOST:45678/sync]
                         [--computerd-token-file FILE] [--token-file FILE] [--mount DIR]
                         [--allow-endpoint HOST:PORT-GLOB]... [--conflict-policy POLICY]
  workspace-server VERB [flags] [args]

Verbs (clients of a running server):
  exec [--cwd DIR] [--env K=V]... [--timeout 30s] [--user UID[:GID]] [--sync wait|defer] [--detach] -- CMD [ARG...]
  exec attach ID [--from OFFSET]   exec ls [--json]   exec kill ID [--signal SIG]   exec wait ID
  read PATH                  write PATH [FILE|-]
  ls [--json] [-R] [PATH]    stat [--json] PATH
  mkdir [-p] PATH            rm [-r] PATH
  mv SRC DST                 symlink TARGET PATH
  push | pull | tick | status [--json] | verify [--json]
  workspaces [--json]        workspaces create NAME [--computerd URL] [--computerd-token-file FILE] [--ignore PATTERNS] [--conflict-policy P]
                             [--max-bytes SIZE] [--max-entries N] [--max-file-size SIZE]
                             workspaces set-quota NAME [--max-bytes 10GiB] [--max-entries N] [--max-file-size 1GiB]
  runtimes [--json]          runtimes attach NAME --endpoint URL [--computerd-token-file FILE]
                             runtimes detach NAME
  conflicts [--all] [--json] conflicts resolve PATH --keep server|container|both
                             conflicts policy [keep-both|server-wins|container-wins]
  ignore [--json]            ignore [--default | --none | PATTERN...]   (gitignore patterns; /.wsyncignore adds)
  events [--json] [--after ID] [--types LIST]   (follows until interrupted)
  trash ls [--json] [PATH]   trash restore PATH [--at TIME] [--force]
                             trash purge [PATH] [--older-than 24h]
  pull --allow-mass-delete   (confirms a pull paused for deleting more than half the workspace)

Client flags (after the verb), with their environment twins:
  --server URL       WSYNC_SERVER      (default http://127.0.0.1:8080)
  --workspace NAME   WSYNC_WORKSPACE   (default "default")
  --token-file FILE  WSYNC_TOKEN_FILE  (default ./data/token, which serve writes; WSYNC_TOKEN holds a token itself)
  --runtime NAME     WSYNC_RUNTIME     (exec, push, pull, verify, status; default "default")

Exit codes: 0 success, 1 an error (named by its errno), 2 bad usage; exec exits with the
command's code (128+n when killed by signal n); verify exits 3 when the sides differ.

Example:
  workspace-server serve &
  workspace-server exec -- sh -c 'echo hi > a'
  workspace-server read /a
  id=$(workspace-server exec --detach -- sh -c 'sleep 60; echo done > b')
  workspace-server exec wait "$id"

Run "workspace-server VERB --help" for a verb's flags.
`

// verb is one subcommand: it parses its own flags from args.
type verb func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int

var verbs = map[string]verb{
	"serve":      runServe,
	"exec":       runExec,
	"read":       runRead,
	"write":      runWrite,
	"ls":         runLs,
	"stat":       runStat,
	"mkdir":      runMkdir,
	"rm":         runRm,
	"mv":         runMv,
	"symlink":    runSymlink,
	"push":       runPush,
	"pull":       runPull,
	"tick":       runTick,
	"status":     runStatus,
	"verify":     runVerify,
	"workspaces": runWorkspaces,
	"runtimes":   runRuntimes,
	"conflicts":  runConflicts,
	"ignore":     runIgnore,
	"events":     runEvents,
	"trash":      runTrash,
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to the verb and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	v, ok := verbs[args[0]]
	if !ok {
		names := make([]string, 0, len(verbs))
		for n := range verbs {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(stderr, "workspace-server: unknown verb %q (want one of %s)\n", args[0], strings.Join(names, ", "))
		return exitUsage
	}
	return v(ctx, args[1:], stdin, stdout, stderr)
}
