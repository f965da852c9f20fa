package api

import (
	"net/http"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// getQuota answers the workspace's quota and usage (workspace.QuotaStatus).
func (s *Server) getQuota(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	st, err := ws.Store(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	respond(w, workspace.QuotaStatus{Quota: st.Quota(), Used: st.Usage()}, nil)
}

// setQuota replaces the workspace's quota with the body (a vfs.Quota: zero
// or absent fields are unbounded) and answers the quota and the usage.
func (s *Server) setQuota(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var q vfs.Quota
	if err := s.decode(w, r, s.opts.MaxJSON, &q); err != nil {
		writeError(w, err)
		return
	}
	if _, err := ws.SetQuota(r.Context(), q); err != nil {
		writeError(w, err)
		return
	}
	s.getQuota(w, r, ws)
}
