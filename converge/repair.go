package converge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// RepairOptions configures Repair.
type RepairOptions struct {
	// Ignore is the ignore list both trees are compared under (nil:
	// vfs.DefaultIgnore, empty: nothing ignored).
	Ignore []string
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
// entries for every differing path through the exchange's two shipping
// paths, the ones push and pull take (syncwire.Exchange Send and Receive:
// missing chunks first, atomic batches, bounce suppression). Then it
// verifies again. It runs in the exchange's turn of the driver's FIFO, so
// no push or pull interleaves with it.
//
// The winner of a path: the local side (the server, authoritative) unless
// the peer changed the path after our fetch cursor (a change we have not
// pulled yet) and we did not change it after our push cursor. A path both
// sides changed since the last sync goes to the local side; the peer's push
// fence then holds it back (its change is not pulled yet), and the next
// pull's conflict detection keeps both versions. Each side's "changed" is
// read from its changes table (live entries and tombstones), so a delete
// wins as a write does.
func Repair(ctx context.Context, local *vfs.Store, x *syncwire.Exchange, opts RepairOptions) (RepairReport, error) {
	start := time.Now()
	var rr RepairReport
	if opts.MaxPaths <= 0 {
		opts.MaxPaths = 1 << 20
	}
	sess := x.Session()
	before, tree, err := verify(ctx, local, sess, opts.Ignore, opts.MaxPaths, true)
	observeVerify(before, err)
	rr.Before = before
	if err == nil && before.Converged {
		// Nothing to repair: the verdict after is the one before.
		rr.After, rr.WireBytes = before, before.WireBytes
	}
	if err != nil || before.Converged {
		rr.Duration = time.Since(start)
		return rr, err
	}
	rp := &repairer{ctx: ctx, local: local, x: x, sess: sess, opts: opts, tree: tree, rr: &rr}
	if err := rp.run(before.Differences); err != nil {
		rr.WireBytes = rp.wire + rp.st.WireBytes
		rr.Duration = time.Since(start)
		return rr, fmt.Errorf("repair: %w", err)
	}
	metricRepaired.WithLabelValues("local").Add(float64(rr.LocalWins))
	metricRepaired.WithLabelValues("peer").Add(float64(rr.PeerWins))
	rr.After, err = Verify(ctx, local, sess, opts.Ignore)
	rr.WireBytes = rp.wire + rp.st.WireBytes + rr.Before.WireBytes + rr.After.WireBytes
	rr.Duration = time.Since(start)
	return rr, err
}

type repairer struct {
	ctx   context.Context
	local *vfs.Store
	x     *syncwire.Exchange
	sess  *rpc.Session
	opts  RepairOptions
	tree  *Tree
	rr    *RepairReport
	st    callStats
	wire  int64 // frame bytes of the exchange's transfers
	// pathBytes charges the peer paths taken on (peerPaths).
	pathBytes int64
}

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
	ws, err := rp.local.Watermarks(rp.ctx, rp.x.Peer())
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
	// The peer's entries first, as a Tick pulls before it pushes. A side
	// with nothing to ship makes no transfer.
	if len(pull) > 0 {
		res, err := rp.x.Receive(rp.ctx, func(ctx context.Context, max int) ([]vfs.ChangeEntry, error) {
			if len(pull) == 0 {
				return nil, io.EOF
			}
			part := pull[:min(max, len(pull))]
			pull = pull[len(part):]
			return peerEntries(ctx, rp.sess, &rp.st, part)
		})
		rp.count(res, &rp.rr.Pulled)
		if err != nil {
			return err
		}
	}
	if len(push) == 0 {
		return nil
	}
	res, err := rp.x.Send(rp.ctx, push)
	rp.count(res, &rp.rr.Pushed)
	return err
}

// count adds a transfer's figures to the report, its entries to *entries.
func (rp *repairer) count(res syncwire.Result, entries *int) {
	*entries += res.Entries
	rp.rr.Chunks += res.Chunks
	rp.rr.ChunkBytes += res.ChunkBytes
	rp.wire += res.WireBytes
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
