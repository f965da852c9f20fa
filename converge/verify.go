package converge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/wsync/wsync/syncwire"
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
	// bound with more to find.
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
func Verify(ctx context.Context, local *vfs.Store, sess *syncwire.Session, ignore []string) (Report, error) {
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
func verify(ctx context.Context, local *vfs.Store, sess *syncwire.Session, ignore []string, limit int, full bool) (rep Report, _ *Tree, _ error) {
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
	sess   *syncwire.Session
	st     *callStats
	ignore []string
}

// walkConcurrency bounds the Node calls a walk has in flight.
const walkConcurrency = 8

// pendingDir is a directory whose hashes differ on the two sides.
type pendingDir struct {
	path  string
	local *dir
	depth int
}

// dirResult is what comparing one directory found.
type dirResult struct {
	diffs   []Difference
	descend []pendingDir
	err     error
}

// walk compares the trees level by level from the root: every differing
// directory of a level is compared at once (at most walkConcurrency Node
// calls in flight), so a walk costs one round of calls per level rather
// than one per directory. Differences come shallowest first, in tree order
// (parents in order, then names) within a level. With limit > 0 the walk stops after the level at which
// the limit was reached and reports the first limit differences.
func (w *walker) walk(root *dir, limit int) ([]Difference, bool, error) {
	var diffs []Difference
	level := []pendingDir{{path: "", local: root}}
	sem := make(chan struct{}, walkConcurrency)
	for len(level) > 0 {
		results := make([]dirResult, len(level))
		var wg sync.WaitGroup
		for i, p := range level {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				results[i] = w.compare(p)
			})
		}
		wg.Wait()
		var next []pendingDir
		for _, r := range results {
			if r.err != nil {
				return diffs, false, r.err
			}
			diffs = append(diffs, r.diffs...)
			next = append(next, r.descend...)
		}
		if limit > 0 && len(diffs) >= limit {
			return diffs[:limit], len(diffs) > limit || len(next) > 0, nil
		}
		level = next
	}
	return diffs, false, nil
}

// compare pages through the peer's children of one directory, merging them
// in name order with the local ones: a name on one side only, or with a
// different kind, mode or content, is a difference; a directory on both
// sides with a different hash is to be descended into.
func (w *walker) compare(p pendingDir) (res dirResult) {
	if p.depth >= MaxWalkDepth {
		res.err = malformed("walk deeper than %d levels at /%s", MaxWalkDepth, p.path)
		return res
	}
	ld := p.local
	add := func(name string, l *node, pc *Child) {
		d := Difference{Path: joinPath(p.path, name), Peer: pc}
		if l != nil {
			c := l.Child
			d.Local = &c
		}
		res.diffs = append(res.diffs, d)
	}
	i := 0
	res.err = peerChildren(w.ctx, w.sess, w.st, p.path, w.ignore, func(pc Child) error {
		for i < len(ld.children) && ld.children[i].Name < pc.Name {
			add(ld.children[i].Name, &ld.children[i], nil)
			i++
		}
		c := pc
		if i == len(ld.children) || ld.children[i].Name != pc.Name {
			add(pc.Name, nil, &c)
			return nil
		}
		l := &ld.children[i]
		i++
		switch {
		case l.Child == pc:
		case l.Kind == vfs.KindDir && pc.Kind == vfs.KindDir:
			if l.Mode != pc.Mode {
				add(pc.Name, l, &c)
			}
			if l.Hash != pc.Hash {
				res.descend = append(res.descend, pendingDir{path: joinPath(p.path, pc.Name), local: l.dir, depth: p.depth + 1})
			}
		default:
			add(pc.Name, l, &c)
		}
		return nil
	})
	if res.err != nil {
		return res
	}
	for ; i < len(ld.children); i++ {
		add(ld.children[i].Name, &ld.children[i], nil)
	}
	return res
}
