package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Session. The zero value is usable.
type Config struct {
	Logger *slog.Logger
	// PingInterval is how often the session pings its peer (default 10s).
	PingInterval time.Duration
	// PingTimeout is the grace window: a peer that does not answer a ping,
	// or does not take a frame we write, within it fails the session
	// (default 20s).
	PingTimeout time.Duration
	// CallTimeout is the deadline of a call whose context has none
	// (default 5m). It travels in the CALL frame so the callee stops too.
	CallTimeout time.Duration
	// Window is the credit, in bytes, each stream this side receives starts
	// with and never exceeds (default 4 MiB; at least one full frame).
	Window int
	// MaxCalls is how many of the peer's calls this side serves at once
	// (default 64). The peer learns it in the handshake and queues beyond it.
	MaxCalls int
	// Features are advertised in the handshake.
	Features []string
	// ID identifies this side in the handshake (Hello.ID). It is opaque
	// here; syncwire puts the store id in it.
	ID string
	// MinVersion and MaxVersion override the protocol versions this side
	// speaks (zero: ProtocolMinVersion..ProtocolMaxVersion). For tests.
	MinVersion, MaxVersion uint32
}

const (
	defaultPingInterval = 10 * time.Second
	defaultPingTimeout  = 20 * time.Second
	defaultCallTimeout  = 5 * time.Minute
	defaultWindow       = 4 << 20
	defaultMaxCalls     = 64
	// frameCost is what one DATA frame costs in credit beyond its payload,
	// so empty messages are not free.
	frameCost = 64
	minWindow = MaxFrameSize + frameCost
	maxWindow = 1 << 30
)

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.PingInterval <= 0 {
		c.PingInterval = defaultPingInterval
	}
	if c.PingTimeout <= 0 {
		c.PingTimeout = defaultPingTimeout
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = defaultCallTimeout
	}
	if c.Window <= 0 {
		c.Window = defaultWindow
	}
	c.Window = min(max(c.Window, minWindow), maxWindow)
	if c.MaxCalls <= 0 {
		c.MaxCalls = defaultMaxCalls
	}
	c.MaxCalls = min(c.MaxCalls, maxCallsLimit)
	if c.MinVersion == 0 && c.MaxVersion == 0 {
		c.MinVersion, c.MaxVersion = ProtocolMinVersion, ProtocolMaxVersion
	}
	return c
}

// Method names a call. Each protocol on a session owns a range: sync below
// 256 (syncwire), exec 256..511, convergence 512..767 (Server.Handle).
type Method uint32

// Handler serves one incoming call. It reads the request body and stream
// from c and answers with c.Reply or c.ReplyStream and c.Send. Returning an
// error sends it to the caller as a typed error; returning nil without a
// reply sends an empty reply.
type Handler func(ctx context.Context, c *Incoming) error

// Session is one connection between two peers: calls in both directions,
// each with optional request and response streams under credit-based flow
// control. Create it with NewSession, run Handshake, then Serve.
type Session struct {
	conn    Conn
	cfg     Config
	client  bool // we allocate odd call ids
	handler func(m Method) Handler
	log     *slog.Logger

	local, peer Hello

	ctx    context.Context // session lifetime; cancelled when it fails
	cancel context.CancelFunc

	mu  sync.Mutex
	out map[uint64]*Outgoing
	in  map[uint64]*Incoming
	// inCalls counts the peer's calls that hold one of our MaxCalls slots:
	// from their CALL until we write their final frame (REPLY without a
	// stream, END or ERROR) or read their CANCEL. The caller frees its slot
	// only after it read that final frame or wrote that CANCEL, so both
	// sides agree and an honest peer never exceeds MaxCalls.
	inCalls int
	// stopping counts the peer's cancelled calls whose handlers still run.
	stopping int
	busy     chan uint64 // calls refused with EBUSY, answered by busyWriter
	nextID   uint64
	err      error
	done     chan struct{}
	slots    chan struct{} // bounds our calls in flight to the peer's MaxCalls

	handlers sync.WaitGroup
	closing  sync.WaitGroup // the conn.Close in flight

	stats sessionStats
}

type sessionStats struct {
	bytesIn, bytesOut   atomic.Int64
	framesIn, framesOut atomic.Int64
	buffered            atomic.Int64 // bytes queued in receive buffers now
	bufferedPeak        atomic.Int64
	blocked             atomic.Int64 // senders waiting for credit now
}

// Stats are a session's counters.
type Stats struct {
	BytesIn, BytesOut   int64
	FramesIn, FramesOut int64
	// Buffered is the bytes of stream messages received and not yet
	// consumed; BufferedPeak its high-water mark. Flow control bounds both
	// by Window per stream.
	Buffered, BufferedPeak int64
	// BlockedSenders is how many stream senders wait for credit right now.
	BlockedSenders int64
}

// NewSession wraps conn. client decides which half of the call-id space
// this side allocates (the dialing side is the client). handler resolves
// the peer's calls; nil serves none.
func NewSession(conn Conn, client bool, cfg Config, handler func(Method) Handler) *Session {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		conn:    conn,
		cfg:     cfg,
		client:  client,
		handler: handler,
		log:     cfg.Logger,
		ctx:     ctx,
		cancel:  cancel,
		out:     make(map[uint64]*Outgoing),
		in:      make(map[uint64]*Incoming),
		done:    make(chan struct{}),
		busy:    make(chan uint64, maxBusyQueue),
	}
	if client {
		s.nextID = 1
	} else {
		s.nextID = 2
	}
	return s
}

// Peer is the peer's handshake (valid after Handshake).
func (s *Session) Peer() Hello { return s.peer }

// Local is our handshake, with the negotiated version.
func (s *Session) Local() Hello { return s.local }

// Done is closed when the session has failed or been closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended (nil while it runs).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Stats returns the session's counters.
func (s *Session) Stats() Stats {
	return Stats{
		BytesIn: s.stats.bytesIn.Load(), BytesOut: s.stats.bytesOut.Load(),
		FramesIn: s.stats.framesIn.Load(), FramesOut: s.stats.framesOut.Load(),
		Buffered: s.stats.buffered.Load(), BufferedPeak: s.stats.bufferedPeak.Load(),
		BlockedSenders: s.stats.blocked.Load(),
	}
}

// Close ends the session; in-flight calls fail with ErrShutdown.
func (s *Session) Close() error {
	s.fail(fmt.Errorf("%w: session closed", ErrShutdown))
	return nil
}

// shutdownError is how in-flight calls learn the session died: it is
// ErrShutdown and also whatever caused it (ErrProtocol, ErrAuth...).
type shutdownError struct{ cause error }

func (e *shutdownError) Error() string {
	if errors.Is(e.cause, ErrShutdown) {
		return e.cause.Error()
	}
	return "session shut down: " + e.cause.Error()
}
func (e *shutdownError) Unwrap() []error { return []error{ErrShutdown, e.cause} }

func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	close(s.done)
	out, in := s.out, s.in
	s.out, s.in = map[uint64]*Outgoing{}, map[uint64]*Incoming{}
	// The close is counted before the lock is released: a later fail (the
	// one Serve makes when its read loop ends) takes the lock after this,
	// so Serve's wait for closing always sees it.
	s.closing.Add(1)
	s.mu.Unlock()
	s.cancel()
	// Closing a WebSocket waits for the peer's close frame (up to a few
	// seconds for a silent peer); in-flight calls must not wait for that.
	go func() {
		defer s.closing.Done()
		s.conn.Close(err)
	}()
	serr := &shutdownError{cause: err}
	for _, o := range out {
		o.finish(serr)
	}
	for _, c := range in {
		c.abort(serr)
	}
	metricSessionsEnded.WithLabelValues(CodeOf(err).String()).Inc()
}

// Serve runs the session until it fails, the peer goes away or ctx ends.
// It returns once every goroutine it started (reader, pinger, handlers) has
// exited, with the reason the session ended.
func (s *Session) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.fail(fmt.Errorf("%w: %v", ErrShutdown, context.Cause(ctx))) })
	defer stop()
	var wg sync.WaitGroup
	wg.Go(s.pinger)
	wg.Go(s.busyWriter)
	err := s.readLoop()
	s.fail(err)
	wg.Wait()
	s.handlers.Wait()
	s.closing.Wait()
	return s.Err()
}

func (s *Session) pinger() {
	t := time.NewTicker(s.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PingTimeout)
		err := s.conn.Ping(ctx)
		cancel()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			metricWatchdog.Inc()
			s.fail(fmt.Errorf("%w: peer silent for %v (ping: %v)", ErrShutdown, s.cfg.PingTimeout, err))
			return
		}
	}
}

func (s *Session) readLoop() error {
	for {
		// Not under s.ctx: cancelling a WebSocket read tears the socket
		// down before our close frame (with its reason) is written. Close
		// ends the read instead.
		b, err := s.conn.ReadMessage(context.Background())
		if err != nil {
			if s.ctx.Err() != nil {
				return fmt.Errorf("%w: session closed", ErrShutdown)
			}
			return err
		}
		s.stats.bytesIn.Add(int64(len(b)))
		s.stats.framesIn.Add(1)
		metricBytesIn.Add(float64(len(b)))
		f, err := DecodeFrame(b)
		if err != nil {
			return err
		}
		if err := s.dispatch(f, len(b)); err != nil {
			return err
		}
	}
}

// ours reports whether id is a call this side opened.
func (s *Session) ours(id uint64) bool { return (id%2 == 1) == s.client }

// dispatch routes one frame. It never blocks on the network: stream
// messages land in credit-bounded queues and calls start goroutines.
func (s *Session) dispatch(f Frame, size int) error {
	if f.Type == FrameHello {
		return protoErr("HELLO after the handshake")
	}
	if f.Type == FrameError && f.ID == 0 {
		code, msg, err := decodeError(f.Payload)
		if err != nil {
			return err
		}
		return &RemoteError{Code: code, Msg: msg}
	}
	if s.ours(f.ID) {
		s.mu.Lock()
		o := s.out[f.ID]
		s.mu.Unlock()
		if o == nil {
			return nil // a call we already finished or abandoned
		}
		o.bytesIn.Add(int64(size))
		return o.handle(f)
	}
	if f.Type == FrameCall {
		return s.startIncoming(f, size)
	}
	s.mu.Lock()
	c := s.in[f.ID]
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	c.bytesIn.Add(int64(size))
	return c.handle(f)
}

// writeFrame sends one frame. The socket write runs under the session's
// context with the grace window as deadline, never under a caller's
// context: abandoning a call must not tear down the connection.
func (s *Session) writeFrame(f Frame, acct *atomic.Int64) error {
	bp := framePool.Get().(*[]byte)
	defer framePool.Put(bp)
	b, err := AppendFrame((*bp)[:0], f)
	*bp = b
	if err != nil {
		return err
	}
	select {
	case <-s.done:
		return &shutdownError{cause: s.Err()}
	default:
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PingTimeout)
	defer cancel()
	if err := s.conn.WriteMessage(ctx, b); err != nil {
		if errors.Is(err, ErrProtocol) {
			s.fail(err)
		} else {
			s.fail(fmt.Errorf("%w: write: %v", ErrShutdown, err))
		}
		return &shutdownError{cause: s.Err()}
	}
	s.stats.bytesOut.Add(int64(len(b)))
	s.stats.framesOut.Add(1)
	metricBytesOut.Add(float64(len(b)))
	if acct != nil {
		acct.Add(int64(len(b)))
	}
	return nil
}

var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func encodeError(err error) []byte {
	var e Encoder
	e.PutUvarint(uint64(CodeOf(err)))
	e.PutString(errMessage(err))
	return e.Bytes()
}

func decodeError(p []byte) (Code, string, error) {
	d := NewDecoder(p)
	code := Code(d.Bounded("error code", 0xffff))
	msg := d.UTF8("error message", maxErrMsg)
	return code, msg, d.Done()
}

// Open starts a call of method m with a request body. With stream, a
// request stream follows: Send messages, then CloseSend. The returned call
// must be closed. The call ends when ctx does; when ctx has no deadline the
// session's CallTimeout applies.
func (s *Session) Open(ctx context.Context, m Method, body []byte, stream bool) (*Outgoing, error) {
	if err := s.acquireSlot(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	if _, ok := ctx.Deadline(); !ok {
		cctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
	}
	var timeout time.Duration
	if dl, ok := cctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	o := &Outgoing{
		s:      s,
		method: m,
		ctx:    cctx,
		cancel: cancel,
		replyc: make(chan struct{}),
		resp:   newRecvQueue(s),

		cancelled: make(chan struct{}),
	}
	if stream {
		o.send = newSendCredit(int(s.peer.Window), &s.stats.blocked)
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		s.releaseSlot()
		cancel()
		return nil, &shutdownError{cause: err}
	}
	o.id = s.nextID
	s.nextID += 2
	s.out[o.id] = o
	s.mu.Unlock()
	o.resp.id = o.id

	var e Encoder
	e.PutUvarint(uint64(m))
	e.PutUvarint(uint64(timeout / time.Millisecond))
	e.PutFixed(body)
	var flags uint8
	if stream {
		flags = FlagStream
	}
	if err := s.writeFrame(Frame{Type: FrameCall, Flags: flags, ID: o.id, Payload: e.Bytes()}, &o.bytesOut); err != nil {
		o.finish(err)
		o.Close()
		return nil, err
	}
	o.stopWatch = context.AfterFunc(cctx, func() {
		o.abandon(fmt.Errorf("call %d: %w", m, context.Cause(cctx)))
	})
	metricCalls.WithLabelValues("out").Inc()
	return o, nil
}

// Call is a unary call: a request body in, a response body out.
func (s *Session) Call(ctx context.Context, m Method, body []byte) ([]byte, error) {
	o, err := s.Open(ctx, m, body, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return o.Reply(ctx)
}

func (s *Session) acquireSlot(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-s.done:
		return &shutdownError{cause: s.Err()}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Session) releaseSlot() { <-s.slots }

func (s *Session) removeOut(id uint64, release bool) {
	s.mu.Lock()
	delete(s.out, id)
	s.mu.Unlock()
	if release {
		s.releaseSlot()
	}
}

// Outgoing is a call this side opened.
type Outgoing struct {
	s         *Session
	id        uint64
	method    Method
	ctx       context.Context
	cancel    context.CancelFunc
	stopWatch func() bool

	send *sendCredit // request stream credit; nil without a request stream
	resp *recvQueue  // response stream

	mu     sync.Mutex
	state  callState
	replyc chan struct{} // closed when the call leaves callWaiting
	// cancelled is closed once an abandon has written the CANCEL.
	cancelled   chan struct{}
	replyBody   []byte
	replyStream bool
	err         error // the call's final error

	bytesIn, bytesOut atomic.Int64
}

// callState is where an outgoing call stands (under Outgoing.mu). It only
// moves forward:
//
//	callWaiting   -> callStreaming         REPLY with a response stream
//	callWaiting   -> callReplied           REPLY without one
//	callWaiting   -> callFailed            ERROR, session failure, CALL not written
//	callStreaming -> callReplied           END, ERROR or session failure
//	callWaiting   -> callAbandoned         abandon (context done, Close)
//	callStreaming -> callAbandonedReplied  abandon
//
// The last four states are final. Leaving callWaiting closes replyc; a
// final state ends the streams and frees the call's slot, except that an
// abandoned call holds its slot until its CANCEL is written.
type callState uint8

const (
	callWaiting          callState = iota // CALL written, no REPLY yet
	callStreaming                         // REPLY read, response stream running
	callReplied                           // ended after its REPLY
	callFailed                            // ended without a REPLY
	callAbandoned                         // cancelled by us before a REPLY
	callAbandonedReplied                  // cancelled by us after the REPLY
)

// final reports whether the call has ended.
func (st callState) final() bool { return st >= callReplied }

// gotReply reports whether a REPLY arrived: Reply returns its body.
func (st callState) gotReply() bool {
	return st == callStreaming || st == callReplied || st == callAbandonedReplied
}

// abandoned reports whether we cancelled the call: the callee's answer may
// cross our CANCEL on the wire, so its late frames are dropped.
func (st callState) abandoned() bool { return st == callAbandoned || st == callAbandonedReplied }

// ID is the call id.
func (o *Outgoing) ID() uint64 { return o.id }

// WireBytes are the frame bytes this call moved in each direction.
func (o *Outgoing) WireBytes() (in, out int64) { return o.bytesIn.Load(), o.bytesOut.Load() }

// handle takes a frame the callee sent on this call (reader goroutine).
// A call abandoned between the reader's lookup and here is already
// finished: its late frames are dropped, as they would be after
// removeOut, never taken for a peer's protocol error (the CANCEL and the
// answer cross on the wire).
func (o *Outgoing) handle(f Frame) error {
	switch f.Type {
	case FrameReply:
		o.mu.Lock()
		if st := o.state; st != callWaiting {
			o.mu.Unlock()
			if st.abandoned() {
				return nil
			}
			return protoErr("call %d: second REPLY", o.id)
		}
		o.replyBody = f.Payload
		o.replyStream = f.Flags&FlagStream != 0
		if !o.replyStream {
			o.endLocked(nil, false) // a REPLY without a stream ends the call
			return nil
		}
		o.state = callStreaming
		close(o.replyc)
		o.mu.Unlock()
	case FrameError:
		code, msg, err := decodeError(f.Payload)
		if err != nil {
			return err
		}
		o.finish(&RemoteError{Code: code, Msg: msg})
	case FrameData, FrameEnd:
		o.mu.Lock()
		ok := o.replyStream || o.state.abandoned()
		o.mu.Unlock()
		if !ok {
			return protoErr("call %d: %s without a response stream", o.id, f.Type)
		}
		if f.Type == FrameData {
			return o.resp.push(f.Payload)
		}
		o.finish(nil)
	case FrameCredit:
		if o.send == nil {
			return protoErr("call %d: CREDIT without a request stream", o.id)
		}
		return o.send.grant(f.Payload)
	default:
		return protoErr("call %d: unexpected %s", o.id, f.Type)
	}
	return nil
}

// finish ends the call unless it has ended: err nil is a clean end (a
// REPLY without a stream, or END of the response stream). It frees the
// call's slot.
func (o *Outgoing) finish(err error) {
	o.mu.Lock()
	o.endLocked(err, false)
}

// endLocked moves a live call to its final state (abandon: an abandoned
// one, which keeps its slot for abandon to free after the CANCEL) and ends
// its streams. It is called with o.mu held and releases it; it reports
// whether the call was still live.
func (o *Outgoing) endLocked(err error, abandon bool) bool {
	from := o.state
	if from.final() {
		o.mu.Unlock()
		return false
	}
	switch {
	case abandon && from == callWaiting:
		o.state = callAbandoned
	case abandon:
		o.state = callAbandonedReplied
	case from == callStreaming || err == nil:
		// From callWaiting, only a REPLY ends a call without an error.
		o.state = callReplied
	default:
		o.state = callFailed
	}
	o.err = err
	if from == callWaiting {
		close(o.replyc)
	}
	o.mu.Unlock()
	o.resp.end(err)
	if o.send != nil {
		if err == nil {
			err = errCallDone
		}
		o.send.close(err)
	}
	o.s.removeOut(o.id, !abandon)
	return true
}

var errCallDone = errors.New("call already answered")

// abandon cancels the call locally and tells the callee. The call's slot
// is freed only once the CANCEL is written: the callee frees its own when
// it reads the CANCEL, so a CALL we open in the freed slot always reaches
// the callee after the CANCEL that makes room for it.
//
// The context's watcher and the caller's own wait both abandon a call
// whose context ends; the one that loses returns only once the other has
// written the CANCEL, so whatever this side sends after the call returned
// (the next CALL above all) follows the CANCEL on the wire.
func (o *Outgoing) abandon(err error) {
	o.mu.Lock()
	if !o.endLocked(err, true) {
		o.mu.Lock()
		abandoned := o.state.abandoned()
		o.mu.Unlock()
		if abandoned {
			<-o.cancelled
		}
		return
	}
	o.s.writeFrame(Frame{Type: FrameCancel, ID: o.id}, &o.bytesOut)
	o.s.releaseSlot()
	close(o.cancelled)
}

// Send sends one message on the request stream, waiting for credit.
func (o *Outgoing) Send(ctx context.Context, p []byte) error {
	if o.send == nil {
		return fmt.Errorf("call %d: no request stream", o.id)
	}
	if err := o.send.take(ctx, o.ctx, len(p)+frameCost); err != nil {
		return o.sendErr(err)
	}
	return o.s.writeFrame(Frame{Type: FrameData, ID: o.id, Payload: p}, &o.bytesOut)
}

// sendErr prefers the callee's error (it refused the request) over the
// local "call already answered".
func (o *Outgoing) sendErr(err error) error {
	if errors.Is(err, errCallDone) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.err != nil {
			return o.err
		}
	}
	return err
}

// CloseSend ends the request stream.
func (o *Outgoing) CloseSend() error {
	if o.send == nil {
		return nil
	}
	if err := o.send.close(errStreamClosed); err != nil {
		return o.sendErr(err)
	}
	return o.s.writeFrame(Frame{Type: FrameEnd, ID: o.id}, &o.bytesOut)
}

var errStreamClosed = errors.New("stream closed")

// Reply waits for the response body.
func (o *Outgoing) Reply(ctx context.Context) ([]byte, error) {
	select {
	case <-o.replyc:
	case <-ctx.Done():
		o.abandon(ctx.Err())
		return nil, ctx.Err()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.state.gotReply() {
		return nil, o.err
	}
	return o.replyBody, nil
}

// Recv returns the next response-stream message; io.EOF after a clean end.
func (o *Outgoing) Recv(ctx context.Context) ([]byte, error) {
	if _, err := o.Reply(ctx); err != nil {
		return nil, err
	}
	o.mu.Lock()
	stream := o.replyStream
	o.mu.Unlock()
	if !stream {
		return nil, io.EOF
	}
	p, err := o.resp.recv(ctx)
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() != nil {
		o.abandon(err)
	}
	return p, err
}

// Close releases the call, cancelling it at the callee if it is still
// running.
func (o *Outgoing) Close() {
	o.abandon(fmt.Errorf("call %d: %w", o.id, context.Canceled))
	if o.stopWatch != nil {
		o.stopWatch()
	}
	o.cancel()
}

// startIncoming opens a call the peer made (reader goroutine).
func (s *Session) startIncoming(f Frame, size int) error {
	d := NewDecoder(f.Payload)
	m := Method(d.Bounded("method", 1<<32-1))
	timeoutMS := d.Bounded("timeout", uint64(24*time.Hour/time.Millisecond))
	if err := d.Err(); err != nil {
		return err
	}
	body := d.Rest()
	s.mu.Lock()
	if _, dup := s.in[f.ID]; dup {
		s.mu.Unlock()
		return protoErr("CALL %d: id in use", f.ID)
	}
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	if s.inCalls >= s.cfg.MaxCalls || s.stopping >= maxStopping(s.cfg.MaxCalls) {
		// Over the limit (a peer that does not count as we do, or handlers
		// slow to stop after a CANCEL): refuse this call, keep the session.
		calls, stopping := s.inCalls, s.stopping
		s.mu.Unlock()
		metricBusy.Inc()
		select {
		case s.busy <- f.ID:
		default:
			return protoErr("more than %d calls refused as busy at once (%d in flight, %d stopping)", maxBusyQueue, calls, stopping)
		}
		return nil
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	c := &Incoming{s: s, id: f.ID, Method: m, Body: body, ctx: ctx, cancel: cancel}
	if timeoutMS > 0 {
		var tcancel context.CancelFunc
		c.ctx, tcancel = context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
		c.cancel = func(err error) { cancel(err); tcancel() }
	}
	if f.Flags&FlagStream != 0 {
		c.req = newRecvQueue(s)
		c.req.id = f.ID
	}
	s.in[f.ID] = c
	s.inCalls++
	c.counted = true
	s.handlers.Add(1)
	s.mu.Unlock()
	c.bytesIn.Add(int64(size))
	metricCalls.WithLabelValues("in").Inc()
	go c.run()
	return nil
}

// Incoming is a call the peer made, as its handler sees it.
type Incoming struct {
	s      *Session
	id     uint64
	Method Method
	// Body is the request body. It stays valid for the handler's lifetime.
	Body   []byte
	ctx    context.Context
	cancel context.CancelCauseFunc

	req *recvQueue // request stream; nil without one

	mu       sync.Mutex
	replied  bool
	send     *sendCredit // response stream after ReplyStream
	canceled bool

	counted  bool // holds one of the session's inCalls (under s.mu)
	stopping bool // cancelled by the caller, handler still running (under s.mu)

	bytesIn, bytesOut atomic.Int64
}

// Session is the session the call arrived on (its Peer names the caller).
func (c *Incoming) Session() *Session { return c.s }

func (c *Incoming) run() {
	defer c.s.handlers.Done()
	defer func() {
		c.s.mu.Lock()
		delete(c.s.in, c.id)
		c.releaseLocked()
		if c.stopping {
			c.stopping = false
			c.s.stopping--
		}
		c.s.mu.Unlock()
		c.cancel(context.Canceled)
	}()
	var err error
	h := Handler(nil)
	if c.s.handler != nil {
		h = c.s.handler(c.Method)
	}
	if h == nil {
		err = fmt.Errorf("%w %d", ErrUnknownMethod, c.Method)
	} else {
		err = c.safeHandle(h)
	}
	c.mu.Lock()
	replied, send, canceled := c.replied, c.send, c.canceled
	c.mu.Unlock()
	if canceled {
		return
	}
	switch {
	case err != nil:
		c.s.log.Debug("call failed", "method", c.Method, "err", err)
		if send != nil {
			send.close(errCallDone)
		}
		c.release()
		c.s.writeFrame(Frame{Type: FrameError, ID: c.id, Payload: encodeError(err)}, &c.bytesOut)
	case send != nil:
		send.close(errCallDone)
		c.release()
		c.s.writeFrame(Frame{Type: FrameEnd, ID: c.id}, &c.bytesOut)
	case !replied:
		c.release()
		c.s.writeFrame(Frame{Type: FrameReply, ID: c.id}, &c.bytesOut)
	}
}

// release frees the call's slot. It runs before the call's final frame is
// written (and when its CANCEL is read): the caller reuses the slot only
// after reading that frame or writing that CANCEL.
func (c *Incoming) release() {
	c.s.mu.Lock()
	c.releaseLocked()
	c.s.mu.Unlock()
}

func (c *Incoming) releaseLocked() {
	if c.counted {
		c.counted = false
		c.s.inCalls--
	}
}

// maxStopping bounds the cancelled calls whose handlers are still
// stopping; while that many linger, new calls are refused with EBUSY, so a
// peer cannot pile up handlers by cancelling calls that are slow to stop.
func maxStopping(maxCalls int) int { return 2 * maxCalls }

// maxBusyQueue bounds the EBUSY answers waiting to be written; a peer that
// overruns it is not counting its calls at all, and the session fails.
const maxBusyQueue = 1024

// busyWriter answers the calls refused as busy, off the reader goroutine.
func (s *Session) busyWriter() {
	payload := encodeError(fmt.Errorf("%w: %d calls in flight", ErrBusy, s.cfg.MaxCalls))
	for {
		select {
		case <-s.done:
			return
		case id := <-s.busy:
			s.writeFrame(Frame{Type: FrameError, ID: id, Payload: payload}, nil)
		}
	}
}

func (c *Incoming) safeHandle(h Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.log.Error("handler panic", "method", c.Method, "panic", r)
			err = fmt.Errorf("handler for method %d panicked", c.Method)
		}
	}()
	return h(c.ctx, c)
}

// handle takes a frame the caller sent on this call (reader goroutine).
func (c *Incoming) handle(f Frame) error {
	switch f.Type {
	case FrameData:
		if c.req == nil {
			return protoErr("call %d: DATA without a request stream", c.id)
		}
		return c.req.push(f.Payload)
	case FrameEnd:
		if c.req == nil {
			return protoErr("call %d: END without a request stream", c.id)
		}
		c.req.end(nil)
	case FrameCredit:
		c.mu.Lock()
		send := c.send
		c.mu.Unlock()
		if send == nil {
			return protoErr("call %d: CREDIT without a response stream", c.id)
		}
		return send.grant(f.Payload)
	case FrameCancel:
		// The caller freed its slot once this CANCEL was written; free ours
		// before the reader takes the next frame (maybe its next CALL).
		c.s.mu.Lock()
		if c.counted {
			c.releaseLocked()
			if _, running := c.s.in[c.id]; running {
				c.stopping = true
				c.s.stopping++
			}
		}
		c.s.mu.Unlock()
		c.abort(fmt.Errorf("call %d: %w by the caller", c.id, context.Canceled))
	default:
		return protoErr("call %d: unexpected %s", c.id, f.Type)
	}
	return nil
}

// abort stops the handler: the caller cancelled or the session died.
func (c *Incoming) abort(err error) {
	c.mu.Lock()
	c.canceled = true
	send := c.send
	c.mu.Unlock()
	c.cancel(err)
	if c.req != nil {
		c.req.end(err)
	}
	if send != nil {
		send.close(err)
	}
}

// Recv returns the next request-stream message; io.EOF at its end.
func (c *Incoming) Recv(ctx context.Context) ([]byte, error) {
	if c.req == nil {
		return nil, io.EOF
	}
	return c.req.recv(ctx)
}

// Reply sends the response body; the call ends when the handler returns.
func (c *Incoming) Reply(body []byte) error { return c.reply(body, false) }

// ReplyStream sends the response body and opens the response stream: Send
// messages, then return from the handler (nil sends END, an error ERROR).
func (c *Incoming) ReplyStream(body []byte) error { return c.reply(body, true) }

func (c *Incoming) reply(body []byte, stream bool) error {
	c.mu.Lock()
	if c.replied {
		c.mu.Unlock()
		return fmt.Errorf("call %d: replied twice", c.id)
	}
	c.replied = true
	if stream {
		c.send = newSendCredit(int(c.s.peer.Window), &c.s.stats.blocked)
	}
	c.mu.Unlock()
	if !stream {
		// A REPLY without a stream ends the call for the caller.
		c.release()
	}
	var flags uint8
	if stream {
		flags = FlagStream
	}
	return c.s.writeFrame(Frame{Type: FrameReply, Flags: flags, ID: c.id, Payload: body}, &c.bytesOut)
}

// Send sends one response-stream message, waiting for credit.
func (c *Incoming) Send(ctx context.Context, p []byte) error {
	c.mu.Lock()
	send := c.send
	c.mu.Unlock()
	if send == nil {
		return fmt.Errorf("call %d: no response stream", c.id)
	}
	if err := send.take(ctx, c.ctx, len(p)+frameCost); err != nil {
		return err
	}
	return c.s.writeFrame(Frame{Type: FrameData, ID: c.id, Payload: p}, &c.bytesOut)
}

// recvQueue is the receiving end of one stream. The sender may have at most
// Window bytes (counted with frameCost per message) outstanding: received
// and not yet granted back. Consuming messages grants credit in batches.
type recvQueue struct {
	s           *Session
	id          uint64
	mu          sync.Mutex
	msgs        [][]byte
	outstanding int
	consumed    int
	ended       bool
	err         error
	wake        chan struct{}
}

func newRecvQueue(s *Session) *recvQueue {
	return &recvQueue{s: s, wake: make(chan struct{}, 1)}
}

func (q *recvQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *recvQueue) push(p []byte) error {
	cost := len(p) + frameCost
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		if q.err != nil {
			return nil // we stopped reading (cancelled); late frames are dropped
		}
		return protoErr("call %d: DATA after END", q.id)
	}
	if q.outstanding+cost > q.s.cfg.Window {
		q.mu.Unlock()
		return protoErr("call %d: peer exceeded its stream credit (%d + %d > %d)", q.id, q.outstanding, cost, q.s.cfg.Window)
	}
	q.outstanding += cost
	q.msgs = append(q.msgs, p)
	q.mu.Unlock()
	bufferedAll.Add(int64(len(p)))
	n := q.s.stats.buffered.Add(int64(len(p)))
	for {
		peak := q.s.stats.bufferedPeak.Load()
		if n <= peak || q.s.stats.bufferedPeak.CompareAndSwap(peak, n) {
			break
		}
	}
	q.signal()
	return nil
}

func (q *recvQueue) end(err error) {
	q.mu.Lock()
	if q.ended {
		q.mu.Unlock()
		return
	}
	q.ended = true
	q.err = err
	if err != nil {
		// Nobody will consume what is queued.
		var n int
		for _, m := range q.msgs {
			n += len(m)
		}
		q.msgs = nil
		q.s.stats.buffered.Add(-int64(n))
		bufferedAll.Add(-int64(n))
	}
	q.mu.Unlock()
	q.signal()
}

func (q *recvQueue) recv(ctx context.Context) ([]byte, error) {
	for {
		q.mu.Lock()
		if len(q.msgs) > 0 {
			p := q.msgs[0]
			q.msgs[0] = nil
			q.msgs = q.msgs[1:]
			q.consumed += len(p) + frameCost
			var grant int
			if !q.ended && q.consumed >= q.s.cfg.Window/4 {
				grant = q.consumed
				q.consumed = 0
				q.outstanding -= grant
			}
			q.mu.Unlock()
			q.s.stats.buffered.Add(-int64(len(p)))
			bufferedAll.Add(-int64(len(p)))
			if grant > 0 {
				var e Encoder
				e.PutUvarint(uint64(grant))
				q.s.writeFrame(Frame{Type: FrameCredit, ID: q.id, Payload: e.Bytes()}, nil)
			}
			return p, nil
		}
		if q.ended {
			err := q.err
			q.mu.Unlock()
			if err == nil {
				return nil, io.EOF
			}
			return nil, err
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// bufferedAll is the stream bytes received and not yet consumed across
// every session of the process (the wsync_syncwire_stream_buffered_bytes
// gauge).
var bufferedAll atomic.Int64

// BufferedBytes is the stream bytes received and not yet consumed across
// every session of the process: what peers' streams hold in memory here.
func BufferedBytes() int64 { return bufferedAll.Load() }

// sendCredit is the sending end's view of one stream's credit.
type sendCredit struct {
	mu     sync.Mutex
	credit int
	err    error // set once the stream can take no more messages
	wake   chan struct{}
	// blocked counts the session's senders waiting for credit.
	blocked *atomic.Int64
}

func newSendCredit(window int, blocked *atomic.Int64) *sendCredit {
	return &sendCredit{credit: window, wake: make(chan struct{}, 1), blocked: blocked}
}

func (c *sendCredit) grant(p []byte) error {
	d := NewDecoder(p)
	n := d.Bounded("credit", maxWindow)
	if err := d.Done(); err != nil {
		return err
	}
	c.mu.Lock()
	c.credit += int(n)
	if c.credit > maxWindow {
		c.mu.Unlock()
		return protoErr("credit grows past %d", maxWindow)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// take waits until cost bytes of credit are available and consumes them.
func (c *sendCredit) take(ctx, callCtx context.Context, cost int) error {
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return err
		}
		if c.credit >= cost {
			c.credit -= cost
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		c.blocked.Add(1)
		select {
		case <-c.wake:
			c.blocked.Add(-1)
		case <-ctx.Done():
			c.blocked.Add(-1)
			return ctx.Err()
		case <-callCtx.Done():
			c.blocked.Add(-1)
			return context.Cause(callCtx)
		}
	}
}

// close stops further sends; it returns the earlier reason if already
// closed.
func (c *sendCredit) close(err error) error {
	c.mu.Lock()
	prev := c.err
	if prev == nil {
		c.err = err
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return prev
}
