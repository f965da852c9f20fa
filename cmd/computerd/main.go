// Command computerd runs inside the sandbox container: it mounts the
// workspace with FUSE and serves the sync wire, the command runner and its
// HTTP routes to the workspace server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wsync/wsync/computer"
	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/vfs"
)

const usage = `computerd: the container side of wsync (FUSE mount + sync server + command runner)

Usage:
  computerd [--listen 127.0.0.1:45678] [--mount /workspace] [--state /var/lib/computerd/state.db | :memory:]
            [--token-file FILE] [--owner 0:0] [--group-commit 5ms] [--exec-retain-for 1h] [--log-level info]

Every flag has an environment twin: COMPUTERD_LISTEN, COMPUTERD_MOUNT, COMPUTERD_STATE,
COMPUTERD_TOKEN (the token itself), COMPUTERD_OWNER, COMPUTERD_GROUP_COMMIT, COMPUTERD_EXEC_RETAIN_FOR,
COMPUTERD_LOG_LEVEL.

--exec-retain-for is how long a finished command stays listed and attachable by id (its output
replayed, its exit status known); at most the newest 64 finished commands are kept however young.

--group-commit is how long mutations made through the mount may wait, answered but not yet
committed, to share one commit: a SIGKILL of computerd loses at most that window of what was
not fsynced (fsync, and every pull, commit first). 0 commits every mutation before answering it.

Example (in a container started with --device /dev/fuse --cap-add SYS_ADMIN):
  echo "$SECRET" > /run/computerd.token
  computerd --listen 0.0.0.0:45678 --token-file /run/computerd.token --owner 1000:1000

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr))
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("computerd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", env("COMPUTERD_LISTEN", "127.0.0.1:45678"), "HTTP and sync listen address")
	mount := fs.String("mount", env("COMPUTERD_MOUNT", "/workspace"), "FUSE mount point")
	state := fs.String("state", env("COMPUTERD_STATE", "/var/lib/computerd/state.db"), "store database path, or :memory:")
	tokenFile := fs.String("token-file", "", "file holding the bearer token (default: $COMPUTERD_TOKEN)")
	owner := fs.String("owner", env("COMPUTERD_OWNER", "0:0"), "UID:GID owning the mount root and synced nodes")
	level := fs.String("log-level", env("COMPUTERD_LOG_LEVEL", "info"), "debug, info, warn or error")
	group := fs.String("group-commit", env("COMPUTERD_GROUP_COMMIT", vfs.DefaultGroupWindow.String()), "group commit window for mutations through the mount (0: commit each one)")
	retainFor := fs.String("exec-retain-for", env("COMPUTERD_EXEC_RETAIN_FOR", execrun.DefaultRetainFor.String()), "how long a finished command stays listed and attachable by id")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "computerd: unexpected arguments %q\n", fs.Args())
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "computerd: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	window, err := time.ParseDuration(*group)
	if err != nil || window < 0 || window > time.Second {
		fmt.Fprintf(stderr, "computerd: --group-commit %q: want a duration from 0 to 1s\n", *group)
		return 2
	}
	if window == 0 {
		window = -1 // vfs: negative is off, zero the default
	}
	retain, err := time.ParseDuration(*retainFor)
	if err != nil || retain <= 0 {
		fmt.Fprintf(stderr, "computerd: --exec-retain-for %q: want a positive duration\n", *retainFor)
		return 2
	}
	own, err := parseOwner(*owner)
	if err != nil {
		fmt.Fprintf(stderr, "computerd: --owner: %v\n", err)
		return 2
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "computerd: %v\n", err)
		return 1
	}
	d, err := computer.Start(ctx, computer.Config{Listen: *listen, Mount: *mount, State: *state, Token: token, Owner: own, GroupWindow: window, ExecRetainFor: retain, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	select {
	case <-ctx.Done():
	case err := <-d.Done():
		log.Error("http server stopped", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "computerd: shutdown: %v\n", err)
		return 1
	}
	return 0
}

// readToken finds the bearer token: the content of file (surrounding white
// space trimmed) when one is given, else $COMPUTERD_TOKEN. A token that is
// given but empty is an error, never "no auth": a file that was truncated
// or an unset secret in a deployment template must not open the daemon.
// Neither given at all means no token (allowed on loopback only).
func readToken(file string) (string, error) {
	if file != "" {
		tok, err := bearer.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: refusing to run without auth (remove --token-file to run unauthenticated on loopback)", err)
		}
		return tok, nil
	}
	v, ok := os.LookupEnv("COMPUTERD_TOKEN")
	if !ok {
		return "", nil
	}
	tok := strings.TrimSpace(v)
	if tok == "" {
		return "", errors.New("COMPUTERD_TOKEN is set but empty: refusing to run without auth (unset it to run unauthenticated on loopback)")
	}
	return tok, nil
}

func parseOwner(s string) (fusefs.Owner, error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		g = u
	}
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return fusefs.Owner{}, fmt.Errorf("bad uid in %q", s)
	}
	gid, err := strconv.ParseUint(g, 10, 32)
	if err != nil {
		return fusefs.Owner{}, fmt.Errorf("bad gid in %q", s)
	}
	return fusefs.Owner{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
