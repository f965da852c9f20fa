package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/bearer"
	"github.com/wsync/wsync/internal/crashpoint"
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
	ReadChunk(ctx context.Context, h chunkstore.Hash) ([]byte, error)
	Chunks() *chunkstore.Store
	Watermarks(ctx context.Context, peer string) (watermark.Set, error)
	SetWatermarks(ctx context.Context, peer string, set watermark.Set) error
	// Bounce is the peer's bounce run: revs stamped by applies of its
	// entries (ApplyOptions.Bounce), never sent back to it.
	Bounce(ctx context.Context, peer string) (vfs.BounceRun, error)
	FlushAll(ctx context.Context) error
}

var _ Backend = (*vfs.Store)(nil)

// ServerOptions configures a Server.
type ServerOptions struct {
	Config
	// Token is the bearer token every upgrade must carry. Empty disables
	// authentication (loopback-only deployments; the caller decides).
	Token string
	// HandshakeTimeout bounds the HELLO exchange (default 10s).
	HandshakeTimeout time.Duration
}

// Server serves a Backend's sync methods, plus any registered with Handle,
// on GET /sync (ServeHTTP) or on any Conn (ServeConn).
type Server struct {
	b     Backend
	opts  ServerOptions
	token bearer.Token

	mu      sync.RWMutex
	methods map[Method]Handler

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewServer returns a server for b.
func NewServer(b Backend, opts ServerOptions) *Server {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.StoreID == "" {
		opts.StoreID = b.ID()
	}
	opts.Config = opts.Config.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{b: b, opts: opts, token: bearer.New(opts.Token), methods: map[Method]Handler{}, ctx: ctx, cancel: cancel}
}

// Handle registers h for method m (m >= FirstExtensionMethod). Handlers
// may be registered while sessions run; a method registered twice panics.
func (s *Server) Handle(m Method, h Handler) {
	if m < FirstExtensionMethod {
		panic(fmt.Sprintf("syncwire: method %d is reserved", m))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.methods[m]; dup {
		panic(fmt.Sprintf("syncwire: method %d registered twice", m))
	}
	s.methods[m] = h
}

// Close ends every session and waits for them.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// ServeHTTP upgrades GET requests carrying the right bearer token and
// serves the session until it ends. Refusals are opaque: 401 with a fixed
// body whatever was wrong.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !s.token.Check(r) {
		metricRejected.WithLabelValues("auth").Inc()
		s.opts.Logger.Info("sync upgrade refused", "remote", r.RemoteAddr, "reason", "unauthorized")
		w.Header().Set("WWW-Authenticate", `Bearer realm="wsync"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.opts.Logger.Info("sync upgrade failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	s.ServeConn(r.Context(), WebSocket(c))
}

// ServeConn runs one session on conn until it ends.
func (s *Server) ServeConn(ctx context.Context, conn Conn) error {
	s.wg.Add(1)
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	ss := &serverSession{srv: s, stages: map[uint64]*chunkstore.Stage{}}
	defer ss.releaseAll()
	sess := NewSession(conn, false, s.opts.Config, ss.handler)
	ss.sess = sess
	hctx, hcancel := context.WithTimeout(ctx, s.opts.HandshakeTimeout)
	err := sess.Handshake(hctx)
	hcancel()
	if err != nil {
		metricRejected.WithLabelValues(CodeOf(err).String()).Inc()
		s.opts.Logger.Info("sync handshake failed", "err", err)
		return err
	}
	metricSessions.WithLabelValues("server").Inc()
	log := s.opts.Logger.With("peer_store", sess.Peer().StoreID, "peer_runtime", sess.Peer().RuntimeID)
	log.Debug("sync session open", "version", sess.Local().Version)
	err = sess.Serve(ctx)
	log.Debug("sync session closed", "err", err)
	return err
}

// serverSession is one session's server-side state: the stages PushObjects
// filled for the Push that follows.
type serverSession struct {
	srv  *Server
	sess *Session

	mu     sync.Mutex
	stages map[uint64]*chunkstore.Stage
}

// maxStages bounds the stages one session holds open.
const maxStages = 16

func (ss *serverSession) handler(m Method) Handler {
	switch m {
	case MethodWatermarks:
		return ss.watermarks
	case MethodPush:
		return ss.push
	case MethodFetchChanges:
		return ss.fetchChanges
	case MethodHasObjects:
		return ss.hasObjects
	case MethodFetchObjects:
		return ss.fetchObjects
	case MethodPushObjects:
		return ss.pushObjects
	}
	ss.srv.mu.RLock()
	defer ss.srv.mu.RUnlock()
	return ss.srv.methods[m]
}

// peerKey names the caller's watermarks in the backend: its store id.
func (ss *serverSession) peerKey() string { return ss.sess.Peer().StoreID }

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

func (ss *serverSession) watermarks(ctx context.Context, c *Incoming) error {
	if len(c.Body) != 0 {
		return protoErr("watermarks: %d-byte body", len(c.Body))
	}
	set, err := ss.srv.b.Watermarks(ctx, ss.peerKey())
	if err != nil {
		return err
	}
	b, err := PeerState{StoreID: ss.srv.b.ID(), CurrentRev: ss.srv.b.CurrentRev(), Set: set}.appendTo(nil)
	if err != nil {
		return err
	}
	return c.Reply(b)
}

// push applies one batch atomically: every entry and the receiver's
// watermarks in one transaction, with the chunks PushObjects staged.
func (ss *serverSession) push(ctx context.Context, c *Incoming) error {
	req, err := DecodePushRequest(c.Body)
	if err != nil {
		return err
	}
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
	b, key := ss.srv.b, ss.peerKey()
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
	resp := PushResponse{Applied: res.Applied, Skipped: res.Skipped, AppliedPush: ws.AppliedPush}
	if res.LastRev > 0 {
		resp.RevBefore, resp.RevAfter = res.RevBefore, res.LastRev
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
func (ss *serverSession) fetchChanges(ctx context.Context, c *Incoming) error {
	req, err := DecodeFetchRequest(c.Body)
	if err != nil {
		return err
	}
	b := ss.srv.b
	if err := b.FlushAll(ctx); err != nil {
		return fmt.Errorf("fetch changes: flush: %w", err)
	}
	through := req.Through
	if through == (watermark.Cursor{}) {
		through = watermark.At(b.CurrentRev())
	}
	ws, err := b.Watermarks(ctx, ss.peerKey())
	if err != nil {
		return err
	}
	// Bounce suppression: the peer holds everything up to req.After; our
	// revs that hold its own entries (its pushes we applied) do not go back.
	run, err := b.Bounce(ctx, ss.peerKey())
	if err != nil {
		return err
	}
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
// entryFrameTarget bytes, a long file entry as entry parts: the one sender
// of entry streams (push, fetch, and converge's entry pages). EntryDecoder
// reads what it sends.
func SendEntries(ctx context.Context, send func(context.Context, []byte) error, feed iter.Seq2[vfs.ChangeEntry, error]) error {
	var batch []vfs.ChangeEntry
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		p, err := AppendEntries(nil, batch)
		if err != nil {
			return err
		}
		batch, size = batch[:0], 0
		crashpoint.Hit("syncwire.entries.sent")
		return send(ctx, p)
	}
	for en, err := range feed {
		if err != nil {
			return err
		}
		n := entrySize(&en)
		if size+n > entryFrameTarget && len(batch) > 0 {
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

func (ss *serverSession) hasObjects(ctx context.Context, c *Incoming) error {
	hs, err := DecodeHashes(c.Body)
	if err != nil {
		return err
	}
	if err := noHoles("has objects", hs); err != nil {
		return err
	}
	have, err := ss.srv.b.Has(ctx, hs)
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

func (ss *serverSession) fetchObjects(ctx context.Context, c *Incoming) error {
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
	b := ss.srv.b
	return sendObjects(ctx, c.Send, hs, b.ReadChunk, nil)
}

// sendObjects streams the chunks named by hs, read with read, packed into
// messages of about entryFrameTarget bytes. sent, if non-nil, learns the
// raw and wire size of each chunk.
func sendObjects(ctx context.Context, send func(context.Context, []byte) error, hs []chunkstore.Hash,
	read func(context.Context, chunkstore.Hash) ([]byte, error), sent func(raw, wire int)) error {
	var msg []byte
	count := 0
	flush := func() error {
		if count == 0 {
			return nil
		}
		var e enc
		e.uvarint(uint64(count))
		p := append(e.b, msg...)
		msg, count = msg[:0], 0
		crashpoint.Hit("syncwire.objects.sent")
		return send(ctx, p)
	}
	for _, h := range hs {
		data, err := read(ctx, h)
		if err != nil {
			return fmt.Errorf("read chunk %s: %w", h, err)
		}
		if len(data) == 0 || len(data) > chunkstore.ChunkSize {
			return fmt.Errorf("read chunk %s: %w: %d bytes", h, chunkstore.ErrChunkTooLarge, len(data))
		}
		if len(msg)+objectHeader+len(data) > MaxPayload-binaryMaxVarint {
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
		if len(msg) >= entryFrameTarget {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// pushObjects stages received chunks for the Push that follows. Each chunk
// is hashed before it is staged; one mismatch fails the call and discards
// the whole stage, so the batch applies nothing.
func (ss *serverSession) pushObjects(ctx context.Context, c *Incoming) error {
	req, err := DecodePushObjectsRequest(c.Body)
	if err != nil {
		return err
	}
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
