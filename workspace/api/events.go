package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
	"github.com/wsync/wsync/workspace/events"
)

// Stream defaults (Options).
const (
	DefaultEventHeartbeat     = 15 * time.Second
	DefaultStreamWriteTimeout = 30 * time.Second
	DefaultBodyReadTimeout    = 30 * time.Second
	DefaultMaxEventStreams    = 64
)

// events serves the workspace's event log as Server-Sent Events, from the
// event after Last-Event-ID (or ?after=, for curl; "" from now, "0" all
// retained), of the types ?types= selects. Each event is one SSE message
// (id, event, data: the event's JSON), flushed at once; a comment goes out
// when nothing was written for a heartbeat. The log is the buffer: a write
// that cannot finish within the write timeout (a client that stopped
// reading) ends the stream, and the client's reconnect with Last-Event-ID
// loses nothing still retained. The stream ends with the server's
// shutdown (EndStreams).
func (s *Server) events(w http.ResponseWriter, r *http.Request, ws *workspace.Workspace) {
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	filter, err := events.ParseFilter(r.URL.Query().Get("types"), workspace.EventTypes)
	if err != nil {
		writeError(w, fmt.Errorf("types: %w: %v", vfs.ErrInvalid, err))
		return
	}
	sub, err := ws.Events().Subscribe(after)
	if err != nil {
		writeError(w, fmt.Errorf("event id: %w: %v", vfs.ErrInvalid, err))
		return
	}
	if s.ending.Err() != nil {
		writeError(w, fmt.Errorf("event stream: %w", workspace.ErrClosed))
		return
	}
	release, err := s.streams.acquire(ws.Name())
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.ending, cancel)()
	// The deadline of the last write bounds the response's end too;
	// net/http clears it once the response is done.
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.opts.StreamWriteTimeout}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	w.WriteHeader(http.StatusOK)
	// Subscribed from now: the position goes first (an id with no data
	// sets a client's Last-Event-ID and dispatches nothing), so a
	// reconnect after a drop goes on from here.
	err = sw.write(func(b []byte) []byte {
		if after == "" {
			b = append(b, "id: "+sub.Position()+"\n"...)
		}
		return append(b, ": wsync events\n\n"...)
	})
	last := time.Now()
	for err == nil {
		nctx, ncancel := context.WithDeadline(ctx, last.Add(s.opts.EventHeartbeat))
		ev, nerr := sub.Next(nctx)
		ncancel()
		switch {
		case nerr == nil && !filter.Match(ev.Type):
			continue
		case nerr == nil:
			err = sw.write(func(b []byte) []byte { return appendSSE(b, ev) })
		case ctx.Err() != nil:
			return // the client went away, or the server is shutting down
		default:
			err = sw.write(func(b []byte) []byte { return append(b, ":\n\n"...) })
		}
		last = time.Now()
	}
	metricStreamsDropped.Inc()
	s.log.Info("event stream dropped", "workspace", ws.Name(), "err", err)
}

// appendSSE appends ev as one SSE message. A gap event has no id, so the
// client's Last-Event-ID stays at the last event it got. The JSON holds no
// newline, so it is one data line.
func appendSSE(b []byte, ev events.Event) []byte {
	if ev.ID != "" {
		b = append(b, "id: "+ev.ID+"\n"...)
	}
	b = append(b, "event: "+ev.Type+"\ndata: "...)
	b = append(b, ev.JSON()...)
	return append(b, "\n\n"...)
}

// sseWriter writes one message at a time, each under a deadline of its
// own (which also replaces any write timeout the http.Server has, so a
// stream lives as long as its client reads), and flushes it.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
}

func (sw *sseWriter) write(msg func([]byte) []byte) error {
	sw.buf = msg(sw.buf[:0])
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := sw.w.Write(sw.buf); err != nil {
		return err
	}
	return sw.rc.Flush()
}

// streamLimit bounds the event streams open at once on each workspace.
type streamLimit struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

// acquire counts a stream on workspace ws, or refuses it (ErrBusy: 429)
// when ws has max open. The function it returns releases it.
func (l *streamLimit) acquire(ws string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[ws]; n >= l.max {
		return nil, fmt.Errorf("workspace %q: %w: %d event streams open (at most %d)", ws, workspace.ErrBusy, n, l.max)
	}
	if l.open == nil {
		l.open = make(map[string]int)
	}
	l.open[ws]++
	metricStreams.Inc()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[ws]--; l.open[ws] == 0 {
			delete(l.open, ws)
		}
		metricStreams.Dec()
	}, nil
}

// EndStreams ends every event stream, now and from now on: a server that
// shuts down (http.Server.RegisterOnShutdown) must not wait for them, as
// they never end by themselves. The clients reconnect, to this server's
// successor.
func (s *Server) EndStreams() { s.endStreams() }
