package execrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/wsync/wsync/syncwire/rpc"
)

// Stream is a running exec's event stream, as the caller sees it.
type Stream struct {
	ID        string
	RuntimeID string
	o         *rpc.Outgoing
	// Next is the offset the next output event starts at: re-attach from
	// here after a lost session.
	NextOffset int64
}

// Start runs a command and returns its event stream. ctx bounds the whole
// stream, so give it the command's timeout plus a margin.
func Start(ctx context.Context, s *rpc.Session, req Request) (*Stream, error) {
	if len(req.Stdin) > MaxStdin {
		return nil, fmt.Errorf("exec: stdin of %d bytes exceeds %d: %w", len(req.Stdin), MaxStdin, ErrBadMessage)
	}
	return open(ctx, s, MethodStart, AppendRequest(nil, req))
}

// Attach resumes an exec's event stream from an offset; from FromEnd it
// replays nothing (the events to come and the exit).
func Attach(ctx context.Context, s *rpc.Session, id string, from int64) (*Stream, error) {
	return open(ctx, s, MethodAttach, appendAttach(nil, attachReq{ID: id, From: from}))
}

// Kill signals an exec's process group.
func Kill(ctx context.Context, s *rpc.Session, id string, sig syscall.Signal) error {
	_, err := s.Call(ctx, MethodKill, appendKill(nil, killReq{ID: id, Signal: sig}))
	if err != nil {
		return fmt.Errorf("exec kill %s: %w", id, err)
	}
	return nil
}

func open(ctx context.Context, s *rpc.Session, m rpc.Method, body []byte) (*Stream, error) {
	o, err := s.Open(ctx, m, body, false)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	b, err := o.Reply(ctx)
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("exec: %w", err)
	}
	st, err := decodeStarted(b)
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("exec: %w", err)
	}
	return &Stream{ID: st.ID, RuntimeID: st.RuntimeID, o: o}, nil
}

// Next returns the next event: output, then one exit event, then io.EOF.
// Output Data is the caller's to keep.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	p, err := s.o.Recv(ctx)
	if errors.Is(err, io.EOF) {
		return Event{}, io.EOF
	}
	if err != nil {
		return Event{}, fmt.Errorf("exec %s: %w", s.ID, err)
	}
	ev, err := DecodeEvent(p)
	if err != nil {
		return Event{}, fmt.Errorf("exec %s: %w", s.ID, err)
	}
	if ev.Data != nil {
		ev.Data = append([]byte(nil), ev.Data...)
		s.NextOffset = ev.Offset + int64(len(ev.Data))
	}
	return ev, nil
}

// Close releases the stream; the command keeps running.
func (s *Stream) Close() { s.o.Close() }
