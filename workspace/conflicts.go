package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wsync/wsync/vfs"
)

// Conflicts are detected and recorded by the server's store in the apply
// of a pull (vfs, "Conflicts"); this file is what a user sees of them and
// how one is settled: the workspace's policy, the records as the API shows
// them, and `conflicts resolve`.

// ResolveBoth is the keep value of a resolve that keeps both versions as
// they are (the others are SideServer and SideContainer).
const ResolveBoth = "both"

// ConflictInfo is a recorded conflict as the API shows it. Paths are in
// workspace form ("/PLAN.md").
type ConflictInfo struct {
	ID   int64  `json:"id"`
	Path string `json:"path"`
	// Runtime is the runtime whose pull found the conflict ("default", or
	// an attached runtime's name).
	Runtime string             `json:"runtime"`
	At      time.Time          `json:"at"`
	Policy  vfs.ConflictPolicy `json:"policy"`
	// Kind is "both-modified", "type", "server-deleted" or
	// "container-deleted".
	Kind string `json:"kind"`
	// Server and Container are the two versions: the server's and the
	// runtime's container's.
	Server    vfs.PathState `json:"server"`
	Container vfs.PathState `json:"container"`
	// Copy is where the version that lost the name was written (keep-both
	// only), and CopySide whose version it is: "server" or "container".
	Copy     string `json:"copy,omitempty"`
	CopySide string `json:"copy_side,omitempty"`
	// ResolvedAt is when `conflicts resolve` settled it (absent: open),
	// and Resolution what it kept: "server", "container" or "both".
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	Resolution string    `json:"resolution,omitempty"`
}

func conflictInfo(c vfs.Conflict) ConflictInfo {
	ci := ConflictInfo{ID: c.ID, Path: "/" + c.Path, Runtime: runtimeOfPeer(c.Peer), At: c.At, Policy: c.Policy, Kind: c.Kind,
		Server: c.Server, Container: c.Container, CopySide: c.CopySide, ResolvedAt: c.Resolved, Resolution: c.Resolution}
	if c.Copy != "" {
		ci.Copy = "/" + c.Copy
	}
	return ci
}

// runtimeOfPeer is the runtime a store peer name stands for (Runtime.Peer
// read backwards); a peer of no runtime is shown as it is.
func runtimeOfPeer(peer string) string {
	if peer == DefaultPeer {
		return DefaultRuntime
	}
	if name, ok := strings.CutPrefix(peer, DefaultPeer+"@"); ok {
		return name
	}
	return peer
}

// ConflictPolicy is the workspace's conflict policy.
func (w *Workspace) ConflictPolicy() vfs.ConflictPolicy {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	return cmp.Or(w.cfg.ConflictPolicy, vfs.KeepBoth)
}

// ConflictOptions is the conflict detection a remote of the runtime rt
// gives its driver (syncwire.DriverOptions.Conflicts): the workspace's
// policy, and the runtime's side in the names of conflict copies. Every
// RemoteFactory that runs the real driver takes it from here.
func (w *Workspace) ConflictOptions(rt Runtime) *vfs.ConflictOptions {
	return &vfs.ConflictOptions{Policy: w.ConflictPolicy(), Side: rt.Side()}
}

// conflictPolicySetter is a Remote whose pulls can take a new conflict
// policy without ending its session (workspace/remote's and the fake's).
type conflictPolicySetter interface {
	SetConflictPolicy(vfs.ConflictPolicy)
}

// SetConflictPolicy changes the workspace's conflict policy and persists
// the registry, in a turn of the workspace's FIFO so no sync is cut
// halfway. The runtimes' remotes take it from their next pull on, their
// sessions (and the commands running on them) left alone; a remote that
// cannot take it is closed and built again with it on the next call. (The
// default workspace's policy given to serve --conflict-policy is applied
// again at the next start.)
func (w *Workspace) SetConflictPolicy(ctx context.Context, policy string) (vfs.ConflictPolicy, error) {
	p, err := vfs.ParseConflictPolicy(policy)
	if policy == "" {
		err = fmt.Errorf("%w: no conflict policy given (want keep-both, server-wins or container-wins)", vfs.ErrInvalid)
	}
	if err != nil {
		return "", fmt.Errorf("workspace %q: %w", w.cfg.Name, err)
	}
	err = w.q.Do(ctx, func() error {
		w.m.mu.Lock()
		w.stateMu.Lock()
		old := w.cfg.ConflictPolicy
		w.cfg.ConflictPolicy = p
		rss := w.sortedLocked()
		w.stateMu.Unlock()
		if cmp.Or(old, vfs.KeepBoth) == p {
			w.m.mu.Unlock()
			return nil
		}
		err := ErrClosed
		if !w.m.closed {
			err = w.m.saveLocked()
		}
		if err != nil {
			w.stateMu.Lock()
			w.cfg.ConflictPolicy = old
			w.stateMu.Unlock()
			w.m.mu.Unlock()
			return fmt.Errorf("workspace %q: conflict policy: %w", w.cfg.Name, err)
		}
		w.m.mu.Unlock()
		var errs []error
		for _, rs := range rss {
			rs.remoteMu.Lock()
			r := rs.remote
			rs.remoteMu.Unlock()
			if cs, ok := r.(conflictPolicySetter); ok {
				cs.SetConflictPolicy(p)
				continue
			}
			errs = append(errs, rs.close())
		}
		w.log.Info("conflict policy changed", "from", cmp.Or(old, vfs.KeepBoth), "to", p)
		return errors.Join(errs...)
	})
	return p, err
}

// Conflict list bounds: a list returns the newest DefaultConflictList
// records unless the caller asks for up to MaxConflictList.
const (
	DefaultConflictList = 1000
	MaxConflictList     = 100_000
)

// Conflicts lists the workspace's newest recorded conflicts, newest first:
// the open ones, or all of them; at most limit (0: DefaultConflictList;
// above MaxConflictList is vfs.ErrInvalid).
func (w *Workspace) Conflicts(ctx context.Context, all bool, limit int) ([]ConflictInfo, error) {
	switch {
	case limit == 0:
		limit = DefaultConflictList
	case limit < 0 || limit > MaxConflictList:
		return nil, fmt.Errorf("conflicts: %w: limit %d (1 to %d)", vfs.ErrInvalid, limit, MaxConflictList)
	}
	s, err := w.Store(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := s.Conflicts(ctx, !all, limit)
	if err != nil {
		return nil, err
	}
	out := make([]ConflictInfo, len(cs))
	for i, c := range cs {
		out[i] = conflictInfo(c)
	}
	return out, nil
}

// ResolveConflict settles the newest open conflict at path (workspace
// form), keeping keep's version, and returns the settled record:
//
//   - "both": both versions stay as they are (the path and the copy).
//   - The side whose version is in the copy: the copy replaces the path
//     (what is at the path is removed first where a rename cannot replace
//     it, a directory say).
//   - The side whose version holds the name: the copy is removed (if it is
//     still there).
//   - A record without a copy (modify beats delete, or server-wins and
//     container-wins): keeping the side whose state is "absent" removes the
//     path; keeping the side whose version is at the path changes nothing.
//     Under server-wins and container-wins the losing version was not kept,
//     so keeping it is vfs.ErrInvalid.
//
// The changes are ordinary server writes: they reach the containers with
// the next push. It runs in a turn of the workspace's FIFO, so no sync
// moves the path meanwhile. No open conflict at path is vfs.ErrNotExist.
func (w *Workspace) ResolveConflict(ctx context.Context, path, keep string) (ConflictInfo, error) {
	switch keep {
	case SideServer, SideContainer, ResolveBoth:
	default:
		return ConflictInfo{}, fmt.Errorf("resolve: %w: keep %q (want server, container or both)", vfs.ErrInvalid, keep)
	}
	s, sp, err := w.onStore(ctx, "resolve", path, existing, nil)
	if err != nil {
		return ConflictInfo{}, err
	}
	var out ConflictInfo
	err = w.q.Do(ctx, func() error {
		c, err := s.OpenConflictAt(ctx, sp)
		if err != nil {
			return fmt.Errorf("resolve /%s: %w", sp, err)
		}
		if err := settle(ctx, s, c, keep); err != nil {
			return fmt.Errorf("resolve /%s: %w", sp, err)
		}
		if err := s.MarkResolved(ctx, c.ID, keep); err != nil {
			return err
		}
		if c, err = s.Conflict(ctx, c.ID); err != nil {
			return err
		}
		out = conflictInfo(c)
		w.log.Info("conflict resolved", "path", out.Path, "id", c.ID, "keep", keep, "runtime", out.Runtime)
		return nil
	})
	return out, err
}

// settle makes the store hold what resolving c keeping keep's version
// means (see ResolveConflict).
func settle(ctx context.Context, s *vfs.Store, c vfs.Conflict, keep string) error {
	if keep == ResolveBoth {
		return nil
	}
	if won := winner(c.Policy); won != "" && keep != won {
		return fmt.Errorf("%w: the %s policy kept the %s's version and did not keep the %s's: keep %s or both",
			vfs.ErrInvalid, c.Policy, won, keep, won)
	}
	switch {
	case c.Copy != "" && keep == c.CopySide:
		return replaceWithCopy(ctx, s, c.Copy, c.Path)
	case c.Copy != "":
		return removeIfThere(ctx, s, c.Copy)
	case keep == SideServer && c.Server.Type == "absent", keep == SideContainer && c.Container.Type == "absent":
		return removeIfThere(ctx, s, c.Path)
	}
	return nil
}

// winner is the side a one-sided policy keeps ("" for keep-both).
func winner(p vfs.ConflictPolicy) string {
	switch p {
	case vfs.ServerWins:
		return SideServer
	case vfs.ContainerWins:
		return SideContainer
	}
	return ""
}

// replaceWithCopy renames the conflict copy cp over path. A rename
// replaces a file in one step; a directory at path (or a path whose type
// a rename cannot replace) is removed first, in its own transaction.
func replaceWithCopy(ctx context.Context, s *vfs.Store, cp, path string) error {
	ca, err := s.Stat(ctx, cp)
	if errors.Is(err, vfs.ErrNotExist) {
		return fmt.Errorf("%w: the conflict copy /%s is gone (moved or removed since): keep the other side or both", vfs.ErrNotExist, cp)
	}
	if err != nil {
		return err
	}
	pa, err := s.Stat(ctx, path)
	switch {
	case err == nil && (pa.Kind == vfs.KindDir || ca.Kind == vfs.KindDir):
		if err := s.RemovePath(ctx, path, true); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, vfs.ErrNotExist):
		return err
	}
	return s.RenamePath(ctx, cp, path)
}

// removeIfThere removes path (a directory with what it holds); a path
// already gone is fine.
func removeIfThere(ctx context.Context, s *vfs.Store, path string) error {
	if err := s.RemovePath(ctx, path, true); err != nil && !errors.Is(err, vfs.ErrNotExist) {
		return err
	}
	return nil
}
