package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// PurgeRequest is the body of POST /v1/workspaces/{ws}/trash/purge: the
// versions at Path or below it ("/" or empty: all) trashed more than
// OlderThan ago (0: all of them) go.
type PurgeRequest struct {
	Path      string        `json:"path"`
	OlderThan time.Duration `json:"older_than_ns,omitempty"`
}

// listTrash answers the versions in the trash at ?path= or below it
// (absent: all), newest first, at most ?limit=N (workspace.MaxTrashList
// when absent).
func (s *Server) listTrash(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > workspace.MaxTrashList {
			writeError(w, fmt.Errorf("trash: %w: limit %q (1 to %d)", vfs.ErrInvalid, v, workspace.MaxTrashList))
			return
		}
		limit = n
	}
	list, err := ws.TrashList(r.Context(), q.Get("path"), limit)
	respond(w, list, err)
}

// restoreTrash brings a path back from the trash (workspace.RestoreRequest).
func (s *Server) restoreTrash(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req workspace.RestoreRequest
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	rep, err := ws.TrashRestore(r.Context(), req)
	respond(w, rep, err)
}

// purgeTrash deletes versions from the trash (PurgeRequest).
func (s *Server) purgeTrash(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req PurgeRequest
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	rep, err := ws.TrashPurge(r.Context(), req.Path, req.OlderThan)
	respond(w, rep, err)
}

// pull is a pull of the runtime ?runtime= names (synced):
// ?allow_mass_delete=1 confirms one the deletion safety paused;
// ?mass_delete_share=F and ?mass_delete_min=N replace the server's bounds
// for this pull.
func (s *Server) pull(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	opts, err := pullOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	t := target(r, ws)
	synced(s, w, r, func(ctx context.Context) (workspace.SyncReport, error) { return t.PullWith(ctx, opts) })
}

func pullOptions(r *http.Request) (workspace.PullOptions, error) {
	q := r.URL.Query()
	var o workspace.PullOptions
	switch v := q.Get("allow_mass_delete"); v {
	case "", "0", "false":
	case "1", "true":
		o.AllowMassDelete = true
	default:
		return o, fmt.Errorf("pull: %w: allow_mass_delete %q (1 or 0)", vfs.ErrInvalid, v)
	}
	if v := q.Get("mass_delete_share"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) { // NaN fails too
			return o, fmt.Errorf("pull: %w: mass_delete_share %q (above 0, at most 1)", vfs.ErrInvalid, v)
		}
		o.MassDelete.Share = f
	}
	if v := q.Get("mass_delete_min"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("pull: %w: mass_delete_min %q (a positive count)", vfs.ErrInvalid, v)
		}
		o.MassDelete.Min = n
	}
	return o, nil
}
