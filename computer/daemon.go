package computer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wsync/wsync/converge"
	"github.com/wsync/wsync/execrpc"
	"github.com/wsync/wsync/execrun"
	"github.com/wsync/wsync/fusefs"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// Config configures a Daemon.
type Config struct {
	// Listen is the HTTP address (default 127.0.0.1:45678). Listener, when
	// set, is used instead (an embedding process binds :0 itself).
	Listen   string
	Listener net.Listener
	// Mount is the mount point (default /workspace).
	Mount string
	// State is the store's database path, or vfs.Memory.
	State string
	// Token guards every route but /health; empty only on loopback.
	Token string
	// Owner owns the mount root and every node the server sends.
	Owner fusefs.Owner
	// MaxExecs and ExecLogCap bound the command runner (0: defaults).
	MaxExecs   int
	ExecLogCap int64
	// ExecRetainFor is how long a finished exec stays attachable and
	// listed (execrun.Options.RetainFor; 0: its default, one hour).
	ExecRetainFor time.Duration
	// NoSync skips fsync in the store (tests, tmpfs).
	NoSync bool
	// GroupWindow is the store's group commit window for mutations made
	// through the mount (vfs.Options.GroupWindow: 0 default, negative off).
	GroupWindow time.Duration
	Logger      *slog.Logger
}

// Daemon is a running computerd.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	store  *vfs.Store
	mnt    *fusefs.Server
	runner *execrun.Runner
	sync   *syncwire.Server
	http   *http.Server
	ln     net.Listener
	served chan error
	start  time.Time
}

// Start brings computerd up: store, mount, runner, sync server, HTTP.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:45678"
	}
	if cfg.Mount == "" {
		cfg.Mount = "/workspace"
	}
	if cfg.State == "" {
		cfg.State = "/var/lib/computerd/state.db"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	d := &Daemon{cfg: cfg, log: log.With("component", "computerd"), served: make(chan error, 1), start: time.Now()}

	if cfg.Token != "" && strings.TrimSpace(cfg.Token) == "" {
		return nil, fmt.Errorf("computerd: the token is blank: refusing to run without auth")
	}
	ln := cfg.Listener
	if ln == nil {
		if cfg.Token == "" && !loopback(cfg.Listen) {
			return nil, fmt.Errorf("computerd: refusing to listen on %s without a token (use --token-file or a loopback address)", cfg.Listen)
		}
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("computerd: listen: %w", err)
		}
	} else if cfg.Token == "" && !loopback(ln.Addr().String()) {
		return nil, fmt.Errorf("computerd: refusing to serve %s without a token", ln.Addr())
	}
	d.ln = ln
	fail := func(err error) (*Daemon, error) {
		d.close(context.Background())
		return nil, err
	}

	var err error
	owner := vfs.NewAttr{Uid: cfg.Owner.Uid, Gid: cfg.Owner.Gid}
	if d.store, err = vfs.Open(ctx, cfg.State, vfs.Options{Owner: owner, NoSync: cfg.NoSync, GroupWindow: cfg.GroupWindow, Logger: log, GC: vfs.DefaultGC}); err != nil {
		return fail(fmt.Errorf("computerd: %w", err))
	}
	if err := cleanStaleMount(cfg.Mount, d.log); err != nil {
		return fail(fmt.Errorf("computerd: %w", err))
	}
	own := cfg.Owner
	if d.mnt, err = fusefs.Mount(ctx, cfg.Mount, d.store, fusefs.Options{Owner: &own, Logger: log}); err != nil {
		return fail(fmt.Errorf("computerd: mount %s: %w", cfg.Mount, err))
	}
	if d.runner, err = execrun.New(execrun.Options{
		Root: cfg.Mount, RuntimeID: rpc.RuntimeID.String(),
		MaxRunning: cfg.MaxExecs, LogCap: cfg.ExecLogCap, RetainFor: cfg.ExecRetainFor, Logger: log,
	}); err != nil {
		return fail(fmt.Errorf("computerd: %w", err))
	}
	d.sync = syncwire.NewServer(d.store, rpc.ServerOptions{Token: cfg.Token, Config: rpc.Config{ID: d.store.ID(), Logger: log}})
	execrpc.Register(d.sync, d.runner, execrpc.Options{BeforeStart: d.mnt.WaitInvalidated, Head: d.head, Logger: log})
	converge.Register(d.sync, d.store, log)

	d.http = &http.Server{Handler: d.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() { d.served <- d.http.Serve(ln) }()
	d.log.Info("computerd up", "listen", ln.Addr().String(), "mount", cfg.Mount, "state", cfg.State,
		"runtime", rpc.RuntimeID.String(), "store", d.store.ID())
	return d, nil
}

// head is the store's feed head once everything written through the mount
// is committed: the files still open (a process the command left behind
// may hold one), then the open group of mutations (CurrentRev commits it).
// Every exit event carries it, so the server skips the pull after a
// command that changed nothing (docs/PROTOCOL.md, exec).
func (d *Daemon) head(ctx context.Context) (int64, error) {
	if err := d.store.FlushAll(ctx); err != nil {
		return 0, err
	}
	return d.store.CurrentRev(), nil
}

// Addr is the address computerd listens on.
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

// SyncURL is the WebSocket endpoint for the workspace server.
func (d *Daemon) SyncURL() string { return "ws://" + d.Addr() + "/sync" }

// Store is the container store.
func (d *Daemon) Store() *vfs.Store { return d.store }

// MountDir is the mount point.
func (d *Daemon) MountDir() string { return d.cfg.Mount }

// Done reports the HTTP server's end (an error other than a clean close).
func (d *Daemon) Done() <-chan error { return d.served }

// Shutdown stops serving, kills running commands, flushes, unmounts and
// closes the store.
func (d *Daemon) Shutdown(ctx context.Context) error {
	err := d.close(ctx)
	d.log.Info("computerd down", "err", err)
	return err
}

func (d *Daemon) close(ctx context.Context) error {
	var errs []error
	if d.http != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		errs = append(errs, ignoreClosed(d.http.Shutdown(sctx)))
		cancel()
	} else if d.ln != nil {
		d.ln.Close()
	}
	if d.sync != nil {
		errs = append(errs, d.sync.Close())
	}
	if d.runner != nil {
		errs = append(errs, d.runner.Shutdown(ctx))
	}
	if d.mnt != nil {
		errs = append(errs, d.mnt.Flush(ctx))
		if err := d.mnt.Unmount(); err != nil {
			d.log.Warn("unmount busy, detaching", "err", err)
			errs = append(errs, d.mnt.ForceUnmount())
		}
	}
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cleanStaleMount detaches a FUSE mount whose server died (stat gives
// ENOTCONN) and makes sure the mount point exists. A live mount is left
// alone: mounting over it fails with a clear error.
func cleanStaleMount(dir string, log *slog.Logger) error {
	var st syscall.Stat_t
	err := syscall.Stat(dir, &st)
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		log.Warn("stale mount from a previous run, detaching", "dir", dir)
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("detach stale mount %s: %w", dir, err)
		}
	case errors.Is(err, syscall.ENOENT):
		return os.MkdirAll(dir, 0o755)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	if mounted(dir) {
		return fmt.Errorf("%s is already a mount point (another computerd?)", dir)
	}
	return nil
}

// mounted reports whether dir is a mount point, from /proc/self/mountinfo.
func mounted(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == abs {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
