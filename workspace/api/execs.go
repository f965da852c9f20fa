package api

import (
	"net/http"

	"github.com/wsync/wsync/workspace"
)

// startExec starts a detached command (POST .../execs): the push before
// it, then the command, answered at once with its id (201). The workspace
// follows it from then on; see workspace.Target.StartExec.
func (s *Server) startExec(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var spec workspace.ExecSpec
	if err := s.decode(w, r, s.opts.MaxExec, &spec); err != nil {
		writeError(w, err)
		return
	}
	rep, err := target(r, ws).StartExec(r.Context(), spec)
	if err != nil && rep.ExecID == "" {
		writeError(w, err)
		return
	}
	if err != nil {
		// Started, but not recorded: the caller has its id and must know
		// a restart of the server forgets it.
		s.log.Warn("detached exec not recorded", "workspace", ws.Name(), "exec", rep.ExecID, "err", err)
		rep.Warning = err.Error()
	}
	writeJSON(w, http.StatusCreated, rep)
}

// listExecs answers the commands of every runtime (GET .../execs).
func (s *Server) listExecs(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	list, err := ws.Execs(r.Context())
	respond(w, list, err)
}

// getExec describes one exec (GET .../execs/{id}).
func (s *Server) getExec(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	info, err := target(r, ws).ExecInfo(r.Context(), r.PathValue("id"))
	respond(w, info, err)
}

// waitExec answers once the exec has ended (for a detached one: once the
// pull after it is made or owed), like getExec then.
func (s *Server) waitExec(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	info, err := target(r, ws).WaitExec(r.Context(), r.PathValue("id"))
	respond(w, info, err)
}

// killExec signals an exec's process group (POST .../execs/{id}/kill,
// {"signal": "TERM"}; TERM when absent).
func (s *Server) killExec(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req KillRequest
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Signal == "" {
		req.Signal = "TERM"
	}
	sig, err := workspace.ParseSignal(req.Signal)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := target(r, ws).KillExec(r.Context(), id, sig); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, KillResponse{ExecID: id, Signal: int(sig)})
}

// execOutput replays an exec's output from ?from= (a byte offset, 0 when
// absent, or "end") and follows it until the command ends, as NDJSON: one
// frame per piece of output with its offset, then the result frame (the
// ExecResult), or an error frame. An error before any frame is an
// ordinary JSON error. A caller that goes away (or stops reading for the
// stream write timeout) stops the stream, not the command.
func (s *Server) execOutput(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	from, err := workspace.ParseExecFrom(r.URL.Query().Get("from"))
	if err != nil {
		writeError(w, err)
		return
	}
	t, id := target(r, ws), r.PathValue("id")
	if err := workspace.ValidateExecID(id); err != nil {
		writeError(w, err)
		return
	}
	fw := s.newFrameWriter(w)
	ctx, done := fw.callContext(r.Context())
	defer done()
	res, err := t.AttachExec(ctx, id, from, func(ev workspace.ExecEvent) {
		fw.frame(ExecOutputFrame{Type: ev.Stream, Data: ev.Data, Offset: ev.Offset})
	})
	finish(fw, res, err)
}
