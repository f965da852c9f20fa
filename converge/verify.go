package converge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// MaxDifferences is how many differing paths Verify reports.
const MaxDifferences = 100

// Difference is one path where the two trees disagree: present on one side
// only, or present on both with a different kind, mode or content. Local
// or Peer is nil where the path is absent. A directory present on both
// sides is a difference only when its mode differs; differences below it
// are reported at their own paths.
type Difference struct {
	Path        string // store form ("src/a.go")
	Local, Peer *Child
}

// Report is a convergence verdict.
type Report struct {
	Converged bool
	LocalRoot Hash
	PeerRoot  Hash
	LocalRev  int64 // the rev the local tree was hashed at
	PeerRev   int64
	// LocalNames and PeerNames count the names in each tree.
	LocalNames, PeerNames int
	// Differences are the first differing paths, shallowest first (in
	// tree order within a level); Truncated says the walk stopped at the
	// bound (the count, or MaxDiffBytes) with more to find.
	Differences []Difference
	Truncated   bool
	// Requests counts the calls made to the peer, Nodes the directory
	// pages among them, WireBytes their frame bytes (both directions).
	Requests  int
	Nodes     int
	WireBytes int64
	// Scan is the time spent hashing the local tree; Duration the whole
	// verify.
	Scan     time.Duration
	Duration time.Duration
}

// Verify compares local's Merkle root with the peer's for the same ignore
// list (nil: vfs.DefaultIgnore, empty: nothing ignored). Equal roots cost
// one round trip. Otherwise it walks both trees top-down, asking the peer
// for a directory's children only where the hashes differ, and reports the
// first MaxDifferences differing paths.
func Verify(ctx context.Context, local *vfs.Store, sess *rpc.Session, ignore []string) (Report, error) {
	rep, _, err := verify(ctx, local, sess, ignore, MaxDifferences, false)
	observeVerify(rep, err)
	return rep, err
}

// Paths returns the differing paths in workspace form (leading "/").
func (r Report) Paths() []string {
	out := make([]string, len(r.Differences))
	for i, d := range r.Differences {
		out[i] = "/" + d.Path
	}
	return out
}

// verify is Verify with a bound on the differences (0: none) that also
// returns the local tree (a full one, for repair, with full).
func verify(ctx context.Context, local *vfs.Store, sess *rpc.Session, ignore []string, limit int, full bool) (rep Report, _ *Tree, _ error) {
	start := time.Now()
	if err := local.FlushAll(ctx); err != nil {
		return rep, nil, fmt.Errorf("verify: flush: %w", err)
	}
	t, err := buildTree(ctx, local, vfs.NewIgnore(ignore), full)
	if err != nil {
		return rep, nil, fmt.Errorf("verify: %w", err)
	}
	rep.Scan = time.Since(start)
	rep.LocalRoot, rep.LocalRev, rep.LocalNames = t.Root, t.Rev, t.Len()
	var st callStats
	defer func() {
		rep.Requests, rep.Nodes, rep.WireBytes = st.Requests, st.Nodes, st.WireBytes
		rep.Duration = time.Since(start)
	}()
	ri, err := peerRoot(ctx, sess, &st, ignore)
	if err != nil {
		return rep, t, fmt.Errorf("verify: %w", err)
	}
	rep.PeerRoot, rep.PeerRev, rep.PeerNames = ri.Root, ri.Rev, ri.Names
	if ri.Root == t.Root {
		rep.Converged = true
		return rep, t, nil
	}
	w := &walker{ctx: ctx, sess: sess, st: &st, ignore: ignore}
	rep.Differences, rep.Truncated, err = w.walk(t.root, limit)
	if err != nil {
		return rep, t, fmt.Errorf("verify: %w", err)
	}
	return rep, t, nil
}

type walker struct {
	ctx    context.Context
	sess   *rpc.Session
	st     *callStats
	ignore []string
}

// walkConcurrency bounds the Node calls a walk has in flight.
const walkConcurrency = 8

// MaxDiffBytes bounds the memory the differences of one walk may hold
// (diffCost each): a walk that reaches it stops, Truncated, as at the
// count bound. With the count bound it caps what a walk keeps however
// many names a peer sends.
const MaxDiffBytes = 32 << 20

// diffOverhead is what a Difference costs beyond its path: the struct,
// its two Child copies and their names' headers.
const diffOverhead = 256

// diffCost is the memory one difference is charged.
func diffCost(path string, l, p *Child) int64 {
	n := int64(diffOverhead + len(path))
	if l != nil {
		n += int64(len(l.Name))
	}
	if p != nil {
		n += int64(len(p.Name))
	}
	return n
}

// diffBudget is what the differences of a walk may still take. The
// directories of a level compared at once draw on it as they find
// differences, so all of them together hold at most the bound.
type diffBudget struct {
	mu           sync.Mutex
	count, bytes int64
}

// take reserves one difference of cost bytes; false when the budget is
// spent.
func (b *diffBudget) take(cost int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.count < 1 || b.bytes < cost {
		return false
	}
	b.count--
	b.bytes -= cost
	return true
}

// spent reports whether no difference can be taken any more.
func (b *diffBudget) spent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count < 1
}

// give returns what a discarded result had taken.
func (b *diffBudget) give(count int, bytes int64) {
	b.mu.Lock()
	b.count += int64(count)
	b.bytes += bytes
	b.mu.Unlock()
}

// pendingDir is a directory whose hashes differ on the two sides.
type pendingDir struct {
	path  string
	local *dir
	depth int
}

// dirResult is what comparing one directory found.
type dirResult struct {
	diffs   []Difference
	bytes   int64 // charged for diffs
	descend []pendingDir
	full    bool // stopped at the budget with more to find
	err     error
}

// errBudget stops a directory's paging when the budget is spent.
var errBudget = errors.New("difference budget spent")

// walk compares the trees level by level from the root: the differing
// directories of a level are compared at once (at most walkConcurrency
// Node calls in flight), so a walk costs one round of calls per level
// rather than one per directory. Differences come shallowest first, in
// tree order (parents in order, then names) within a level. The walk
// stops at limit differences (0: no count bound) or MaxDiffBytes of them,
// charged as they are found, before anything is kept: what a walk holds
// is bounded whatever the peer sends, and a directory stops paging once
// the budget is spent.
func (w *walker) walk(root *dir, limit int) ([]Difference, bool, error) {
	if limit <= 0 {
		limit = MaxDirChildren * MaxWalkDepth
	}
	budget := &diffBudget{count: int64(limit), bytes: MaxDiffBytes}
	var diffs []Difference
	level := []pendingDir{{path: "", local: root}}
	for len(level) > 0 {
		next, stop, err := w.walkLevel(level, budget, &diffs)
		if err != nil || stop {
			return diffs, stop, err
		}
		level = next
	}
	return diffs, false, nil
}

// walkLevel compares one level's directories, taking their results in
// order. A directory that stopped at the budget ends the walk there: the
// directories after it are cancelled and their differences dropped (their
// budget returned). When they had taken budget it needed, it is compared
// again alone, and the level goes on after it if that fits; so the report
// is the first differences in walk order.
func (w *walker) walkLevel(level []pendingDir, budget *diffBudget, diffs *[]Difference) (next []pendingDir, stop bool, _ error) {
	// The calls in flight share one context, renewed after a drop.
	var cur struct {
		ctx    context.Context
		cancel context.CancelFunc
	}
	cur.ctx, cur.cancel = context.WithCancel(w.ctx)
	defer func() { cur.cancel() }()
	type slot struct {
		done chan struct{}
		res  dirResult
	}
	slots := make([]*slot, len(level))
	var wg sync.WaitGroup
	defer wg.Wait()
	launched := 0
	launch := func() {
		s := &slot{done: make(chan struct{})}
		slots[launched] = s
		p, c := level[launched], cur.ctx
		launched++
		wg.Go(func() {
			defer close(s.done)
			s.res = w.compare(c, p, budget)
		})
	}
	// drop cancels and discards every result after i.
	drop := func(i int) (returned int) {
		cur.cancel()
		wg.Wait()
		for j := i + 1; j < launched; j++ {
			r := slots[j].res
			budget.give(len(r.diffs), r.bytes)
			returned += len(r.diffs)
			slots[j] = nil
		}
		return returned
	}
	for i := range level {
		for launched < len(level) && launched < i+walkConcurrency {
			launch()
		}
		<-slots[i].done
		r := slots[i].res
		slots[i] = nil
		if r.err != nil {
			drop(i)
			return nil, false, r.err
		}
		if r.full && drop(i) > 0 {
			// Later directories held budget this one needed: compare it
			// again alone with what they returned, then go on after it.
			budget.give(len(r.diffs), r.bytes)
			if r = w.compare(w.ctx, level[i], budget); r.err != nil {
				return nil, false, r.err
			}
			cur.ctx, cur.cancel = context.WithCancel(w.ctx)
			launched = i + 1
		}
		*diffs = append(*diffs, r.diffs...)
		if r.full {
			return nil, true, nil
		}
		next = append(next, r.descend...)
	}
	if budget.spent() && len(next) > 0 {
		// The bound is reached exactly with directories left to descend.
		return nil, true, nil
	}
	return next, false, nil
}

// compare pages through the peer's children of one directory, merging them
// in name order with the local ones: a name on one side only, or with a
// different kind, mode or content, is a difference; a directory on both
// sides with a different hash is to be descended into. Each difference is
// charged to budget before it is kept; when the budget is spent the
// result is full and the paging stops.
func (w *walker) compare(ctx context.Context, p pendingDir, budget *diffBudget) (res dirResult) {
	if p.depth >= MaxWalkDepth {
		res.err = malformed("walk deeper than %d levels at /%s", MaxWalkDepth, p.path)
		return res
	}
	ld := p.local
	add := func(name string, l *node, pc *Child) error {
		path := joinPath(p.path, name)
		var lc *Child
		if l != nil {
			lc = &l.Child
		}
		cost := diffCost(path, lc, pc)
		if !budget.take(cost) {
			res.full = true
			return errBudget
		}
		d := Difference{Path: path}
		if lc != nil {
			c := *lc
			d.Local = &c
		}
		if pc != nil {
			c := *pc
			d.Peer = &c
		}
		res.diffs = append(res.diffs, d)
		res.bytes += cost
		return nil
	}
	i := 0
	err := peerChildren(ctx, w.sess, w.st, p.path, w.ignore, func(pc Child) error {
		for i < len(ld.children) && ld.children[i].Name < pc.Name {
			if err := add(ld.children[i].Name, &ld.children[i], nil); err != nil {
				return err
			}
			i++
		}
		if i == len(ld.children) || ld.children[i].Name != pc.Name {
			return add(pc.Name, nil, &pc)
		}
		l := &ld.children[i]
		i++
		switch {
		case l.Child == pc:
		case l.Kind == vfs.KindDir && pc.Kind == vfs.KindDir:
			if l.Mode != pc.Mode {
				if err := add(pc.Name, l, &pc); err != nil {
					return err
				}
			}
			if l.Hash != pc.Hash {
				res.descend = append(res.descend, pendingDir{path: joinPath(p.path, pc.Name), local: l.dir, depth: p.depth + 1})
			}
		default:
			return add(pc.Name, l, &pc)
		}
		return nil
	})
	if errors.Is(err, errBudget) {
		return res
	}
	if err != nil {
		res.err = err
		return res
	}
	for ; i < len(ld.children); i++ {
		if add(ld.children[i].Name, &ld.children[i], nil) != nil {
			return res
		}
	}
	return res
}
