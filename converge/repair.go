package converge

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// RepairOptions configures Repair.
type RepairOptions struct {
	// Ignore is the ignore list both trees are compared under (nil:
	// vfs.DefaultIgnore, empty: nothing ignored).
	Ignore []string
	// Peer names the local watermarks kept for the peer (the driver's
	// peer name, "computerd" on the server).
	Peer string
	// MaxPaths bounds the differing paths one Repair takes on (default
	// 1<<20); so does MaxDiffBytes, the memory they may hold (about
	// 100,000 differences of short paths). A larger drift converges over
	// several calls.
	MaxPaths int
}

// RepairReport is what Repair found and did.
type RepairReport struct {
	Before, After Report
	// LocalWins and PeerWins count the differing paths each side won.
	LocalWins, PeerWins int
	// Pushed and Pulled count the entries sent to the peer and applied
	// locally (a directory won with its whole subtree counts every path).
	Pushed, Pulled int
	// Chunks and ChunkBytes are the chunks that crossed the wire.
	Chunks     int
	ChunkBytes int64
	// WireBytes are the frame bytes of the whole repair, both walks
	// included.
	WireBytes int64
	Duration  time.Duration
}

// Repair walks both trees as Verify does, then re-sends the winning side's
// entries for every differing path under the usual apply rules: pushed to
// the peer as a sync peer's batch (upstream, atomically, missing chunks
// first), or fetched from the peer and applied locally as upstream. Then it
// verifies again.
//
// The winner of a path: the local side (the server, authoritative) unless
// the peer changed the path after our fetch cursor (a change we have not
// pulled yet) and we did not change it after our push cursor. A path both
// sides changed since the last sync goes to the local side, as a push after
// a pull would decide it. Each side's "changed" is read from its changes
// table (live entries and tombstones), so a delete wins as a write does.
func Repair(ctx context.Context, local *vfs.Store, sess *rpc.Session, opts RepairOptions) (RepairReport, error) {
	start := time.Now()
	var rr RepairReport
	if opts.MaxPaths <= 0 {
		opts.MaxPaths = 1 << 20
	}
	before, tree, err := verify(ctx, local, sess, opts.Ignore, opts.MaxPaths, true)
	observeVerify(before, err)
	rr.Before = before
	if err != nil || before.Converged {
		rr.Duration = time.Since(start)
		return rr, err
	}
	rp := &repairer{ctx: ctx, local: local, sess: sess, opts: opts, tree: tree, rr: &rr}
	ctx = rpc.WithWireCounter(ctx, &rp.wc)
	rp.ctx = ctx
	if err := rp.run(before.Differences); err != nil {
		rr.WireBytes = rp.wc.In.Load() + rp.wc.Out.Load() + rp.st.WireBytes
		rr.Duration = time.Since(start)
		return rr, fmt.Errorf("repair: %w", err)
	}
	metricRepaired.WithLabelValues("local").Add(float64(rr.LocalWins))
	metricRepaired.WithLabelValues("peer").Add(float64(rr.PeerWins))
	rr.After, err = Verify(ctx, local, sess, opts.Ignore)
	rr.WireBytes = rp.wc.In.Load() + rp.wc.Out.Load() + rp.st.WireBytes + rr.Before.WireBytes + rr.After.WireBytes
	rr.Duration = time.Since(start)
	return rr, err
}

type repairer struct {
	ctx   context.Context
	local *vfs.Store
	sess  *rpc.Session
	opts  RepairOptions
	tree  *Tree
	rr    *RepairReport
	st    callStats
	wc    rpc.WireCounter
	// pathBytes charges the peer paths taken on (peerPaths).
	pathBytes int64
}

// stageSeq numbers the peer-side stages repair opens, far above the
// driver's so the two never collide on one session.
var stageSeq atomic.Uint64

func init() { stageSeq.Store(1 << 48) }

func (rp *repairer) run(diffs []Difference) error {
	paths := make([]string, len(diffs))
	for i, d := range diffs {
		paths[i] = d.Path
	}
	localRevs, err := rp.local.ChangeRevs(rp.ctx, paths)
	if err != nil {
		return err
	}
	peerRevs, err := peerRevs(rp.ctx, rp.sess, &rp.st, paths)
	if err != nil {
		return err
	}
	ws, err := rp.local.Watermarks(rp.ctx, rp.opts.Peer)
	if err != nil {
		return err
	}
	var push []vfs.ChangeEntry
	var pull []string
	for i, d := range diffs {
		localChanged := localRevs[i] > 0 && ws.Push.Admits(localRevs[i], d.Path)
		peerChanged := peerRevs[i] > 0 && ws.Fetch.Admits(peerRevs[i], d.Path)
		if peerChanged && !localChanged {
			rp.rr.PeerWins++
			if pull, err = rp.peerPaths(pull, d); err != nil {
				return err
			}
			continue
		}
		rp.rr.LocalWins++
		if push, err = rp.localEntries(push, d); err != nil {
			return err
		}
	}
	pushBefore := ws.Push
	if err := rp.pull(pull, &ws); err != nil {
		return err
	}
	if len(push) == 0 && ws.Push != pushBefore {
		// Bounce suppression moved our push cursor over revs the peer never
		// got from us; tell it, so its applied-push cursor keeps covering
		// ours (as the pull driver does).
		req := syncwire.PushRequest{SenderRev: max(rp.local.CurrentRev(), 1), SenderCursor: ws.Push}
		_, err := syncwire.NewPeer(rp.sess).Push(rp.ctx, req, nil)
		return err
	}
	return rp.push(push, &ws)
}

// localEntries appends the local side's entries for d: a delete where the
// path is absent here; the node itself; and, for a directory the peer does
// not hold as one, its whole subtree.
func (rp *repairer) localEntries(out []vfs.ChangeEntry, d Difference) ([]vfs.ChangeEntry, error) {
	if d.Local == nil {
		return append(out, vfs.ChangeEntry{Kind: vfs.EntryDelete, Rev: rp.tree.Rev, Path: d.Path}), nil
	}
	parent := rp.tree.lookup(parentOf(d.Path))
	var n *node
	if parent != nil {
		n = parent.find(baseOf(d.Path))
	}
	if n == nil {
		return nil, fmt.Errorf("local tree lost /%s", d.Path)
	}
	if n.Kind == vfs.KindDir && d.Peer != nil && d.Peer.Kind == vfs.KindDir {
		e, err := n.entry(d.Path, rp.tree.Rev)
		return append(out, e), err
	}
	err := n.walk(d.Path, func(p string, n *node) error {
		if len(out) >= rp.opts.MaxPaths {
			return fmt.Errorf("more than %d paths to repair", rp.opts.MaxPaths)
		}
		e, err := n.entry(p, rp.tree.Rev)
		out = append(out, e)
		return err
	})
	return out, err
}

// peerPaths appends the paths to take from the peer for d: the path, and
// for a directory we do not hold as one its whole subtree, walked through
// Node pages (bounded like every walk). Every path is validated (a peer
// cannot grow one past vfs.MaxPathLen by nesting) and charged to a budget
// of MaxDiffBytes (and opts.MaxPaths paths) before it is kept; a subtree
// larger than that is cut at the budget, parents before children, and the
// rest converges on the next Repair.
func (rp *repairer) peerPaths(out []string, d Difference) ([]string, error) {
	out = append(out, d.Path)
	rp.pathBytes += int64(pathCost + len(d.Path))
	if d.Peer == nil || d.Peer.Kind != vfs.KindDir || (d.Local != nil && d.Local.Kind == vfs.KindDir) {
		return out, nil
	}
	var expand func(path string, depth int) error
	expand = func(path string, depth int) error {
		if depth >= MaxWalkDepth {
			return malformed("peer subtree deeper than %d levels at /%s", MaxWalkDepth, path)
		}
		var dirs []string
		err := peerChildren(rp.ctx, rp.sess, &rp.st, path, rp.opts.Ignore, func(c Child) error {
			p := joinPath(path, c.Name)
			if len(p) > vfs.MaxPathLen {
				return malformed("peer path of %d bytes under /%s exceeds %d", len(p), path, vfs.MaxPathLen)
			}
			cost := int64(pathCost + len(p))
			if len(out) >= rp.opts.MaxPaths || rp.pathBytes+cost > MaxDiffBytes {
				return errBudget
			}
			rp.pathBytes += cost
			out = append(out, p)
			if c.Kind == vfs.KindDir {
				dirs = append(dirs, p)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, p := range dirs {
			if err := expand(p, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	err := expand(d.Path, depth(d.Path))
	if errors.Is(err, errBudget) {
		err = nil
	}
	return out, err
}

// pathCost is what one path of a repair is charged beyond its bytes.
const pathCost = 32

// repairBatch bounds the entries of one push or local apply.
const repairBatch = syncwire.BatchEntries

// pull fetches the peer's entries for paths and applies them locally as
// upstream, with the chunks we lack.
func (rp *repairer) pull(paths []string, ws *watermark.Set) error {
	for start := 0; start < len(paths); start += repairBatch {
		part := paths[start:min(start+repairBatch, len(paths))]
		es, err := peerEntries(rp.ctx, rp.sess, &rp.st, part)
		if err != nil {
			return err
		}
		ar, err := rp.applyPulled(es)
		if err != nil {
			return err
		}
		rp.rr.Pulled += len(es)
		// The revs this apply stamped hold the peer's own state: when every
		// earlier local rev was pushed, skip them in the push cursor, as the
		// pull driver does.
		if ar.LastRev > 0 && ws.Push.Covers(watermark.At(ar.RevBefore)) {
			ws.Push = watermark.At(ar.LastRev)
			if err := rp.local.SetWatermarks(rp.ctx, rp.opts.Peer, *ws); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyPulled applies one batch of the peer's entries locally, fetching
// the chunks we lack into a stage first.
func (rp *repairer) applyPulled(es []vfs.ChangeEntry) (vfs.ApplyResult, error) {
	var stage *chunkstore.Stage
	if need := chunkHashes(es); len(need) > 0 {
		have, err := rp.local.Has(rp.ctx, need)
		if err != nil {
			return vfs.ApplyResult{}, err
		}
		if missing := subtract(need, have); len(missing) > 0 {
			stage = rp.local.Chunks().NewStage()
			defer stage.Release()
			err := syncwire.NewPeer(rp.sess).FetchObjects(rp.ctx, missing, func(o syncwire.Object) error {
				rp.rr.Chunks++
				rp.rr.ChunkBytes += int64(len(o.Data))
				return stage.Put(rp.ctx, o.Hash, o.Data)
			})
			if err != nil {
				return vfs.ApplyResult{}, err
			}
		}
	}
	return rp.local.Apply(rp.ctx, es, vfs.ApplyOptions{Source: vfs.Upstream, Stage: stage})
}

// push sends entries to the peer in batches: probe, missing chunks, then
// the batch, which the peer applies atomically as a sync peer's. The
// batch carries our current push cursor, so the peer's applied-push
// cursor (the cross-side invariant) stays where the driver left it.
func (rp *repairer) push(es []vfs.ChangeEntry, ws *watermark.Set) error {
	for start := 0; start < len(es); start += repairBatch {
		batch := es[start:min(start+repairBatch, len(es))]
		need := chunkHashes(batch)
		var stageID uint64
		if len(need) > 0 {
			have, err := syncwire.NewPeer(rp.sess).HasObjects(rp.ctx, need)
			if err != nil {
				return err
			}
			if missing := subtract(need, have); len(missing) > 0 {
				stageID = stageSeq.Add(1)
				os, err := syncwire.NewPeer(rp.sess).PushObjects(rp.ctx, stageID, missing, rp.local.ReadChunk)
				if err != nil {
					return err
				}
				rp.rr.Chunks += os.Chunks
				rp.rr.ChunkBytes += os.RawBytes
			}
		}
		req := syncwire.PushRequest{SenderRev: max(rp.local.CurrentRev(), 1), SenderCursor: ws.Push, Stage: stageID}
		resp, err := syncwire.NewPeer(rp.sess).Push(rp.ctx, req, batch)
		if err != nil {
			return err
		}
		rp.rr.Pushed += len(batch)
		if resp.RevAfter > resp.RevBefore && ws.Fetch.Covers(watermark.At(resp.RevBefore)) {
			ws.Fetch = watermark.At(resp.RevAfter)
			if err := rp.local.SetWatermarks(rp.ctx, rp.opts.Peer, *ws); err != nil {
				return err
			}
		}
	}
	return nil
}

// chunkHashes is the union of the entries' data chunk hashes, in
// first-use order.
func chunkHashes(es []vfs.ChangeEntry) []chunkstore.Hash {
	return dataHashes(es, func(e *vfs.ChangeEntry) chunkstore.Manifest { return e.Chunks })
}

// dataHashes is the union of the data chunk hashes of refs(x) for each x,
// in first-use order. Holes (the all-zero hash) are no objects: never
// probed, fetched or sent.
func dataHashes[T any](xs []T, refs func(*T) chunkstore.Manifest) []chunkstore.Hash {
	seen := map[chunkstore.Hash]bool{}
	var out []chunkstore.Hash
	for i := range xs {
		for _, r := range refs(&xs[i]) {
			if !r.IsHole() && !seen[r.Hash] {
				seen[r.Hash] = true
				out = append(out, r.Hash)
			}
		}
	}
	return out
}

// subtract returns the hashes of all that are not in have.
func subtract(all, have []chunkstore.Hash) []chunkstore.Hash {
	got := make(map[chunkstore.Hash]bool, len(have))
	for _, h := range have {
		got[h] = true
	}
	var out []chunkstore.Hash
	for _, h := range all {
		if !got[h] {
			out = append(out, h)
		}
	}
	return out
}

func parentOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return ""
}

func baseOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
