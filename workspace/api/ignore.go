package api

import (
	"net/http"

	"github.com/wsync/wsync/workspace"
)

// Ignore is the body of PUT /v1/workspaces/{ws}/ignore and, with its
// answer fields, the answer of GET and PUT: Ignore is the configured
// gitignore patterns (null: the default ["node_modules"], []: none);
// Patterns the patterns in force, in order (Ignore, or the default, then
// the lines of the workspace's /.wsyncignore); FileError what of that file
// was left out.
type Ignore struct {
	Ignore    []string `json:"ignore"`
	Patterns  []string `json:"patterns,omitempty"`
	FileError string   `json:"file_error,omitempty"`
}

func ignoreInfo(r *http.Request, ws *workspace.Workspace) (Ignore, error) {
	pats, err := ws.Patterns(r.Context())
	return Ignore{Ignore: ws.IgnoreList(), Patterns: pats, FileError: ws.IgnoreFileError()}, err
}

// getIgnore answers the workspace's ignore patterns.
func (s *Server) getIgnore(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	info, err := ignoreInfo(r, ws)
	respond(w, info, err)
}

// setIgnore replaces the workspace's configured patterns and answers the
// patterns now in force. A bad pattern is a 400 naming it.
func (s *Server) setIgnore(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req Ignore
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	if _, err := ws.SetIgnore(r.Context(), req.Ignore); err != nil {
		writeError(w, err)
		return
	}
	info, err := ignoreInfo(r, ws)
	respond(w, info, err)
}
