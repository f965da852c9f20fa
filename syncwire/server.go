package syncwire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Backend is what the sync server and the drivers need of a store.
// *vfs.Store satisfies it.
type Backend interface {
	ID() string
	CurrentRev() int64
	Changes(ctx context.Context, after, through watermark.Cursor, ig vfs.Ignore) iter.Seq2[vfs.ChangeEntry, error]
	Apply(ctx context.Context, entries []vfs.ChangeEntry, opts vfs.ApplyOptions) (vfs.ApplyResult, error)
	Has(ctx context.Context, hashes []chunkstore.Hash) ([]chunkstore.Hash, error)
	// ReadChunks calls each with every chunk of hs, in order; an error
	// from each stops it and is returned.
	ReadChunks(ctx context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error
	Chunks() *chunkstore.Store
	Watermarks(ctx context.Context, peer string) (watermark.Set, error)
	SetWatermarks(ctx context.Context, peer string, set watermark.Set) error
	// FeedIgnore is the ignore list key (vfs.IgnoreKey) the peer's feed
	// was last pulled with, "" when none was recorded; SetFeedIgnore
	// records one with the watermarks, in one transaction.
	FeedIgnore(ctx context.Context, peer string) (string, error)
	SetFeedIgnore(ctx context.Context, peer, key string, set watermark.Set) error
	// Delivered is SetWatermarks after a push batch the peer acknowledged,
	// with the merge bases of what it applied (bases) and new revs for
	// what its fence deferred, in one transaction.
	Delivered(ctx context.Context, peer string, set watermark.Set, sent []vfs.ChangeEntry, deferred []string, bases bool) error
	// Bounce is the peer's bounce run: revs stamped by applies of its
	// entries (ApplyOptions.Bounce), never sent back to it.
	Bounce(ctx context.Context, peer string) (vfs.BounceRun, error)
	// MeetPeer records the store id behind peer; when another store was
	// recorded, or the same one serves less of its feed than our fetch
	// cursor covers (restored behind it), it resets what described what
	// the peer held (the fetch cursor, the bounce run, the merge bases)
	// and reports it. A served below 0 is not checked.
	MeetPeer(ctx context.Context, peer, id string, served int64) (vfs.Met, error)
	// Served is the highest rev the store handed out as a place in its
	// feed; NoteServed records one before the answer carrying it goes
	// (a failure to record only costs a refetch later, and is not
	// returned).
	Served() int64
	NoteServed(ctx context.Context, rev int64)
	FlushAll(ctx context.Context) error
	// Quota, SetQuota and Admit are the store's quota (quota.go): the
	// driver tells the peer its own and admits each pulled batch; the
	// server takes the peer's.
	Quota() vfs.Quota
	SetQuota(q vfs.Quota) error
	Usage() vfs.Usage
	Admit(ctx context.Context, entries []vfs.ChangeEntry, from vfs.Usage) (vfs.Usage, error)
}

var _ Backend = (*vfs.Store)(nil)

// Server serves a Backend's sync methods on an rpc.Server, beside the
// methods other packages register with Handle, on GET /sync (ServeHTTP) or
// on any Conn (ServeConn).
type Server struct {
	*rpc.Server
	b Backend

	mu       sync.Mutex
	sessions map[*rpc.Session]*serverSession
}

// NewServer returns a server for b. The handshake names b (opts.ID
// defaults to b.ID()): the peer keys the watermarks it keeps for us by it.
func NewServer(b Backend, opts rpc.ServerOptions) *Server {
	if opts.ID == "" {
		opts.ID = b.ID()
	}
	s := &Server{Server: rpc.NewServer(opts), b: b, sessions: map[*rpc.Session]*serverSession{}}
	s.Server.Handle(MethodWatermarks, s.watermarks)
	s.Server.Handle(MethodPush, s.push)
	s.Server.Handle(MethodFetchChanges, s.fetchChanges)
	s.Server.Handle(MethodHasObjects, s.hasObjects)
	s.Server.Handle(MethodFetchObjects, s.fetchObjects)
	s.Server.Handle(MethodPushObjects, s.pushObjects)
	s.Server.Handle(MethodSetQuota, s.setQuota)
	s.OnSessionEnd(s.sessionEnded)
	return s
}

// Handle registers h for method m (m >= FirstExtensionMethod: the numbers
// below are the sync protocol's). A method registered twice panics.
func (s *Server) Handle(m rpc.Method, h rpc.Handler) {
	if m < FirstExtensionMethod {
		panic(fmt.Sprintf("syncwire: method %d is reserved", m))
	}
	s.Server.Handle(m, h)
}

// serverSession is one session's server-side state: the stages PushObjects
// filled for the Push that follows.
type serverSession struct {
	srv *Server

	mu     sync.Mutex
	stages map[uint64]*chunkstore.Stage
}

// session returns the state of the session c arrived on.
func (s *Server) session(c *rpc.Incoming) *serverSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[c.Session()]
	if ss == nil {
		ss = &serverSession{srv: s, stages: map[uint64]*chunkstore.Stage{}}
		s.sessions[c.Session()] = ss
	}
	return ss
}

// sessionEnded releases a session's stages once its handlers returned.
func (s *Server) sessionEnded(sess *rpc.Session) {
	s.mu.Lock()
	ss := s.sessions[sess]
	delete(s.sessions, sess)
	s.mu.Unlock()
	if ss != nil {
		ss.releaseAll()
	}
}

// peerKey names the caller's watermarks in the backend: its store id,
// which it sends as its handshake id.
func peerKey(c *rpc.Incoming) string { return c.Session().Peer().ID }

// maxStages bounds the stages one session holds open.
const maxStages = 16

func (ss *serverSession) releaseAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, st := range ss.stages {
		st.Release()
		delete(ss.stages, id)
	}
}

func (ss *serverSession) stage(id uint64, create bool) (*chunkstore.Stage, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	st := ss.stages[id]
	if st != nil || !create {
		return st, nil
	}
	if len(ss.stages) >= maxStages {
		return nil, fmt.Errorf("%w: more than %d open stages", vfs.ErrInvalid, maxStages)
	}
	st = ss.srv.b.Chunks().NewStage()
	ss.stages[id] = st
	return st, nil
}

// dropStage forgets and releases a stage.
func (ss *serverSession) dropStage(id uint64) {
	ss.mu.Lock()
	st := ss.stages[id]
	delete(ss.stages, id)
	ss.mu.Unlock()
	if st != nil {
		st.Release()
	}
}

func (s *Server) watermarks(ctx context.Context, c *rpc.Incoming) error {
	if len(c.Body) != 0 {
		return protoErr("watermarks: %d-byte body", len(c.Body))
	}
	set, err := s.b.Watermarks(ctx, peerKey(c))
	if err != nil {
		return err
	}
	b, err := PeerState{StoreID: s.b.ID(), CurrentRev: s.b.CurrentRev(), Set: set, Served: s.b.Served()}.appendTo(nil)
	if err != nil {
		return err
	}
	return c.Reply(b)
}

// push applies one batch atomically: every entry and the receiver's
// watermarks in one transaction, with the chunks PushObjects staged.
func (s *Server) push(ctx context.Context, c *rpc.Incoming) error {
	req, err := DecodePushRequest(c.Body)
	if err != nil {
		return err
	}
	ss := s.session(c)
	var stage *chunkstore.Stage
	if req.Stage != 0 {
		defer ss.dropStage(req.Stage)
		if stage, err = ss.stage(req.Stage, false); err != nil {
			return err
		}
		if stage == nil {
			return fmt.Errorf("push: stage %d: %w (no PushObjects on this session)", req.Stage, chunkstore.ErrUnknownHash)
		}
	}
	var entries []vfs.ChangeEntry
	var size int
	var ed EntryDecoder
	for {
		p, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if err := ed.Finish(); err != nil {
				return fmt.Errorf("push: %w", err)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		size += len(p)
		if size > MaxPushBytes {
			return protoErr("push: entries exceed %d bytes", MaxPushBytes)
		}
		batch, err := ed.Decode(p)
		if err != nil {
			return fmt.Errorf("push: %w", err)
		}
		if len(entries)+len(batch) > MaxPushEntries {
			return protoErr("push: more than %d entries", MaxPushEntries)
		}
		entries = append(entries, batch...)
	}
	b, key := s.b, peerKey(c)
	ws, err := b.Watermarks(ctx, key)
	if err != nil {
		return err
	}
	ws.AppliedPush = req.SenderCursor
	opts := vfs.ApplyOptions{Source: vfs.Local, Stage: stage, Peer: key, Watermarks: &ws}
	if req.SenderRev > 0 {
		// A sync peer: its entries are upstream state, and this batch is
		// how far we have taken its feed.
		opts.Source = vfs.Upstream
		ws.Fetch = req.SenderCursor
		// The revs this apply stamps hold the sender's own entries: keep
		// them, in the apply's transaction, as its bounce run, so our feed
		// skips them even if this reply never reaches it.
		opts.Bounce = true
		// What we changed after the sender's fetch cursor is not
		// overwritten: those entries wait for the sender's next pull.
		// Dirty open files commit first, so what running processes wrote
		// counts as changed.
		fence := req.Fence
		opts.Fence = &fence
		if len(entries) > 0 {
			if err := b.FlushAll(ctx); err != nil {
				return fmt.Errorf("push: flush: %w", err)
			}
		}
	}
	var res vfs.ApplyResult
	if len(entries) == 0 {
		err = b.SetWatermarks(ctx, key, ws)
	} else {
		res, err = b.Apply(ctx, entries, opts)
	}
	if err != nil {
		return err
	}
	crashpoint.Hit("syncwire.push.applied")
	resp := PushResponse{Applied: res.Applied, Skipped: res.Skipped, AppliedPush: ws.AppliedPush, Deferred: res.Deferred}
	if res.LastRev > 0 {
		resp.RevBefore, resp.RevAfter = res.RevBefore, res.LastRev
		// The sender may take rev_after as its fetch cursor (the revs
		// hold its own entries): recorded first, as a feed's head is.
		b.NoteServed(ctx, resp.RevAfter)
	} else {
		resp.RevBefore = b.CurrentRev()
		resp.RevAfter = resp.RevBefore
	}
	out, err := resp.appendTo(nil)
	if err != nil {
		return err
	}
	return c.Reply(out)
}

// fetchChanges streams the feed. Dirty open handles are flushed first so a
// pull sees what running processes wrote.
func (s *Server) fetchChanges(ctx context.Context, c *rpc.Incoming) error {
	req, err := DecodeFetchRequest(c.Body)
	if err != nil {
		return err
	}
	b := s.b
	if err := b.FlushAll(ctx); err != nil {
		return fmt.Errorf("fetch changes: flush: %w", err)
	}
	through := req.Through
	if through == (watermark.Cursor{}) {
		through = watermark.At(b.CurrentRev())
	}
	ws, err := b.Watermarks(ctx, peerKey(c))
	if err != nil {
		return err
	}
	// Bounce suppression: the peer holds everything up to req.After; our
	// revs that hold its own entries (its pushes we applied) do not go back.
	run, err := b.Bounce(ctx, peerKey(c))
	if err != nil {
		return err
	}
	// The caller may take the head as its fetch cursor: recorded first, a
	// copy of this store restored later holds at least this much.
	b.NoteServed(ctx, through.Rev)
	head, err := FetchResponse{Current: through, AppliedPush: ws.AppliedPush}.appendTo(nil)
	if err != nil {
		return err
	}
	if err := c.ReplyStream(head); err != nil {
		return err
	}
	return SendEntries(ctx, c.Send, b.Changes(ctx, run.Skip(req.After), through, vfs.NewIgnore(req.Ignore)))
}

// SendEntries packs a feed into entry-stream messages of about
// entryFrameTarget bytes (the first of firstEntryFrame, each next one's
// target twice the last's), a long file entry as entry parts: the one sender
// of entry streams (push, fetch, and converge's entry pages). EntryDecoder
// reads what it sends.
func SendEntries(ctx context.Context, send func(context.Context, []byte) error, feed iter.Seq2[vfs.ChangeEntry, error]) error {
	var batch []vfs.ChangeEntry
	size, target := 0, firstEntryFrame
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		p, err := AppendEntries(nil, batch)
		if err != nil {
			return err
		}
		batch, size, target = batch[:0], 0, min(2*target, entryFrameTarget)
		crashpoint.Hit("syncwire.entries.sent")
		return send(ctx, p)
	}
	for en, err := range feed {
		if err != nil {
			return err
		}
		n := entrySize(&en)
		if size+n > target && len(batch) > 0 {
			if err := flush(); err != nil {
				return err
			}
		}
		if longEntry(&en) {
			// A manifest this long (a dense file over ~6 GiB) travels as
			// entry parts, each well within a frame.
			if err := flush(); err != nil {
				return err
			}
			parts, err := AppendEntryParts(&en)
			if err != nil {
				return err
			}
			for _, p := range parts {
				if err := send(ctx, p); err != nil {
					return err
				}
			}
			continue
		}
		batch = append(batch, en)
		size += n
	}
	return flush()
}

// noHoles refuses a request that names the hole hash as an object: holes
// are never probed, fetched or pushed.
func noHoles(what string, hs []chunkstore.Hash) error {
	for i, h := range hs {
		if isHole(h) {
			return protoErr("%s: hash %d is the hole hash, not an object", what, i)
		}
	}
	return nil
}

func (s *Server) hasObjects(ctx context.Context, c *rpc.Incoming) error {
	hs, err := DecodeHashes(c.Body)
	if err != nil {
		return err
	}
	if err := noHoles("has objects", hs); err != nil {
		return err
	}
	have, err := s.b.Has(ctx, hs)
	if err != nil {
		return err
	}
	set := make(map[chunkstore.Hash]bool, len(have))
	for _, h := range have {
		set[h] = true
	}
	bits := make([]bool, len(hs))
	for i, h := range hs {
		bits[i] = set[h]
	}
	return c.Reply(AppendBitmap(nil, bits))
}

func (s *Server) fetchObjects(ctx context.Context, c *rpc.Incoming) error {
	hs, err := DecodeHashes(c.Body)
	if err != nil {
		return err
	}
	if err := noHoles("fetch objects", hs); err != nil {
		return err
	}
	if err := c.ReplyStream(nil); err != nil {
		return err
	}
	b := s.b
	return SendObjects(ctx, c.Send, hs, b.ReadChunks, nil)
}

// SendObjects streams the chunks named by hs, read with read, packed into
// object messages of about entryFrameTarget bytes (each chunk raw or zstd,
// whichever is meaningfully smaller) sent with send, which must be done
// with a message when it returns. sent, if non-nil, learns the raw and
// wire size of each chunk. FetchObjects, PushObjects and a snapshot's
// SnapObjects (converge) all send their chunks this way.
func SendObjects(ctx context.Context, send func(context.Context, []byte) error, hs []chunkstore.Hash,
	read ChunkReader, sent func(raw, wire int)) error {
	// A message is uvarint(count) || objects. The objects are appended
	// after room for the count, which goes in front of them at the flush:
	// the message is sent from the buffer it was built in (send copies it
	// into its frame), not copied into another one first.
	// The buffer comes from a pool: a pull sends one call per batch, and a
	// buffer grown to a message's size serves the calls after it.
	const room = binaryMaxVarint
	bp := objectBufs.Get().(*[]byte)
	msg := (*bp)[:room] // the room's bytes are written at each flush
	defer func() {
		*bp = msg[:0]
		objectBufs.Put(bp)
	}()
	count := 0
	flush := func() error {
		if count == 0 {
			return nil
		}
		var c [binaryMaxVarint]byte
		head := binary.PutUvarint(c[:], uint64(count))
		p := msg[room-head:]
		copy(p, c[:head])
		msg, count = msg[:room], 0
		crashpoint.Hit("syncwire.objects.sent")
		return send(ctx, p)
	}
	err := read(ctx, hs, func(h chunkstore.Hash, data []byte) error {
		if len(data) == 0 || len(data) > chunkstore.ChunkSize {
			return fmt.Errorf("read chunk %s: %w: %d bytes", h, chunkstore.ErrChunkTooLarge, len(data))
		}
		if len(msg)-room+objectHeader+len(data) > rpc.MaxPayload-binaryMaxVarint {
			if err := flush(); err != nil {
				return err
			}
		}
		var wire int
		msg, wire = appendObject(msg, Object{Hash: h, Data: data})
		count++
		if sent != nil {
			sent(len(data), wire)
		}
		if len(msg)-room >= entryFrameTarget {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// objectBufs are SendObjects's message buffers (they start at 64 KiB: a
// pull of one file sends one small chunk).
var objectBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// ChunkReader calls each with every chunk of hs, in order; an error from
// each stops it and is returned (Backend.ReadChunks).
type ChunkReader func(ctx context.Context, hs []chunkstore.Hash, each func(chunkstore.Hash, []byte) error) error

// pushObjects stages received chunks for the Push that follows. Each chunk
// is hashed before it is staged; one mismatch fails the call and discards
// the whole stage, so the batch applies nothing.
func (s *Server) pushObjects(ctx context.Context, c *rpc.Incoming) error {
	req, err := DecodePushObjectsRequest(c.Body)
	if err != nil {
		return err
	}
	ss := s.session(c)
	id := req.Stage
	st, err := ss.stage(id, true)
	if err != nil {
		return err
	}
	var resp PushObjectsResponse
	g := newStager(ctx, st)
	fail := func(err error) error {
		if werr := g.wait(); werr != nil {
			err = werr // the staging failure is the cause
		}
		ss.dropStage(id)
		return fmt.Errorf("push objects: %w", err)
	}
	q := newObjectQueue("push objects", req.Hashes)
	put := func(o Object) error {
		if err := g.put(o); err != nil {
			return err
		}
		resp.Chunks++
		resp.Bytes += int64(len(o.Data))
		return nil
	}
	for {
		p, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		if err := DecodeObjectsFunc(p, q.check, put); err != nil {
			return fail(err)
		}
	}
	if err := q.finish(); err != nil {
		return fail(err)
	}
	if err := g.wait(); err != nil {
		ss.dropStage(id)
		return fmt.Errorf("push objects: %w", err)
	}
	return c.Reply(resp.appendTo(nil))
}
