package api

import (
	"net/http"

	"github.com/wsync/wsync/workspace"
)

// AttachRuntimeRequest is the body of POST /v1/workspaces/{ws}/runtimes:
// the runtime's name and endpoint, its computerd token by value. A
// "computerd_token" that is present but empty is refused (an empty token
// is never "no auth").
type AttachRuntimeRequest struct {
	workspace.AttachOptions
	// ComputerdToken shadows the embedded field so an empty string given
	// explicitly can be told from an absent one.
	ComputerdToken *string `json:"computerd_token,omitempty"`
}

// listRuntimes answers the workspace's runtimes, the default one first.
func (s *Server) listRuntimes(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	writeJSON(w, http.StatusOK, ws.Runtimes())
}

// attachRuntime attaches a runtime: 201 with it (never its token).
func (s *Server) attachRuntime(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req AttachRuntimeRequest
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := tokenByValue(req.ComputerdToken, &req.AttachOptions.ComputerdToken); err != nil {
		writeError(w, err)
		return
	}
	rt, err := ws.Attach(r.Context(), req.AttachOptions)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, rt)
}

// detachRuntime detaches a runtime: 204.
func (s *Server) detachRuntime(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	if err := ws.Detach(r.Context(), r.PathValue("name")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
