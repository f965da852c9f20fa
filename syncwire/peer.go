package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// Peer makes the sync calls (Watermarks, Push, FetchChanges, HasObjects,
// FetchObjects, PushObjects) on a session: the client side of what Server
// serves. It holds no state of its own; wrap the session at hand (a
// Client's current one) with NewPeer. Each call's frame bytes go to the
// rpc.WireCounter its context carries.
type Peer struct{ s *rpc.Session }

// NewPeer returns the sync calls on s.
func NewPeer(s *rpc.Session) Peer { return Peer{s: s} }

// open is Session.Open plus wire accounting at close.
func (p Peer) open(ctx context.Context, m rpc.Method, body []byte, stream bool) (*rpc.Outgoing, func(), error) {
	o, err := p.s.Open(ctx, m, body, stream)
	if err != nil {
		return nil, nil, err
	}
	return o, func() { o.Close(); rpc.CountWire(ctx, o) }, nil
}

// Watermarks asks the peer for its rev and the watermarks it keeps for us.
func (p Peer) Watermarks(ctx context.Context) (PeerState, error) {
	o, done, err := p.open(ctx, MethodWatermarks, nil, false)
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
func (p Peer) HasObjects(ctx context.Context, hs []chunkstore.Hash) ([]chunkstore.Hash, error) {
	have, err := Probe(ctx, hs, func(ctx context.Context, body []byte) ([]byte, error) {
		o, done, err := p.open(ctx, MethodHasObjects, body, false)
		if err != nil {
			return nil, err
		}
		defer done()
		return o.Reply(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("has objects: %w", err)
	}
	return have, nil
}

// Probe asks a side which of hs it holds, MaxHashes at a time, through
// call: a method that takes a hash list (AppendHashes) and answers a
// bitmap (AppendBitmap), as HasObjects does. It returns the hashes held,
// in input order.
func Probe(ctx context.Context, hs []chunkstore.Hash, call func(ctx context.Context, body []byte) ([]byte, error)) ([]chunkstore.Hash, error) {
	var have []chunkstore.Hash
	for len(hs) > 0 {
		part := hs[:min(len(hs), MaxHashes)]
		hs = hs[len(part):]
		b, err := call(ctx, AppendHashes(nil, part))
		if err != nil {
			return nil, err
		}
		bits, err := DecodeBitmap(b, len(part))
		if err != nil {
			return nil, err
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
func (p Peer) FetchObjects(ctx context.Context, hs []chunkstore.Hash, fn func(Object) error) error {
	for len(hs) > 0 {
		n := min(len(hs), MaxHashes)
		part := hs[:n]
		hs = hs[n:]
		if err := p.fetchObjects(ctx, part, fn); err != nil {
			return err
		}
	}
	return nil
}

func (p Peer) fetchObjects(ctx context.Context, hs []chunkstore.Hash, fn func(Object) error) error {
	if err := noHoles("fetch objects", hs); err != nil {
		return err
	}
	o, done, err := p.open(ctx, MethodFetchObjects, AppendHashes(nil, hs), false)
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
func (p Peer) PushObjects(ctx context.Context, stage uint64, hs []chunkstore.Hash,
	read ChunkReader) (ObjectStats, error) {
	var st ObjectStats
	if err := noHoles("push objects", hs); err != nil {
		return st, err
	}
	for len(hs) > 0 {
		n := min(len(hs), MaxHashes)
		if err := p.pushObjects(ctx, stage, hs[:n], read, &st); err != nil {
			return st, err
		}
		hs = hs[n:]
	}
	return st, nil
}

func (p Peer) pushObjects(ctx context.Context, stage uint64, hs []chunkstore.Hash,
	read ChunkReader, total *ObjectStats) error {
	var st ObjectStats
	o, done, err := p.open(ctx, MethodPushObjects, PushObjectsRequest{Stage: stage, Hashes: hs}.appendTo(nil), true)
	if err != nil {
		return err
	}
	defer done()
	err = SendObjects(ctx, o.Send, hs, read, func(raw, wire int) {
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
func (p Peer) Push(ctx context.Context, req PushRequest, entries []vfs.ChangeEntry) (PushResponse, error) {
	body, err := req.appendTo(nil)
	if err != nil {
		return PushResponse{}, err
	}
	o, done, err := p.open(ctx, MethodPush, body, true)
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
	o    *rpc.Outgoing
	done func()
	buf  []vfs.ChangeEntry
	eof  bool
	dec  EntryDecoder
}

// FetchChanges opens the peer's feed.
func (p Peer) FetchChanges(ctx context.Context, req FetchRequest) (*ChangeStream, error) {
	body, err := req.appendTo(nil)
	if err != nil {
		return nil, err
	}
	o, done, err := p.open(ctx, MethodFetchChanges, body, false)
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
