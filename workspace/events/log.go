package events

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Retention defaults (Options).
const (
	DefaultMaxEvents = 10_000
	DefaultMaxAge    = time.Hour
	DefaultMaxBytes  = 16 << 20
)

// MaxEventBytes bounds one event's encoding: an event whose data would
// make it larger is published with {"truncated": true, "bytes": N} as its
// data instead.
const MaxEventBytes = 64 << 10

// TypeGap is the type of the event a subscription is told when events it
// has not read are no longer retained (see Gap). It has no id.
const TypeGap = "gap"

// Gap reasons.
const (
	GapBehind  = "behind"  // the subscriber fell behind what the log retains
	GapRestart = "restart" // its id is not of this log: the server restarted since
)

// Event is one thing that happened in a workspace.
type Event struct {
	// ID is "EPOCH-SEQ": the log's epoch (random, new with every log, so
	// with every server start) and the event's number in it, from 1. A gap
	// event has none.
	ID   string    `json:"id,omitempty"`
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Runtime is the workspace runtime the event concerns ("" for none).
	Runtime string          `json:"runtime,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`

	raw []byte // the encoding, made once when the event was published
}

// JSON is the event's JSON encoding: made once at publication for a
// logged event, so a thousand subscribers share it. It must not be
// modified.
func (e Event) JSON() []byte {
	if e.raw != nil {
		return e.raw
	}
	type plain Event
	b, _ := json.Marshal(plain(e))
	return b
}

// Gap is the data of a TypeGap event.
type Gap struct {
	// After is the id the subscriber read last (or asked to read after).
	After string `json:"after,omitempty"`
	// Oldest is the oldest id the log still retains; the subscription
	// goes on from it. Empty when the log retains nothing.
	Oldest string `json:"oldest,omitempty"`
	// Missed is how many events were dropped unread, when it is known (a
	// restart loses an unknown number).
	Missed uint64 `json:"missed,omitempty"`
	Reason string `json:"reason"`
}

// Options bounds a Log's retention: an event is dropped, oldest first,
// once the log holds more than MaxEvents events or MaxBytes bytes of
// encoded events, or once it is older than MaxAge. Zero values are the
// defaults.
type Options struct {
	MaxEvents int
	MaxAge    time.Duration
	MaxBytes  int64
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Log is the bounded, replayable, in-memory log of one workspace's events.
// Publish appends; subscribers read from an id onwards at their own pace
// (Subscribe). The log is the only buffer: a subscriber that does not read
// holds up no publisher and no other subscriber, and one that falls behind
// what is retained is told so by a gap event. Safe for concurrent use.
type Log struct {
	opts  Options
	epoch string

	mu    sync.Mutex
	ring  []Event // retained events are ring[head:], seqs first, first+1, ...
	head  int
	first uint64 // seq of ring[head]; next when nothing is retained
	next  uint64 // seq of the next event published
	bytes int64  // encoded bytes retained
	wake  chan struct{}
}

// New returns an empty log with a fresh epoch.
func New(opts Options) *Log {
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var b [4]byte
	rand.Read(b[:])
	return &Log{opts: opts, epoch: hex.EncodeToString(b[:]), first: 1, next: 1}
}

// Epoch is the log's epoch, the first part of its ids.
func (l *Log) Epoch() string { return l.epoch }

// Publish appends an event of type typ about runtime ("" for none) with
// data encoded as JSON (nil: none), wakes the subscribers that wait, and
// returns the event. It never blocks on a subscriber. data must encode:
// what does not is published as {"error": ...}, never lost silently.
func (l *Log) Publish(typ, runtime string, data any) Event {
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"error": err.Error()})
		}
		raw = b
	}
	metricPublished.WithLabelValues(typ).Inc()
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := Event{ID: l.id(l.next), Time: now.UTC(), Type: typ, Runtime: runtime, Data: raw}
	ev.raw = ev.JSON()
	if len(ev.raw) > MaxEventBytes {
		ev.raw = nil
		ev.Data, _ = json.Marshal(map[string]any{"truncated": true, "bytes": len(raw)})
		ev.raw = ev.JSON()
	}
	if n, end := len(ev.Data), len(ev.raw)-1; n > 0 && bytes.HasSuffix(ev.raw[:end], ev.Data) {
		ev.Data = ev.raw[end-n : end : end] // the data is the encoding's last field: keep its bytes once
	}
	l.next++
	l.ring = append(l.ring, ev)
	l.bytes += int64(len(ev.raw))
	l.pruneLocked(now)
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
	return ev
}

// pruneLocked drops the oldest events past the bounds. l.mu is held.
func (l *Log) pruneLocked(now time.Time) {
	old := now.Add(-l.opts.MaxAge)
	for l.head < len(l.ring) {
		ev := &l.ring[l.head]
		if len(l.ring)-l.head <= l.opts.MaxEvents && l.bytes <= l.opts.MaxBytes && !ev.Time.Before(old) {
			break
		}
		l.bytes -= int64(len(ev.raw))
		*ev = Event{}
		l.head++
		l.first++
	}
	if l.head > 64 && l.head > len(l.ring)/2 {
		n := copy(l.ring, l.ring[l.head:])
		clear(l.ring[n:])
		l.ring = l.ring[:n]
		l.head = 0
	}
}

func (l *Log) id(seq uint64) string { return l.epoch + "-" + strconv.FormatUint(seq, 10) }

// maxIDLen bounds an id a caller gives.
const maxIDLen = 64

// parseID splits an id into its epoch and sequence number.
func parseID(id string) (epoch string, seq uint64, err error) {
	if len(id) > maxIDLen {
		return "", 0, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadID, len(id), maxIDLen)
	}
	epoch, n, ok := strings.Cut(id, "-")
	if !ok || len(epoch) != 8 || strings.Trim(epoch, "0123456789abcdef") != "" {
		return "", 0, fmt.Errorf("%w: %q (want EPOCH-SEQ, as the events carry)", ErrBadID, id)
	}
	seq, err = strconv.ParseUint(n, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %q (want EPOCH-SEQ, as the events carry)", ErrBadID, id)
	}
	return epoch, seq, nil
}

// Subscribe returns a subscription that reads the events after the one
// named after:
//
//   - "": the events published from now on;
//   - "0": every event of this log from its first, so everything still
//     retained (with a gap first when its first events were dropped);
//   - an id of this log: the events after it (with a gap first when some
//     of them were dropped);
//   - an id of another log (from before a restart; or one this log never
//     gave): everything retained, after a gap event with reason
//     GapRestart, since what happened in between is not known.
//
// An id that is not of the form the log writes is ErrBadID.
func (l *Log) Subscribe(after string) (*Subscription, error) {
	s := &Subscription{l: l, after: after}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(l.opts.Now())
	switch after {
	case "":
		s.next = l.next
		return s, nil
	case "0":
		s.after, s.next = "", 1
		return s, nil
	}
	epoch, seq, err := parseID(after)
	if err != nil {
		return nil, err
	}
	if epoch == l.epoch && seq < l.next {
		s.next = seq + 1
	} else {
		s.next, s.restart = 1, true
	}
	return s, nil
}

// Subscription reads one log's events in order at its own pace. It holds
// no resources and needs no closing; it is not safe for concurrent use.
type Subscription struct {
	l       *Log
	next    uint64 // seq of the next event to read
	after   string // the id read last (or given to Subscribe), for gaps
	restart bool   // the first Next reports a GapRestart
}

// Position is the id a Subscribe goes on from to read what this
// subscription has yet to read (while it has no gap to tell).
func (s *Subscription) Position() string { return s.l.id(s.next - 1) }

// Next blocks until there is an event for the subscription or ctx ends,
// and returns it. When events the subscription has not read were dropped
// it returns a TypeGap event (data: Gap) first, then goes on from the
// oldest event retained.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	l := s.l
	for {
		l.mu.Lock()
		switch {
		case s.restart:
			s.restart = false
			s.next = l.first
			ev := s.gapLocked(GapRestart, 0)
			l.mu.Unlock()
			return ev, nil
		case s.next < l.first:
			missed := l.first - s.next
			s.next = l.first
			ev := s.gapLocked(GapBehind, missed)
			l.mu.Unlock()
			return ev, nil
		case s.next < l.next:
			ev := l.ring[l.head+int(s.next-l.first)]
			s.next++
			s.after = ev.ID
			l.mu.Unlock()
			return ev, nil
		}
		if l.wake == nil {
			l.wake = make(chan struct{})
		}
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// gapLocked is the gap event telling the subscription it goes on from
// the oldest event retained. l.mu is held.
func (s *Subscription) gapLocked(reason string, missed uint64) Event {
	l := s.l
	g := Gap{After: s.after, Missed: missed, Reason: reason}
	if l.first < l.next {
		g.Oldest = l.id(l.first)
	}
	metricGaps.WithLabelValues(reason).Inc()
	data, _ := json.Marshal(g)
	return Event{Time: l.opts.Now().UTC(), Type: TypeGap, Data: data}
}
