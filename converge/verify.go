package converge

import (
	"context"
	"fmt"
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
	// Differences are the first differing paths in pre-order (parents
	// before children, names sorted); Truncated says the walk stopped at
	// the bound with more to find.
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
	w := &walker{ctx: ctx, sess: sess, st: &st, ignore: ignore, limit: limit}
	err = w.dir("", t.root, 0)
	if err == errWalkFull {
		rep.Truncated, err = true, nil
	}
	rep.Differences = w.diffs
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
	limit  int
	diffs  []Difference
}

var errWalkFull = fmt.Errorf("walk bound reached")

func (w *walker) add(path string, l *node, p *Child) error {
	if w.limit > 0 && len(w.diffs) >= w.limit {
		return errWalkFull
	}
	d := Difference{Path: path, Peer: p}
	if l != nil {
		c := l.Child
		d.Local = &c
	}
	w.diffs = append(w.diffs, d)
	return nil
}

// dir compares the peer's children of path with the local directory ld,
// page by page in name order, and descends into directories present on
// both sides whose hashes differ.
func (w *walker) dir(path string, ld *dir, depth int) error {
	if depth >= MaxWalkDepth {
		return malformed("walk deeper than %d levels at /%s", MaxWalkDepth, path)
	}
	i := 0
	var descend []*node
	// Descents wait for the page's comparison so one directory's pages are
	// read in one pass, but they run in name order, keeping pre-order.
	flush := func() error {
		for _, n := range descend {
			if err := w.dir(joinPath(path, n.Name), n.dir, depth+1); err != nil {
				return err
			}
		}
		descend = descend[:0]
		return nil
	}
	err := peerChildren(w.ctx, w.sess, w.st, path, w.ignore, func(pc Child) error {
		for i < len(ld.children) && ld.children[i].Name < pc.Name {
			if err := w.add(joinPath(path, ld.children[i].Name), &ld.children[i], nil); err != nil {
				return err
			}
			i++
		}
		p := pc
		if i == len(ld.children) || ld.children[i].Name != pc.Name {
			return w.add(joinPath(path, pc.Name), nil, &p)
		}
		l := &ld.children[i]
		i++
		if l.Child == pc {
			return nil
		}
		if l.Kind == vfs.KindDir && pc.Kind == vfs.KindDir {
			if l.Mode != pc.Mode {
				if err := w.add(joinPath(path, pc.Name), l, &p); err != nil {
					return err
				}
			}
			if l.Hash != pc.Hash {
				descend = append(descend, l)
			}
			return nil
		}
		return w.add(joinPath(path, pc.Name), l, &p)
	})
	if err != nil {
		return err
	}
	for ; i < len(ld.children); i++ {
		if err := w.add(joinPath(path, ld.children[i].Name), &ld.children[i], nil); err != nil {
			return err
		}
	}
	return flush()
}
