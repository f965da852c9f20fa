package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/internal/metrics"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// Default request limits.
const (
	DefaultMaxJSON  = 1 << 20 // JSON request bodies
	DefaultMaxExec  = 4 << 20 // room for the container's limits (workspace.MaxExecStdin, base64) and more
	DefaultMaxWrite = 4 << 30 // one file written by PUT
)

// Options configures a Server.
type Options struct {
	Manager *workspace.Manager
	// Token is the bearer token every route but /health requires. Required.
	Token string
	// MaxJSON, MaxExec and MaxWrite bound request bodies: JSON calls, exec
	// requests (their stdin included), file writes. Zero means the default.
	MaxJSON, MaxExec, MaxWrite int64
	// EventHeartbeat is how long an event stream stays silent before a
	// comment goes out; MaxEventStreams how many event streams may be
	// open on one workspace (more: 429 EBUSY). StreamWriteTimeout is how
	// long one write of a stream (events, exec output, a sync's NDJSON)
	// may take before the caller counts as gone: the stream is dropped
	// and the call cancelled, as when the caller hangs up.
	// BodyReadTimeout is how long a request body may send nothing before
	// the request fails (408 ETIMEDOUT). Zero means the default
	// (DefaultEventHeartbeat, ...).
	EventHeartbeat     time.Duration
	MaxEventStreams    int
	StreamWriteTimeout time.Duration
	BodyReadTimeout    time.Duration
	// Gatherer serves /metrics; nil is metrics.Gatherer(): the default
	// registry, with the process's collectors registered into it.
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
}

// Server is the HTTP API of a workspace-server.
type Server struct {
	opts    Options
	m       *workspace.Manager
	log     *slog.Logger
	token   bearer.Token
	mux     *http.ServeMux
	metrics http.Handler

	streams    streamLimit
	ending     context.Context // done once EndStreams is called
	endStreams context.CancelFunc
}

// New builds the API. It refuses an empty token: every route but /health
// is authenticated.
func New(opts Options) (*Server, error) {
	if opts.Manager == nil {
		return nil, errors.New("api: no manager")
	}
	if opts.Token == "" {
		return nil, errors.New("api: an API token is required")
	}
	setDefault(&opts.MaxJSON, DefaultMaxJSON)
	setDefault(&opts.MaxExec, DefaultMaxExec)
	setDefault(&opts.MaxWrite, DefaultMaxWrite)
	if opts.EventHeartbeat <= 0 {
		opts.EventHeartbeat = DefaultEventHeartbeat
	}
	if opts.StreamWriteTimeout <= 0 {
		opts.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if opts.BodyReadTimeout <= 0 {
		opts.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if opts.MaxEventStreams <= 0 {
		opts.MaxEventStreams = DefaultMaxEventStreams
	}
	if opts.Gatherer == nil {
		opts.Gatherer = metrics.Gatherer()
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{opts: opts, m: opts.Manager, log: log.With("component", "api"), token: bearer.New(opts.Token),
		streams: streamLimit{max: opts.MaxEventStreams}}
	s.ending, s.endStreams = context.WithCancel(context.Background())
	s.metrics = promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{})
	s.routes()
	return s, nil
}

func setDefault(p *int64, def int64) {
	if *p <= 0 {
		*p = def
	}
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /metrics", s.metrics.ServeHTTP)
	mux.HandleFunc("GET /v1/workspaces", s.listWorkspaces)
	mux.HandleFunc("POST /v1/workspaces", s.createWorkspace)
	ws := "/v1/workspaces/{ws}"
	mux.HandleFunc("GET "+ws, s.withWS(s.getWorkspace))
	mux.HandleFunc("GET "+ws+"/files/{path...}", s.withWS(s.readFile))
	mux.HandleFunc("PUT "+ws+"/files/{path...}", s.withWS(s.writeFile))
	mux.HandleFunc("DELETE "+ws+"/files/{path...}", s.withWS(s.removeFile))
	mux.HandleFunc("GET "+ws+"/fs/stat", s.withWS(s.stat))
	mux.HandleFunc("GET "+ws+"/fs/ls", s.withWS(s.list))
	mux.HandleFunc("POST "+ws+"/fs/mkdir", s.withWS(s.mkdir))
	mux.HandleFunc("POST "+ws+"/fs/mv", s.withWS(s.move))
	mux.HandleFunc("POST "+ws+"/fs/symlink", s.withWS(s.symlink))
	mux.HandleFunc("POST "+ws+"/fs/chmod", s.withWS(s.chmod))
	mux.HandleFunc("POST "+ws+"/exec", s.withWS(s.exec))
	mux.HandleFunc("POST "+ws+"/execs", s.withWS(s.startExec))
	mux.HandleFunc("GET "+ws+"/execs", s.withWS(s.listExecs))
	mux.HandleFunc("GET "+ws+"/execs/{id}", s.withWS(s.getExec))
	mux.HandleFunc("GET "+ws+"/execs/{id}/output", s.withWS(s.execOutput))
	mux.HandleFunc("POST "+ws+"/execs/{id}/kill", s.withWS(s.killExec))
	mux.HandleFunc("GET "+ws+"/execs/{id}/wait", s.withWS(s.waitExec))
	mux.HandleFunc("POST "+ws+"/push", s.withWS(syncing(s, workspace.Target.Push)))
	mux.HandleFunc("POST "+ws+"/pull", s.withWS(s.pull))
	mux.HandleFunc("POST "+ws+"/tick", s.withWS(s.tick))
	mux.HandleFunc("GET "+ws+"/status", s.withWS(onRuntime(workspace.Target.Status)))
	mux.HandleFunc("POST "+ws+"/verify", s.withWS(s.verify))
	mux.HandleFunc("GET "+ws+"/runtimes", s.withWS(s.listRuntimes))
	mux.HandleFunc("POST "+ws+"/runtimes", s.withWS(s.attachRuntime))
	mux.HandleFunc("DELETE "+ws+"/runtimes/{name}", s.withWS(s.detachRuntime))
	mux.HandleFunc("GET "+ws+"/conflicts", s.withWS(s.listConflicts))
	mux.HandleFunc("POST "+ws+"/conflicts/resolve", s.withWS(s.resolveConflict))
	mux.HandleFunc("PUT "+ws+"/conflict-policy", s.withWS(s.setConflictPolicy))
	mux.HandleFunc("GET "+ws+"/quota", s.withWS(s.getQuota))
	mux.HandleFunc("PUT "+ws+"/quota", s.withWS(s.setQuota))
	mux.HandleFunc("GET "+ws+"/ignore", s.withWS(s.getIgnore))
	mux.HandleFunc("PUT "+ws+"/ignore", s.withWS(s.setIgnore))
	mux.HandleFunc("GET "+ws+"/events", s.withWS(s.events))
	mux.HandleFunc("GET "+ws+"/trash", s.withWS(s.listTrash))
	mux.HandleFunc("POST "+ws+"/trash/restore", s.withWS(s.restoreTrash))
	mux.HandleFunc("POST "+ws+"/trash/purge", s.withWS(s.purgeTrash))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("no route for %s %s: %w", r.Method, r.URL.Path, vfs.ErrNotExist))
	})
	s.mux = mux
}

// IdleTimeout is how long the server keeps an idle connection open
// (Configure): a client's pool reconnects after it, one that holds
// connections it never uses holds nothing longer.
const IdleTimeout = 2 * time.Minute

// Configure sets what the API needs of the http.Server that serves it:
// the API as its handler, bounded waits for a request's headers and on an
// idle connection, and the event streams ended at shutdown (they never end
// by themselves). It sets no WriteTimeout: that would cut every stream
// that lasts longer; each stream's writes have deadlines of their own
// (StreamWriteTimeout), and each body's reads (BodyReadTimeout).
func (s *Server) Configure(hs *http.Server) {
	hs.Handler = s
	hs.ReadHeaderTimeout = 10 * time.Second
	hs.IdleTimeout = IdleTimeout
	hs.RegisterOnShutdown(s.EndStreams)
}

// ServeHTTP authenticates, logs and routes one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &bodyReader{r: r.Body, rc: http.NewResponseController(w), timeout: s.opts.BodyReadTimeout}
	}
	if r.URL.Path != "/health" && !s.token.Check(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="wsync"`)
		writeError(rec, workspace.ErrUnauthorized)
	} else {
		s.mux.ServeHTTP(rec, r)
	}
	route := r.Pattern
	if route == "" {
		route = "unmatched"
	}
	d := time.Since(start)
	metricRequests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
	metricSeconds.WithLabelValues(route).Observe(d.Seconds())
	lvl := slog.LevelDebug
	if rec.status >= 500 {
		lvl = slog.LevelWarn
	} else if r.Method != http.MethodGet && r.Method != http.MethodHead {
		lvl = slog.LevelInfo
	}
	// Never the headers: they carry the token.
	s.log.Log(r.Context(), lvl, "request", "method", r.Method, "route", route, "path", r.URL.Path,
		"status", rec.status, "bytes", rec.bytes, "duration", d)
}

// recorder keeps the status and size for logs and metrics.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

// bodyReader reads a request body, each read under a deadline of its own:
// a client that stops sending fails its request (ErrRequestTimeout, 408)
// instead of holding its handler, and what it sent before is refused as
// for any body that breaks off. A body as long as the limits allow (a
// file's PUT) still has all the time it needs while bytes come.
type bodyReader struct {
	r       io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if err := b.rc.SetReadDeadline(time.Now().Add(b.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return 0, err
	}
	n, err := b.r.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("request body: nothing came for %v: %w", b.timeout, workspace.ErrRequestTimeout)
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.r.Close() }

// Unwrap lets http.ResponseController reach Flush.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
}

// withWS resolves the {ws} path value.
func (s *Server) withWS(h func(http.ResponseWriter, *http.Request, *workspace.Workspace)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ws, err := s.m.Serve(r.Context(), r.PathValue("ws"))
		var no *workspace.NotOwnerError
		if errors.As(err, &no) && no.Address != "" {
			// Another server owns the workspace: send the caller there,
			// method and body kept (307).
			w.Header().Set("Location", strings.TrimSuffix(no.Address, "/")+r.URL.RequestURI())
		}
		if err != nil {
			writeError(w, err)
			return
		}
		h(w, r, ws)
	}
}

// decode reads a bounded JSON body into v; unknown fields are refused so a
// misspelt option is an error, not a silent default, and so is a body that
// is not UTF-8: the decoder would turn each bad byte into U+FFFD, and a
// path in it would name another file.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe), errors.Is(err, workspace.ErrRequestTimeout):
		return err
	case err != nil:
		return fmt.Errorf("request body: %w: %v", vfs.ErrInvalid, err)
	}
	if !utf8.Valid(body) {
		return fmt.Errorf("request body: %w: not valid UTF-8 (a name that is not UTF-8 can be reached only by the routes that take a path in the URL)", vfs.ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty body is the zero request
		}
		return fmt.Errorf("request body: %w: %v", vfs.ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("request body: %w: trailing data", vfs.ErrInvalid)
	}
	return nil
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.m.Workspaces())
}

func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request) {
	var req CreateWorkspaceRequest
	if err := s.decode(w, r, s.opts.MaxJSON, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.TokenFile != nil || req.Token != nil {
		writeError(w, errTokenFile)
		return
	}
	if err := tokenByValue(req.ComputerdToken, &req.CreateOptions.ComputerdToken); err != nil {
		writeError(w, err)
		return
	}
	ws, err := s.m.Create(r.Context(), req.CreateOptions)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, ws.Info())
}

// tokenByValue sets *dst to a computerd_token given in a request body
// (nil: absent, *dst unchanged); one present but empty is refused.
func tokenByValue(tok *string, dst *string) error {
	if tok == nil {
		return nil
	}
	if *tok == "" {
		return fmt.Errorf("computerd_token: %w: the token is empty", vfs.ErrInvalid)
	}
	*dst = *tok
	return nil
}

// errTokenFile answers a create request that names a token file (or the
// old "token" field): the server never reads a host path a caller names.
var errTokenFile = fmt.Errorf("%w: token_file and token are not accepted: the server never reads a host path named in a request; send the token itself as computerd_token", vfs.ErrInvalid)

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	writeJSON(w, http.StatusOK, ws.Info())
}

// onRuntime answers with what call returns for the runtime ?runtime=
// names (status): the report as JSON, or the error.
func onRuntime[T any](call func(workspace.Target, context.Context) (T, error)) func(http.ResponseWriter, *http.Request, *workspace.Workspace) {
	return func(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
		v, err := call(target(r, ws), r.Context())
		respond(w, v, err)
	}
}

// syncing is onRuntime for a sync (push, pull), streaming its progress to
// a request that accepts NDJSON (synced).
func syncing[T any](s *Server, call func(workspace.Target, context.Context) (T, error)) func(http.ResponseWriter, *http.Request, *workspace.Workspace) {
	return func(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
		synced(s, w, r, func(ctx context.Context) (T, error) { return call(target(r, ws), ctx) })
	}
}

// tick pulls from every runtime, then pushes to every runtime (synced).
func (s *Server) tick(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	synced(s, w, r, ws.Tick)
}

// target is the runtime ?runtime= names (absent: the default one).
func target(r *http.Request, ws *workspace.Workspace) workspace.Target {
	return ws.On(r.URL.Query().Get("runtime"))
}

// verify answers the convergence verdict; ?repair=1 repairs drift first.
// A request that accepts NDJSON gets it as a stream (synced): a repair's
// progress frames (the pull it may owe first, then the entries it moves),
// a plain verify's result frame alone, since it moves nothing.
func (s *Server) verify(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	t := target(r, ws)
	op := t.Verify
	if v := r.URL.Query().Get("repair"); v == "1" || v == "true" {
		op = t.Repair
	}
	synced(s, w, r, op)
}

func respond(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
