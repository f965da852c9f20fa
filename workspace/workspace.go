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
	"sync/atomic"
	"time"

	"github.com/wsync/wsync/internal/fifo"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace/events"
)

// Workspace is one registered workspace: its store, its runtimes (each
// with its remote), the FIFO that serialises their sync phases, and what
// the last syncs did.
type Workspace struct {
	m   *Manager
	cfg Config // Runtimes and pending pulls live in runtimes
	dir string
	ign ignoreState // the patterns in force (ignore.go)
	log *slog.Logger

	q fifo.Queue

	events *events.Log
	syncs  atomic.Uint64 // numbers the sync calls (SyncStarted.Sync)

	storeMu sync.Mutex
	store   *vfs.Store
	beside  io.Closer // what runs beside the store (Ownership.Opened), closed first

	stateMu  sync.Mutex
	runtimes map[string]*runtimeState // by name; DefaultRuntime always

	// execMu guards the table of detached execs (execs.go) and the count
	// of commands running (foreground and detached), which
	// Options.MaxExecs bounds.
	execMu  sync.Mutex
	execs   map[string]*detachedExec
	running int

	// bgCtx is the context of the workspace's background work (the
	// runtimes' background pullers, the detached execs' followers),
	// cancelled by close, which waits for bg.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// Name is the workspace's name.
func (w *Workspace) Name() string { return w.cfg.Name }

// Config is the workspace's registration, its attached runtimes included.
func (w *Workspace) Config() Config {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	c := w.cfg // its conflict policy changes under stateMu
	c.Runtimes = w.attachedLocked()
	return c
}

// Info is the registration as the API shows it: no token, no path.
func (w *Workspace) Info() Info { return w.Config().Info() }

// Dir is the workspace's directory under the data dir.
func (w *Workspace) Dir() string { return w.dir }

// IgnoreList is the configured ignore list: nil for the default. The
// patterns in force add the IgnoreFile's lines (Patterns).
func (w *Workspace) IgnoreList() []string {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	return slices.Clone(w.cfg.Ignore)
}

// Token returns the bearer token for the computerd of the workspace's
// default runtime: the one given by value at creation (kept in the
// workspace's directory), the operator's --computerd-token-file for the
// default workspace, or the embedded computerd's in-memory token. No token
// is "" with a nil error; a token file that became empty is an error,
// never "no auth".
func (w *Workspace) Token() (string, error) {
	rs, err := w.state(DefaultRuntime)
	if err != nil {
		return "", err
	}
	tok, err := rs.rt.Token()
	if err != nil {
		return "", fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
	}
	return tok, nil
}

// newRuntime builds the state of one of the workspace's runtimes; pending
// is the pull the registry says it owes.
func (w *Workspace) newRuntime(rt Runtime, pending *PendingPull) *runtimeState {
	if !rt.isDefault() && rt.HasToken {
		rt.tokenFile = runtimeTokenPath(w.m.opts.DataDir, w.cfg.Name, rt.Name)
	}
	if pending != nil {
		metricPending.Inc()
	}
	return &runtimeState{rt: rt, log: w.log.With("runtime", rt.Name), pending: pending, detached: make(chan struct{})}
}

// defaultRuntime is the workspace's primary runtime, from its registration.
func (w *Workspace) defaultRuntime() Runtime {
	rt := Runtime{Name: DefaultRuntime, Endpoint: w.cfg.Endpoint, Created: w.cfg.Created,
		HasToken: w.cfg.HasToken || w.cfg.tokenFile != "" || w.cfg.token != "", tokenFile: w.cfg.tokenFile, token: w.cfg.token}
	if w.cfg.HasToken {
		rt.tokenFile = tokenPath(w.m.opts.DataDir, w.cfg.Name)
	}
	return rt
}

// Store returns the workspace's store, opening it on first use.
func (w *Workspace) Store(ctx context.Context) (*vfs.Store, error) {
	return cached(w.m, &w.storeMu, &w.store, func() (*vfs.Store, error) {
		if err := os.MkdirAll(w.dir, 0o700); err != nil {
			return nil, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
		}
		opts := vfs.Options{NoSync: w.m.opts.NoSync, Logger: w.log, GC: vfs.DefaultGC, Trash: w.m.trashOptions()}
		own := w.m.opts.Ownership
		if own != nil && w.cfg.Name != DefaultName {
			own.StoreOptions(w.cfg.Name, &opts)
		}
		s, err := vfs.Open(ctx, filepath.Join(w.dir, "store.db"), opts)
		if err != nil {
			return nil, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
		}
		if err := s.SetQuota(w.Quota()); err != nil {
			s.Close()
			return nil, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
		}
		if own != nil && w.cfg.Name != DefaultName {
			c, err := own.Opened(ctx, w.cfg.Name, s)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
			}
			w.beside = c
		}
		return s, nil
	})
}

// remoteFor returns the runtime's remote, building it on first use.
func (w *Workspace) remoteFor(rs *runtimeState) (Remote, error) {
	if rs.rt.Endpoint == "" {
		return nil, fmt.Errorf("workspace %q: %w: no computerd endpoint", w.cfg.Name, ErrNoRemote)
	}
	if w.m.opts.Remote == nil {
		return nil, fmt.Errorf("workspace %q: %w: the manager has no RemoteFactory", w.cfg.Name, ErrNoRemote)
	}
	return cached(w.m, &rs.remoteMu, &rs.remote, func() (Remote, error) {
		r, err := w.m.opts.Remote(w, rs.rt)
		if err != nil {
			if rs.rt.isDefault() {
				return nil, fmt.Errorf("workspace %q: remote: %w", w.cfg.Name, err)
			}
			return nil, fmt.Errorf("workspace %q: runtime %q: remote: %w", w.cfg.Name, rs.rt.Name, err)
		}
		w.watchSession(rs, r)
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
	w.bgCancel()
	w.bg.Wait()
	var errs []error
	w.stateMu.Lock()
	rss := w.sortedLocked()
	w.stateMu.Unlock()
	for _, rs := range rss {
		errs = append(errs, rs.close())
	}
	w.storeMu.Lock()
	if w.beside != nil {
		errs = append(errs, w.beside.Close())
		w.beside = nil
	}
	if w.store != nil {
		errs = append(errs, w.store.Close())
		w.store = nil
	}
	w.storeMu.Unlock()
	return errors.Join(errs...)
}

// PendingPull is a pull a runtime owes: one that failed (after a command,
// explicit, or in a tick), one deferred after a command (--sync defer), or
// one in slices with more to fetch. The command's writes stay in the
// container until a pull from the same runtime drains its feed; until then
// pushes to it are fenced, and the background puller works on it.
type PendingPull struct {
	ExecID    string `json:"exec_id,omitempty"`
	RuntimeID string `json:"runtime_id,omitempty"`
	// State is PendingDeferred, PendingRunning or PendingFailed (a record
	// written before there were states has none: failed).
	State string `json:"state,omitempty"`
	// Error is the last failed attempt's error.
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since"`
	// Pulled counts the entries its slices have applied so far; Attempts
	// the attempts that failed.
	Pulled   int `json:"pulled,omitempty"`
	Attempts int `json:"attempts,omitempty"`
	// Deletes is how many live paths a paused pull (PendingPaused) would
	// delete, net of the new paths it creates.
	Deletes int `json:"deletes,omitempty"`
	// MassDelete are the bounds that paused it; the pulls that follow use
	// them until one confirms.
	MassDelete *MassDeleteOptions `json:"mass_delete,omitempty"`
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

// Status is a workspace's state for `workspace-server status`. The fields
// from Endpoint to LastVerify describe one runtime (Runtime: the default
// unless the call named another), as they did before a workspace had
// several; Runtimes describes each.
type Status struct {
	Workspace string `json:"workspace"`
	Runtime   string `json:"runtime"`
	Endpoint  string `json:"endpoint,omitempty"`
	// Ignore is the patterns in force (Workspace.Patterns), in order;
	// IgnoreFileError says what of the IgnoreFile was left out.
	Ignore          []string    `json:"ignore"`
	IgnoreFileError string      `json:"ignore_file_error,omitempty"`
	Store           StoreStatus `json:"store"`
	// Ownership is the workspace's owner and the replication of its store
	// to the object store (serve --object-store); nil without one.
	Ownership *OwnershipStatus `json:"ownership,omitempty"`
	// Quota is the store's usage against the workspace's quota.
	Quota *QuotaStatus `json:"quota,omitempty"`
	RuntimeSync
	Queued int `json:"queued"`
	// Conflicts counts the workspace's open conflicts (see
	// Workspace.Conflicts), whichever runtime's pull found them.
	Conflicts int `json:"conflicts"`
	// Trash is what the workspace's trash holds.
	Trash    TrashUsage      `json:"trash"`
	Runtimes []RuntimeStatus `json:"runtimes"`
}

// RuntimeSync is one runtime's sync state.
type RuntimeSync struct {
	Remote *RemoteStatus `json:"remote,omitempty"`
	// RemoteError says why Remote is missing.
	RemoteError string       `json:"remote_error,omitempty"`
	Pending     *PendingPull `json:"pending,omitempty"`
	// Abandoned is the last pending pull given up because the container's
	// runtime changed before it could be retried.
	Abandoned  *PendingPull  `json:"abandoned,omitempty"`
	LastPush   *SyncRecord   `json:"last_push,omitempty"`
	LastPull   *SyncRecord   `json:"last_pull,omitempty"`
	LastVerify *VerifyReport `json:"last_verify,omitempty"`
}

// RuntimeStatus is one runtime in Status.Runtimes: its registration, the
// peer the server's store keeps its watermarks under, the side its
// conflict copies are named after, and its sync state.
type RuntimeStatus struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint,omitempty"`
	HasToken bool   `json:"computerd_token"`
	Peer     string `json:"peer"`
	Side     string `json:"side"`
	RuntimeSync
}

// statusTimeout bounds the remote's answer to Status.
const statusTimeout = 5 * time.Second

// Status reports the workspace's state, with the default runtime's at the
// top level. See Target.Status.
func (w *Workspace) Status(ctx context.Context) (Status, error) {
	return w.On(DefaultRuntime).Status(ctx)
}

// Status reports the workspace's state, with the target runtime's at the
// top level. It is a pure read: it does not wait for the FIFO. An
// unreachable remote is reported in RemoteError, not as an error; only a
// store that cannot be opened, or a runtime the workspace does not have, is.
// The runtimes' remotes are asked at once, each bounded by statusTimeout.
func (t Target) Status(ctx context.Context) (Status, error) {
	w := t.w
	target, err := w.state(t.name)
	if err != nil {
		return Status{}, err
	}
	st := Status{Workspace: w.cfg.Name, Runtime: target.rt.Name, Endpoint: target.rt.Endpoint, Queued: w.q.Queued()}
	s, err := w.Store(ctx)
	if err != nil {
		return st, err
	}
	if st.Ignore, err = w.Patterns(ctx); err != nil {
		return st, err
	}
	st.IgnoreFileError = w.IgnoreFileError()
	st.Store = StoreStatus{StoreID: s.ID(), CurrentRev: s.CurrentRev()}
	if own := w.m.opts.Ownership; own != nil && w.cfg.Name != DefaultName {
		st.Ownership = own.Status(w.cfg.Name)
	}
	st.Quota = quotaStatus(s)
	if st.Conflicts, err = s.OpenConflicts(ctx); err != nil {
		return st, err
	}
	if st.Trash, err = w.TrashUsage(ctx); err != nil {
		return st, err
	}
	w.stateMu.Lock()
	rss := w.sortedLocked()
	st.Runtimes = make([]RuntimeStatus, len(rss))
	for i, rs := range rss {
		st.Runtimes[i] = RuntimeStatus{Name: rs.rt.Name, Endpoint: rs.rt.Endpoint, HasToken: rs.rt.HasToken,
			Peer: rs.rt.Peer(), Side: rs.rt.Side(), RuntimeSync: RuntimeSync{
				Pending: clonePtr(rs.pending), Abandoned: clonePtr(rs.abandoned),
				LastPush: clonePtr(rs.lastPush), LastPull: clonePtr(rs.lastPull), LastVerify: clonePtr(rs.lastVerify),
			}}
	}
	w.stateMu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, rs := range rss {
		wg.Go(func() {
			rst := &st.Runtimes[i].RuntimeSync
			r, err := w.remoteFor(rs)
			if err == nil {
				var x RemoteStatus
				if x, err = r.Status(rctx); err == nil {
					rst.Remote = &x
				}
			}
			if err != nil {
				rst.RemoteError = err.Error()
			}
		})
	}
	wg.Wait()
	for _, rs := range st.Runtimes {
		if rs.Name == target.rt.Name {
			st.RuntimeSync = rs.RuntimeSync
		}
	}
	return st, nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
