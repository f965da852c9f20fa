package workspace

import (
	"context"
	"fmt"

	"github.com/wsync/wsync/vfs"
)

// Deletion safety. A pull that would delete more than Share of the
// workspace's live paths, and at least Min of them (net of the new paths
// it creates: a directory renamed in the container is a delete of every
// old path and a create of every new one), stops before its first
// deletion: nothing of them is applied, the fetch cursor stays before
// them, and the runtime's pending record is paused (PendingPaused), which
// holds pushes and execs back (the container keeps what it has; the server
// keeps what it had) until a pull confirms it (PullOptions.AllowMassDelete,
// `pull --allow-mass-delete`). The receive path counts (syncwire guard.go:
// the first deleting batch is read ahead to the end of the feed, entries
// only, before anything of it applies); this file decides.

// Defaults of MassDeleteOptions.
const (
	DefaultMassDeleteShare = 0.5
	DefaultMassDeleteMin   = 1000
)

// MassDeleteOptions bound what one pull may delete without confirmation:
// it pauses when it would delete more than Share (0 to 1; 0: the default,
// 1: never pause) of the workspace's live paths and at least Min (0: the
// default) of them.
type MassDeleteOptions struct {
	Share float64 `json:"share,omitempty"`
	Min   int     `json:"min,omitempty"`
}

func (o MassDeleteOptions) check() error {
	if o.Share < 0 || o.Share > 1 || o.Share != o.Share {
		return fmt.Errorf("%w: mass delete share %v is not between 0 and 1", vfs.ErrInvalid, o.Share)
	}
	if o.Min < 0 {
		return fmt.Errorf("%w: mass delete minimum %d is negative", vfs.ErrInvalid, o.Min)
	}
	return nil
}

// or fills o's zero fields from d.
func (o MassDeleteOptions) or(d MassDeleteOptions) MassDeleteOptions {
	if o.Share == 0 {
		o.Share = d.Share
	}
	if o.Min == 0 {
		o.Min = d.Min
	}
	return o
}

// PullOptions are the options of one explicit pull (Target.PullWith).
type PullOptions struct {
	// AllowMassDelete applies the pull's deletions however many there
	// are: the confirmation of a paused pull.
	AllowMassDelete bool
	// MassDelete replaces the server's bounds for this pull (zero fields:
	// the server's).
	MassDelete MassDeleteOptions
}

// MassDeleteError is a pull paused by the deletion safety: it would delete
// Deletes of the workspace's Live paths, net of the new paths it creates
// (a renamed directory deletes nothing), more than Share of them and at
// least Min. It is an ErrMassDelete.
type MassDeleteError struct {
	Deletes int
	Live    int64
	Share   float64
	Min     int
}

func (e *MassDeleteError) Error() string {
	return fmt.Sprintf("%v: it would delete %d of the workspace's %d paths, net of those it creates (more than %.0f%%, at least %d); nothing was deleted. "+
		"Confirm with `workspace-server pull --allow-mass-delete`, or restore the files in the container",
		ErrMassDelete, e.Deletes, e.Live, e.Share*100, e.Min)
}

func (e *MassDeleteError) Unwrap() error { return ErrMassDelete }

// massDeleteGuard is a pull's DeleteGuard over the workspace's store.
type massDeleteGuard struct {
	s    *vfs.Store
	o    MassDeleteOptions
	live int64 // the store's live paths, counted once a check needs them; -1 before
}

// deleteGuard is the guard of one pull: o's bounds, the server's where o
// has none.
func (w *Workspace) deleteGuard(ctx context.Context, o MassDeleteOptions) (DeleteGuard, error) {
	o = o.or(w.m.opts.MassDelete).or(MassDeleteOptions{Share: DefaultMassDeleteShare, Min: DefaultMassDeleteMin})
	if o.Share >= 1 {
		return nil, nil
	}
	s, err := w.Store(ctx)
	if err != nil {
		return nil, err
	}
	return &massDeleteGuard{s: s, o: o, live: -1}, nil
}

func (g *massDeleteGuard) Live(ctx context.Context, paths []string) (int, error) {
	return g.s.CountLive(ctx, paths)
}

func (g *massDeleteGuard) Refuse(ctx context.Context, deletes int) error {
	if deletes < g.o.Min {
		return nil
	}
	if g.live < 0 {
		n, err := g.s.LiveNodes(ctx)
		if err != nil {
			return err
		}
		g.live = n
	}
	if float64(deletes) <= g.o.Share*float64(g.live) {
		return nil
	}
	metricMassDeletes.Inc()
	return &MassDeleteError{Deletes: deletes, Live: g.live, Share: g.o.Share, Min: g.o.Min}
}
