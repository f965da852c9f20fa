package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
)

// ClientOptions configures a Client.
type ClientOptions struct {
	Config
	// URL is the peer's sync endpoint, ws://host:port/sync.
	URL string
	// Token is sent as "Authorization: Bearer <token>".
	Token string
	// HTTPClient dials the upgrade (default http.DefaultClient).
	HTTPClient *http.Client
	// Dial, when set, replaces URL dialing (in-process pipes in tests).
	Dial func(ctx context.Context) (Conn, error)
	// DialTimeout bounds dial plus handshake (default 10s).
	DialTimeout time.Duration
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
	c.wg.Go(func() { sess.Serve(context.Background()) })
	c.sess = sess
	c.epoch++
	return sess, c.epoch, nil
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
// if it died): for methods other packages register with Server.Handle.
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

// WithWireCounter makes every call opened under ctx add its frame bytes
// to wc when it closes.
func WithWireCounter(ctx context.Context, wc *WireCounter) context.Context {
	return context.WithValue(ctx, wireKey{}, wc)
}

func countWire(ctx context.Context, o *Outgoing) {
	if wc, ok := ctx.Value(wireKey{}).(*WireCounter); ok {
		in, out := o.WireBytes()
		wc.In.Add(in)
		wc.Out.Add(out)
	}
}

// open is Open plus wire accounting at close.
func (s *Session) open(ctx context.Context, m Method, body []byte, stream bool) (*Outgoing, func(), error) {
	o, err := s.Open(ctx, m, body, stream)
	if err != nil {
		return nil, nil, err
	}
	return o, func() { o.Close(); countWire(ctx, o) }, nil
}

// Watermarks asks the peer for its rev and the watermarks it keeps for us.
func (s *Session) Watermarks(ctx context.Context) (PeerState, error) {
	o, done, err := s.open(ctx, MethodWatermarks, nil, false)
	if err != nil {
		return PeerState{}, err
	}
	defer done()
	b, err := o.Reply(ctx)
	if err != nil {
		return PeerState{}, fmt.Errorf("watermarks: %w", err)
	}
	return DecodePeerState(b)
}

// HasObjects returns the subset of hs the peer holds, in input order.
// Longer lists are split into requests of MaxHashes.
func (s *Session) HasObjects(ctx context.Context, hs []chunkstore.Hash) ([]chunkstore.Hash, error) {
	var have []chunkstore.Hash
	for len(hs) > 0 {
		n := min(len(hs), MaxHashes)
		part := hs[:n]
		hs = hs[n:]
		o, done, err := s.open(ctx, MethodHasObjects, AppendHashes(nil, part), false)
		if err != nil {
			return nil, err
		}
		b, err := o.Reply(ctx)
		done()
		if err != nil {
			return nil, fmt.Errorf("has objects: %w", err)
		}
		bits, err := DecodeBitmap(b, len(part))
		if err != nil {
			return nil, fmt.Errorf("has objects: %w", err)
		}
		for i, ok := range bits {
			if ok {
				have = append(have, part[i])
			}
		}
	}
	return have, nil
}

// FetchObjects streams the chunks named by hs from the peer, in order,
// calling fn for each. It checks that the peer sends exactly what was asked,
// in order; fn must verify the bytes against the hash (staging does).
func (s *Session) FetchObjects(ctx context.Context, hs []chunkstore.Hash, fn func(Object) error) error {
	for len(hs) > 0 {
		n := min(len(hs), MaxHashes)
		part := hs[:n]
		hs = hs[n:]
		if err := s.fetchObjects(ctx, part, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s *Session) fetchObjects(ctx context.Context, hs []chunkstore.Hash, fn func(Object) error) error {
	if err := noHoles("fetch objects", hs); err != nil {
		return err
	}
	o, done, err := s.open(ctx, MethodFetchObjects, AppendHashes(nil, hs), false)
	if err != nil {
		return err
	}
	defer done()
	// Each object must be the next one asked for, at most a chunk: the
	// answer decodes to at most len(hs) chunks, one at a time.
	q := newObjectQueue("fetch objects", hs)
	for {
		p, err := o.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("fetch objects: %w", err)
		}
		if err := DecodeObjectsFunc(p, q.check, fn); err != nil {
			return fmt.Errorf("fetch objects: %w", err)
		}
	}
	return q.finish()
}

// ObjectStats counts what an object transfer moved.
type ObjectStats struct {
	Chunks    int
	RawBytes  int64 // chunk bytes before compression
	WireBytes int64 // chunk bytes as sent (after compression)
}

// PushObjects streams the chunks named by hs (read with read) into stage
// on the peer, for the Push that names the same stage. Each call announces
// the hashes it sends (at most MaxHashes; longer lists take
// several calls into the same stage).
func (s *Session) PushObjects(ctx context.Context, stage uint64, hs []chunkstore.Hash,
	read func(context.Context, chunkstore.Hash) ([]byte, error)) (ObjectStats, error) {
	var st ObjectStats
	if err := noHoles("push objects", hs); err != nil {
		return st, err
	}
	for len(hs) > 0 {
		n := min(len(hs), MaxHashes)
		if err := s.pushObjects(ctx, stage, hs[:n], read, &st); err != nil {
			return st, err
		}
		hs = hs[n:]
	}
	return st, nil
}

func (s *Session) pushObjects(ctx context.Context, stage uint64, hs []chunkstore.Hash,
	read func(context.Context, chunkstore.Hash) ([]byte, error), total *ObjectStats) error {
	var st ObjectStats
	o, done, err := s.open(ctx, MethodPushObjects, PushObjectsRequest{Stage: stage, Hashes: hs}.appendTo(nil), true)
	if err != nil {
		return err
	}
	defer done()
	err = sendObjects(ctx, o.Send, hs, read, func(raw, wire int) {
		st.Chunks++
		st.RawBytes += int64(raw)
		st.WireBytes += int64(wire)
	})
	if err == nil {
		err = o.CloseSend()
	}
	if err != nil {
		// The peer may have refused the stream (a hash mismatch): its
		// error is the one to report.
		if _, rerr := o.Reply(ctx); rerr != nil {
			err = rerr
		}
		return fmt.Errorf("push objects: %w", err)
	}
	b, err := o.Reply(ctx)
	if err != nil {
		return fmt.Errorf("push objects: %w", err)
	}
	resp, err := DecodePushObjectsResponse(b)
	if err != nil {
		return fmt.Errorf("push objects: %w", err)
	}
	if resp.Chunks != int64(st.Chunks) || resp.Bytes != st.RawBytes {
		return protoErr("push objects: peer staged %d chunks (%d bytes), we sent %d (%d bytes)", resp.Chunks, resp.Bytes, st.Chunks, st.RawBytes)
	}
	total.Chunks += st.Chunks
	total.RawBytes += st.RawBytes
	total.WireBytes += st.WireBytes
	return nil
}

// Push sends one batch of entries; the peer applies it atomically.
func (s *Session) Push(ctx context.Context, req PushRequest, entries []vfs.ChangeEntry) (PushResponse, error) {
	body, err := req.appendTo(nil)
	if err != nil {
		return PushResponse{}, err
	}
	o, done, err := s.open(ctx, MethodPush, body, true)
	if err != nil {
		return PushResponse{}, err
	}
	defer done()
	err = SendEntries(ctx, o.Send, func(yield func(vfs.ChangeEntry, error) bool) {
		for _, en := range entries {
			if !yield(en, nil) {
				return
			}
		}
	})
	if err == nil {
		err = o.CloseSend()
	}
	b, rerr := o.Reply(ctx)
	if rerr != nil {
		return PushResponse{}, fmt.Errorf("push: %w", rerr)
	}
	if err != nil {
		return PushResponse{}, fmt.Errorf("push: %w", err)
	}
	return DecodePushResponse(b)
}

// ChangeStream is an open FetchChanges: its head, then entries.
type ChangeStream struct {
	FetchResponse
	o    *Outgoing
	done func()
	buf  []vfs.ChangeEntry
	eof  bool
	dec  EntryDecoder
}

// FetchChanges opens the peer's feed.
func (s *Session) FetchChanges(ctx context.Context, req FetchRequest) (*ChangeStream, error) {
	body, err := req.appendTo(nil)
	if err != nil {
		return nil, err
	}
	o, done, err := s.open(ctx, MethodFetchChanges, body, false)
	if err != nil {
		return nil, err
	}
	b, err := o.Reply(ctx)
	if err != nil {
		done()
		return nil, fmt.Errorf("fetch changes: %w", err)
	}
	head, err := DecodeFetchResponse(b)
	if err != nil {
		done()
		return nil, fmt.Errorf("fetch changes: %w", err)
	}
	return &ChangeStream{FetchResponse: head, o: o, done: done}, nil
}

// Next returns up to max entries; io.EOF once the stream ended cleanly and
// everything was returned. Only one message is decoded ahead.
func (cs *ChangeStream) Next(ctx context.Context, max int) ([]vfs.ChangeEntry, error) {
	var out []vfs.ChangeEntry
	for len(out) < max {
		if len(cs.buf) > 0 {
			n := min(max-len(out), len(cs.buf))
			out = append(out, cs.buf[:n]...)
			cs.buf = cs.buf[n:]
			continue
		}
		if cs.eof {
			break
		}
		p, err := cs.o.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if err := cs.dec.Finish(); err != nil {
				return nil, fmt.Errorf("fetch changes: %w", err)
			}
			cs.eof = true
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fetch changes: %w", err)
		}
		if cs.buf, err = cs.dec.Decode(p); err != nil {
			return nil, fmt.Errorf("fetch changes: %w", err)
		}
	}
	if len(out) == 0 && cs.eof {
		return nil, io.EOF
	}
	return out, nil
}

// Close releases the stream (cancelling it at the peer if unfinished).
func (cs *ChangeStream) Close() { cs.done() }
