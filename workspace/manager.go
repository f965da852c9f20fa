package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace/events"
)

// Options configures a Manager.
type Options struct {
	// DataDir holds the registry (workspaces.json) and one directory per
	// workspace (<DataDir>/<name>/store.db).
	DataDir string
	// DefaultEndpoint, DefaultTokenFile and DefaultToken bind the default
	// workspace to the server's own computerd (serve --computerd and
	// --computerd-token-file, or the embedded one's endpoint and in-memory
	// token). They are the operator's, trusted, applied on every Open (so
	// the flags win over what the registry held) and never persisted.
	DefaultEndpoint  string
	DefaultTokenFile string
	DefaultToken     string
	// DefaultConflictPolicy is the default workspace's conflict policy
	// (serve --conflict-policy): when set, applied on every Open and
	// persisted; empty keeps what the registry holds (keep-both at first).
	DefaultConflictPolicy vfs.ConflictPolicy
	// AllowEndpoints restricts the endpoints a workspace created through
	// Create may name: globs (path.Match) over the endpoint's host:port,
	// the port filled in from the scheme when absent ("10.0.0.*:45678",
	// "*.sandbox.internal:*"). Empty allows any well-formed endpoint.
	AllowEndpoints []string
	// Remote builds each workspace's Remote on first use. Nil: every sync
	// and exec call fails with ErrNoRemote.
	Remote RemoteFactory
	// NoSync opens stores without fsync (tests, tmpfs).
	NoSync bool
	// MaxExecOutput bounds the output an Exec without an out callback keeps
	// in its report (default 8 MiB); the rest is dropped and
	// ExecReport.OutputTruncated set.
	MaxExecOutput int
	// PullTimeout bounds the post-command pull, which runs even when the
	// caller has gone away (default 10 minutes).
	PullTimeout time.Duration
	// PullSlice bounds each slice of a post-command pull, one FIFO turn
	// (default DefaultPullSlice; a field left zero takes its default).
	PullSlice Budget
	// RetryBackoff is the background puller's first wait after a failed
	// pull; it doubles up to 60 times this (default DefaultRetryBackoff).
	RetryBackoff time.Duration
	// MaxExecs bounds the commands one workspace runs at once, foreground
	// and detached together (default DefaultMaxExecs); one more is
	// refused with ErrTooManyExecs.
	MaxExecs int
	// ExecHistory is how many finished detached execs a workspace keeps in
	// its table (and the registry) for ls and wait (default
	// DefaultExecHistory); the oldest go first.
	ExecHistory int
	// VerifyAfterSync compares both sides' Merkle roots after every exec's
	// pull and every explicit pull or tick; the verdict shows in Status and
	// the metrics. A verify that fails or finds drift never fails the call
	// it follows.
	VerifyAfterSync bool
	// Events bounds the retention of each workspace's event log (zero:
	// the defaults of package events).
	Events events.Options
	// Trash configures each workspace store's trash (zero fields: vfs's
	// defaults, 24 hours and 10 GiB); NoTrash keeps none (trash.go).
	Trash   vfs.TrashOptions
	NoTrash bool
	// MassDelete is the deletion safety of pulls (zero fields: the
	// defaults; massdelete.go).
	MassDelete MassDeleteOptions
	// Ownership, when set, shares the workspaces with other servers
	// through an object store (ownership.go); nil keeps every workspace
	// this server's alone.
	Ownership Ownership
	Logger    *slog.Logger
}

// Manager owns the workspaces of one server: their registry, their stores
// (opened on first use) and their remotes (built on first use).
type Manager struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex // guards ws, order of the registry file, closed
	ws     map[string]*Workspace
	closed bool

	claimMu sync.Mutex // one claim at a time (ownership.go)
}

// Open loads (or creates) the registry under opts.DataDir and binds the
// default workspace. Stores are not opened until used.
func Open(ctx context.Context, opts Options) (*Manager, error) {
	if opts.DataDir == "" {
		return nil, fmt.Errorf("open workspaces: %w: no data dir", vfs.ErrInvalid)
	}
	if opts.MaxExecOutput <= 0 {
		opts.MaxExecOutput = 8 << 20
	}
	if opts.PullTimeout <= 0 {
		opts.PullTimeout = 10 * time.Minute
	}
	if opts.PullSlice.Entries <= 0 {
		opts.PullSlice.Entries = DefaultPullSlice.Entries
	}
	if opts.PullSlice.Bytes <= 0 {
		opts.PullSlice.Bytes = DefaultPullSlice.Bytes
	}
	if opts.PullSlice.Wall <= 0 {
		opts.PullSlice.Wall = DefaultPullSlice.Wall
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	if opts.MaxExecs <= 0 {
		opts.MaxExecs = DefaultMaxExecs
	}
	if opts.ExecHistory <= 0 {
		opts.ExecHistory = DefaultExecHistory
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	for _, p := range opts.AllowEndpoints {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("open workspaces: allow-endpoint %q: %w: %v", p, vfs.ErrInvalid, err)
		}
	}
	if opts.DefaultEndpoint != "" {
		if _, err := checkEndpoint(opts.DefaultEndpoint); err != nil {
			return nil, fmt.Errorf("open workspaces: default computerd: %w", err)
		}
	}
	if opts.DefaultTokenFile != "" {
		if _, err := bearer.ReadFile(opts.DefaultTokenFile); err != nil {
			return nil, fmt.Errorf("open workspaces: default computerd: %w", err)
		}
	}
	if opts.DefaultToken != "" {
		if err := checkToken(opts.DefaultToken); err != nil {
			return nil, fmt.Errorf("open workspaces: default computerd: %w", err)
		}
	}
	if err := opts.MassDelete.check(); err != nil {
		return nil, fmt.Errorf("open workspaces: %w", err)
	}
	if _, err := vfs.ParseConflictPolicy(string(opts.DefaultConflictPolicy)); err != nil {
		return nil, fmt.Errorf("open workspaces: default workspace: %w", err)
	}
	m := &Manager{opts: opts, log: log.With("component", "workspace"), ws: make(map[string]*Workspace)}
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("open workspaces: %w", err)
	}
	cfgs, dropped, err := loadRegistry(opts.DataDir)
	if err != nil {
		return nil, err
	}
	for _, name := range dropped {
		if name == DefaultName {
			continue // its token comes from the flags
		}
		m.log.Warn("registry named a token file outside the workspace's directory; it is not read: re-create the workspace with its token", "workspace", name)
	}
	cfg, ok := Config{Name: DefaultName, Created: time.Now().UTC()}, false
	var reclaim []string
	for _, c := range cfgs {
		if c.Name == DefaultName {
			cfg, ok = c, true // bound to the flags below
			continue
		}
		if opts.Ownership != nil {
			// The object store has the registration; the workspace is
			// served again once claimed (ownership.go).
			reclaim = append(reclaim, c.Name)
			continue
		}
		m.ws[c.Name] = m.newWorkspace(c)
	}
	changed := !ok || len(dropped) > 0 || cfg.Endpoint != opts.DefaultEndpoint || cfg.HasToken
	cfg.Endpoint, cfg.HasToken, cfg.tokenFile, cfg.token = opts.DefaultEndpoint, false, opts.DefaultTokenFile, opts.DefaultToken
	if p := opts.DefaultConflictPolicy; p != "" && p != cfg.ConflictPolicy {
		cfg.ConflictPolicy, changed = p, true
	}
	m.ws[DefaultName] = m.newWorkspace(cfg)
	if changed {
		if err := m.saveLocked(); err != nil {
			return nil, err
		}
	}
	m.log.Info("workspaces loaded", "data", opts.DataDir, "count", len(m.ws), "default_endpoint", opts.DefaultEndpoint)
	for _, w := range m.ws {
		w.resumePulls()
		w.resumeExecs()
	}
	trackUsage(m, true)
	if len(reclaim) > 0 {
		go m.claimOwned(reclaim)
	}
	return m, nil
}

// newWorkspace builds a workspace from its registration: its default
// runtime and the attached ones, each with the pending pull the registry
// held for it.
func (m *Manager) newWorkspace(c Config) *Workspace {
	pending, attached, execs := c.PendingPulls, c.Runtimes, c.Execs
	c.PendingPulls, c.Runtimes, c.Execs = nil, nil, nil
	w := &Workspace{
		m:        m,
		cfg:      c,
		dir:      filepath.Join(m.opts.DataDir, c.Name),
		log:      m.log.With("workspace", c.Name),
		runtimes: make(map[string]*runtimeState, 1+len(attached)),
		events:   events.New(m.opts.Events),
		execs:    make(map[string]*detachedExec),
	}
	w.bgCtx, w.bgCancel = context.WithCancel(context.Background())
	w.runtimes[DefaultRuntime] = w.newRuntime(w.defaultRuntime(), pending[DefaultRuntime])
	for _, rt := range attached {
		w.runtimes[rt.Name] = w.newRuntime(rt, pending[rt.Name])
	}
	w.loadExecs(execs)
	return w
}

// pendingPulls is the live pending pull of each runtime that owes one.
func (w *Workspace) pendingPulls() map[string]*PendingPull {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	var out map[string]*PendingPull
	for name, rs := range w.runtimes {
		if rs.pending != nil {
			if out == nil {
				out = make(map[string]*PendingPull)
			}
			out[name] = clonePtr(rs.pending)
		}
	}
	return out
}

// saveLocked writes the registry: every registration with its attached
// runtimes and their live pending records. Lock order: m.mu, then each
// w.stateMu.
func (m *Manager) saveLocked() error {
	cfgs := make([]Config, 0, len(m.ws))
	for _, w := range m.ws {
		c := w.Config()
		c.PendingPulls = w.pendingPulls()
		c.Execs = w.execRecords()
		cfgs = append(cfgs, c)
		m.publish(w, c)
	}
	return saveRegistry(m.opts.DataDir, cfgs)
}

// Workspace returns the workspace named name.
func (m *Manager) Workspace(name string) (*Workspace, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	w, ok := m.ws[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoWorkspace, name)
	}
	return w, nil
}

// Workspaces lists the registered workspaces by name, as the API shows
// them: no tokens, no paths.
func (m *Manager) Workspaces() []Info {
	var shared []string
	if own := m.opts.Ownership; own != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		if shared, err = own.Names(ctx); err != nil {
			m.log.Warn("list the object store's workspaces", "err", err)
		}
		cancel()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Info, 0, len(m.ws))
	for _, w := range m.ws {
		out = append(out, w.Info())
	}
	for _, name := range shared {
		if _, ok := m.ws[name]; !ok {
			out = append(out, Info{Name: name}) // served by another server
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// CreateOptions describes a new workspace. It is the body of POST
// /v1/workspaces: everything in it comes from a caller, so nothing in it is
// a host path, and the token comes by value.
type CreateOptions struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint,omitempty"`
	// ComputerdToken is the bearer token of Endpoint's computerd, by value.
	// It is written to <data>/<name>/computerd.token (mode 0600, temp +
	// fsync + rename), never echoed, logged or put in the registry.
	ComputerdToken string `json:"computerd_token,omitempty"`
	// Ignore is the workspace's gitignore patterns (vfs.Ignore): null or
	// absent for the default ["node_modules"], [] for none. The
	// IgnoreFile's lines add to them.
	Ignore []string `json:"ignore"`
	// ConflictPolicy is how the server settles a path both sides changed:
	// keep-both (the default, "" too), server-wins or container-wins.
	ConflictPolicy vfs.ConflictPolicy `json:"conflict_policy,omitempty"`
	// Quota bounds the workspace's store (zero fields: unbounded);
	// SetQuota changes it.
	Quota vfs.Quota `json:"quota,omitzero"`
}

// Create registers a new workspace and persists the registry.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*Workspace, error) {
	if err := ValidateName(o.Name); err != nil {
		return nil, err
	}
	if o.ComputerdToken != "" {
		if err := checkToken(o.ComputerdToken); err != nil {
			return nil, fmt.Errorf("create workspace %q: computerd_token: %w", o.Name, err)
		}
	}
	if o.Endpoint != "" {
		if err := m.checkEndpointAllowed(o.Endpoint); err != nil {
			return nil, fmt.Errorf("create workspace %q: %w", o.Name, err)
		}
	}
	policy, err := vfs.ParseConflictPolicy(string(o.ConflictPolicy))
	if err != nil {
		return nil, fmt.Errorf("create workspace %q: %w", o.Name, err)
	}
	if err := o.Quota.Validate(); err != nil {
		return nil, fmt.Errorf("create workspace %q: %w", o.Name, err)
	}
	if err := CheckIgnore(o.Ignore); err != nil {
		return nil, fmt.Errorf("create workspace %q: ignore: %w", o.Name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.ws[o.Name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrWorkspaceExists, o.Name)
	}
	cfg := Config{Name: o.Name, Endpoint: o.Endpoint, HasToken: o.ComputerdToken != "", Ignore: o.Ignore, Created: time.Now().UTC(), ConflictPolicy: policy, Quota: o.Quota}
	w := m.newWorkspace(cfg)
	if own := m.opts.Ownership; own != nil {
		name := o.Name
		if err := own.Create(ctx, name, w.dir, func(err error) { m.drop(name, err) }); err != nil {
			return nil, fmt.Errorf("create workspace %q: %w", name, err)
		}
	}
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace %q: %w", o.Name, err)
	}
	if err := placeToken(tokenPath(m.opts.DataDir, o.Name), o.ComputerdToken); err != nil {
		return nil, fmt.Errorf("create workspace %q: token: %w", o.Name, err)
	}
	m.ws[o.Name] = w
	if err := m.saveLocked(); err != nil {
		delete(m.ws, o.Name)
		return nil, err
	}
	m.log.Info("workspace created", "workspace", o.Name, "endpoint", o.Endpoint, "token", o.ComputerdToken != "")
	return w, nil
}

// placeToken keeps a computerd token given by value at path (mode 0600,
// temp + fsync + rename, its directory made 0700); without one it removes
// a token an earlier registration of the name left there, which is not
// this one's.
func placeToken(path, token string) error {
	if token == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeFileAtomic(path, []byte(token+"\n"), 0o600)
}

// MaxTokenLen bounds a computerd token given by value. (A create
// request's ignore list is bounded by vfs.MaxIgnore and
// vfs.MaxIgnorePatternLen.)
const MaxTokenLen = 4096

// checkToken accepts a bearer token given by value: 1 to MaxTokenLen
// visible ASCII characters (no white space, nothing that could end a header
// line). An empty token is refused everywhere, never read as "no auth".
func checkToken(tok string) error {
	if strings.TrimSpace(tok) == "" {
		return fmt.Errorf("%w: the token is empty", vfs.ErrInvalid)
	}
	if len(tok) > MaxTokenLen {
		return fmt.Errorf("%w: token of %d bytes (at most %d)", vfs.ErrInvalid, len(tok), MaxTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: the token must be visible ASCII characters without white space", vfs.ErrInvalid)
		}
	}
	return nil
}

// MaxEndpointLen bounds an endpoint URL.
const MaxEndpointLen = 2048

// checkEndpoint validates a computerd sync URL (ws:// or wss://, a host, no
// user info, query or fragment) and returns its host:port, the port filled
// in from the scheme when absent, the host in lower case.
func checkEndpoint(ep string) (string, error) {
	if len(ep) > MaxEndpointLen {
		return "", fmt.Errorf("%w: endpoint of %d bytes (at most %d)", vfs.ErrInvalid, len(ep), MaxEndpointLen)
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", fmt.Errorf("%w: endpoint: %v", vfs.ErrInvalid, err)
	}
	if u.Scheme != "ws" && u.Scheme != "wss" || u.Opaque != "" {
		return "", fmt.Errorf("%w: endpoint %q: want a ws:// or wss:// URL", vfs.ErrInvalid, ep)
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: endpoint %q: user info is not allowed (send the token as computerd_token)", vfs.ErrInvalid, ep)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("%w: endpoint %q: no query or fragment allowed", vfs.ErrInvalid, ep)
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", fmt.Errorf("%w: endpoint %q has no host", vfs.ErrInvalid, ep)
	}
	port := u.Port()
	if port == "" {
		if strings.HasSuffix(u.Host, ":") {
			return "", fmt.Errorf("%w: endpoint %q: empty port", vfs.ErrInvalid, ep)
		}
		port = "80"
		if u.Scheme == "wss" {
			port = "443"
		}
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("%w: endpoint %q: bad port", vfs.ErrInvalid, ep)
	}
	return net.JoinHostPort(host, port), nil
}

// checkEndpointAllowed checks an endpoint a caller gave (a workspace's or
// an attached runtime's): well formed (checkEndpoint), and allowed by
// Options.AllowEndpoints (ErrEndpointNotAllowed).
func (m *Manager) checkEndpointAllowed(ep string) error {
	hostport, err := checkEndpoint(ep)
	if err != nil {
		return err
	}
	if !m.endpointAllowed(hostport) {
		return fmt.Errorf("%w: endpoint %s is not allowed by this server (serve --allow-endpoint)", ErrEndpointNotAllowed, hostport)
	}
	return nil
}

// endpointAllowed matches host:port against Options.AllowEndpoints.
func (m *Manager) endpointAllowed(hostport string) bool {
	if len(m.opts.AllowEndpoints) == 0 {
		return true
	}
	for _, p := range m.opts.AllowEndpoints {
		if ok, _ := path.Match(p, hostport); ok {
			return true
		}
	}
	return false
}

// Close closes every open store and every remote that is an io.Closer. It
// does not wait for calls in flight: stop serving first.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	trackUsage(m, false)
	ws := make([]*Workspace, 0, len(m.ws))
	for _, w := range m.ws {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.close())
	}
	return errors.Join(errs...)
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

var _ io.Closer = (*Manager)(nil)
