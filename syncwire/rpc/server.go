package rpc

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/wsync/wsync/internal/bearer"
)

// ServerOptions configures a Server.
type ServerOptions struct {
	Config
	// Token is the bearer token every upgrade must carry. Empty disables
	// authentication (loopback-only deployments; the caller decides).
	Token string
	// HandshakeTimeout bounds the HELLO exchange (default 10s).
	HandshakeTimeout time.Duration
}

// Server accepts sessions, on HTTP upgrades (ServeHTTP) or on any Conn
// (ServeConn), and serves the methods registered with Handle on each.
type Server struct {
	opts  ServerOptions
	token bearer.Token

	mu      sync.RWMutex
	methods map[Method]Handler
	ended   []func(*Session)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewServer returns a server with no methods.
func NewServer(opts ServerOptions) *Server {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	opts.Config = opts.Config.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{opts: opts, token: bearer.New(opts.Token), methods: map[Method]Handler{}, ctx: ctx, cancel: cancel}
}

// Handle registers h for method m. Handlers may be registered while
// sessions run; a method registered twice panics.
func (s *Server) Handle(m Method, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.methods[m]; dup {
		panic(fmt.Sprintf("rpc: method %d registered twice", m))
	}
	s.methods[m] = h
}

// OnSessionEnd registers fn to run once a session has ended and every
// handler of its calls has returned: where a protocol releases the state
// it keeps per session (syncwire's staged chunks).
func (s *Server) OnSessionEnd(fn func(*Session)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = append(s.ended, fn)
}

func (s *Server) handler(m Method) Handler {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.methods[m]
}

// Close ends every session and waits for them.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// ServeHTTP upgrades GET requests carrying the right bearer token and
// serves the session until it ends. Refusals are opaque: 401 with a fixed
// body whatever was wrong.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !s.token.Check(r) {
		metricRejected.WithLabelValues("auth").Inc()
		s.opts.Logger.Info("upgrade refused", "remote", r.RemoteAddr, "reason", "unauthorized")
		w.Header().Set("WWW-Authenticate", `Bearer realm="wsync"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.opts.Logger.Info("upgrade failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	s.ServeConn(r.Context(), WebSocket(c))
}

// ServeConn runs one session on conn until it ends.
func (s *Server) ServeConn(ctx context.Context, conn Conn) error {
	s.wg.Add(1)
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	sess := NewSession(conn, false, s.opts.Config, s.handler)
	defer s.sessionEnded(sess)
	hctx, hcancel := context.WithTimeout(ctx, s.opts.HandshakeTimeout)
	err := sess.Handshake(hctx)
	hcancel()
	if err != nil {
		metricRejected.WithLabelValues(CodeOf(err).String()).Inc()
		s.opts.Logger.Info("handshake failed", "err", err)
		return err
	}
	metricSessions.WithLabelValues("server").Inc()
	log := s.opts.Logger.With("peer_id", sess.Peer().ID, "peer_runtime", sess.Peer().RuntimeID)
	log.Debug("session open", "version", sess.Local().Version)
	err = sess.Serve(ctx)
	log.Debug("session closed", "err", err)
	return err
}

// Pipe serves a session on one end of a new Pipe and returns both ends: a
// Client joins s in the same process by returning client from its
// ClientOptions.Dial (tests, a peer embedded in one binary). Close waits
// for the session.
func (s *Server) Pipe() (client, server *PipeConn) {
	client, server = Pipe()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.ServeConn(context.Background(), server)
	}()
	return client, server
}

func (s *Server) sessionEnded(sess *Session) {
	s.mu.RLock()
	ended := s.ended
	s.mu.RUnlock()
	for _, fn := range ended {
		fn(sess)
	}
}
