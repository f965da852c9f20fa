package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// filePath is the {path...} of a files route as a workspace path.
func filePath(r *http.Request) string { return "/" + r.PathValue("path") }

// boolParam reads a flag query parameter: "1", "true", "" (present) are
// true; absent is def.
func boolParam(r *http.Request, name string, def bool) (bool, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, nil
	}
	v := q.Get(name)
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query %s=%q: %w", name, v, vfs.ErrInvalid)
	}
	return b, nil
}

// ParseMode parses permission bits written in octal ("644", "0755").
func ParseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q: %w: want octal permission bits", s, vfs.ErrInvalid)
	}
	return uint32(m), nil
}

// readFile serves a file's bytes, with Range and conditional requests
// (http.ServeContent over a reader of the file as it is now).
func (s *Server) readFile(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	ra, fi, err := ws.Open(r.Context(), filePath(r))
	if err != nil {
		writeError(w, err)
		return
	}
	// One byte before the headers go out: a chunk the store cannot read
	// now (kept in an object store that is down) is an error answer, not a
	// 200 cut short. A failure further in still cuts the body short.
	if fi.Size > 0 {
		var b [1]byte
		if _, err := ra.ReadAt(b[:], 0); err != nil && !errors.Is(err, io.EOF) {
			writeError(w, err)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Wsync-Mode", fmt.Sprintf("%04o", fi.Mode))
	http.ServeContent(w, r, "", fi.Mtime, io.NewSectionReader(ra, 0, fi.Size))
}

// writeFile replaces a file with the request body, atomically: the bytes
// are staged before one transaction swaps the content, so a body cut short
// or over the limit changes nothing.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var mode *uint32
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := ParseMode(v)
		if err != nil {
			writeError(w, err)
			return
		}
		mode = &m
	}
	if r.ContentLength > s.opts.MaxWrite {
		writeError(w, &http.MaxBytesError{Limit: s.opts.MaxWrite})
		return
	}
	fi, err := ws.WriteFile(r.Context(), filePath(r), http.MaxBytesReader(w, r.Body, s.opts.MaxWrite), mode)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	rec, err := boolParam(r, "recursive", false)
	if err == nil {
		err = ws.Remove(r.Context(), filePath(r), rec)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	hash, err := boolParam(r, "sha256", true)
	if err != nil {
		writeError(w, err)
		return
	}
	fi, err := ws.Stat(r.Context(), queryPath(r), hash)
	respond(w, fi, err)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	hash, err := boolParam(r, "sha256", true)
	if err != nil {
		writeError(w, err)
		return
	}
	rec, err := boolParam(r, "recursive", false)
	if err != nil {
		writeError(w, err)
		return
	}
	// The array streams as the walk reads the tree: the server never holds
	// the whole answer. An error before the first entry is an ordinary
	// error response; after it the response is cut (no closing "]"), which
	// every JSON reader reports.
	started := false
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	err = ws.Walk(r.Context(), queryPath(r), rec, hash, func(fi workspace.FileInfo) error {
		sep := ","
		if !started {
			started, sep = true, "["
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		if _, err := io.WriteString(w, sep); err != nil {
			return err
		}
		return enc.Encode(fi)
	})
	switch {
	case err != nil && !started:
		writeError(w, err)
	case err != nil:
		s.log.Warn("listing cut", "path", queryPath(r), "err", err)
		panic(http.ErrAbortHandler)
	case !started:
		writeJSON(w, http.StatusOK, []workspace.FileInfo{})
	default:
		io.WriteString(w, "]\n")
	}
}

// queryPath is the path query parameter; absent means the root.
func queryPath(r *http.Request) string {
	if p := r.URL.Query().Get("path"); p != "" {
		return p
	}
	return "/"
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req MkdirRequest
	s.mutate(w, r, &req, func(ctx context.Context) (workspace.FileInfo, error) {
		return statAfter(ctx, ws, req.Path, ws.Mkdir(ctx, req.Path, req.Mode, req.Parents))
	})
}

func (s *Server) move(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req MoveRequest
	s.mutate(w, r, &req, func(ctx context.Context) (workspace.FileInfo, error) {
		return ws.Rename(ctx, req.Src, req.Dst)
	})
}

func (s *Server) symlink(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req SymlinkRequest
	s.mutate(w, r, &req, func(ctx context.Context) (workspace.FileInfo, error) {
		return statAfter(ctx, ws, req.Path, ws.Symlink(ctx, req.Target, req.Path))
	})
}

func (s *Server) chmod(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	var req ChmodRequest
	s.mutate(w, r, &req, func(ctx context.Context) (workspace.FileInfo, error) {
		return statAfter(ctx, ws, req.Path, ws.Chmod(ctx, req.Path, req.Mode))
	})
}

// mutate answers a JSON mutation request: it decodes the body into req,
// makes the mutation (do) and answers with the node do returns.
func (s *Server) mutate(w http.ResponseWriter, r *http.Request, req any, do func(context.Context) (workspace.FileInfo, error)) {
	if err := s.decode(w, r, s.opts.MaxJSON, req); err != nil {
		writeError(w, err)
		return
	}
	fi, err := do(r.Context())
	respond(w, fi, err)
}

// statAfter is the answer to a mutation whose store call returns no
// attributes (mkdir, symlink, chmod): the node at path, read after it
// committed. Unlike a write's or a move's answer, it fails with ENOENT
// when another caller removes path in between.
func statAfter(ctx context.Context, ws *workspace.Workspace, path string, err error) (workspace.FileInfo, error) {
	if err != nil {
		return workspace.FileInfo{}, err
	}
	return ws.Stat(ctx, path, false)
}
