package workspace

import (
	"context"
	"fmt"
	"time"

	"github.com/wsync/wsync/vfs"
)

// The trash of a workspace is its store's (vfs trash.go): what a pull or
// the files API deleted or overwrote stays restorable for the retention
// (Options.Trash), within the trash's own bounds, costing a manifest per
// path and no copy of the bytes. A restore is a change of the server's
// store like a write of the files API: it reaches the container on the
// next push, tick or exec.

// MaxTrashList bounds one TrashList.
const MaxTrashList = vfs.MaxTrashList

// TrashEntry is one version in the trash, as `trash ls --json` prints it.
type TrashEntry struct {
	ID        int64     `json:"id"`
	Path      string    `json:"path"`
	Type      string    `json:"type"` // "file", "dir" or "symlink"
	Mode      uint32    `json:"mode"`
	Size      int64     `json:"size"`
	Mtime     time.Time `json:"mtime"`
	Target    string    `json:"target,omitempty"`
	TrashedAt time.Time `json:"trashed_at"`
	// Op is "delete" or "overwrite"; Origin who did it: "sync" (a pull
	// from the container), "api" (the files API), "restore" (a forced
	// restore replacing the live version).
	Op     string `json:"op"`
	Origin string `json:"origin"`
}

// TrashUsage is what a workspace's trash holds.
type TrashUsage struct {
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// RestoreRequest is a restore of the trash (Workspace.TrashRestore, the
// body of POST /v1/workspaces/{ws}/trash/restore).
type RestoreRequest struct {
	Path string `json:"path"`
	// At picks, per path, the version trashed at or before it (zero: the
	// newest).
	At time.Time `json:"at,omitzero"`
	// Force replaces a live version in the way (which goes to the trash);
	// without it such a restore changes nothing and fails with EEXIST.
	Force bool `json:"force,omitempty"`
}

// RestoreReport is what a restore did.
type RestoreReport struct {
	Restored int `json:"restored"`
	Matched  int `json:"matched,omitempty"`
	Replaced int `json:"replaced,omitempty"`
	Created  int `json:"created,omitempty"`
}

// PurgeReport is what a purge deleted.
type PurgeReport struct {
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// trashOptions is the stores' vfs trash configuration (nil: none).
func (m *Manager) trashOptions() *vfs.TrashOptions {
	if m.opts.NoTrash {
		return nil
	}
	o := m.opts.Trash
	return &o
}

// TrashList returns the versions in the trash at path or below it, newest
// first, at most limit (0: MaxTrashList).
func (w *Workspace) TrashList(ctx context.Context, path string, limit int) ([]TrashEntry, error) {
	if limit < 0 || limit > MaxTrashList {
		return nil, fmt.Errorf("trash list: %w: limit %d (0 to %d)", vfs.ErrInvalid, limit, MaxTrashList)
	}
	s, sp, err := w.onStore(ctx, "trash list", path, existing, nil)
	if err != nil {
		return nil, err
	}
	es, err := s.TrashList(ctx, sp, limit)
	if err != nil {
		return nil, err
	}
	ig, err := w.Matcher(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TrashEntry, 0, len(es))
	for _, e := range es {
		if ig.Match(e.Path, e.Kind == vfs.KindDir) {
			continue
		}
		out = append(out, TrashEntry{ID: e.ID, Path: "/" + e.Path, Type: e.Kind.String(), Mode: e.Mode, Size: e.Size,
			Mtime: e.Mtime.UTC(), Target: e.Target, TrashedAt: e.TrashedAt.UTC(), Op: e.Op, Origin: e.Origin})
	}
	return out, nil
}

// TrashRestore brings back req.Path and what the trash holds below it
// (vfs.Store.RestoreTrash), as new changes of the server's store.
func (w *Workspace) TrashRestore(ctx context.Context, req RestoreRequest) (RestoreReport, error) {
	s, sp, err := w.onStore(ctx, "trash restore", req.Path, existing, nil)
	if err != nil {
		return RestoreReport{}, err
	}
	res, err := s.RestoreTrash(ctx, sp, vfs.RestoreOptions{At: req.At, Force: req.Force})
	if err != nil {
		return RestoreReport{}, err
	}
	w.log.Info("trash restored", "path", "/"+sp, "restored", res.Restored, "replaced", res.Replaced)
	return RestoreReport{Restored: res.Restored, Matched: res.Matched, Replaced: res.Replaced, Created: res.Created}, nil
}

// TrashPurge deletes the versions at path or below it ("/" or "": all)
// trashed more than olderThan ago (0: all of them).
func (w *Workspace) TrashPurge(ctx context.Context, path string, olderThan time.Duration) (PurgeReport, error) {
	if olderThan < 0 {
		return PurgeReport{}, fmt.Errorf("trash purge: %w: negative age %v", vfs.ErrInvalid, olderThan)
	}
	s, sp, err := w.onStore(ctx, "trash purge", path, existing, nil)
	if err != nil {
		return PurgeReport{}, err
	}
	var before time.Time
	if olderThan > 0 {
		before = time.Now().Add(-olderThan)
	}
	u, err := s.PurgeTrash(ctx, sp, before)
	if err != nil {
		return PurgeReport{}, err
	}
	return PurgeReport{Entries: u.Entries, Bytes: u.Bytes}, nil
}

// TrashUsage returns what the workspace's trash holds.
func (w *Workspace) TrashUsage(ctx context.Context) (TrashUsage, error) {
	s, err := w.Store(ctx)
	if err != nil {
		return TrashUsage{}, err
	}
	u, err := s.TrashUsage(ctx)
	return TrashUsage{Entries: u.Entries, Bytes: u.Bytes}, err
}
