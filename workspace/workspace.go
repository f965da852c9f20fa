package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/internal/fifo"
	"github.com/wsync/wsync/vfs"
)

// Workspace is one registered workspace: its store, its remote, the FIFO
// that serialises its sync phases, and what the last syncs did.
type Workspace struct {
	m      *Manager
	cfg    Config
	dir    string
	ignore vfs.Ignore
	log    *slog.Logger

	q fifo.Queue

	storeMu sync.Mutex
	store   *vfs.Store

	remoteMu sync.Mutex
	remote   Remote

	stateMu sync.Mutex
	// pulled: a pull succeeded since this process opened the workspace.
	// Until then the server cannot know what the container wrote while it
	// was down (or during a command it was running when it stopped), so the
	// first push pulls first, as with a pending pull.
	pulled     bool
	pending    *PendingPull
	abandoned  *PendingPull // the last pending pull given up on (runtime changed)
	lastPush   *SyncRecord
	lastPull   *SyncRecord
	lastVerify *VerifyReport
}

// Name is the workspace's name.
func (w *Workspace) Name() string { return w.cfg.Name }

// Config is the workspace's registration.
func (w *Workspace) Config() Config { return w.cfg }

// Info is the registration as the API shows it: no token, no path.
func (w *Workspace) Info() Info { return w.cfg.Info() }

// Dir is the workspace's directory under the data dir.
func (w *Workspace) Dir() string { return w.dir }

// IgnoreList is the list given to Remote.Pull: nil for the default.
func (w *Workspace) IgnoreList() []string { return slices.Clone(w.cfg.Ignore) }

// Ignore is the matcher of the files API.
func (w *Workspace) Ignore() vfs.Ignore { return w.ignore }

// Token returns the bearer token for the workspace's computerd: the one
// given by value at creation (kept in the workspace's directory), the
// operator's --computerd-token-file for the default workspace, or the
// embedded computerd's in-memory token. No token is "" with a nil error; a
// token file that became empty is an error, never "no auth".
func (w *Workspace) Token() (string, error) {
	file := w.cfg.tokenFile
	if w.cfg.HasToken {
		file = tokenPath(w.m.opts.DataDir, w.cfg.Name)
	}
	if file == "" {
		return w.cfg.token, nil
	}
	tok, err := bearer.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
	}
	return tok, nil
}

// Store returns the workspace's store, opening it on first use.
func (w *Workspace) Store(ctx context.Context) (*vfs.Store, error) {
	return cached(w.m, &w.storeMu, &w.store, func() (*vfs.Store, error) {
		if err := os.MkdirAll(w.dir, 0o700); err != nil {
			return nil, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
		}
		s, err := vfs.Open(ctx, filepath.Join(w.dir, "store.db"), vfs.Options{NoSync: w.m.opts.NoSync, Logger: w.log, GC: vfs.DefaultGC})
		if err != nil {
			return nil, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
		}
		return s, nil
	})
}

// remoteFor returns the workspace's remote, building it on first use.
func (w *Workspace) remoteFor() (Remote, error) {
	if w.cfg.Endpoint == "" {
		return nil, fmt.Errorf("workspace %q: %w: no computerd endpoint", w.cfg.Name, ErrNoRemote)
	}
	if w.m.opts.Remote == nil {
		return nil, fmt.Errorf("workspace %q: %w: the manager has no RemoteFactory", w.cfg.Name, ErrNoRemote)
	}
	return cached(w.m, &w.remoteMu, &w.remote, func() (Remote, error) {
		r, err := w.m.opts.Remote(w)
		if err != nil {
			return nil, fmt.Errorf("workspace %q: remote: %w", w.cfg.Name, err)
		}
		return r, nil
	})
}

// cached returns *v, building it on first use: under mu, and never once
// the manager is closed (ErrClosed), so Close finds what it must close.
func cached[T comparable](m *Manager, mu *sync.Mutex, v *T, build func() (T, error)) (T, error) {
	mu.Lock()
	defer mu.Unlock()
	var zero T
	if *v != zero {
		return *v, nil
	}
	if m.isClosed() {
		return zero, ErrClosed
	}
	x, err := build()
	if err != nil {
		return zero, err
	}
	*v = x
	return x, nil
}

func (w *Workspace) close() error {
	var errs []error
	w.remoteMu.Lock()
	if c, ok := w.remote.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	w.remote = nil
	w.remoteMu.Unlock()
	w.storeMu.Lock()
	if w.store != nil {
		errs = append(errs, w.store.Close())
		w.store = nil
	}
	w.storeMu.Unlock()
	return errors.Join(errs...)
}

// PendingPull is a post-command pull that failed. The command's writes stay
// in the container until a later pull from the same runtime succeeds.
type PendingPull struct {
	ExecID    string    `json:"exec_id,omitempty"`
	RuntimeID string    `json:"runtime_id,omitempty"`
	Error     string    `json:"error"`
	Since     time.Time `json:"since"`
}

// SyncRecord is the outcome of the last push or pull.
type SyncRecord struct {
	At     time.Time  `json:"at"`
	Report SyncReport `json:"report"`
	Error  string     `json:"error,omitempty"`
}

// StoreStatus is the server store's own position, known without the remote.
type StoreStatus struct {
	StoreID    string `json:"store_id"`
	CurrentRev int64  `json:"current_rev"`
}

// Status is a workspace's state for `workspace-server status`.
type Status struct {
	Workspace string        `json:"workspace"`
	Endpoint  string        `json:"endpoint,omitempty"`
	Ignore    []string      `json:"ignore"`
	Store     StoreStatus   `json:"store"`
	Remote    *RemoteStatus `json:"remote,omitempty"`
	// RemoteError says why Remote is missing.
	RemoteError string       `json:"remote_error,omitempty"`
	Queued      int          `json:"queued"`
	Pending     *PendingPull `json:"pending,omitempty"`
	// Abandoned is the last pending pull given up because the container's
	// runtime changed before it could be retried.
	Abandoned  *PendingPull  `json:"abandoned,omitempty"`
	LastPush   *SyncRecord   `json:"last_push,omitempty"`
	LastPull   *SyncRecord   `json:"last_pull,omitempty"`
	LastVerify *VerifyReport `json:"last_verify,omitempty"`
}

// statusTimeout bounds the remote's answer to Status.
const statusTimeout = 5 * time.Second

// Status reports the workspace's state. It is a pure read: it does not wait
// for the FIFO. An unreachable remote is reported in RemoteError, not as an
// error; only a store that cannot be opened is.
func (w *Workspace) Status(ctx context.Context) (Status, error) {
	st := Status{Workspace: w.cfg.Name, Endpoint: w.cfg.Endpoint, Ignore: w.ignore.List(), Queued: w.q.Queued()}
	slices.Sort(st.Ignore)
	s, err := w.Store(ctx)
	if err != nil {
		return st, err
	}
	st.Store = StoreStatus{StoreID: s.ID(), CurrentRev: s.CurrentRev()}
	w.stateMu.Lock()
	st.Pending, st.Abandoned = clonePtr(w.pending), clonePtr(w.abandoned)
	st.LastPush, st.LastPull, st.LastVerify = clonePtr(w.lastPush), clonePtr(w.lastPull), clonePtr(w.lastVerify)
	w.stateMu.Unlock()
	r, err := w.remoteFor()
	if err != nil {
		st.RemoteError = err.Error()
		return st, nil
	}
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	rs, err := r.Status(rctx)
	if err != nil {
		st.RemoteError = err.Error()
		return st, nil
	}
	st.Remote = &rs
	return st, nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
