package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Driver batch bounds (SPEC section 4).
const (
	// BatchEntries bounds a push batch and a pull batch.
	BatchEntries = 256
	// BatchMissingBytes bounds the missing chunk bytes of a push batch
	// (a batch always takes at least one entry, however large its file).
	BatchMissingBytes = 4 << 20
)

// DriverOptions configures a Driver.
type DriverOptions struct {
	// Ignore is the pull's ignore list: nil means vfs.DefaultIgnore, an
	// empty non-nil list disables ignoring.
	Ignore []string
	// BatchEntries and BatchMissingBytes override the batch bounds (tests).
	BatchEntries      int
	BatchMissingBytes int64
	Logger            *slog.Logger

	// noReconcile skips reconcile-on-connect (tests of the invariant path).
	noReconcile bool
}

// Driver syncs a local store with one peer: PushOnce sends local changes,
// PullOnce fetches the peer's, Tick does both (pull first). Calls are
// serialised through a FIFO; a failed call does not poison it.
type Driver struct {
	local  Backend
	peer   string
	client *rpc.Client
	opts   DriverOptions
	log    *slog.Logger

	q          fifo
	reconciled uint64 // session epoch last reconciled (under q)
	stageSeq   atomic.Uint64
}

// NewDriver returns a driver for local and the peer behind c. peer names
// the local watermarks kept for that peer. c must announce local's store id
// (rpc.ClientOptions.Config.ID = local.ID()): the peer keys the watermarks
// it keeps for us by it.
func NewDriver(local Backend, peer string, c *rpc.Client, opts DriverOptions) *Driver {
	if opts.BatchEntries <= 0 {
		opts.BatchEntries = BatchEntries
	}
	if opts.BatchMissingBytes <= 0 {
		opts.BatchMissingBytes = BatchMissingBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Driver{local: local, peer: peer, client: c, opts: opts, log: opts.Logger.With("peer", peer)}
}

// Result counts what one push or pull did.
type Result struct {
	Entries int // entries sent (push) or received (pull)
	Applied int // entries that changed the receiving store
	Skipped int // entries that already matched
	Batches int
	// Chunks and ChunkBytes are the chunks that crossed the wire and their
	// raw size.
	Chunks     int
	ChunkBytes int64
	// DedupBytes are chunk bytes the entries referenced that did not cross
	// the wire because the receiver had them (or they repeated in a batch).
	DedupBytes int64
	// WireBytes are the frame bytes of every call, both directions.
	WireBytes int64
	// Resets counts watermarks reset to re-baseline the peer.
	Resets int
}

// TickResult is a Tick's pull and push.
type TickResult struct{ Pull, Push Result }

// PushOnce sends every local change after the push cursor to the peer.
func (d *Driver) PushOnce(ctx context.Context) (Result, error) {
	var res Result
	err := d.q.run(ctx, func() error { return d.withSession(ctx, &res, d.push) })
	return res, d.observe("push", err)
}

// PullOnce fetches and applies every peer change after the fetch cursor.
func (d *Driver) PullOnce(ctx context.Context) (Result, error) {
	var res Result
	err := d.q.run(ctx, func() error { return d.withSession(ctx, &res, d.pull) })
	return res, d.observe("pull", err)
}

// Tick pulls then pushes, in one FIFO turn: the pull absorbs the peer's
// writes before the push can overwrite them with stale local state.
func (d *Driver) Tick(ctx context.Context) (TickResult, error) {
	var tr TickResult
	err := d.q.run(ctx, func() error {
		if err := d.withSession(ctx, &tr.Pull, d.pull); err != nil {
			return fmt.Errorf("pull: %w", d.observe("pull", err))
		}
		if err := d.withSession(ctx, &tr.Push, d.push); err != nil {
			return fmt.Errorf("push: %w", d.observe("push", err))
		}
		return nil
	})
	return tr, err
}

func (d *Driver) observe(op string, err error) error {
	if err != nil {
		metricSyncErrors.WithLabelValues(op, rpc.CodeOf(err).String()).Inc()
	}
	return err
}

// withSession gets a session (redialling if the last one died), reconciles
// watermarks on a new one, runs op and totals its wire bytes.
func (d *Driver) withSession(ctx context.Context, res *Result, op func(context.Context, Peer, *Result) error) error {
	var wc rpc.WireCounter
	ctx = rpc.WithWireCounter(ctx, &wc)
	defer func() { res.WireBytes += wc.In.Load() + wc.Out.Load() }()
	sess, epoch, err := d.client.Session(ctx)
	if err != nil {
		return err
	}
	if id := sess.Local().ID; id != d.local.ID() {
		// The peer keys the watermarks it keeps for us by this id.
		return fmt.Errorf("%w: client announces store %q, the driver's store is %q", vfs.ErrInvalid, id, d.local.ID())
	}
	s := NewPeer(sess)
	if epoch != d.reconciled && !d.opts.noReconcile {
		if err := d.reconcile(ctx, s, res); err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
	}
	d.reconciled = epoch
	return op(ctx, s, res)
}

// reconcile re-baselines watermarks against a peer met on a new session:
// a peer whose current rev is below our fetch cursor lost its feed (fetch
// it again from the start); a peer that has less of our feed than our push
// cursor says lost state (push again from what it has).
func (d *Driver) reconcile(ctx context.Context, s Peer, res *Result) error {
	ps, err := s.Watermarks(ctx)
	if err != nil {
		return err
	}
	ws, err := d.local.Watermarks(ctx, d.peer)
	if err != nil {
		return err
	}
	changed := false
	if ps.CurrentRev < ws.Fetch.Rev {
		d.log.Info("peer feed is behind our fetch cursor; refetching", "peer_rev", ps.CurrentRev, "fetch", ws.Fetch)
		ws.Fetch = watermark.Cursor{}
		changed = true
	}
	peerHas := ps.Set.AppliedPush
	if peerHas.Less(ps.Set.Fetch) {
		peerHas = ps.Set.Fetch
	}
	if peerHas.Less(ws.Push) {
		d.log.Info("peer has less of our feed than our push cursor; re-pushing", "peer_has", peerHas, "push", ws.Push)
		ws.Push = peerHas
		changed = true
	}
	if !changed {
		return nil
	}
	res.Resets++
	metricResets.WithLabelValues("reconcile").Inc()
	return d.local.SetWatermarks(ctx, d.peer, ws)
}

// push runs the push loop: batches of at most BatchEntries entries and
// BatchMissingBytes missing chunk bytes; for each, probe, send the missing
// chunks, then the entries, which the peer applies atomically.
func (d *Driver) push(ctx context.Context, s Peer, res *Result) error {
	err := d.pushOnce(ctx, s, res)
	var ie *watermark.InvariantError
	if !errors.As(err, &ie) {
		return err
	}
	// The peer applied less than we sent: start again from what it says
	// it has, once.
	d.log.Warn("push invariant violated; re-baselining", "err", err)
	if err := d.resetPush(ctx, ie.PeerApplied, res); err != nil {
		return err
	}
	return d.pushOnce(ctx, s, res)
}

func (d *Driver) resetPush(ctx context.Context, to watermark.Cursor, res *Result) error {
	ws, err := d.local.Watermarks(ctx, d.peer)
	if err != nil {
		return err
	}
	ws.Push = to
	res.Resets++
	metricResets.WithLabelValues("invariant").Inc()
	return d.local.SetWatermarks(ctx, d.peer, ws)
}

func (d *Driver) pushOnce(ctx context.Context, s Peer, res *Result) error {
	ws, err := d.local.Watermarks(ctx, d.peer)
	if err != nil {
		return err
	}
	through := watermark.At(d.local.CurrentRev())
	if ws.Push.Covers(through) {
		return nil
	}
	// Bounce suppression: our revs that hold the peer's own entries (a
	// pull that was cut before it could move our push cursor past them)
	// are not sent back; the final cursor (through) still covers them.
	run, err := d.local.Bounce(ctx, d.peer)
	if err != nil {
		return err
	}
	next, stop := iter.Pull2(d.local.Changes(ctx, run.Skip(ws.Push), through, vfs.Ignore{}))
	defer stop()
	var pending []vfs.ChangeEntry
	exhausted := false
	for {
		// Fill up to BatchEntries, then cut by missing bytes.
		for !exhausted && len(pending) < d.opts.BatchEntries {
			en, err, ok := next()
			if !ok {
				exhausted = true
				break
			}
			if err != nil {
				return fmt.Errorf("changes: %w", err)
			}
			pending = append(pending, en)
		}
		batch, missing, refBytes, err := d.cutPushBatch(ctx, s, pending)
		if err != nil {
			return err
		}
		pending = pending[len(batch):]
		if len(pending) == 0 && !exhausted {
			// Peek: is this the last batch?
			en, err, ok := next()
			switch {
			case !ok:
				exhausted = true
			case err != nil:
				return fmt.Errorf("changes: %w", err)
			default:
				pending = append(pending, en)
			}
		}
		last := exhausted && len(pending) == 0
		cursor := through
		if !last {
			e := batch[len(batch)-1]
			cursor = watermark.Within(e.Rev, e.Path)
		}
		var stageID uint64
		var st ObjectStats
		if len(missing) > 0 {
			stageID = d.stageSeq.Add(1)
			if st, err = s.PushObjects(ctx, stageID, missing, d.local.ReadChunk); err != nil {
				return err
			}
		}
		resp, err := s.Push(ctx, PushRequest{SenderRev: through.Rev, SenderCursor: cursor, Stage: stageID}, batch)
		if err != nil {
			return err
		}
		crashpoint.Hit("syncwire.push.acked")
		res.Batches++
		res.Entries += len(batch)
		res.Applied += resp.Applied
		res.Skipped += resp.Skipped
		res.Chunks += st.Chunks
		res.ChunkBytes += st.RawBytes
		res.DedupBytes += refBytes - st.RawBytes
		metricEntries.WithLabelValues("pushed").Add(float64(len(batch)))
		metricChunks.WithLabelValues("sent").Add(float64(st.Chunks))
		metricChunkBytes.WithLabelValues("sent").Add(float64(st.RawBytes))
		metricDedupBytes.Add(float64(refBytes - st.RawBytes))

		// The peer echoes what it applied: our cursor moves to that, never
		// past what we sent. Through was fixed before the feed opened, so a
		// local write made meanwhile has a later rev and stays unpushed.
		if err := watermark.CheckInvariant(d.peer, watermark.Set{Push: cursor}, resp.AppliedPush); err != nil {
			return err
		}
		ws.Push = cursor
		// Bounce suppression: the revs the peer's apply stamped are our
		// own entries; when we had fetched everything of the peer's before
		// them, skip them in our fetch cursor. (The peer also keeps them as
		// its bounce run, so a lost reply does not bring them back.)
		ws.Fetch = vfs.BounceRun{From: resp.RevBefore, To: resp.RevAfter}.Skip(ws.Fetch)
		if err := d.local.SetWatermarks(ctx, d.peer, ws); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// cutPushBatch probes the peer for the chunks of pending's entries and
// returns the longest prefix (at least one entry) whose missing chunks stay
// within BatchMissingBytes, those missing hashes in first-use order, and
// the chunk bytes the prefix references.
func (d *Driver) cutPushBatch(ctx context.Context, s Peer, pending []vfs.ChangeEntry) ([]vfs.ChangeEntry, []chunkstore.Hash, int64, error) {
	if len(pending) == 0 {
		return nil, nil, 0, nil
	}
	seen := map[chunkstore.Hash]bool{}
	var probe []chunkstore.Hash
	for _, e := range pending {
		for _, r := range e.Chunks {
			if r.IsHole() {
				continue // zeros: never probed, sent or counted
			}
			if !seen[r.Hash] {
				seen[r.Hash] = true
				probe = append(probe, r.Hash)
			}
		}
	}
	have := map[chunkstore.Hash]bool{}
	if len(probe) > 0 {
		hs, err := s.HasObjects(ctx, probe)
		if err != nil {
			return nil, nil, 0, err
		}
		for _, h := range hs {
			have[h] = true
		}
	}
	var missing []chunkstore.Hash
	var missingBytes, refBytes int64
	counted := map[chunkstore.Hash]bool{}
	n := 0
	for i, e := range pending {
		var add int64
		var adds []chunkstore.Hash
		for _, r := range e.Chunks {
			if !r.IsHole() && !have[r.Hash] && !counted[r.Hash] {
				counted[r.Hash] = true
				add += int64(r.Size)
				adds = append(adds, r.Hash)
			}
		}
		if i > 0 && missingBytes+add > d.opts.BatchMissingBytes {
			for _, h := range adds {
				delete(counted, h)
			}
			break
		}
		missingBytes += add
		missing = append(missing, adds...)
		refBytes += dataBytes(e.Chunks)
		n++
	}
	return pending[:n], missing, refBytes, nil
}

// pull runs the pull loop, with the invariant and reconcile checks on the
// feed's head: on violation the affected watermark is reset and the pull
// retried once.
func (d *Driver) pull(ctx context.Context, s Peer, res *Result) error {
	err := d.pullOnce(ctx, s, res, false)
	if !errors.Is(err, errRetryPull) {
		return err
	}
	return d.pullOnce(ctx, s, res, true)
}

var errRetryPull = errors.New("retry pull")

func (d *Driver) pullOnce(ctx context.Context, s Peer, res *Result, retried bool) error {
	ws, err := d.local.Watermarks(ctx, d.peer)
	if err != nil {
		return err
	}
	cs, err := s.FetchChanges(ctx, FetchRequest{After: ws.Fetch, Ignore: d.opts.Ignore})
	if err != nil {
		return err
	}
	defer cs.Close()

	invErr := watermark.CheckInvariant(d.peer, ws, cs.AppliedPush)
	behind := cs.Current.Rev < ws.Fetch.Rev
	if invErr != nil || behind {
		if retried {
			if invErr != nil {
				return invErr
			}
			return fmt.Errorf("%w: peer feed at %v is behind our fetch cursor %v after a reset", watermark.ErrInvariant, cs.Current, ws.Fetch)
		}
		d.log.Warn("peer lost state; re-baselining", "invariant", invErr, "peer_current", cs.Current, "fetch", ws.Fetch)
		if invErr != nil {
			ws.Push = cs.AppliedPush
			metricResets.WithLabelValues("invariant").Inc()
		}
		if behind {
			ws.Fetch = watermark.Cursor{}
			metricResets.WithLabelValues("reconcile").Inc()
		}
		res.Resets++
		if err := d.local.SetWatermarks(ctx, d.peer, ws); err != nil {
			return err
		}
		return errRetryPull
	}

	if err := d.pullBatches(ctx, s, cs, &ws, res); err != nil {
		return err
	}
	// Clean drain: everything through the feed's current cursor is here,
	// including entries the feed filtered out (ignored paths).
	if ws.Fetch != cs.Current {
		ws.Fetch = cs.Current
		if err := d.local.SetWatermarks(ctx, d.peer, ws); err != nil {
			return err
		}
	}
	// Bounce suppression: the revs our applies stamped (the bounce run each
	// apply extended in its own transaction) hold the peer's own entries.
	// When every earlier local rev was pushed, move our push cursor past
	// them: first tell the peer, with an empty push, so its echoed
	// applied-push cursor covers ours even if we die before persisting.
	run, err := d.local.Bounce(ctx, d.peer)
	if err != nil {
		return err
	}
	if to := run.Skip(ws.Push); to != ws.Push {
		if err := d.syncApplied(ctx, s, to); err != nil {
			return err
		}
		ws.Push = to
		return d.local.SetWatermarks(ctx, d.peer, ws)
	}
	return nil
}

// syncApplied records cursor as the peer's applied-push cursor.
func (d *Driver) syncApplied(ctx context.Context, s Peer, cursor watermark.Cursor) error {
	resp, err := s.Push(ctx, PushRequest{SenderRev: max(d.local.CurrentRev(), 1), SenderCursor: cursor}, nil)
	if err != nil {
		return err
	}
	return watermark.CheckInvariant(d.peer, watermark.Set{Push: cursor}, resp.AppliedPush)
}

// fetchedBatch is one pulled batch with the chunks it was missing,
// staged.
type fetchedBatch struct {
	batch    []vfs.ChangeEntry
	stage    *chunkstore.Stage // nil when nothing was missing
	fetched  map[chunkstore.Hash]bool
	chunks   int
	bytes    int64 // raw chunk bytes fetched
	refBytes int64 // chunk bytes the batch references
	err      error
}

func (f *fetchedBatch) release() {
	if f.stage != nil {
		f.stage.Release()
	}
}

// pullBatches reads the stream 256 entries at a time and applies each
// batch. It runs as a two-step pipeline: while batch k applies locally,
// batch k+1 is read and its missing chunks fetched from the peer, so the
// peer's reads and our writes overlap. At most two batches (and the chunks
// they reference) are held at once.
func (d *Driver) pullBatches(ctx context.Context, s Peer, cs *ChangeStream, ws *watermark.Set, res *Result) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan *fetchedBatch, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ready)
		var prev map[chunkstore.Hash]bool
		for {
			batch, err := cs.Next(ctx, d.opts.BatchEntries)
			if errors.Is(err, io.EOF) {
				return
			}
			f := &fetchedBatch{batch: batch, err: err}
			if err == nil {
				d.fetchBatch(ctx, s, f, prev)
				prev = f.fetched
			}
			select {
			case ready <- f:
			case <-ctx.Done():
				f.release()
				return
			}
			if f.err != nil {
				return
			}
		}
	})
	defer func() {
		cancel()
		for f := range ready {
			f.release()
		}
		wg.Wait()
	}()
	for f := range ready {
		if f.err != nil {
			return f.err
		}
		err := d.applyPulled(ctx, f, ws, res)
		f.release()
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// fetchBatch probes the local store for the chunks of f.batch and fetches
// the missing ones into a stage. Chunks the previous batch fetched are not
// fetched again: that batch is applied (or the pull fails) first.
func (d *Driver) fetchBatch(ctx context.Context, s Peer, f *fetchedBatch, prev map[chunkstore.Hash]bool) {
	seen := map[chunkstore.Hash]bool{}
	var need []chunkstore.Hash
	for _, e := range f.batch {
		f.refBytes += dataBytes(e.Chunks)
		for _, r := range e.Chunks {
			if !r.IsHole() && !seen[r.Hash] && !prev[r.Hash] {
				seen[r.Hash] = true
				need = append(need, r.Hash)
			}
		}
	}
	if len(need) == 0 {
		return
	}
	have, err := d.local.Has(ctx, need)
	if err != nil {
		f.err = err
		return
	}
	got := make(map[chunkstore.Hash]bool, len(have))
	for _, h := range have {
		got[h] = true
	}
	var missing []chunkstore.Hash
	for _, h := range need {
		if !got[h] {
			missing = append(missing, h)
		}
	}
	if len(missing) == 0 {
		return
	}
	f.stage = d.local.Chunks().NewStage()
	f.fetched = make(map[chunkstore.Hash]bool, len(missing))
	// Stage.Put hashes the bytes before staging them: a chunk that does
	// not match its hash fails the pull with ErrHashMismatch.
	g := newStager(ctx, f.stage)
	err = s.FetchObjects(ctx, missing, func(o Object) error {
		f.bytes += int64(len(o.Data))
		f.fetched[o.Hash] = true
		return g.put(o)
	})
	if werr := g.wait(); werr != nil {
		err = werr
	}
	f.err = err
	f.chunks = len(missing)
}

// applyPulled applies one fetched batch with the fetch cursor and the
// bounce run (the revs it stamps hold the peer's entries) in the same
// transaction.
func (d *Driver) applyPulled(ctx context.Context, f *fetchedBatch, ws *watermark.Set, res *Result) error {
	last := f.batch[len(f.batch)-1]
	ws.Fetch = watermark.Within(last.Rev, last.Path)
	ar, err := d.local.Apply(ctx, f.batch, vfs.ApplyOptions{Source: vfs.Upstream, Stage: f.stage, Peer: d.peer, Watermarks: ws, Bounce: true})
	if err != nil {
		return fmt.Errorf("apply pulled batch: %w", err)
	}
	crashpoint.Hit("syncwire.pull.applied")
	res.Batches++
	res.Entries += len(f.batch)
	res.Applied += ar.Applied
	res.Skipped += ar.Skipped
	res.Chunks += f.chunks
	res.ChunkBytes += f.bytes
	res.DedupBytes += f.refBytes - f.bytes
	metricEntries.WithLabelValues("pulled").Add(float64(len(f.batch)))
	metricChunks.WithLabelValues("fetched").Add(float64(f.chunks))
	metricChunkBytes.WithLabelValues("fetched").Add(float64(f.bytes))
	metricDedupBytes.Add(float64(f.refBytes - f.bytes))
	return nil
}

// dataBytes is the bytes of m's data refs: what could cross the wire
// (holes never do).
func dataBytes(m chunkstore.Manifest) int64 {
	var n int64
	for _, r := range m {
		if !r.IsHole() {
			n += int64(r.Size)
		}
	}
	return n
}

// fifo runs functions one at a time in arrival order. A waiter that gives
// up keeps its place until its predecessor finishes, so order holds; an
// error in one function does not affect the next.
type fifo struct {
	mu    sync.Mutex
	tail  chan struct{}
	depth atomic.Int64 // calls queued or running
}

func (q *fifo) run(ctx context.Context, fn func() error) error {
	q.mu.Lock()
	prev := q.tail
	mine := make(chan struct{})
	q.tail = mine
	q.depth.Add(1)
	q.mu.Unlock()
	if prev != nil {
		select {
		case <-prev:
		case <-ctx.Done():
			go func() { <-prev; q.depth.Add(-1); close(mine) }()
			return ctx.Err()
		}
	}
	defer close(mine)
	defer q.depth.Add(-1)
	return fn()
}
