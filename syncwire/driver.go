package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/internal/fifo"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Driver batch bounds (docs/PROTOCOL.md section 9).
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
	// Conflicts turns on conflict detection in the receive path and keeps
	// the merge bases in the send path: set on the server's driver
	// (vfs.ApplyOptions.Conflicts). Nil: last writer wins, no bases.
	Conflicts *vfs.ConflictOptions

	// noReconcile skips reconcile-on-connect (tests of the invariant path).
	noReconcile bool
}

// Driver syncs a local store with one peer: PushOnce sends local changes,
// PullOnce fetches the peer's, Tick does both (pull first), and Do runs
// any other exchange with the peer (convergence repair, snapshot
// bootstrap) in the same order. Calls are serialised through one FIFO; a
// failed call does not poison it.
type Driver struct {
	local  Backend
	peer   string
	client *rpc.Client
	opts   DriverOptions
	log    *slog.Logger

	q          fifo.Queue
	reconciled uint64     // session epoch last reconciled (under q)
	quota      quotaState // what the peer was told of the quota (under q)
	stageSeq   atomic.Uint64
	conflicts  atomic.Pointer[vfs.ConflictOptions] // DriverOptions.Conflicts, SetConflicts
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
	d := &Driver{local: local, peer: peer, client: c, opts: opts, log: opts.Logger.With("peer", peer)}
	d.conflicts.Store(opts.Conflicts)
	return d
}

// SetConflicts replaces DriverOptions.Conflicts (a workspace's policy
// changed): batches applied from now on use it; one being applied keeps
// what it started with. Nil turns detection off.
func (d *Driver) SetConflicts(c *vfs.ConflictOptions) { d.conflicts.Store(c) }

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
	// Conflicts are the conflicts the receive path recorded
	// (DriverOptions.Conflicts).
	Conflicts []vfs.Conflict
	// Deferred counts the entries the peer's fence held back on the send
	// path: it had changes there we had not fetched. They go again after
	// the next pull.
	Deferred int
	// More: a pull stopped on its Budget before the end of the peer's
	// feed. The fetch cursor is at the last batch it applied; the next
	// pull fetches the rest.
	More bool
	// Checked is how far a guarded pull's deletes were counted (guard.go),
	// for its next slice; zero after a clean drain.
	Checked GuardState
}

// PullOptions configures one pull of the peer's feed.
type PullOptions struct {
	// Ignore is the list of path segments left out: nil means
	// vfs.DefaultIgnore, an empty non-nil list disables ignoring.
	Ignore []string
	// Budget bounds the pull; its zero value bounds nothing.
	Budget Budget
	// Guard, when set, pauses a pull that would delete too much before it
	// applies any of its deletions (guard.go); Checked is what the earlier
	// slices of the same pull counted (their Result.Checked).
	Guard   DeleteGuard
	Checked GuardState
}

// PushOptions configures one push of the local feed.
type PushOptions struct {
	// Ignore is the list of patterns whose paths stay here: nil means
	// vfs.DefaultIgnore, an empty non-nil list sends everything.
	Ignore []string
}

// Budget bounds one pull: it stops after the first batch that reaches a
// bound that is set (zero or negative: unbounded), so a pull applies at
// least one batch, and reports Result.More when the feed goes on.
type Budget struct {
	Entries int           // entries received (Result.Entries)
	Bytes   int64         // chunk bytes fetched (Result.ChunkBytes)
	Wall    time.Duration // time since the pull started
}

// reached reports whether a pull that started at start and has received
// entries and bytes of chunks has met a bound of b.
func (b Budget) reached(entries int, bytes int64, start time.Time) bool {
	return b.Entries > 0 && entries >= b.Entries ||
		b.Bytes > 0 && bytes >= b.Bytes ||
		b.Wall > 0 && time.Since(start) >= b.Wall
}

// TickResult is a Tick's pull and push.
type TickResult struct{ Pull, Push Result }

// PushOnce sends every local change after the push cursor to the peer.
func (d *Driver) PushOnce(ctx context.Context) (Result, error) {
	var res Result
	err := d.do(ctx, "push", func(ctx context.Context, x *Exchange) (err error) {
		res, err = x.Push(ctx)
		return err
	})
	return res, err
}

// PullOnce fetches and applies every peer change after the fetch cursor,
// leaving out the paths of DriverOptions.Ignore.
func (d *Driver) PullOnce(ctx context.Context) (Result, error) {
	return d.PullWith(ctx, PullOptions{Ignore: d.opts.Ignore})
}

// PullWith is PullOnce with opts in place of DriverOptions.Ignore: a
// workspace.Remote's Pull takes its ignore list and budget per call.
func (d *Driver) PullWith(ctx context.Context, opts PullOptions) (Result, error) {
	var res Result
	err := d.do(ctx, "pull", func(ctx context.Context, x *Exchange) (err error) {
		res, err = x.PullWith(ctx, opts)
		return err
	})
	return res, err
}

// Tick pulls then pushes, in one FIFO turn: the pull absorbs the peer's
// writes before the push can overwrite them with stale local state.
func (d *Driver) Tick(ctx context.Context) (TickResult, error) {
	var tr TickResult
	err := d.do(ctx, "pull", func(ctx context.Context, x *Exchange) (err error) {
		if tr.Pull, err = x.Pull(ctx); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
		if tr.Push, err = x.Push(ctx); err != nil {
			return fmt.Errorf("push: %w", err)
		}
		return nil
	})
	return tr, err
}

// Do runs fn in the driver's FIFO on a live session (redialled if the last
// one died). Everything that moves entries between the two stores goes
// through an Exchange, so every transfer keeps the same rules and none
// overtakes another.
func (d *Driver) Do(ctx context.Context, fn func(ctx context.Context, x *Exchange) error) error {
	return d.do(ctx, "exchange", fn)
}

// do is Do counting a failure to get a session under op.
func (d *Driver) do(ctx context.Context, op string, fn func(ctx context.Context, x *Exchange) error) error {
	return d.q.Do(ctx, func() error {
		sess, epoch, err := d.client.Session(ctx)
		if err != nil {
			return d.observe(op, err)
		}
		if id := sess.Local().ID; id != d.local.ID() {
			// The peer keys the watermarks it keeps for us by this id.
			return d.observe(op, fmt.Errorf("%w: client announces store %q, the driver's store is %q", vfs.ErrInvalid, id, d.local.ID()))
		}
		return fn(ctx, &Exchange{d: d, sess: sess, s: NewPeer(sess), epoch: epoch})
	})
}

func (d *Driver) observe(op string, err error) error {
	if err != nil {
		metricSyncErrors.WithLabelValues(op, rpc.CodeOf(err).String()).Inc()
	}
	return err
}

// Exchange is one FIFO turn of a Driver on a live session to the peer. Its
// first transfer on a new session reconciles the watermarks with the
// peer's (re-baselining a peer that lost state); a snapshot bootstrap,
// which sets them itself, comes before it. It owns the two shipping paths
// every transfer takes, written once:
//
//   - send (local entries to the peer): cut batches of at most BatchEntries
//     entries and BatchMissingBytes missing chunk bytes; probe the peer for
//     the batch's chunks, send the missing ones, then the entries, which the
//     peer applies atomically and records as our bounce run; check the
//     applied-push cursor it echoes; advance our watermarks and skip the
//     revs the peer's apply stamped in our fetch cursor.
//   - receive (peer entries into the local store): probe the local store
//     for each batch's chunks and fetch the missing ones (the next batch's
//     fetch overlapping this one's apply); apply atomically with the
//     watermarks and the peer's bounce run; then skip that run in our push
//     cursor, telling the peer first.
//
// Push and Pull run them over the two feeds; Send and Receive over entries
// a caller chose (convergence repair).
type Exchange struct {
	d        *Driver
	sess     *rpc.Session
	s        Peer
	epoch    uint64 // the session's, from rpc.Client.Session
	progress func(op string, total Result)
	// ignore is the running pull's list (PullWith), for its applies;
	// pushIgnore the running push's (PushWith), for its feed.
	ignore, pushIgnore vfs.Ignore
}

// OnProgress makes every transfer of the exchange from now on call fn
// after each batch it commits: op is "push" for the send path (Push,
// Send) and "pull" for the receive path (Pull, Receive), total the
// transfer's Result so far, so the last call's totals are the Result the
// transfer returns. fn runs on the transfer's goroutine, between batches:
// it must not block for long, and must not call the exchange.
func (x *Exchange) OnProgress(fn func(op string, total Result)) { x.progress = fn }

// committed tells the progress observer that a batch of op committed.
func (x *Exchange) committed(op string, res *Result) {
	if x.progress != nil {
		x.progress(op, *res)
	}
}

// Session is the exchange's session, for calls of other packages'
// methods (convergence walks, snapshot pages).
func (x *Exchange) Session() *rpc.Session { return x.sess }

// Peer names the local watermarks the exchange keeps for the peer.
func (x *Exchange) Peer() string { return x.d.peer }

// Push sends every local change after the push cursor to the peer,
// ignoring nothing.
func (x *Exchange) Push(ctx context.Context) (Result, error) {
	return x.PushWith(ctx, PushOptions{Ignore: []string{}})
}

// PushWith is Push with opts: the paths its ignore list matches stay
// here, as a pull with the same list leaves them in the peer.
func (x *Exchange) PushWith(ctx context.Context, opts PushOptions) (Result, error) {
	var res Result
	x.pushIgnore = vfs.NewIgnore(opts.Ignore)
	defer func() { x.pushIgnore = vfs.Ignore{} }()
	err := x.transfer(ctx, &res, x.push)
	return res, x.d.observe("push", err)
}

// Pull fetches and applies every peer change after the fetch cursor,
// leaving out the paths of DriverOptions.Ignore.
func (x *Exchange) Pull(ctx context.Context) (Result, error) {
	return x.PullWith(ctx, PullOptions{Ignore: x.d.opts.Ignore})
}

// PullWith is Pull with opts: its own ignore list, and a budget that
// stops it after the batch that reaches a bound (Result.More).
func (x *Exchange) PullWith(ctx context.Context, opts PullOptions) (Result, error) {
	var res Result
	start := time.Now()
	x.ignore = vfs.NewIgnore(opts.Ignore)
	defer func() { x.ignore = vfs.Ignore{} }()
	err := x.transfer(ctx, &res, func(ctx context.Context, res *Result) error {
		res.Checked = opts.Checked
		retried := false
		for rounds := 0; ; {
			err := x.pullFeed(ctx, opts, start, res, retried)
			switch {
			case errors.Is(err, errRetryPull) && !retried:
				retried = true
			case errors.Is(err, errGuardReopen) && rounds < maxGuardRounds:
				rounds++
			case errors.Is(err, errGuardReopen):
				return fmt.Errorf("the peer's feed kept growing through %d deletion checks; pull again", rounds)
			default:
				return err
			}
		}
	})
	return res, x.d.observe("pull", err)
}

// Send ships entries (a repair's choice, not the feed) to the peer through
// the send path. The push cursor stays where it is: these entries are not
// the feed.
func (x *Exchange) Send(ctx context.Context, entries []vfs.ChangeEntry) (Result, error) {
	var res Result
	err := x.transfer(ctx, &res, func(ctx context.Context, res *Result) error {
		ws, err := x.d.local.Watermarks(ctx, x.d.peer)
		if err != nil {
			return err
		}
		through := watermark.At(x.d.local.CurrentRev())
		return x.send(ctx, sliceFeed(entries), through, false, &ws, res)
	})
	return res, x.d.observe("send", err)
}

// Receive applies the peer entries next returns (up to max per call,
// io.EOF at the end) through the receive path. The fetch cursor stays
// where it is: these entries are not the feed.
func (x *Exchange) Receive(ctx context.Context, next func(ctx context.Context, max int) ([]vfs.ChangeEntry, error)) (Result, error) {
	var res Result
	err := x.transfer(ctx, &res, func(ctx context.Context, res *Result) error {
		ws, err := x.d.local.Watermarks(ctx, x.d.peer)
		if err != nil {
			return err
		}
		if err := x.receive(ctx, next, false, Budget{}, time.Time{}, nil, &ws, res); err != nil {
			return err
		}
		return x.settleBounce(ctx, &ws)
	})
	return res, x.d.observe("receive", err)
}

// transfer runs op with its frame bytes counted into res, reconciling the
// watermarks first when no transfer has on this session yet.
func (x *Exchange) transfer(ctx context.Context, res *Result, op func(context.Context, *Result) error) error {
	var wc rpc.WireCounter
	ctx = rpc.WithWireCounter(ctx, &wc)
	defer func() { res.WireBytes += wc.In.Load() + wc.Out.Load() }()
	if x.epoch != x.d.reconciled && !x.d.opts.noReconcile {
		if err := x.reconcile(ctx, res); err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
	}
	x.d.reconciled = x.epoch
	if err := x.tellQuota(ctx); err != nil {
		return err
	}
	return op(ctx, res)
}

// reconcile re-baselines watermarks against a peer met on a new session:
// a peer that is another store than the one our watermarks for its name
// describe (a replaced or pooled container) is fetched from the start of
// its feed, and one restored behind our fetch cursor (it served less of
// its feed than the cursor covers) from what it served (MeetPeer); a peer
// whose current rev is below our fetch cursor lost its feed (fetch it
// again from the start); a peer that has less of our feed than our push
// cursor says lost state (push again from what it has); one that has more
// than we ever served is told our push cursor (our store was restored
// behind what it applied, so our pulls must fetch it back).
func (x *Exchange) reconcile(ctx context.Context, res *Result) error {
	d := x.d
	ps, err := x.s.Watermarks(ctx)
	if err != nil {
		return err
	}
	if ps.StoreID != "" {
		met, err := d.local.MeetPeer(ctx, d.peer, ps.StoreID, ps.Served)
		if err != nil {
			return err
		}
		switch {
		case met.Store:
			d.log.Info("peer is another store than our watermarks describe; fetching its feed from the start", "store", ps.StoreID)
			res.Resets++
			metricResets.WithLabelValues("store").Inc()
		case met.Restored:
			d.log.Warn("peer's store serves less of its feed than our fetch cursor covers (restored from an older copy); fetching again from what it served", "store", ps.StoreID, "fetch", met.Fetch)
			res.Resets++
			metricResets.WithLabelValues("restored").Inc()
		}
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
	switch {
	case peerHas.Less(ws.Push):
		d.log.Info("peer has less of our feed than our push cursor; re-pushing", "peer_has", peerHas, "push", ws.Push)
		ws.Push = peerHas
		changed = true
	case ws.Push.Less(peerHas) && peerHas.Rev > d.local.Served():
		// The peer applied more of our feed than we ever handed out: our
		// store was restored from a copy older than those pushes (a push
		// records its cursor as served before it goes; a push whose reply
		// was lost is within what we served, and its entries are still
		// ours). Its bounce run keeps the revs those applies stamped out
		// of our pulls, and they hold entries we no longer have: tell it
		// our cursor, so it forgets that run and our next pull fetches
		// them back.
		d.log.Warn("peer has more of our feed than we served (our store restored from an older copy); telling it our push cursor so our pulls fetch back what it applied", "peer_has", peerHas, "push", ws.Push, "served", d.local.Served())
		resp, err := x.s.Push(ctx, PushRequest{SenderRev: max(d.local.CurrentRev(), 1), SenderCursor: ws.Push, Fence: ws.Fetch}, nil)
		if err != nil {
			return err
		}
		if err := watermark.CheckInvariant(d.peer, ws, resp.AppliedPush); err != nil {
			return err
		}
		res.Resets++
		metricResets.WithLabelValues("rewind").Inc()
	}
	if !changed {
		return nil
	}
	res.Resets++
	metricResets.WithLabelValues("reconcile").Inc()
	return d.local.SetWatermarks(ctx, d.peer, ws)
}

// push runs the feed's send path; when the peer's echo shows it applied
// less than we sent, it starts again from what the peer has, once.
func (x *Exchange) push(ctx context.Context, res *Result) error {
	err := x.pushFeed(ctx, res)
	var ie *watermark.InvariantError
	if !errors.As(err, &ie) {
		return err
	}
	x.d.log.Warn("push invariant violated; re-baselining", "err", err)
	ws, err := x.d.local.Watermarks(ctx, x.d.peer)
	if err != nil {
		return err
	}
	ws.Push = ie.PeerApplied
	res.Resets++
	metricResets.WithLabelValues("invariant").Inc()
	if err := x.d.local.SetWatermarks(ctx, x.d.peer, ws); err != nil {
		return err
	}
	return x.pushFeed(ctx, res)
}

func (x *Exchange) pushFeed(ctx context.Context, res *Result) error {
	d := x.d
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
	return x.send(ctx, d.local.Changes(ctx, run.Skip(ws.Push), through, x.pushIgnore), through, true, &ws, res)
}

// send is the send path. entries are the feed from ws.Push through
// through when feed is set (the push cursor follows the batches, ending at
// through), or entries of the caller's choosing otherwise (every batch
// carries the push cursor unchanged).
func (x *Exchange) send(ctx context.Context, entries iter.Seq2[vfs.ChangeEntry, error], through watermark.Cursor, feed bool, ws *watermark.Set, res *Result) error {
	d := x.d
	next, stop := iter.Pull2(entries)
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
		if len(pending) == 0 {
			return nil // nothing to send (a Send of no entries)
		}
		batch, missing, refBytes, err := x.cutBatch(ctx, pending)
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
		cursor := ws.Push
		if feed {
			cursor = through
			if !last {
				e := batch[len(batch)-1]
				cursor = watermark.Within(e.Rev, e.Path)
			}
		}
		var stageID uint64
		var st ObjectStats
		if len(missing) > 0 {
			stageID = d.stageSeq.Add(1)
			if st, err = x.s.PushObjects(ctx, stageID, missing, d.local.ReadChunks); err != nil {
				return err
			}
		}
		// The peer records the cursor as how far it has our feed: recorded
		// first as served, a copy of our store restored later knows
		// whether it pushed this far (reconcile).
		d.local.NoteServed(ctx, cursor.Rev)
		resp, err := x.s.Push(ctx, PushRequest{SenderRev: max(through.Rev, 1), SenderCursor: cursor, Stage: stageID, Fence: ws.Fetch}, batch)
		if err != nil {
			return err
		}
		crashpoint.Hit("syncwire.push.acked")
		if err := checkDeferred(batch, resp.Deferred); err != nil {
			return err
		}
		res.Batches++
		res.Entries += len(batch)
		res.Applied += resp.Applied
		res.Skipped += resp.Skipped
		res.Deferred += len(resp.Deferred)
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
		if err := d.local.Delivered(ctx, d.peer, *ws, batch, resp.Deferred, d.conflicts.Load() != nil); err != nil {
			return err
		}
		if len(resp.Deferred) > 0 {
			metricEntries.WithLabelValues("deferred").Add(float64(len(resp.Deferred)))
			d.log.Info("peer held back entries with changes we have not fetched", "deferred", len(resp.Deferred), "first", resp.Deferred[0])
		}
		x.committed("push", res)
		if last {
			return nil
		}
	}
}

// checkDeferred: the paths a peer deferred are paths of the batch, each
// once: anything else is a broken or hostile peer, and re-stamping paths
// of its choosing is not ours to do.
func checkDeferred(batch []vfs.ChangeEntry, deferred []string) error {
	if len(deferred) == 0 {
		return nil
	}
	in := make(map[string]bool, len(batch))
	for i := range batch {
		in[batch[i].Path] = true
	}
	for _, p := range deferred {
		if !in[p] {
			return protoErr("push: the peer deferred %q, which is not an entry of the batch (or deferred it twice)", p)
		}
		in[p] = false
	}
	return nil
}

// cutBatch probes the peer for the chunks of pending's entries and returns
// the longest prefix (at least one entry) whose missing chunks stay within
// BatchMissingBytes, those missing hashes in first-use order, and the chunk
// bytes the prefix references.
func (x *Exchange) cutBatch(ctx context.Context, pending []vfs.ChangeEntry) ([]vfs.ChangeEntry, []chunkstore.Hash, int64, error) {
	need := DataHashes(pending, nil)
	missing, err := Missing(ctx, need, x.s.HasObjects)
	if err != nil {
		return nil, nil, 0, err
	}
	lacks := make(map[chunkstore.Hash]bool, len(missing))
	for _, h := range missing {
		lacks[h] = true
	}
	var out []chunkstore.Hash
	var missingBytes, refBytes int64
	n := 0
	for i, e := range pending {
		var add int64
		var adds []chunkstore.Hash
		for _, r := range e.Chunks {
			if !r.IsHole() && lacks[r.Hash] {
				lacks[r.Hash] = false // counted once, by its first user
				add += int64(r.Size)
				adds = append(adds, r.Hash)
			}
		}
		if i > 0 && missingBytes+add > x.d.opts.BatchMissingBytes {
			break
		}
		missingBytes += add
		out = append(out, adds...)
		refBytes += dataBytes(e.Chunks)
		n++
	}
	return pending[:n], out, refBytes, nil
}

// errRetryPull: pullFeed reset a watermark and the pull starts again, once.
var errRetryPull = errors.New("retry pull")

// pullFeed runs the feed's receive path, with the invariant and reconcile
// checks on the feed's head: on violation the affected watermark is reset
// and errRetryPull returned. A pull the budget stopped (res.More) leaves
// the fetch cursor at its last batch and closes the feed unfinished.
func (x *Exchange) pullFeed(ctx context.Context, opts PullOptions, start time.Time, res *Result, retried bool) error {
	d := x.d
	ws, err := d.local.Watermarks(ctx, d.peer)
	if err != nil {
		return err
	}
	if err := x.followIgnore(ctx, opts.Ignore, &ws, res); err != nil {
		return err
	}
	cs, err := x.s.FetchChanges(ctx, FetchRequest{After: ws.Fetch, Ignore: opts.Ignore})
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
		res.Checked = GuardState{}
		if err := d.local.SetWatermarks(ctx, d.peer, ws); err != nil {
			return err
		}
		return errRetryPull
	}

	var gd *guarded
	if opts.Guard != nil {
		if peer := x.sess.Peer().ID; res.Checked.Peer != peer {
			res.Checked = GuardState{Peer: peer}
		}
		gd = &guarded{g: opts.Guard, st: &res.Checked}
	}
	err = x.receive(ctx, cs.Next, true, opts.Budget, start, gd, &ws, res)
	gd.settle()
	if err != nil {
		return err
	}
	if res.More {
		// The rest of the feed waits for the next pull: its cursor is the
		// last batch's, persisted with it.
		return x.settleBounce(ctx, &ws)
	}
	// Clean drain: everything through the feed's current cursor is here,
	// including entries the feed filtered out (ignored paths). The pull's
	// deletes were applied: the next pull counts its own.
	res.Checked = GuardState{}
	if ws.Fetch != cs.Current {
		ws.Fetch = cs.Current
		if err := d.local.SetWatermarks(ctx, d.peer, ws); err != nil {
			return err
		}
	}
	return x.settleBounce(ctx, &ws)
}

// followIgnore re-baselines the fetch cursor when the pull's ignore list
// is not the one the feed up to it was filtered with: the entries a pattern
// no longer ignores were skipped, and a full re-read is what brings them
// (idempotent apply skips the rest). A newly ignored path needs nothing:
// it stops coming. The list is recorded with the reset cursor in one
// transaction; a store that has none recorded (older than patterns, whose
// plain names meant what they mean now) records it without a reset.
func (x *Exchange) followIgnore(ctx context.Context, list []string, ws *watermark.Set, res *Result) error {
	d := x.d
	key := vfs.IgnoreKey(list)
	seen, err := d.local.FeedIgnore(ctx, d.peer)
	if err != nil || seen == key {
		return err
	}
	if seen != "" && ws.Fetch != (watermark.Cursor{}) {
		d.log.Info("ignore list changed; re-reading the peer's feed", "fetch", ws.Fetch)
		ws.Fetch = watermark.Cursor{}
		res.Resets++
		metricResets.WithLabelValues("ignore").Inc()
	}
	return d.local.SetFeedIgnore(ctx, d.peer, key, *ws)
}

// settleBounce ends a receive: the revs our applies stamped (the bounce
// run each apply extended in its own transaction) hold the peer's own
// entries. When every earlier local rev was pushed, move our push cursor
// past them: first tell the peer, with an empty push, so its echoed
// applied-push cursor covers ours even if we die before persisting.
func (x *Exchange) settleBounce(ctx context.Context, ws *watermark.Set) error {
	d := x.d
	run, err := d.local.Bounce(ctx, d.peer)
	if err != nil {
		return err
	}
	to := run.Skip(ws.Push)
	if to == ws.Push {
		return nil
	}
	d.local.NoteServed(ctx, to.Rev)
	resp, err := x.s.Push(ctx, PushRequest{SenderRev: max(d.local.CurrentRev(), 1), SenderCursor: to}, nil)
	if err != nil {
		return err
	}
	if err := watermark.CheckInvariant(d.peer, watermark.Set{Push: to}, resp.AppliedPush); err != nil {
		return err
	}
	ws.Push = to
	return d.local.SetWatermarks(ctx, d.peer, *ws)
}

// fetchedBatch is one received batch with the chunks it was missing,
// staged.
type fetchedBatch struct {
	batch    []vfs.ChangeEntry
	stage    *chunkstore.Stage // nil when nothing was missing
	fetched  map[chunkstore.Hash]bool
	chunks   int
	bytes    int64 // raw chunk bytes fetched
	refBytes int64 // chunk bytes the batch references
	err      error
	// last: the budget stops the receive after this batch; more: the
	// feed had entries after it.
	last, more bool
	// countCreates: the deletion guard counts the paths this batch
	// creates from its apply (created) rather than ahead of it.
	countCreates bool
	created      int
}

func (f *fetchedBatch) release() {
	if f.stage != nil {
		f.stage.Release()
	}
}

// receive is the receive path: it reads batches of at most BatchEntries
// from next and applies each. When feed is set the batches are the peer's
// feed in order and the fetch cursor follows them, in each batch's
// transaction. It runs as a two-step pipeline: while batch k applies
// locally, batch k+1 is read and its missing chunks fetched from the peer,
// so the peer's reads and our writes overlap. At most two batches (and the
// chunks they reference) are held at once.
//
// The budget (with start, the pull's start) is checked here, once: when
// the batches read so far reach it, the reader stops after that batch
// (fetching nothing it would not apply), looks one entry ahead to tell
// whether the feed goes on, and the receive ends once that batch is
// applied, with res.More set when it does.
func (x *Exchange) receive(ctx context.Context, next func(context.Context, int) ([]vfs.ChangeEntry, error), feed bool,
	budget Budget, start time.Time, gd *guarded, ws *watermark.Set, res *Result) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan *fetchedBatch, 1)
	var wg sync.WaitGroup
	entries, bytes := res.Entries, res.ChunkBytes // what the batches read so far bring
	// from is the usage after the batches admitted so far (Admit).
	from := x.d.local.Usage()
	wg.Go(func() {
		defer close(ready)
		var prev map[chunkstore.Hash]bool
		for {
			batch, err := next(ctx, x.d.opts.BatchEntries)
			if errors.Is(err, io.EOF) {
				return
			}
			if err == nil && len(batch) == 0 {
				continue
			}
			// Before anything of the batch is fetched: a batch that
			// deletes is counted with the rest of the feed first.
			f := &fetchedBatch{batch: batch, err: err}
			if err == nil && gd != nil {
				f.err = gd.check(ctx, f, next, x.d.opts.BatchEntries)
				err = f.err
			}
			if err == nil {
				// The quota first: a batch it has no room for stops the
				// receive before anything of it is fetched.
				use, err := x.d.local.Admit(ctx, batch, from)
				if err != nil {
					f.err = fmt.Errorf("batch of %d entries from %q: %w", len(batch), batch[0].Path, err)
				}
				from.Bytes, from.Entries = from.Bytes+use.Bytes, from.Entries+use.Entries
			}
			if f.err == nil {
				x.fetchBatch(ctx, f, prev)
				prev = f.fetched
				entries, bytes = entries+len(batch), bytes+f.bytes
				if f.err == nil && budget.reached(entries, bytes, start) {
					f.last, f.more = true, goesOn(ctx, next)
				}
			}
			select {
			case ready <- f:
			case <-ctx.Done():
				f.release()
				return
			}
			if f.err != nil || f.last {
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
		err := x.applyBatch(ctx, f, feed, ws, res)
		f.release()
		if err != nil {
			return err
		}
		if gd != nil && f.countCreates {
			gd.applied.Add(int64(f.created))
		}
		res.More = f.more
		x.committed("pull", res)
	}
	return ctx.Err()
}

// goesOn reports whether next has another entry (a failure to read one
// counts as yes: the next pull reads it again).
func goesOn(ctx context.Context, next func(context.Context, int) ([]vfs.ChangeEntry, error)) bool {
	for {
		b, err := next(ctx, 1)
		switch {
		case errors.Is(err, io.EOF):
			return false
		case err != nil || len(b) > 0:
			return true
		}
	}
}

// fetchBatch probes the local store for the chunks of f.batch and fetches
// the missing ones into a stage. Chunks the previous batch fetched are not
// fetched again: that batch is applied (or the receive fails) first.
func (x *Exchange) fetchBatch(ctx context.Context, f *fetchedBatch, prev map[chunkstore.Hash]bool) {
	for _, e := range f.batch {
		f.refBytes += dataBytes(e.Chunks)
	}
	missing, err := Missing(ctx, DataHashes(f.batch, prev), x.d.local.Has)
	if err != nil || len(missing) == 0 {
		f.err = err
		return
	}
	f.stage = x.d.local.Chunks().NewStage()
	f.fetched = make(map[chunkstore.Hash]bool, len(missing))
	// Stage.Put hashes the bytes before staging them: a chunk that does
	// not match its hash fails the receive with ErrHashMismatch.
	g := newStager(ctx, f.stage)
	err = x.s.FetchObjects(ctx, missing, func(o Object) error {
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

// applyBatch applies one fetched batch with the watermarks (the fetch
// cursor past the batch, for the feed) and the bounce run (the revs it
// stamps hold the peer's entries) in the same transaction.
func (x *Exchange) applyBatch(ctx context.Context, f *fetchedBatch, feed bool, ws *watermark.Set, res *Result) error {
	if feed {
		last := f.batch[len(f.batch)-1]
		ws.Fetch = watermark.Within(last.Rev, last.Path)
	}
	ar, err := x.d.local.Apply(ctx, f.batch, vfs.ApplyOptions{Source: vfs.Upstream, Stage: f.stage, Peer: x.d.peer, Watermarks: ws, Bounce: true, Conflicts: x.d.conflicts.Load(), Quota: true, Ignore: x.ignore})
	if err != nil {
		return fmt.Errorf("apply received batch: %w", err)
	}
	res.Conflicts = append(res.Conflicts, ar.Conflicts...)
	f.created = ar.Created
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

// DataHashes is the union of the entries' data chunk hashes in first-use
// order, leaving out those in skip. Holes (the all-zero hash) are no
// objects: never probed, fetched or sent.
func DataHashes(entries []vfs.ChangeEntry, skip map[chunkstore.Hash]bool) []chunkstore.Hash {
	return ManifestHashes(func(yield func(chunkstore.Manifest) bool) {
		for i := range entries {
			if !yield(entries[i].Chunks) {
				return
			}
		}
	}, skip)
}

// ManifestHashes is the union of the manifests' data chunk hashes in
// first-use order, leaving out holes and those in skip.
func ManifestHashes(ms iter.Seq[chunkstore.Manifest], skip map[chunkstore.Hash]bool) []chunkstore.Hash {
	seen := map[chunkstore.Hash]bool{}
	var out []chunkstore.Hash
	for m := range ms {
		for _, r := range m {
			if !r.IsHole() && !seen[r.Hash] && !skip[r.Hash] {
				seen[r.Hash] = true
				out = append(out, r.Hash)
			}
		}
	}
	return out
}

// Missing is the have/missing rule: the hashes of need that has (a probe
// of the side that would receive them) does not report, in need's order.
func Missing(ctx context.Context, need []chunkstore.Hash, has func(context.Context, []chunkstore.Hash) ([]chunkstore.Hash, error)) ([]chunkstore.Hash, error) {
	if len(need) == 0 {
		return nil, nil
	}
	have, err := has(ctx, need)
	if err != nil {
		return nil, err
	}
	got := make(map[chunkstore.Hash]bool, len(have))
	for _, h := range have {
		got[h] = true
	}
	return slices.DeleteFunc(slices.Clone(need), func(h chunkstore.Hash) bool { return got[h] }), nil
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

// sliceFeed is entries as a feed.
func sliceFeed(entries []vfs.ChangeEntry) iter.Seq2[vfs.ChangeEntry, error] {
	return func(yield func(vfs.ChangeEntry, error) bool) {
		for _, e := range entries {
			if !yield(e, nil) {
				return
			}
		}
	}
}
