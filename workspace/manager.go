package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wsync/wsync/vfs"
)

// Options configures a Manager.
type Options struct {
	// DataDir holds the registry (workspaces.json) and one directory per
	// workspace (<DataDir>/<name>/store.db).
	DataDir string
	// DefaultEndpoint, DefaultTokenFile and DefaultToken bind the default
	// workspace to the server's own computerd (serve --computerd and
	// --computerd-token-file, or the embedded one's endpoint and in-memory
	// token). They are applied on every Open, so the flags win over what the
	// registry held.
	DefaultEndpoint  string
	DefaultTokenFile string
	DefaultToken     string
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
	// VerifyAfterSync compares both sides' Merkle roots after every exec's
	// pull and every explicit pull or tick; the verdict shows in Status and
	// the metrics. A verify that fails or finds drift never fails the call
	// it follows.
	VerifyAfterSync bool
	Logger          *slog.Logger
}

// Manager owns the workspaces of one server: their registry, their stores
// (opened on first use) and their remotes (built on first use).
type Manager struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex // guards ws, order of the registry file, closed
	ws     map[string]*Workspace
	closed bool
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
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{opts: opts, log: log.With("component", "workspace"), ws: make(map[string]*Workspace)}
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("open workspaces: %w", err)
	}
	cfgs, err := loadRegistry(opts.DataDir)
	if err != nil {
		return nil, err
	}
	for _, c := range cfgs {
		m.ws[c.Name] = m.newWorkspace(c)
	}
	def, ok := m.ws[DefaultName]
	var cfg Config
	if ok {
		cfg = def.cfg
	} else {
		cfg = Config{Name: DefaultName, Created: time.Now().UTC()}
	}
	changed := !ok || cfg.Endpoint != opts.DefaultEndpoint || cfg.TokenFile != opts.DefaultTokenFile
	cfg.Endpoint, cfg.TokenFile, cfg.token = opts.DefaultEndpoint, opts.DefaultTokenFile, opts.DefaultToken
	m.ws[DefaultName] = m.newWorkspace(cfg)
	if changed {
		if err := m.saveLocked(); err != nil {
			return nil, err
		}
	}
	m.log.Info("workspaces loaded", "data", opts.DataDir, "count", len(m.ws), "default_endpoint", opts.DefaultEndpoint)
	return m, nil
}

func (m *Manager) newWorkspace(c Config) *Workspace {
	return &Workspace{
		m:      m,
		cfg:    c,
		dir:    filepath.Join(m.opts.DataDir, c.Name),
		ignore: vfs.NewIgnore(c.Ignore),
		log:    m.log.With("workspace", c.Name),
	}
}

func (m *Manager) saveLocked() error {
	cfgs := make([]Config, 0, len(m.ws))
	for _, w := range m.ws {
		cfgs = append(cfgs, w.cfg)
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

// Workspaces lists the registered workspaces by name.
func (m *Manager) Workspaces() []Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Config, 0, len(m.ws))
	for _, w := range m.ws {
		out = append(out, w.cfg)
	}
	slices.SortFunc(out, func(a, b Config) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// CreateOptions describes a new workspace. At most one of TokenFile and
// Token: a Token is written to <data>/<name>/computerd.token (0600) and the
// registry records that path.
type CreateOptions struct {
	Name      string   `json:"name"`
	Endpoint  string   `json:"endpoint,omitempty"`
	TokenFile string   `json:"token_file,omitempty"`
	Token     string   `json:"token,omitempty"`
	Ignore    []string `json:"ignore"`
}

// Create registers a new workspace and persists the registry.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*Workspace, error) {
	if err := ValidateName(o.Name); err != nil {
		return nil, err
	}
	if o.Token != "" && o.TokenFile != "" {
		return nil, fmt.Errorf("create workspace %q: %w: both token and token_file", o.Name, vfs.ErrInvalid)
	}
	if err := checkEndpoint(o.Endpoint); err != nil {
		return nil, fmt.Errorf("create workspace %q: %w", o.Name, err)
	}
	for _, seg := range o.Ignore {
		if err := vfs.ValidateName(seg); err != nil {
			return nil, fmt.Errorf("create workspace %q: ignore entry %q: %w", o.Name, seg, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.ws[o.Name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrWorkspaceExists, o.Name)
	}
	cfg := Config{Name: o.Name, Endpoint: o.Endpoint, TokenFile: o.TokenFile, Ignore: o.Ignore, Created: time.Now().UTC()}
	w := m.newWorkspace(cfg)
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace %q: %w", o.Name, err)
	}
	if o.Token != "" {
		w.cfg.TokenFile = filepath.Join(w.dir, "computerd.token")
		if err := writeFileAtomic(w.cfg.TokenFile, []byte(o.Token+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("create workspace %q: token: %w", o.Name, err)
		}
	}
	m.ws[o.Name] = w
	if err := m.saveLocked(); err != nil {
		delete(m.ws, o.Name)
		return nil, err
	}
	m.log.Info("workspace created", "workspace", o.Name, "endpoint", o.Endpoint)
	return w, nil
}

func checkEndpoint(ep string) error {
	if ep == "" {
		return nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Errorf("%w: endpoint: %v", vfs.ErrInvalid, err)
	}
	switch u.Scheme {
	case "ws", "wss", "http", "https":
	default:
		return fmt.Errorf("%w: endpoint %q: want a ws:// or wss:// URL", vfs.ErrInvalid, ep)
	}
	if u.Host == "" {
		return fmt.Errorf("%w: endpoint %q has no host", vfs.ErrInvalid, ep)
	}
	return nil
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
