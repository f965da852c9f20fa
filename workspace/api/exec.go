package api

import (
	"net/http"

	"github.com/wsync/wsync/workspace"
)

// exec runs the exec bracket and streams it as NDJSON: one ExecFrame per
// line, output frames as the container produces them, flushed one by one,
// then a result frame (or an error frame). A request that accepts NDJSON
// also gets progress frames for the push before the command and the pull
// after it. A push failure, which spawns nothing, is an ordinary JSON
// error response, since nothing has been written yet. A caller that goes
// away, or stops reading for the stream write timeout, cancels the
// command; the pull after it still runs.
func (s *Server) exec(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var spec workspace.ExecSpec
	if err := s.decode(w, r, s.opts.MaxExec, &spec); err != nil {
		writeError(w, err)
		return
	}
	fw := s.newFrameWriter(w)
	ctx, done := fw.callContext(r.Context())
	defer done()
	if acceptsNDJSON(r) {
		ctx = workspace.WithProgress(ctx, fw.progress)
	}
	rep, err := target(r, ws).Exec(ctx, spec, func(ev workspace.ExecEvent) {
		fw.frame(ExecFrame{Type: ev.Stream, Data: ev.Data, Offset: ev.Offset})
	})
	finish(fw, rep, err)
}
