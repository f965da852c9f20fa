package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/client"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitDiverged = 3
	// exitInterrupted is exec's code when SIGINT or SIGTERM ended the CLI
	// (128+SIGINT, as a shell reports it).
	exitInterrupted = 130
)

// defaultTokenFile is where serve keeps its API token when it was given
// none (<default --data>/token), so the two README commands work together.
const defaultTokenFile = "data/token"

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// envInt is env for an integer flag's default: a value that is not a
// number is kept as def, and the flag's own check reports nothing; so it
// is read as -1 here, which every such check refuses.
func envInt(key string, def int) int {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// command is one verb's flag set and usage text.
type command struct {
	name     string
	fs       *flag.FlagSet
	stderr   io.Writer
	stdout   io.Writer
	synopsis string
	example  string
}

func newCommand(name, synopsis, example string, stdout, stderr io.Writer) *command {
	c := &command{name: name, fs: flag.NewFlagSet(name, flag.ContinueOnError), stdout: stdout, stderr: stderr, synopsis: synopsis, example: example}
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() { c.printUsage(stderr) }
	return c
}

func (c *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage:\n  workspace-server %s\n\nExample:\n%s\nFlags:\n", c.synopsis, c.example)
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(c.stderr)
}

// parse parses flags anywhere among the arguments ("ls /src --json" and
// "ls --json /src" alike); "--" ends the flags. With interspersed false
// the first argument that is not a flag ends them (exec: the command's own
// flags are its own). It returns the positional arguments, or an exit code
// when parsing ended the command (help: 0, a bad flag: 2).
func (c *command) parse(args []string, interspersed bool) ([]string, int, bool) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.printUsage(c.stdout)
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		rest := c.fs.Args()
		consumed := len(args) - len(rest)
		if len(rest) == 0 || !interspersed || (consumed > 0 && args[consumed-1] == "--") {
			return append(pos, rest...), 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError reports bad usage: exit 2.
func (c *command) usageError(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "workspace-server %s: %s\nRun \"workspace-server %s --help\" for usage.\n", c.name, fmt.Sprintf(format, a...), c.name)
	return exitUsage
}

// fail reports an error, naming its errno: exit 1.
func (c *command) fail(err error) int {
	msg := err.Error()
	var ce *client.Error
	if !errors.As(err, &ce) {
		if code := workspace.ErrnoName(err); code != "EIO" && !strings.Contains(msg, code) {
			msg += " (" + code + ")"
		}
	}
	if errors.Is(err, client.ErrUnauthorized) {
		msg += "; give the server's token with --token-file or WSYNC_TOKEN_FILE"
	}
	fmt.Fprintf(c.stderr, "workspace-server %s: %s\n", c.name, msg)
	return exitError
}

// clientFlags are the flags every client verb takes.
type clientFlags struct {
	server    string
	workspace string
	tokenFile string
	runtime   string // the verbs that sync with one runtime (runtimeFlag)
}

func (c *command) clientFlags() *clientFlags {
	cf := &clientFlags{}
	c.fs.StringVar(&cf.server, "server", env("WSYNC_SERVER", "http://127.0.0.1:8080"), "server URL (env WSYNC_SERVER)")
	c.fs.StringVar(&cf.workspace, "workspace", env("WSYNC_WORKSPACE", workspace.DefaultName), "workspace name (env WSYNC_WORKSPACE)")
	c.fs.StringVar(&cf.tokenFile, "token-file", env("WSYNC_TOKEN_FILE", ""), "file holding the server's API token (env WSYNC_TOKEN_FILE; default "+defaultTokenFile+" if present, or WSYNC_TOKEN)")
	return cf
}

// runtimeFlag adds --runtime to a verb that syncs with one runtime of the
// workspace (exec, push, pull, verify, status).
func (c *command) runtimeFlag(cf *clientFlags) {
	c.fs.StringVar(&cf.runtime, "runtime", env("WSYNC_RUNTIME", workspace.DefaultRuntime), "the workspace's runtime to sync with (env WSYNC_RUNTIME; see `workspace-server runtimes`)")
}

// computerdTokenFlag adds --computerd-token-file (workspaces create,
// runtimes attach): a file read here, on the client, whose token is sent
// to the server by value. The function it returns reads it ("" without the
// flag; an empty file is an error, never "no auth").
func (c *command) computerdTokenFlag() func() (string, error) {
	file := c.fs.String("computerd-token-file", "", "file, read here, holding that computerd's token (sent to the server by value)")
	return func() (string, error) {
		if *file == "" {
			return "", nil
		}
		tok, err := bearer.ReadFile(*file)
		if err != nil {
			return "", fmt.Errorf("--computerd-token-file: %w", err)
		}
		return tok, nil
	}
}

// token finds the API token: --token-file, else WSYNC_TOKEN, else the file
// serve writes by default. A token given but empty (an empty file, a
// WSYNC_TOKEN set to nothing) is an error, never sent as "no token".
func (cf *clientFlags) token() (string, error) {
	file := cf.tokenFile
	if file == "" {
		if t, ok := os.LookupEnv("WSYNC_TOKEN"); ok {
			if t = strings.TrimSpace(t); t == "" {
				return "", errors.New("token: WSYNC_TOKEN is set but empty")
			}
			return t, nil
		}
		if _, err := os.Stat(defaultTokenFile); err != nil {
			return "", nil // no token: the server answers EAUTH, and fail says how to give one
		}
		file = defaultTokenFile
	}
	return bearer.ReadFile(file)
}

func (cf *clientFlags) client() (*client.Client, error) {
	tok, err := cf.token()
	if err != nil {
		return nil, err
	}
	return client.New(cf.server, tok)
}

func (cf *clientFlags) open() (*client.Workspace, error) {
	c, err := cf.client()
	if err != nil {
		return nil, err
	}
	if err := workspace.ValidateName(cf.workspace); err != nil {
		return nil, err
	}
	return c.Workspace(cf.workspace).On(cf.runtime), nil
}

// clientVerb is the shape of a verb that makes one call on the workspace:
// its arguments (checkArgs), then the call (onWorkspace).
func (c *command) clientVerb(ctx context.Context, args []string, cf *clientFlags, check func(pos []string) error,
	call func(ctx context.Context, ws *client.Workspace, pos []string) error) int {
	pos, code, ok := c.checkArgs(args, check)
	if !ok {
		return code
	}
	return c.onWorkspace(ctx, cf, func(ctx context.Context, ws *client.Workspace) error {
		return call(ctx, ws, pos)
	})
}

// checkArgs parses a verb's flags and arguments and checks the arguments:
// what check refuses is bad usage (exit 2). It returns the positional
// arguments, or an exit code when parsing or the check ended the command.
func (c *command) checkArgs(args []string, check func(pos []string) error) ([]string, int, bool) {
	pos, code, ok := c.parse(args, true)
	if !ok {
		return nil, code, false
	}
	if err := check(pos); err != nil {
		return nil, c.usageError("%v", err), false
	}
	return pos, 0, true
}

// onWorkspace opens the workspace the client flags name and makes call on
// it; a failure of either is exit 1.
func (c *command) onWorkspace(ctx context.Context, cf *clientFlags, call func(context.Context, *client.Workspace) error) int {
	ws, err := cf.open()
	if err != nil {
		return c.fail(err)
	}
	if err := call(ctx, ws); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// noArgs is the check of a verb that takes no arguments.
func noArgs(pos []string) error {
	if len(pos) != 0 {
		return errors.New("takes no arguments")
	}
	return nil
}

// onePath is the check of a verb that takes one workspace PATH.
func onePath(pos []string) error {
	if len(pos) != 1 {
		return errors.New("want one PATH")
	}
	return checkPath(pos[0])
}

// checkPath validates a workspace path argument before it goes anywhere.
func checkPath(p string) error {
	_, err := vfs.CleanAPIPath(p)
	return err
}
