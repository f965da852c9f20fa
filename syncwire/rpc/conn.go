package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/coder/websocket"
)

// Conn is a message-oriented connection: what a Session needs of a
// WebSocket. WriteMessage and Ping may be called concurrently with each
// other and with one ReadMessage; Ping only completes while a ReadMessage is
// in progress (the reader answers the peer's pongs).
type Conn interface {
	// ReadMessage returns the next whole message.
	ReadMessage(ctx context.Context) ([]byte, error)
	// WriteMessage sends one whole message.
	WriteMessage(ctx context.Context, p []byte) error
	// Ping does one liveness round trip.
	Ping(ctx context.Context) error
	// Close closes the connection, telling the peer why: nil is a normal
	// closure, otherwise the error's wire code travels in the close status.
	Close(reason error) error
}

// Close status codes: 4000 + the wire code of the reason.
const closeCodeBase = 4000

// WebSocket adapts a coder/websocket connection. It sets the read limit to
// MaxFrameSize; a larger message closes the connection with status 1009,
// which both sides report as ErrProtocol.
func WebSocket(c *websocket.Conn) Conn {
	c.SetReadLimit(MaxFrameSize)
	return &wsConn{c: c}
}

type wsConn struct{ c *websocket.Conn }

func (w *wsConn) ReadMessage(ctx context.Context) ([]byte, error) {
	typ, r, err := w.c.Reader(ctx)
	if err != nil {
		return nil, closeError(err)
	}
	var held [len(readClasses)]*[]byte
	defer func() {
		for i, bp := range held {
			if bp != nil {
				readPools[i].Put(bp)
			}
		}
	}()
	class, n := 0, 0
	buf := readBuf(0, &held)
	for {
		if n == len(buf) {
			if class == len(readClasses)-1 { // the read limit fails a longer message first
				return nil, protoErr("message of more than %d bytes", MaxFrameSize)
			}
			class++
			next := readBuf(class, &held)
			copy(next, buf[:n])
			buf = next
		}
		k, err := r.Read(buf[n:])
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, closeError(err)
		}
	}
	if typ != websocket.MessageBinary {
		return nil, protoErr("text message")
	}
	return append([]byte(nil), buf[:n]...), nil
}

// A message is read whole into pooled buffers, then copied once at its
// exact size. websocket.Conn.Read grows a buffer from 512 bytes
// (io.ReadAll): a 1 MiB message cost 28 allocations, their zeroing and
// their page faults, 2.8 ms a message where this takes 1.1 (BenchmarkReadMessage),
// and 17% of the receiving side's CPU in a pull of small files. The
// buffers come in classes and a reader takes the next class only once the
// peer's bytes fill the one it has, so what a peer makes a reader hold stays
// within four times what it sent, plus the first class.
var readClasses = [...]int{64 << 10, 256 << 10, MaxFrameSize + 1}

var readPools [len(readClasses)]sync.Pool

// readBuf takes a buffer of the class, noting it in held.
func readBuf(class int, held *[len(readClasses)]*[]byte) []byte {
	bp, _ := readPools[class].Get().(*[]byte)
	if bp == nil {
		b := make([]byte, readClasses[class])
		bp = &b
	}
	held[class] = bp
	return *bp
}

func (w *wsConn) WriteMessage(ctx context.Context, p []byte) error {
	if len(p) > MaxFrameSize {
		return protoErr("message of %d bytes exceeds %d", len(p), MaxFrameSize)
	}
	if err := w.c.Write(ctx, websocket.MessageBinary, p); err != nil {
		return closeError(err)
	}
	return nil
}

func (w *wsConn) Ping(ctx context.Context) error { return w.c.Ping(ctx) }

func (w *wsConn) Close(reason error) error {
	if reason == nil || errors.Is(reason, ErrShutdown) && CodeOf(reason) == CodeShutdown {
		return w.c.Close(websocket.StatusNormalClosure, "")
	}
	msg := reason.Error()
	if len(msg) > 100 {
		msg = msg[:100]
	}
	return w.c.Close(websocket.StatusCode(closeCodeBase+int(CodeOf(reason))), msg)
}

// closeError turns a websocket read/write failure into a wire error: a close
// status of 4000+code becomes that code, 1009 (message too big) is a
// protocol error, everything else means the session is gone.
func closeError(err error) error {
	st := websocket.CloseStatus(err)
	switch {
	case st >= closeCodeBase && st < closeCodeBase+1000:
		var ce websocket.CloseError
		errors.As(err, &ce)
		return &RemoteError{Code: Code(int(st) - closeCodeBase), Msg: ce.Reason}
	case st == websocket.StatusMessageTooBig:
		return fmt.Errorf("%w: frame exceeds %d bytes (%v)", ErrProtocol, MaxFrameSize, err)
	case st == websocket.StatusNormalClosure || st == websocket.StatusGoingAway:
		return fmt.Errorf("%w: peer closed the connection", ErrShutdown)
	}
	return fmt.Errorf("%w: %v", ErrShutdown, err)
}

// Pipe returns the two ends of an in-process Conn, for tests and for
// embedding both sides in one process. Messages are copied; each direction
// buffers a bounded number of messages.
func Pipe() (*PipeConn, *PipeConn) {
	ab := make(chan pipeMsg, 64)
	ba := make(chan pipeMsg, 64)
	done := make(chan struct{})
	st := &pipeState{done: done}
	a := &PipeConn{in: ba, out: ab, st: st}
	b := &PipeConn{in: ab, out: ba, st: st}
	a.peer, b.peer = b, a
	return a, b
}

// PipeConn is one end of a Pipe.
type PipeConn struct {
	in, out chan pipeMsg
	st      *pipeState
	peer    *PipeConn

	mu     sync.Mutex
	silent bool // drop everything we would send, answer no pings
}

type pipeState struct {
	once   sync.Once
	done   chan struct{}
	reason error
}

type pipeMsg struct {
	data []byte
	ping chan struct{} // a ping to answer
	pong chan struct{} // a pong answering our ping
}

// SetSilent makes this end stop sending anything, pongs included: it plays
// a peer that hangs without closing the connection.
func (p *PipeConn) SetSilent(v bool) {
	p.mu.Lock()
	p.silent = v
	p.mu.Unlock()
}

func (p *PipeConn) isSilent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}

func (p *PipeConn) send(ctx context.Context, m pipeMsg) error {
	if p.isSilent() {
		return nil
	}
	select {
	case p.out <- m:
		return nil
	case <-p.st.done:
		return p.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *PipeConn) closedErr() error {
	if r := p.st.reason; r != nil {
		var re *RemoteError
		if errors.As(r, &re) {
			return r
		}
		return &RemoteError{Code: CodeOf(r), Msg: r.Error()}
	}
	return fmt.Errorf("%w: pipe closed", ErrShutdown)
}

func (p *PipeConn) ReadMessage(ctx context.Context) ([]byte, error) {
	for {
		select {
		case m := <-p.in:
			switch {
			case m.ping != nil:
				p.send(ctx, pipeMsg{pong: m.ping})
			case m.pong != nil:
				close(m.pong)
			default:
				return m.data, nil
			}
		case <-p.st.done:
			return nil, p.closedErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *PipeConn) WriteMessage(ctx context.Context, b []byte) error {
	if len(b) > MaxFrameSize {
		// The receiving side refuses it, as a WebSocket read limit does.
		err := protoErr("frame of %d bytes exceeds %d", len(b), MaxFrameSize)
		p.Close(err)
		return err
	}
	return p.send(ctx, pipeMsg{data: append([]byte(nil), b...)})
}

func (p *PipeConn) Ping(ctx context.Context) error {
	pong := make(chan struct{})
	if err := p.send(ctx, pipeMsg{ping: pong}); err != nil {
		return err
	}
	select {
	case <-pong:
		return nil
	case <-p.st.done:
		return p.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *PipeConn) Close(reason error) error {
	p.st.once.Do(func() {
		p.st.reason = reason
		close(p.st.done)
	})
	return nil
}

var (
	_ Conn = (*PipeConn)(nil)
	_ Conn = (*wsConn)(nil)
)
