package converge

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// Responder answers the convergence methods for one store: the container
// side of a pair. Create it with Register.
type Responder struct {
	store *vfs.Store
	log   *slog.Logger

	mu    sync.Mutex // one tree build at a time
	trees []*cachedTree

	snap snapReceiver
}

type cachedTree struct {
	key  string // ignore list, canonical
	tree *Tree
}

// maxCachedTrees bounds the trees kept (one per ignore list in use).
const maxCachedTrees = 2

// Register serves the convergence methods of store on srv and returns the
// responder (whose Forget drops cached trees). It first settles a snapshot
// staging left by a process that died (see recoverStaging): a cut-short
// install finishes before Register returns, a staging that can no longer
// install is removed; later, the first Apply that is not an install's
// removes a staging beside a store that holds a tree (see doc.go).
func Register(srv *syncwire.Server, store *vfs.Store, log *slog.Logger) *Responder {
	if log == nil {
		log = slog.Default()
	}
	r := &Responder{store: store, log: log.With("component", "converge")}
	r.snap.r = r
	r.snap.recoverStaging(context.Background())
	r.snap.stopObserve = store.Observe(r.snap.afterApply)
	srv.Handle(MethodRoot, r.root)
	srv.Handle(MethodNode, r.node)
	srv.Handle(MethodRevs, r.revs)
	srv.Handle(MethodEntries, r.entries)
	srv.Handle(MethodSnapBegin, r.snap.begin)
	srv.Handle(MethodSnapHave, r.snap.have)
	srv.Handle(MethodSnapObjects, r.snap.objects)
	srv.Handle(MethodSnapPage, r.snap.page)
	srv.Handle(MethodSnapCommit, r.snap.commit)
	return r
}

// ignoreKey keys a cached tree: the list in order (gitignore patterns
// override each other in order, so two orders are two lists).
func ignoreKey(list []string) string { return vfs.IgnoreKey(list) }

// Tree returns the store's Merkle tree for ignore, reusing the cached one
// while the store's rev has not moved. Writes that bypass the store (a
// database edited underneath it) do not move the rev: call Forget.
func (r *Responder) Tree(ctx context.Context, ignore []string) (*Tree, error) {
	key := ignoreKey(ignore)
	r.mu.Lock()
	defer r.mu.Unlock()
	rev := r.store.CurrentRev()
	for _, c := range r.trees {
		if c.key == key && c.tree.Rev == rev {
			return c.tree, nil
		}
	}
	t, err := buildTree(ctx, r.store, vfs.NewIgnore(ignore), false)
	if err != nil {
		return nil, err
	}
	r.trees = slices.DeleteFunc(r.trees, func(c *cachedTree) bool { return c.key == key })
	if len(r.trees) >= maxCachedTrees {
		r.trees = r.trees[1:]
	}
	r.trees = append(r.trees, &cachedTree{key: key, tree: t})
	return t, nil
}

// Close stops watching the store and releases the responder's snapshot
// staging database (a staged snapshot stays on disk and resumes under the
// next responder). Serve no more calls after it.
func (r *Responder) Close() error { return r.snap.close() }

// Forget drops the cached trees.
func (r *Responder) Forget() {
	r.mu.Lock()
	r.trees = nil
	r.mu.Unlock()
}

func (r *Responder) root(ctx context.Context, c *rpc.Incoming) error {
	d := newDecoder(c.Body)
	ignore := syncwire.DecodeIgnore(&d)
	if err := d.Done(); err != nil {
		return err
	}
	if err := r.store.FlushAll(ctx); err != nil {
		return fmt.Errorf("root: flush: %w", err)
	}
	t, err := r.Tree(ctx, ignore)
	if err != nil {
		return err
	}
	return c.Reply(appendRootInfo(nil, rootInfo{Root: t.Root, Rev: t.Rev, Names: t.Len()}))
}

func (r *Responder) node(ctx context.Context, c *rpc.Incoming) error {
	q, err := decodeNodeRequest(c.Body)
	if err != nil {
		return err
	}
	t, err := r.Tree(ctx, q.Ignore)
	if err != nil {
		return err
	}
	d := t.lookup(q.Path)
	if d == nil {
		return fmt.Errorf("node /%s: %w", q.Path, vfs.ErrNotExist)
	}
	kids, more := d.page(q.After, q.Limit)
	// Cut by the byte budget too (long names).
	size := 16
	for i, k := range kids {
		size += len(k.Name) + 48
		if size > MaxPageBytes {
			kids, more = kids[:i], true
			break
		}
	}
	return c.Reply(appendNodePage(nil, nodePage{Children: kids, More: more}))
}

func (r *Responder) revs(ctx context.Context, c *rpc.Incoming) error {
	paths, err := decodePaths(c.Body)
	if err != nil {
		return err
	}
	revs, err := r.store.ChangeRevs(ctx, paths)
	if err != nil {
		return err
	}
	return c.Reply(appendRevs(nil, revs))
}

func (r *Responder) entries(ctx context.Context, c *rpc.Incoming) error {
	paths, err := decodePaths(c.Body)
	if err != nil {
		return err
	}
	if err := r.store.FlushAll(ctx); err != nil {
		return fmt.Errorf("entries: flush: %w", err)
	}
	es, err := r.store.EntriesAt(ctx, paths)
	if err != nil {
		return err
	}
	if err := c.ReplyStream(nil); err != nil {
		return err
	}
	return syncwire.SendEntries(ctx, c.Send, func(yield func(vfs.ChangeEntry, error) bool) {
		for _, e := range es {
			if !yield(e, nil) {
				return
			}
		}
	})
}
