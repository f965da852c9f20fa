package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// ResolveRequest is the body of POST /v1/workspaces/{ws}/conflicts/resolve:
// the path of an open conflict (workspace form) and the version to keep,
// "server", "container" or "both" (see workspace.Workspace.ResolveConflict).
type ResolveRequest struct {
	Path string `json:"path"`
	Keep string `json:"keep"`
}

// ConflictPolicy is the body of PUT /v1/workspaces/{ws}/conflict-policy
// and its answer: "keep-both", "server-wins" or "container-wins".
type ConflictPolicy struct {
	Policy string `json:"policy"`
}

// listConflicts answers the open conflicts, newest first; ?all=1 adds the
// resolved ones, ?limit=N bounds them (workspace.DefaultConflictList when
// absent).
func (s *Server) listConflicts(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeError(w, fmt.Errorf("conflicts: %w: limit %q (1 to %d)", vfs.ErrInvalid, v, workspace.MaxConflictList))
			return
		}
		limit = n
	}
	all := q.Get("all")
	list, err := ws.Conflicts(r.Context(), all == "1" || all == "true", limit)
	respond(w, list, err)
}

// resolveConflict settles the newest open conflict at a path and answers
// the settled record.
func (s *Server) resolveConflict(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req ResolveRequest
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	c, err := ws.ResolveConflict(r.Context(), req.Path, req.Keep)
	respond(w, c, err)
}

// setConflictPolicy changes the workspace's conflict policy and answers
// the policy now in force.
func (s *Server) setConflictPolicy(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req ConflictPolicy
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := ws.SetConflictPolicy(r.Context(), req.Policy)
	respond(w, ConflictPolicy{Policy: string(p)}, err)
}
