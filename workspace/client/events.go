package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wsync/wsync/workspace/events"
)

// Reconnect delays of an event stream: doubling from the first, up to the
// last, back to the first once a connection delivered an event.
const (
	eventsRetryFirst = 100 * time.Millisecond
	eventsRetryMax   = 5 * time.Second
)

// Events follows the workspace's event stream (GET .../events): it calls
// fn with every event after the one named after ("": from now; "0": all
// the server retains; an id: what came after it), in order, until ctx ends
// (ctx's error) or fn returns an error (that error). A connection that
// drops is opened again with Last-Event-ID, after a delay that grows while
// the server cannot be reached, so nothing the server still retains is
// missed; a gap event (type events.TypeGap) tells what was. An error
// answer ends it (a bad id, a bad token), except those worth a retry: 429
// and 5xx.
func (w *Workspace) Events(ctx context.Context, after string, fn func(events.Event) error) error {
	return w.EventsOf(ctx, after, nil, fn)
}

// EventsOf is Events for the event types (or families: "sync") types
// names; none is every type.
func (w *Workspace) EventsOf(ctx context.Context, after string, types []string, fn func(events.Event) error) error {
	p, err := w.prefix()
	if err != nil {
		return err
	}
	q := url.Values{}
	if len(types) > 0 {
		q.Set("types", strings.Join(types, ","))
	}
	delay := eventsRetryFirst
	for {
		delivered, err := w.follow(ctx, p+"/events", q, &after, fn)
		var fe *fnError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &fe):
			return fe.err
		case !retryable(err):
			return err
		case delivered:
			delay = eventsRetryFirst
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, eventsRetryMax)
	}
}

// fnError carries the error of Events' fn out of follow.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

// errNotEvents: the server answered a stream request with something else
// (a proxy's page, another server): opening it again would not change that.
var errNotEvents = errors.New("the answer is not an event stream")

// retryable: the stream is worth opening again after err (a dropped or
// refused connection, a busy or failing server), not after an answer that
// will not change (4xx but 429, not a stream).
func retryable(err error) bool {
	if errors.Is(err, errNotEvents) {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusTooManyRequests || e.Status >= 500
	}
	return true
}

// maxEventLine bounds one line of the stream: an event's JSON is at most
// events.MaxEventBytes.
const maxEventLine = 2 * events.MaxEventBytes

// follow reads one connection of the stream, resuming after *after and
// moving it with every id the stream carries. It reports whether it
// delivered an event.
func (w *Workspace) follow(ctx context.Context, path string, q url.Values, after *string, fn func(events.Event) error) (bool, error) {
	hdr := http.Header{"Accept": {"text/event-stream"}}
	if *after != "" {
		hdr.Set("Last-Event-ID", *after)
	}
	resp, err := w.c.do(ctx, http.MethodGet, path, q, nil, hdr)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, fmt.Errorf("events: %w: its type is %q", errNotEvents, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	delivered := false
	var id, data string
	var hasID bool
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				id, hasID = value, true
			case "data":
				data = value
			}
			continue
		}
		// A blank line ends a message: an id sets the position, data is
		// an event.
		if hasID {
			*after = id
		}
		if data != "" {
			var ev events.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return delivered, fmt.Errorf("events: %w", err)
			}
			delivered = true
			if err := fn(ev); err != nil {
				return delivered, &fnError{err}
			}
		}
		id, data, hasID = "", "", false
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF // the server never ends a stream it means to keep
	}
	return delivered, fmt.Errorf("events: %w", err)
}
