package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/api"
)

// shutdownGrace bounds how long serve waits for requests in flight (exec
// streams included) after SIGTERM before closing their connections.
const shutdownGrace = 30 * time.Second

func runServe(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("serve", "serve [--listen 127.0.0.1:8080] [--data ./data] [--computerd ws://HOST:45678/sync]\n"+
		"                         [--computerd-token-file FILE] [--token-file FILE] [--mount DIR]\n"+
		"                         [--allow-endpoint HOST:PORT-GLOB]... [--conflict-policy POLICY]",
		"  workspace-server serve                      # embedded computerd, mount at ./workspace\n"+
			"  workspace-server serve --listen 0.0.0.0:8080 --data /var/lib/wsync \\\n"+
			"      --computerd ws://10.0.0.7:45678/sync --computerd-token-file /etc/wsync/computerd.token \\\n"+
			"      --token-file /etc/wsync/api.token --allow-endpoint '10.0.0.*:45678'\n"+
			"\nEvery flag has an environment twin: WSYNC_LISTEN, WSYNC_DATA, WSYNC_COMPUTERD,\n"+
			"WSYNC_COMPUTERD_TOKEN_FILE, WSYNC_TOKEN_FILE, WSYNC_MOUNT, WSYNC_LOG_LEVEL, WSYNC_ALLOW_ENDPOINT\n"+
			"(comma-separated patterns), WSYNC_CONFLICT_POLICY, WSYNC_MAX_EXECS, ...\n"+
			"Without --token-file the API token is kept in DATA/token (created 0600 on first start).\n"+safetyHelp+clusterHelp, stdout, stderr)
	listen := c.fs.String("listen", env("WSYNC_LISTEN", "127.0.0.1:8080"), "HTTP API listen address")
	data := c.fs.String("data", env("WSYNC_DATA", "./data"), "data dir: workspace stores and the registry")
	computerd := c.fs.String("computerd", env("WSYNC_COMPUTERD", ""), "the default workspace's computerd sync URL; empty runs one in this process")
	ctokenFile := c.fs.String("computerd-token-file", env("WSYNC_COMPUTERD_TOKEN_FILE", ""), "file holding --computerd's token")
	tokenFile := c.fs.String("token-file", env("WSYNC_TOKEN_FILE", ""), "file holding the API token clients must send (default DATA/token)")
	mount := c.fs.String("mount", env("WSYNC_MOUNT", "./workspace"), "mount point of the embedded computerd")
	level := c.fs.String("log-level", env("WSYNC_LOG_LEVEL", "info"), "debug, info, warn or error")
	var allow listFlag
	allow.set(env("WSYNC_ALLOW_ENDPOINT", ""))
	c.fs.Var(&allow, "allow-endpoint", "restrict the computerd endpoints a created workspace may name: a glob over HOST:PORT, e.g. '10.0.0.*:45678' (repeatable; env WSYNC_ALLOW_ENDPOINT, comma-separated; default: any)")
	policy := c.fs.String("conflict-policy", env("WSYNC_CONFLICT_POLICY", ""), "the default workspace's conflict policy: keep-both, server-wins or container-wins (env WSYNC_CONFLICT_POLICY; default: what the registry holds, keep-both at first)")
	verifyAfter := c.fs.Bool("verify-after-sync", env("WSYNC_VERIFY_AFTER_SYNC", "") == "1", "compare both sides' Merkle roots after every pull (env WSYNC_VERIFY_AFTER_SYNC=1)")
	pullSlice := c.fs.String("pull-slice", env("WSYNC_PULL_SLICE", workspace.DefaultPullSlice.Wall.String()), "longest FIFO turn of one slice of the pull after a command; the rest goes on in later turns (env WSYNC_PULL_SLICE)")
	maxExecs := c.fs.Int("max-execs", envInt("WSYNC_MAX_EXECS", workspace.DefaultMaxExecs), "most commands one workspace runs at once, foreground and detached; more are refused with EEXEC_BUSY (env WSYNC_MAX_EXECS)")
	retry := c.fs.String("retry-backoff", env("WSYNC_RETRY_BACKOFF", workspace.DefaultRetryBackoff.String()), "first wait before the background puller retries a failed pull; it doubles up to 60 times this (env WSYNC_RETRY_BACKOFF)")
	safety := c.safetyFlags()
	clf := c.clusterFlags()
	pos, code, ok := c.parse(args, true)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError("takes no arguments")
	}
	slice, err := time.ParseDuration(*pullSlice)
	if err != nil || slice <= 0 {
		return c.usageError("--pull-slice %q: want a positive duration", *pullSlice)
	}
	if *maxExecs <= 0 {
		return c.usageError("--max-execs %d: want 1 or more", *maxExecs)
	}
	backoff, err := time.ParseDuration(*retry)
	if err != nil || backoff <= 0 {
		return c.usageError("--retry-backoff %q: want a positive duration", *retry)
	}
	if _, err := vfs.ParseConflictPolicy(*policy); err != nil {
		return c.usageError("--conflict-policy: %v", err)
	}
	var safe workspace.Options
	if err := safety.apply(&safe); err != nil {
		return c.usageError("%v", err)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return c.usageError("--log-level %q: %v", *level, err)
	}
	// Each package adds its own component attribute to root.
	root := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	log := root.With("component", "workspace-server")

	if err := os.MkdirAll(*data, 0o755); err != nil {
		return c.fail(err)
	}
	token, tokenPath, err := serverToken(*tokenFile, *data)
	if err != nil {
		return c.fail(err)
	}

	endpoint, ctoken := *computerd, ""
	stopEmbedded := func() error { return nil }
	if endpoint == "" {
		ep, tok, stop, err := startEmbedded(ctx, *mount, *data)
		if err != nil {
			return c.fail(fmt.Errorf("embedded computerd: %w", err))
		}
		endpoint, ctoken, stopEmbedded = ep, tok, stop
		log.Info("embedded computerd running", "mount", *mount, "endpoint", ep)
	}
	factory := newRemote(root)
	cl, usage, err := clf.open(ctx, *data, *listen, root)
	if err != nil {
		stopEmbedded()
		if usage {
			return c.usageError("%v", err)
		}
		return c.fail(err)
	}

	opts := workspace.Options{
		DataDir:               *data,
		DefaultEndpoint:       endpoint,
		DefaultTokenFile:      *ctokenFile,
		DefaultToken:          ctoken,
		AllowEndpoints:        allow.list,
		DefaultConflictPolicy: vfs.ConflictPolicy(*policy),
		Remote:                factory,
		VerifyAfterSync:       *verifyAfter,
		PullSlice:             workspace.Budget{Wall: slice},
		RetryBackoff:          backoff,
		MaxExecs:              *maxExecs,
		Logger:                root,
	}
	opts.Trash, opts.NoTrash, opts.MassDelete = safe.Trash, safe.NoTrash, safe.MassDelete
	if cl != nil {
		opts.Ownership = cl
	}
	code = serve(ctx, c, root, *listen, token, opts, tokenPath)
	if cl != nil {
		// After the stores closed (their replication flushed): hand the
		// leases back so another server takes over at once.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := cl.Close(cctx); err != nil {
			log.Error("release leases", "err", err)
		}
		cancel()
	}
	if err := stopEmbedded(); err != nil {
		log.Error("embedded computerd shutdown", "err", err)
		if code == exitOK {
			code = exitError
		}
	}
	return code
}

// serve runs the Manager and the HTTP API until ctx ends, then shuts down:
// requests in flight get shutdownGrace, then the stores and remotes close.
func serve(ctx context.Context, c *command, root *slog.Logger, listen, token string, opts workspace.Options, tokenPath string) int {
	log := root.With("component", "workspace-server")
	m, err := workspace.Open(ctx, opts)
	if err != nil {
		return c.fail(err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			log.Error("close workspaces", "err", err)
		}
	}()
	a, err := api.New(api.Options{Manager: m, Token: token, Logger: root})
	if err != nil {
		return c.fail(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return c.fail(err)
	}
	hs := &http.Server{
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	a.Configure(hs)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "data", opts.DataDir, "token_file", tokenPath)
	if onListen != nil {
		onListen(ln.Addr().String())
	}
	select {
	case err := <-served:
		return c.fail(err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("requests still running at shutdown were cut", "err", err)
		hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return c.fail(err)
	}
	return exitOK
}

// serverToken reads the API token from file, or from DATA/token, creating
// that with a random token (0600) on first start. It returns the token and
// the file it came from (for the log: never the token).
func serverToken(file, data string) (string, string, error) {
	if file == "" {
		file = filepath.Join(data, "token")
		if err := createToken(file); err != nil {
			return "", "", err
		}
	}
	tok, err := bearer.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("api %w", err)
	}
	return tok, file, nil
}

// createToken writes a fresh random token to path unless it exists.
func createToken(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("api token: %w", err)
	}
	var b [32]byte
	rand.Read(b[:])
	_, err = f.WriteString(hex.EncodeToString(b[:]) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("api token: %w", err)
	}
	return nil
}

// listFlag is a repeatable string flag; its environment twin holds the
// values comma-separated. A flag given on the command line replaces the
// environment's list.
type listFlag struct {
	list    []string
	fromEnv bool
}

func (l *listFlag) String() string { return strings.Join(l.list, ",") }

// set loads the environment's list.
func (l *listFlag) set(v string) {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			l.list = append(l.list, p)
			l.fromEnv = true
		}
	}
}

// Set adds one value from the command line.
func (l *listFlag) Set(v string) error {
	if l.fromEnv {
		l.list, l.fromEnv = nil, false
	}
	if strings.TrimSpace(v) == "" {
		return errors.New("empty pattern")
	}
	l.list = append(l.list, v)
	return nil
}
