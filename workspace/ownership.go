package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/wsync/wsync/vfs"
)

// Ownership decides which server serves each workspace when several
// servers share an object store (serve --object-store); package cluster
// implements it. Without one (the default) every workspace is this
// server's. The default workspace, bound to the server's own computerd,
// is never shared: each server keeps its own.
type Ownership interface {
	// Create claims a new workspace name for this server (ErrWorkspaceExists
	// when the object store has it already) and prepares dir.
	Create(ctx context.Context, name, dir string, lost func(error)) error
	// Claim makes this server the workspace's owner or says who is
	// (*NotOwnerError); ErrNoWorkspace when the object store has no such
	// workspace. It leaves dir holding the store as the object store has it
	// (restored when the local copy is missing or older) and returns the
	// registration to serve it with. lost is called (once, from another
	// goroutine) if the lease is lost later.
	Claim(ctx context.Context, name, dir string, lost func(error)) (Published, error)
	// Owns is true while this server holds the workspace's lease. No I/O.
	Owns(name string) bool
	// Publish records an owned workspace's registration in the object
	// store. It does not block: the latest registration of each workspace
	// is written in the background, in order, fenced by the lease.
	Publish(p Published)
	// StoreOptions adjusts the options an owned workspace's store opens
	// with (its chunk remote, checkpoints left to replication).
	StoreOptions(name string, o *vfs.Options)
	// Opened starts what runs beside an open store (its replication); the
	// closer runs before the store closes.
	Opened(ctx context.Context, name string, s *vfs.Store) (io.Closer, error)
	// Names lists the workspaces in the object store.
	Names(ctx context.Context) ([]string, error)
	// Status is what Status shows of the workspace's ownership and
	// replication.
	Status(name string) *OwnershipStatus
}

// Published is a workspace's registration as the object store keeps it:
// the Config and the computerd tokens of its runtimes, by runtime name
// (the object store is trusted like the data directory; docs/ARCHITECTURE).
type Published struct {
	Config Config            `json:"config"`
	Tokens map[string]string `json:"tokens,omitempty"`
}

// OwnershipStatus is a workspace's owner and replication, in Status.
type OwnershipStatus struct {
	Owner      string `json:"owner"`
	Address    string `json:"address,omitempty"`
	Generation int64  `json:"generation"`
	// LagSeconds is how far the object store is behind the store's last
	// commit (0: caught up); ReplicaError the last failure to ship.
	LagSeconds   float64   `json:"replication_lag_seconds"`
	ReplicaError string    `json:"replication_error,omitempty"`
	OwedUploads  int64     `json:"owed_chunk_uploads"`
	LastShipped  time.Time `json:"last_shipped,omitzero"`
}

// ErrNotOwner is the sentinel of a NotOwnerError.
var ErrNotOwner = errors.New("workspace is served by another server")

// NotOwnerError names the server that owns a workspace.
type NotOwnerError struct {
	Name    string
	Owner   string
	Address string // the owner's advertised URL; empty when it has none
	Expires time.Time
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("workspace %q is served by server %s at %s (lease until %s)", e.Name, e.Owner, e.Address, e.Expires.Format(time.RFC3339))
}

func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// Serve returns the workspace named name, ready to be served by this
// server: with an Ownership, it first claims the workspace (takes its
// lease, restoring it from the object store when another server owned it)
// or fails with a *NotOwnerError naming the owner.
func (m *Manager) Serve(ctx context.Context, name string) (*Workspace, error) {
	own := m.opts.Ownership
	if own == nil || name == DefaultName {
		return m.Workspace(name)
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if w, ok := m.owned(name); ok {
		return w, nil
	}
	m.claimMu.Lock()
	defer m.claimMu.Unlock()
	if w, ok := m.owned(name); ok {
		return w, nil
	}
	m.drop(name, nil) // a copy whose lease was lost
	dir := filepath.Join(m.opts.DataDir, name)
	pub, err := own.Claim(ctx, name, dir, func(err error) { m.drop(name, err) })
	if err != nil {
		return nil, err
	}
	cfg := pub.Config
	cfg.Name = name
	tok := pub.Tokens[DefaultRuntime]
	cfg.HasToken = tok != ""
	if err := placeToken(tokenPath(m.opts.DataDir, name), tok); err != nil {
		return nil, fmt.Errorf("claim workspace %q: token: %w", name, err)
	}
	for i, rt := range cfg.Runtimes {
		t := pub.Tokens[rt.Name]
		cfg.Runtimes[i].HasToken = t != ""
		if err := placeToken(runtimeTokenPath(m.opts.DataDir, name, rt.Name), t); err != nil {
			return nil, fmt.Errorf("claim workspace %q: runtime %q token: %w", name, rt.Name, err)
		}
	}
	w := m.newWorkspace(cfg)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		w.close()
		return nil, ErrClosed
	}
	m.ws[name] = w
	err = m.saveLocked()
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m.log.Info("workspace claimed", "workspace", name)
	w.resumePulls()
	w.resumeExecs()
	w.catchUp()
	return w, nil
}

// owned returns the workspace if this server serves it and holds its lease.
func (m *Manager) owned(name string) (*Workspace, bool) {
	m.mu.Lock()
	w, ok := m.ws[name]
	m.mu.Unlock()
	if ok && m.opts.Ownership.Owns(name) {
		return w, true
	}
	return nil, false
}

// drop stops serving a workspace whose lease was lost (err) or is about to
// be claimed again: it leaves the table and its store and remotes close.
// Its files stay on disk for a later claim to reuse or replace.
func (m *Manager) drop(name string, err error) {
	m.mu.Lock()
	w, ok := m.ws[name]
	if ok {
		delete(m.ws, name)
		if serr := m.saveLocked(); serr != nil {
			m.log.Warn("registry save after a lost lease", "workspace", name, "err", serr)
		}
	}
	m.mu.Unlock()
	if !ok {
		return
	}
	if err != nil {
		m.log.Warn("workspace lease lost: no longer served here", "workspace", name, "err", err)
	}
	if cerr := w.close(); cerr != nil {
		m.log.Warn("close of a workspace no longer served", "workspace", name, "err", cerr)
	}
}

// fence refuses to write to a container for a workspace this server no
// longer owns: a server paused past its lease must not push what another
// server's computerd session does not expect.
func (m *Manager) fence(name string) error {
	own := m.opts.Ownership
	if own == nil || name == DefaultName || own.Owns(name) {
		return nil
	}
	return fmt.Errorf("workspace %q: %w: this server's lease ran out", name, ErrNotOwner)
}

// publish hands the registration of an owned workspace to the Ownership.
func (m *Manager) publish(w *Workspace, c Config) {
	own := m.opts.Ownership
	if own == nil || c.Name == DefaultName || !own.Owns(c.Name) {
		return
	}
	p := Published{Config: c, Tokens: map[string]string{}}
	if tok, err := readToken(tokenPath(m.opts.DataDir, c.Name)); err == nil && tok != "" {
		p.Tokens[DefaultRuntime] = tok
	}
	for _, rt := range c.Runtimes {
		if tok, err := readToken(runtimeTokenPath(m.opts.DataDir, c.Name, rt.Name)); err == nil && tok != "" {
			p.Tokens[rt.Name] = tok
		}
	}
	own.Publish(p)
}

// readToken reads a token file placeToken wrote; a missing file is no token.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(trimNewline(b)), nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// claimOwned re-claims, in the background, the workspaces this server's
// registry held when it stopped, so their replication and pulls resume
// without waiting for a caller.
func (m *Manager) claimOwned(names []string) {
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := m.Serve(ctx, name)
		cancel()
		if err != nil {
			m.log.Info("workspace not re-claimed at start", "workspace", name, "err", err)
		}
	}
}
