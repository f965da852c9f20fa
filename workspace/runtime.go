package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/vfs"
)

// DefaultRuntime names a workspace's primary runtime: its own endpoint and
// token (serve's --computerd, or the embedded computerd, for the default
// workspace). It cannot be attached or detached.
const DefaultRuntime = "default"

// DefaultPeer is the peer the server's store keeps the default runtime's
// watermarks under (unchanged since there was one runtime, so existing
// stores keep theirs). An attached runtime's is "computerd@NAME".
const DefaultPeer = "computerd"

// The sides of a conflict copy. They are reserved: no runtime is named so.
const (
	SideServer    = "server"
	SideContainer = "container"
)

// Runtime is one computerd a workspace syncs with: its default runtime or
// one attached to it. Each is its own sync peer of the server's store, with
// its own remote, watermarks, bounce run and pending pull; every sync of
// every runtime goes through the workspace's one FIFO. The token is never a
// field: it is read from the workspace's directory when a remote is built.
type Runtime struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint,omitempty"`
	// HasToken: the runtime has a computerd token (its value is never
	// shown). An attached runtime's is kept in
	// <data>/<workspace>/runtimes/<name>.token, mode 0600.
	HasToken bool      `json:"computerd_token"`
	Created  time.Time `json:"created,omitzero"`

	// tokenFile is where the token is read from; token is the embedded
	// computerd's in-memory one. Neither is persisted.
	tokenFile string
	token     string
}

// Peer is the name the server's store keeps this runtime's watermarks
// under: DefaultPeer for the default runtime, "computerd@NAME" for an
// attached one.
func (rt Runtime) Peer() string {
	if rt.isDefault() {
		return DefaultPeer
	}
	return DefaultPeer + "@" + rt.Name
}

// Side is the name a conflict copy of this runtime's version carries:
// "container" for the default runtime, the runtime's name for an attached
// one.
func (rt Runtime) Side() string {
	if rt.isDefault() {
		return SideContainer
	}
	return rt.Name
}

func (rt Runtime) isDefault() bool { return rt.Name == "" || rt.Name == DefaultRuntime }

// Token returns the runtime's computerd bearer token: "" with a nil error
// when it has none; a token file that became empty is an error, never "no
// auth".
func (rt Runtime) Token() (string, error) {
	if rt.tokenFile == "" {
		return rt.token, nil
	}
	tok, err := bearer.ReadFile(rt.tokenFile)
	if err != nil {
		return "", fmt.Errorf("runtime %q: %w", rt.Name, err)
	}
	return tok, nil
}

// ValidateRuntimeName checks the name of a runtime to attach: a workspace
// name's form ([a-z0-9][a-z0-9_-]{0,62}), and none of "server" and
// "container" (the sides of a conflict copy) or "default" (the primary
// runtime, which is the workspace's own).
func ValidateRuntimeName(name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q (want [a-z0-9][a-z0-9_-]{0,62})", ErrBadRuntime, name)
	}
	switch name {
	case SideServer, SideContainer:
		return fmt.Errorf("%w: %q is reserved: it names a side of a conflict copy", ErrBadRuntime, name)
	case DefaultRuntime:
		return fmt.Errorf("%w: %q is the workspace's primary runtime (its own endpoint); it is neither attached nor detached", ErrBadRuntime, name)
	}
	return nil
}

// runtimeTokenPath is where an attached runtime's token is kept.
func runtimeTokenPath(dataDir, ws, name string) string {
	return filepath.Join(dataDir, ws, "runtimes", name+".token")
}

// runtimeState is one runtime of a workspace: its remote, built on first
// use, and what its syncs did. The fields below remoteMu are guarded by the
// workspace's stateMu.
type runtimeState struct {
	rt  Runtime
	log *slog.Logger

	remoteMu sync.Mutex
	remote   Remote

	// pulled: a pull succeeded since this process opened the workspace.
	// Until then the server cannot know what the container wrote while it
	// was down (or during a command it was running when it stopped), so the
	// first push pulls first, as with a pending pull.
	pulled     bool
	pending    *PendingPull
	pulling    bool         // its background puller runs
	abandoned  *PendingPull // the last pending pull given up on (runtime changed)
	lastPush   *SyncRecord
	lastPull   *SyncRecord
	lastVerify *VerifyReport

	// detached is closed when Detach has taken the runtime out of the
	// workspace: a follower waiting to retry wakes and finds it gone.
	detached chan struct{}
}

// close closes the runtime's remote, if it is an io.Closer.
func (rs *runtimeState) close() error {
	rs.remoteMu.Lock()
	defer rs.remoteMu.Unlock()
	var err error
	if c, ok := rs.remote.(io.Closer); ok {
		err = c.Close()
	}
	rs.remote = nil
	return err
}

// Runtimes lists the workspace's runtimes: the default one first, then the
// attached ones by name. No token is shown.
func (w *Workspace) Runtimes() []Runtime {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	out := make([]Runtime, 0, len(w.runtimes))
	for _, rs := range w.sortedLocked() {
		out = append(out, rs.rt)
	}
	return out
}

// sortedLocked is the workspace's runtimes in sync order: default first,
// then by name. stateMu is held.
func (w *Workspace) sortedLocked() []*runtimeState {
	out := make([]*runtimeState, 0, len(w.runtimes))
	for _, rs := range w.runtimes {
		out = append(out, rs)
	}
	slices.SortFunc(out, func(a, b *runtimeState) int {
		switch {
		case a.rt.isDefault():
			return -1
		case b.rt.isDefault():
			return 1
		}
		return strings.Compare(a.rt.Name, b.rt.Name)
	})
	return out
}

// attachedLocked is the attached runtimes as the registry keeps them.
// stateMu is held.
func (w *Workspace) attachedLocked() []Runtime {
	var out []Runtime
	for _, rs := range w.sortedLocked() {
		if !rs.rt.isDefault() {
			out = append(out, rs.rt)
		}
	}
	return out
}

// state is the runtime named name ("" is the default).
func (w *Workspace) state(name string) (*runtimeState, error) {
	if name == "" {
		name = DefaultRuntime
	}
	if name != DefaultRuntime {
		if err := ValidateRuntimeName(name); err != nil {
			return nil, err
		}
	}
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	rs, ok := w.runtimes[name]
	if !ok {
		return nil, fmt.Errorf("workspace %q: %w: %q", w.cfg.Name, ErrNoRuntime, name)
	}
	return rs, nil
}

// AttachOptions describes a runtime to attach. It is the body of POST
// /v1/workspaces/{ws}/runtimes: the token comes by value.
type AttachOptions struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	// ComputerdToken is the runtime's computerd bearer token, by value
	// ("" for none). It is written to the workspace's directory (mode 0600,
	// temp + fsync + rename), never echoed, logged or put in the registry.
	ComputerdToken string `json:"computerd_token,omitempty"`
}

// Attach adds a runtime to the workspace and persists the registry. The
// endpoint is checked as at workspace creation (the server's
// --allow-endpoint included); the runtime syncs from the next call that
// names it, and every tick.
func (w *Workspace) Attach(ctx context.Context, o AttachOptions) (Runtime, error) {
	if err := ValidateRuntimeName(o.Name); err != nil {
		return Runtime{}, fmt.Errorf("attach: %w", err)
	}
	if o.Endpoint == "" {
		return Runtime{}, fmt.Errorf("attach runtime %q: %w: no endpoint", o.Name, vfs.ErrInvalid)
	}
	if err := w.m.checkEndpointAllowed(o.Endpoint); err != nil {
		return Runtime{}, fmt.Errorf("attach runtime %q: %w", o.Name, err)
	}
	if o.ComputerdToken != "" {
		if err := checkToken(o.ComputerdToken); err != nil {
			return Runtime{}, fmt.Errorf("attach runtime %q: computerd_token: %w", o.Name, err)
		}
	}
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if w.m.closed {
		return Runtime{}, ErrClosed
	}
	w.stateMu.Lock()
	_, dup := w.runtimes[o.Name]
	w.stateMu.Unlock()
	if dup {
		return Runtime{}, fmt.Errorf("workspace %q: %w: %q", w.cfg.Name, ErrRuntimeExists, o.Name)
	}
	rt := Runtime{Name: o.Name, Endpoint: o.Endpoint, HasToken: o.ComputerdToken != "", Created: time.Now().UTC()}
	if err := placeToken(runtimeTokenPath(w.m.opts.DataDir, w.cfg.Name, o.Name), o.ComputerdToken); err != nil {
		return Runtime{}, fmt.Errorf("attach runtime %q: token: %w", o.Name, err)
	}
	rs := w.newRuntime(rt, nil)
	w.stateMu.Lock()
	w.runtimes[o.Name] = rs
	w.stateMu.Unlock()
	if err := w.m.saveLocked(); err != nil {
		w.stateMu.Lock()
		delete(w.runtimes, o.Name)
		w.stateMu.Unlock()
		return Runtime{}, err
	}
	w.log.Info("runtime attached", "runtime", o.Name, "endpoint", o.Endpoint, "token", rt.HasToken)
	return rs.rt, nil
}

// Detach removes an attached runtime: in a turn of the workspace's FIFO,
// so no sync of it is cut halfway, it leaves the registry, its remote is
// closed and its token removed. A command running on it loses its session.
// The server's store keeps the peer's watermarks, so a runtime attached
// again under the name resumes where this one stopped.
func (w *Workspace) Detach(ctx context.Context, name string) error {
	if err := ValidateRuntimeName(name); err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	if _, err := w.state(name); err != nil {
		return err
	}
	return w.q.Do(ctx, func() error {
		w.m.mu.Lock()
		w.stateMu.Lock()
		rs, ok := w.runtimes[name]
		delete(w.runtimes, name)
		w.stateMu.Unlock()
		if !ok {
			w.m.mu.Unlock()
			return fmt.Errorf("workspace %q: %w: %q", w.cfg.Name, ErrNoRuntime, name)
		}
		var err error
		if w.m.closed {
			err = ErrClosed
		} else {
			err = w.m.saveLocked()
		}
		if err != nil {
			w.stateMu.Lock()
			w.runtimes[name] = rs
			w.stateMu.Unlock()
			w.m.mu.Unlock()
			return fmt.Errorf("detach runtime %q: %w", name, err)
		}
		w.m.mu.Unlock()
		w.stateMu.Lock()
		owed := rs.pending != nil
		w.stateMu.Unlock()
		if owed {
			metricPending.Dec()
		}
		close(rs.detached)
		errs := []error{rs.close()}
		if err := os.Remove(runtimeTokenPath(w.m.opts.DataDir, w.cfg.Name, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("detach runtime %q: token: %w", name, err))
		}
		w.log.Info("runtime detached", "runtime", name)
		return errors.Join(errs...)
	})
}
