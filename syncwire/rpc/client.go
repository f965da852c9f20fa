package rpc

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// ClientOptions configures a Client.
type ClientOptions struct {
	Config
	// URL is the peer's endpoint (ws://host:port/sync for a wsync peer).
	URL string
	// Token is sent as "Authorization: Bearer <token>".
	Token string
	// HTTPClient dials the upgrade (default http.DefaultClient).
	HTTPClient *http.Client
	// Dial, when set, replaces URL dialing (in-process pipes in tests).
	Dial func(ctx context.Context) (Conn, error)
	// DialTimeout bounds dial plus handshake (default 10s).
	DialTimeout time.Duration
	// OnSession, when set, is told of every session the client opens,
	// once its handshake is done, before any call uses it. It is called
	// with the client's lock held: it must not block or call the Client.
	// Session.Done says when the session ends.
	OnSession func(*Session)
}

// Client holds one session to a peer at a time and redials on the next
// call after the session died.
type Client struct {
	opts ClientOptions

	mu     sync.Mutex
	sess   *Session
	epoch  uint64
	closed bool
	wg     sync.WaitGroup
}

// NewClient returns a client; it dials lazily.
func NewClient(opts ClientOptions) *Client {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	return &Client{opts: opts}
}

// DialWebSocket opens the upgrade to url with a bearer token. A 401 is
// ErrAuth.
func DialWebSocket(ctx context.Context, url, token string, hc *http.Client) (Conn, error) {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("dial %s: %w", url, ErrAuth)
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	return WebSocket(c), nil
}

// Session returns the live session, dialing a new one if there is none or
// the last one died. Its epoch counts sessions: a new epoch means a new
// connection (the driver reconciles watermarks on each).
func (c *Client) Session(ctx context.Context) (*Session, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, fmt.Errorf("%w: client closed", ErrShutdown)
	}
	if c.sess != nil {
		select {
		case <-c.sess.Done():
			c.sess = nil
		default:
			return c.sess, c.epoch, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	var conn Conn
	var err error
	if c.opts.Dial != nil {
		conn, err = c.opts.Dial(dctx)
	} else {
		conn, err = DialWebSocket(dctx, c.opts.URL, c.opts.Token, c.opts.HTTPClient)
	}
	if err != nil {
		return nil, 0, err
	}
	sess := NewSession(conn, true, c.opts.Config, nil)
	if err := sess.Handshake(dctx); err != nil {
		return nil, 0, err
	}
	metricSessions.WithLabelValues("client").Inc()
	if c.opts.OnSession != nil {
		c.opts.OnSession(sess)
	}
	c.wg.Go(func() { sess.Serve(context.Background()) })
	c.sess = sess
	c.epoch++
	return sess, c.epoch, nil
}

// Current returns the session the client holds, live or ended, without
// dialling (nil before the first dial or after Close).
func (c *Client) Current() *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

// Close ends the session and waits for its goroutines.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	sess := c.sess
	c.sess = nil
	c.mu.Unlock()
	if sess != nil {
		sess.Close()
	}
	c.wg.Wait()
	return nil
}

// Call makes a unary call of method m on the current session (redialling
// if it died).
func (c *Client) Call(ctx context.Context, m Method, body []byte) ([]byte, error) {
	s, _, err := c.Session(ctx)
	if err != nil {
		return nil, err
	}
	return s.Call(ctx, m, body)
}

// Open opens a call of method m on the current session (redialling if it
// died); see Session.Open.
func (c *Client) Open(ctx context.Context, m Method, body []byte, stream bool) (*Outgoing, error) {
	s, _, err := c.Session(ctx)
	if err != nil {
		return nil, err
	}
	return s.Open(ctx, m, body, stream)
}

// WireCounter accumulates the frame bytes of the calls made under a
// context carrying it (WithWireCounter).
type WireCounter struct{ In, Out atomic.Int64 }

type wireKey struct{}

// WithWireCounter returns ctx carrying wc: every call counted under it
// (CountWire) adds its frame bytes to wc.
func WithWireCounter(ctx context.Context, wc *WireCounter) context.Context {
	return context.WithValue(ctx, wireKey{}, wc)
}

// CountWire adds the frame bytes call o moved to the WireCounter ctx
// carries, if any. An operation that accounts its calls (syncwire's sync
// calls) runs it once the call is closed.
func CountWire(ctx context.Context, o *Outgoing) {
	if wc, ok := ctx.Value(wireKey{}).(*WireCounter); ok {
		in, out := o.WireBytes()
		wc.In.Add(in)
		wc.Out.Add(out)
	}
}
