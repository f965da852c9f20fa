package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wsync/wsync/internal/testutil"
)

func TestCallsAreMultiplexed(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	// A stream method whose consumer never reads: it must not stall other calls.
	srv.Handle(methodStream, func(ctx context.Context, c *Incoming) error {
		if err := c.ReplyStream(nil); err != nil {
			return err
		}
		p := make([]byte, 512<<10)
		for {
			if err := c.Send(ctx, p); err != nil {
				return err
			}
		}
	})
	c, _, _ := pipePair(t, srv)
	s := session(t, c)
	ctx := testutil.Context(t, 20*time.Second)
	stuck, err := s.Open(ctx, methodStream, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := stuck.Recv(ctx); err != nil { // the stream is open and flowing
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			body := fmt.Appendf(nil, "call %d", i)
			got, err := s.Call(ctx, methodEcho, body)
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("echo %d = %q, %v", i, got, err)
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.BufferedPeak > int64(s.cfg.Window) {
		t.Errorf("buffered peak %d exceeds the window %d", st.BufferedPeak, s.cfg.Window)
	}
}

func TestErrorsKeepTheirIdentityAcrossTheWire(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	c, _, _ := pipePair(t, srv)
	s := session(t, c)
	ctx := testutil.Context(t, 10*time.Second)
	_, err := s.Call(ctx, methodFail, []byte("a/b"))
	var re *RemoteError
	if !errors.Is(err, errTestMissing) || !errors.As(err, &re) || re.Code != codeTestMissing || !strings.Contains(err.Error(), "a/b") {
		t.Errorf("err = %v, want a remote ETEST_MISSING", err)
	}
	_, err = s.Call(ctx, 999, nil)
	if !errors.Is(err, ErrUnknownMethod) {
		t.Errorf("unknown method: err = %v", err)
	}
	// The session survives call errors.
	if got, err := c.Call(ctx, methodEcho, []byte("x")); err != nil || string(got) != "x" {
		t.Errorf("echo after errors = %q, %v", got, err)
	}
}

func TestCancelReachesTheHandler(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	var cancelled atomic.Bool
	started := make(chan struct{})
	srv.Handle(304, func(ctx context.Context, c *Incoming) error {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
		return ctx.Err()
	})
	c, _, _ := pipePair(t, srv)
	s := session(t, c)
	ctx, cancel := context.WithCancel(testutil.Context(t, 10*time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := s.Call(ctx, 304, nil)
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	testutil.WaitFor(t, "handler cancellation", 5*time.Second, cancelled.Load)
}

func TestCallDeadlineTravels(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	c, _, _ := pipePair(t, srv)
	s := session(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := s.Call(ctx, methodBlock, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
}

func TestWatchdogFailsASilentPeer(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	cfg := testConfig()
	cfg.PingTimeout = 300 * time.Millisecond
	c, _, sEnd := pipePairConfig(t, srv, cfg)
	s := session(t, c)
	ctx := testutil.Context(t, 30*time.Second)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Call(ctx, methodBlock, nil)
		errc <- err
	}()
	sEnd.SetSilent(true) // the server hangs: no pongs, no frames
	select {
	case err := <-errc:
		if !errors.Is(err, ErrShutdown) {
			t.Errorf("in-flight call err = %v, want ErrShutdown", err)
		}
	case <-ctx.Done():
		t.Fatal("in-flight call hung on a silent peer")
	}
	// The next call redials.
	sEnd.SetSilent(false)
	s2, epoch, err := c.Session(ctx)
	if err != nil || s2 == s || epoch != 2 {
		t.Fatalf("redial: %v (same session %v, epoch %d)", err, s2 == s, epoch)
	}
	if got, err := s2.Call(ctx, methodEcho, []byte("y")); err != nil || string(got) != "y" {
		t.Errorf("echo after redial = %q, %v", got, err)
	}
}

func TestVersionMismatchFailsBothSides(t *testing.T) {
	a, b := Pipe()
	ca := testConfig()
	ca.MinVersion, ca.MaxVersion = 6, 6 // a peer from before version 7 (the served rev in Watermarks replies)
	sa := NewSession(a, true, ca, nil)
	sb := NewSession(b, false, testConfig(), nil)
	ctx := testutil.Context(t, 10*time.Second)
	errc := make(chan error, 2)
	go func() { errc <- sa.Handshake(ctx) }()
	go func() { errc <- sb.Handshake(ctx) }()
	for range 2 {
		err := <-errc
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "6..6") || !strings.Contains(err.Error(), "7..7") {
			t.Errorf("err = %v, want ErrVersion naming 6..6 and 7..7", err)
		}
	}
}

func TestVersionMismatchOverWebSocket(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	hs := testutil.WSServer(t, srv, "/rpc")
	cfg := testConfig()
	cfg.MinVersion, cfg.MaxVersion = 8, 9 // a peer from after ours
	c := NewClient(ClientOptions{Config: cfg, URL: hs})
	defer c.Close()
	_, _, err := c.Session(testutil.Context(t, 10*time.Second))
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "8..9") {
		t.Errorf("err = %v, want ErrVersion", err)
	}
	// The server keeps serving good sessions.
	good := wsClient(t, hs, "")
	if got, err := session(t, good).Call(t.Context(), methodEcho, []byte("ok")); err != nil || string(got) != "ok" {
		t.Errorf("good session after a bad one: %q, %v", got, err)
	}
}

func TestAuth(t *testing.T) {
	srv := testServer(t, ServerOptions{Token: "s3cret"})
	url := testutil.WSServer(t, srv, "/rpc")
	ctx := testutil.Context(t, 10*time.Second)
	for _, tok := range []string{"", "wrong", "s3cretX"} {
		c := NewClient(ClientOptions{Config: testConfig(), URL: url, Token: tok})
		_, _, err := c.Session(ctx)
		c.Close()
		if !errors.Is(err, ErrAuth) {
			t.Errorf("token %q: err = %v, want ErrAuth", tok, err)
		}
		if CodeOf(err) != CodeAuth {
			t.Errorf("token %q: code %v", tok, CodeOf(err))
		}
	}
	// The refusal is opaque: a fixed body that names nothing.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http"+strings.TrimPrefix(url, "ws"), nil)
	req.Header.Set("Authorization", "Bearer wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.TrimSpace(string(body)) != "unauthorized" {
		t.Errorf("refusal = %d %q", resp.StatusCode, body)
	}
	c := wsClient(t, url, "s3cret")
	if got, err := session(t, c).Call(ctx, methodEcho, []byte("in")); err != nil || string(got) != "in" {
		t.Errorf("authorised call = %q, %v", got, err)
	}
}

// rawPeer dials the server, does a valid handshake, and hands back the raw
// WebSocket to misbehave on.
func rawPeer(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(4 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	h := Hello{Protocol: ProtocolName, MinVersion: ProtocolMinVersion, MaxVersion: ProtocolMaxVersion, RuntimeID: RuntimeID, ID: "raw", Window: defaultWindow, MaxCalls: 8}
	f, _ := AppendFrame(nil, Frame{Type: FrameHello, Payload: AppendHello(nil, h)})
	if err := ws.Write(ctx, websocket.MessageBinary, f); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.Read(ctx); err != nil {
		t.Fatal(err)
	}
	return ws
}

// readUntilClosed reads until the server closes and returns the close error.
func readUntilClosed(t *testing.T, ws *websocket.Conn) error {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			return err
		}
	}
}

func TestBadFramesCloseTheSessionNotTheServer(t *testing.T) {
	var calls atomic.Int64
	srv := testServer(t, ServerOptions{})
	srv.Handle(307, func(ctx context.Context, c *Incoming) error { calls.Add(1); return nil })
	url := testutil.WSServer(t, srv, "/rpc")
	ctx := testutil.Context(t, 20*time.Second)
	cases := map[string][]byte{
		"oversized frame": make([]byte, MaxFrameSize+1),
		"garbage":         []byte("\xff\x00garbage that is not a frame"),
		"unknown flags":   {byte(FrameCall), 0x80, 1, 1},
		"second hello":    {byte(FrameHello), 0, 0},
		"bad error frame": {byte(FrameError), 0, 0, 0xff},
		"data overrun":    nil, // built below
	}
	for name, msg := range cases {
		t.Run(name, func(t *testing.T) {
			ws := rawPeer(t, url)
			if msg == nil {
				// Open a Push with a request stream, then send more than the
				// advertised window without waiting for credit.
				// methodBlock never reads its request stream.
				var e Encoder
				e.PutUvarint(uint64(methodBlock))
				e.PutUvarint(0)
				call, _ := AppendFrame(nil, Frame{Type: FrameCall, Flags: FlagStream, ID: 1, Payload: e.Bytes()})
				ws.Write(ctx, websocket.MessageBinary, call)
				data, _ := AppendFrame(nil, Frame{Type: FrameData, ID: 1, Payload: make([]byte, MaxPayload)})
				for range defaultWindow/MaxPayload + 2 {
					if ws.Write(ctx, websocket.MessageBinary, data) != nil {
						break
					}
				}
			} else if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
				t.Fatal(err)
			}
			err := readUntilClosed(t, ws)
			st := websocket.CloseStatus(err)
			if st != websocket.StatusCode(closeCodeBase+int(CodeProtocol)) && st != websocket.StatusMessageTooBig {
				t.Errorf("close = %v (status %d), want EPROTOCOL", err, st)
			}
			if !errors.Is(closeError(err), ErrProtocol) {
				t.Errorf("closeError(%v) is not ErrProtocol", err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("bad peers ran %d calls", n)
	}
	good := wsClient(t, url, "")
	if got, err := session(t, good).Call(ctx, methodEcho, []byte("still up")); err != nil || string(got) != "still up" {
		t.Errorf("good session after bad peers: %q, %v", got, err)
	}
}

func TestOversizedSendIsRefusedLocally(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	c, _, _ := pipePair(t, srv)
	s := session(t, c)
	_, err := s.Call(testutil.Context(t, 5*time.Second), methodEcho, make([]byte, MaxFrameSize))
	if !errors.Is(err, ErrProtocol) {
		t.Errorf("err = %v, want ErrProtocol", err)
	}
}

// TestBackpressureBoundsTheProducer streams 1 GiB to a consumer that reads
// in bursts and checks, by counters, that neither side ever holds more than
// one window of it.
func TestBackpressureBoundsTheProducer(t *testing.T) {
	const total = 1 << 30
	const msg = 1 << 20
	srv := testServer(t, ServerOptions{})
	var produced atomic.Int64 // bytes the producer handed to Send
	var producer atomic.Pointer[Session]
	srv.Handle(methodStream, func(ctx context.Context, c *Incoming) error {
		producer.Store(c.Session())
		if err := c.ReplyStream(nil); err != nil {
			return err
		}
		p := make([]byte, msg)
		for sent := 0; sent < total; sent += msg {
			if err := c.Send(ctx, p); err != nil {
				return err
			}
			produced.Add(msg)
		}
		return nil
	})
	url := testutil.WSServer(t, srv, "/rpc")
	c := wsClient(t, url, "")
	s := session(t, c)
	ctx := testutil.Context(t, 120*time.Second)
	o, err := s.Open(ctx, methodStream, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var consumed, maxAhead int64
	window := int64(s.cfg.Window)
	for {
		// A slow consumer: before each read, wait until the producer is
		// blocked on credit (or done), so every check is at the worst
		// moment, not a lucky one.
		testutil.WaitFor(t, "producer to block", 10*time.Second, func() bool {
			p := producer.Load()
			return produced.Load() >= total || p != nil && p.Stats().BlockedSenders > 0
		})
		ahead := produced.Load() - consumed
		maxAhead = max(maxAhead, ahead)
		p, err := o.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		consumed += int64(len(p))
	}
	if consumed != total {
		t.Fatalf("consumed %d of %d bytes", consumed, total)
	}
	st := s.Stats()
	t.Logf("1 GiB stream: max produced-but-unconsumed %d KiB, receive buffer peak %d KiB, window %d KiB",
		maxAhead>>10, st.BufferedPeak>>10, window>>10)
	if maxAhead > window+msg {
		t.Errorf("producer ran %d bytes ahead of the consumer; window is %d", maxAhead, window)
	}
	if st.BufferedPeak > window {
		t.Errorf("receive buffer peaked at %d bytes; window is %d", st.BufferedPeak, window)
	}
}

// TestLateAnswerToAnAbandonedCallKeepsTheSession: the reader looks a call
// up, the caller abandons it (the walk of converge cancels its other
// calls), then the reader hands it the answer that crossed the CANCEL on
// the wire. That answer is dropped, as for a call already removed; it was
// taken for a second REPLY and ended the session (1 run in 25 of
// converge's TestWalkBudgetKeepsWalkOrder). A real second REPLY is still a
// protocol error.
func TestLateAnswerToAnAbandonedCallKeepsTheSession(t *testing.T) {
	srv := testServer(t, ServerOptions{})
	release := make(chan struct{})
	srv.Handle(305, func(ctx context.Context, c *Incoming) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	c, _, _ := pipePair(t, srv)
	s := session(t, c)
	defer close(release)
	for _, late := range []Frame{{Type: FrameReply}, {Type: FrameReply, Flags: FlagStream}, {Type: FrameData, Payload: []byte("x")}, {Type: FrameEnd}} {
		ctx, cancel := context.WithCancel(testutil.Context(t, 10*time.Second))
		o, err := s.Open(ctx, 305, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := o.Reply(testutil.Context(t, 5*time.Second)); !errors.Is(err, context.Canceled) {
			t.Fatalf("reply of the abandoned call: %v", err)
		}
		late.ID = o.ID()
		if err := o.handle(late); err != nil {
			t.Errorf("late %s after abandon: %v, want it dropped", late.Type, err)
		}
		o.Close()
	}
	if _, err := s.Call(testutil.Context(t, 5*time.Second), methodEcho, nil); err != nil {
		t.Fatalf("session after late answers: %v", err)
	}

	// A call that got its reply and was not abandoned: a second REPLY is the
	// peer's protocol error.
	o, err := s.Open(testutil.Context(t, 5*time.Second), methodEcho, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.Reply(testutil.Context(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := o.handle(Frame{Type: FrameReply, ID: o.ID()}); !errors.Is(err, ErrProtocol) {
		t.Errorf("second REPLY of an answered call: %v, want ErrProtocol", err)
	}
}

// closeRecorder is a Conn that records whether Close was called.
type closeRecorder struct {
	Conn
	closed atomic.Bool
}

func (c *closeRecorder) Close(reason error) error {
	c.closed.Store(true)
	return c.Conn.Close(reason)
}

// TestServeReturnsAfterTheConnCloseOfARacingFail: Serve returns only once
// the conn is closed, also when the session's first failure (a Close from
// another goroutine) races the end of its read loop. Serve's wait for the
// close once could run before the racing fail had counted its close, so
// Serve returned with the conn still open (and -race saw the WaitGroup
// reused).
func TestServeReturnsAfterTheConnCloseOfARacingFail(t *testing.T) {
	for i := range 300 {
		a, b := Pipe()
		ca := &closeRecorder{Conn: a}
		sa := NewSession(ca, true, testConfig(), nil)
		sb := NewSession(b, false, testConfig(), nil)
		ctx := testutil.Context(t, 10*time.Second)
		hs := make(chan error, 1)
		go func() { hs <- sb.Handshake(ctx) }()
		if err := sa.Handshake(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-hs; err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 2)
		go func() { served <- sa.Serve(ctx) }()
		go func() { served <- sb.Serve(ctx) }()
		go sa.Close()
		b.Close(nil) // sa's read loop ends too
		<-served
		<-served
		if !ca.closed.Load() {
			t.Fatalf("run %d: Serve returned before the conn was closed", i)
		}
	}
}
