package api

import (
	"encoding/json"
	"net/http"

	"github.com/wsync/wsync/workspace"
)

// exec runs the exec bracket and streams it as NDJSON: one ExecFrame per
// line, output frames as the container produces them, flushed one by one,
// then a result frame (or an error frame). A push failure, which spawns
// nothing, is an ordinary JSON error response, since nothing has been
// written yet. A caller that goes away cancels the command; the pull after
// it still runs.
func (s *Server) exec(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var spec workspace.ExecSpec
	if err := s.decode(w, r, s.opts.MaxExec, &spec); err != nil {
		writeError(w, err)
		return
	}
	fw := &frameWriter{w: w, rc: http.NewResponseController(w)}
	rep, err := target(r, ws).Exec(r.Context(), spec, func(ev workspace.ExecEvent) {
		fw.frame(ExecFrame{Type: ev.Stream, Data: ev.Data})
	})
	switch {
	case err != nil && !fw.started:
		writeError(w, err)
	case err != nil:
		fw.frame(ExecFrame{Type: FrameError, Error: err.Error(), Errno: workspace.ErrnoName(err)})
	default:
		fw.frame(ExecFrame{Type: FrameResult, Result: &rep})
	}
}

// frameWriter writes NDJSON frames, sending the headers with the first.
// After a failed write (the caller is gone) it drops the rest.
type frameWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	failed  bool
}

func (f *frameWriter) frame(fr ExecFrame) {
	if f.failed {
		return
	}
	if !f.started {
		f.started = true
		h := f.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		f.w.WriteHeader(http.StatusOK)
	}
	b, err := json.Marshal(fr)
	if err == nil {
		_, err = f.w.Write(append(b, '\n'))
	}
	if err == nil {
		err = f.rc.Flush()
	}
	if err != nil {
		f.failed = true
	}
}
