package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/wsync/wsync/lease"
	"github.com/wsync/wsync/objstore"
	"github.com/wsync/wsync/sharedchunks"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/workspace"
)

// Defaults.
const (
	DefaultLeaseTTL       = 15 * time.Second
	DefaultReplicateEvery = time.Second
	DefaultChunkGCEvery   = time.Hour
)

// Options configures a Cluster.
type Options struct {
	Store *objstore.Store
	// ServerID names this server in leases; one per data directory
	// (ServerID reads or makes it).
	ServerID string
	// Address is where this server's API is reached (serve --advertise):
	// the owner's address other servers redirect callers to.
	Address        string
	LeaseTTL       time.Duration
	ReplicateEvery time.Duration
	// ChunkGCEvery is how often this server tries to collect the bucket's
	// unreferenced chunks (one server at a time, under the collector's
	// lease); 0: DefaultChunkGCEvery, negative: never.
	ChunkGCEvery time.Duration
	// ChunkGCGrace is the collector's grace (sharedchunks.DefaultGrace
	// when 0). Every server on a bucket must use the same.
	ChunkGCGrace time.Duration
	Logger       *slog.Logger
}

// Cluster is the workspace.Ownership of one server sharing an object store.
type Cluster struct {
	opts Options
	log  *slog.Logger

	chunks *sharedchunks.Store

	ctx    context.Context // background work: lease keepers, publishers, the collector
	cancel context.CancelFunc
	bg     sync.WaitGroup

	mu    sync.Mutex
	owned map[string]*owned
}

// owned is a workspace this server holds the lease of.
type owned struct {
	name   string
	lease  *lease.Lease
	cancel context.CancelFunc // its keeper and publisher

	mu      sync.Mutex
	cfgETag string // the registration object as last written or read
	cfgBody []byte
	next    *workspace.Published // waiting to be written
	wake    chan struct{}
	rep     replicator
	store   *vfs.Store
	// restored: the local store was restored from the bucket at the
	// claim (its chunk bytes are the bucket's until read).
	restored bool
}

var _ workspace.Ownership = (*Cluster)(nil)

// New returns the Cluster of one server.
func New(opts Options) (*Cluster, error) {
	if opts.Store == nil || opts.ServerID == "" {
		return nil, fmt.Errorf("cluster: %w: an object store and a server id are needed", objstore.ErrInvalid)
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.ReplicateEvery <= 0 {
		opts.ReplicateEvery = DefaultReplicateEvery
	}
	if opts.ChunkGCEvery == 0 {
		opts.ChunkGCEvery = DefaultChunkGCEvery
	}
	if opts.ChunkGCGrace <= 0 {
		opts.ChunkGCGrace = sharedchunks.DefaultGrace
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{opts: opts, log: opts.Logger.With("component", "cluster"), chunks: sharedchunks.New(opts.Store), ctx: ctx, cancel: cancel, owned: map[string]*owned{}}
	if opts.ChunkGCEvery > 0 {
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			c.collector(ctx)
		}()
	}
	return c, nil
}

// Keys of a workspace's objects, under the store's prefix.
func leaseKey(name string) string      { return "workspaces/" + name + "/lease" }
func configKey(name string) string     { return "workspaces/" + name + "/config.json" }
func replicaPrefix(name string) string { return "workspaces/" + name + "/db" }

// ownerFile records, in a workspace's directory, which server held which
// generation when the local store was last written: a claim keeps the
// local store only when no other server owned the workspace since.
type ownerFile struct {
	Server     string `json:"server"`
	Generation int64  `json:"generation"`
}

func ownerPath(dir string) string { return filepath.Join(dir, "owner.json") }

func readOwner(dir string) ownerFile {
	var o ownerFile
	if b, err := os.ReadFile(ownerPath(dir)); err == nil {
		_ = json.Unmarshal(b, &o)
	}
	return o
}

func writeOwner(dir string, o ownerFile) error {
	b, _ := json.Marshal(o)
	tmp := ownerPath(dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, ownerPath(dir))
}

// Create claims a new workspace: its registration object is created
// conditionally (one creator wins), then its lease.
func (c *Cluster) Create(ctx context.Context, name, dir string, lost func(error)) error {
	body, err := json.Marshal(workspace.Published{Config: workspace.Config{Name: name, Created: time.Now().UTC()}})
	if err != nil {
		return err
	}
	etag, err := c.opts.Store.PutIfAbsent(ctx, configKey(name), body)
	if errors.Is(err, objstore.ErrPrecondition) {
		return fmt.Errorf("%w: %q (in the object store)", workspace.ErrWorkspaceExists, name)
	}
	if err != nil {
		return fmt.Errorf("create workspace %q in the object store: %w", name, err)
	}
	l, err := c.acquire(ctx, name)
	if err != nil {
		return err
	}
	// A directory an earlier workspace of the same name left here is not
	// this one's.
	if err := clearStore(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeOwner(dir, ownerFile{Server: c.opts.ServerID, Generation: l.Generation()}); err != nil {
		return err
	}
	c.hold(name, l, etag, body, lost, false)
	return nil
}

func (c *Cluster) acquire(ctx context.Context, name string) (*lease.Lease, error) {
	l, err := lease.Acquire(ctx, c.opts.Store, leaseKey(name), c.opts.ServerID, c.opts.Address, c.opts.LeaseTTL)
	var held *lease.HeldError
	switch {
	case errors.As(err, &held):
		return nil, &workspace.NotOwnerError{Name: name, Owner: held.Record.Owner, Address: held.Record.Address, Expires: held.Record.Expires}
	case err != nil && !errors.Is(err, objstore.ErrInvalid):
		return nil, fmt.Errorf("%w: %w", workspace.ErrObjectStoreUnavailable, err)
	}
	return l, err
}

// Claim takes a workspace's lease and makes dir hold its store: the local
// copy when this server held the generation just before (nothing newer
// exists anywhere), else the object store's replica of the previous
// generation (the local copy, older, is set aside).
func (c *Cluster) Claim(ctx context.Context, name, dir string, lost func(error)) (workspace.Published, error) {
	body, obj, err := c.opts.Store.Get(ctx, configKey(name))
	if errors.Is(err, objstore.ErrNotFound) {
		return workspace.Published{}, fmt.Errorf("%w: %q", workspace.ErrNoWorkspace, name)
	}
	if err != nil {
		return workspace.Published{}, fmt.Errorf("claim workspace %q: %w: %w", name, workspace.ErrObjectStoreUnavailable, err)
	}
	var pub workspace.Published
	if err := json.Unmarshal(body, &pub); err != nil {
		return workspace.Published{}, fmt.Errorf("claim workspace %q: registration: %w: %v", name, objstore.ErrInvalid, err)
	}
	l, err := c.acquire(ctx, name)
	if err != nil {
		return workspace.Published{}, err
	}
	gen := l.Generation()
	local := readOwner(dir)
	dbPath := filepath.Join(dir, "store.db")
	_, statErr := os.Stat(dbPath)
	keep := local.Server == c.opts.ServerID && local.Generation == gen-1 && statErr == nil
	restored := false
	if !keep {
		start := time.Now()
		if err := clearStore(dir); err != nil {
			return workspace.Published{}, fmt.Errorf("claim workspace %q: %w", name, err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return workspace.Published{}, err
		}
		from, err := restore(ctx, c.opts.Store, replicaPrefix(name), gen-1, dbPath)
		switch {
		case errors.Is(err, errNoReplica):
			c.log.Warn("workspace has no replica yet: it starts empty", "workspace", name, "generation", gen)
		case err != nil:
			_ = l.Release(context.WithoutCancel(ctx))
			return workspace.Published{}, fmt.Errorf("claim workspace %q: restore: %w", name, err)
		default:
			restored = true
			c.log.Info("workspace restored from the object store", "workspace", name, "from_generation", from, "generation", gen, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	if err := writeOwner(dir, ownerFile{Server: c.opts.ServerID, Generation: gen}); err != nil {
		return workspace.Published{}, err
	}
	c.hold(name, l, obj.ETag, body, lost, restored)
	return pub, nil
}

// clearStore sets aside a workspace directory's store files: they are
// replaced by the object store's copy.
func clearStore(dir string) error {
	for _, n := range []string{"store.db", "store.db-wal", "store.db-shm", "store.db.chunks", "owner.json"} {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// hold starts keeping a lease and publishing the workspace's registration.
func (c *Cluster) hold(name string, l *lease.Lease, etag string, body []byte, lost func(error), restored bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	o := &owned{name: name, lease: l, cancel: cancel, cfgETag: etag, cfgBody: body, wake: make(chan struct{}, 1), restored: restored}
	c.mu.Lock()
	if old := c.owned[name]; old != nil {
		old.cancel()
	}
	c.owned[name] = o
	c.mu.Unlock()
	c.bg.Add(2)
	go func() {
		defer c.bg.Done()
		l.Keep(ctx, func(err error) {
			c.forget(o)
			lost(err)
		})
	}()
	go func() {
		defer c.bg.Done()
		c.publisher(ctx, o)
	}()
}

// forget drops an owned workspace whose lease is gone.
func (c *Cluster) forget(o *owned) {
	o.cancel()
	c.mu.Lock()
	if c.owned[o.name] == o {
		delete(c.owned, o.name)
	}
	c.mu.Unlock()
}

func (c *Cluster) get(name string) *owned {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned[name]
}

// Owns is true while this server's lease on the workspace is valid.
func (c *Cluster) Owns(name string) bool {
	o := c.get(name)
	return o != nil && o.lease.Valid() == nil
}

// Publish queues the registration; the workspace's publisher writes it.
func (c *Cluster) Publish(p workspace.Published) {
	o := c.get(p.Config.Name)
	if o == nil {
		return
	}
	o.mu.Lock()
	o.next = &p
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// publisher writes the latest queued registration, conditionally on the
// one it last wrote: a write another server made since (it owns the
// workspace now) fails it, and nothing more is written.
func (c *Cluster) publisher(ctx context.Context, o *owned) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.wake:
		}
		for {
			o.mu.Lock()
			p := o.next
			o.next = nil
			etag, last := o.cfgETag, o.cfgBody
			o.mu.Unlock()
			if p == nil {
				break
			}
			body, err := json.Marshal(p)
			if err != nil {
				c.log.Error("registration", "workspace", o.name, "err", err)
				break
			}
			if string(body) == string(last) {
				continue
			}
			if err := o.lease.Valid(); err != nil {
				return
			}
			tag, err := c.opts.Store.PutIfMatch(ctx, configKey(o.name), body, etag)
			if errors.Is(err, objstore.ErrPrecondition) {
				c.log.Warn("registration changed by another server: not written", "workspace", o.name)
				return
			}
			if err != nil {
				// Keep it for the next wake or retry after a while.
				c.log.Warn("write registration", "workspace", o.name, "err", err)
				o.mu.Lock()
				if o.next == nil {
					o.next = p
				}
				o.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			}
			o.mu.Lock()
			o.cfgETag, o.cfgBody = tag, body
			o.mu.Unlock()
		}
	}
}

// Flush waits until the workspace's queued registration is written (for
// tests and shutdown).
func (c *Cluster) flushRegistration(ctx context.Context, o *owned) {
	for {
		o.mu.Lock()
		pending := o.next != nil
		o.mu.Unlock()
		if !pending || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// StoreOptions: an owned store's chunks go to the object store, fenced by
// the workspace's lease (a store restored from it reads them from there
// until cached), and its checkpoints are left to replication.
func (c *Cluster) StoreOptions(name string, o *vfs.Options) {
	o.ExternalCheckpoint = true
	o.ChunkRemote = c.chunks
	if w := c.get(name); w != nil {
		o.ChunkRemote = c.chunks.Fenced(w.lease.Valid)
		w.mu.Lock()
		o.DetachChunks = w.restored
		w.mu.Unlock()
	}
}

// Opened starts the store's replication under the lease's generation.
func (c *Cluster) Opened(ctx context.Context, name string, s *vfs.Store) (io.Closer, error) {
	o := c.get(name)
	if o == nil {
		return nil, fmt.Errorf("workspace %q: %w", name, workspace.ErrNotOwner)
	}
	o.mu.Lock()
	restored := o.restored
	o.restored = false // a later open keeps what this one cached
	o.mu.Unlock()
	if !restored {
		// A store kept here may name chunks it verified in the bucket
		// before a crash, in commits the bucket never got: the collector
		// may have set them aside since. Verify them again.
		n, err := s.ReoweUploads(ctx)
		if err != nil {
			return nil, fmt.Errorf("workspace %q: %w", name, err)
		}
		if n > 0 {
			c.log.Info("chunks to verify in the object store again", "workspace", name, "chunks", n)
		}
	}
	rep, err := startReplica(c.ctx, replicaOptions{
		store: c.opts.Store, prefix: replicaPrefix(name), gen: o.lease.Generation(), every: c.opts.ReplicateEvery,
		vfs: s, fence: o.lease.Valid, grace: c.opts.ChunkGCGrace, log: c.log.With("workspace", name),
	})
	if err != nil {
		return nil, fmt.Errorf("workspace %q: replication: %w", name, err)
	}
	o.mu.Lock()
	o.rep, o.store = rep, s
	o.mu.Unlock()
	return closerFunc(func() error {
		o.mu.Lock()
		o.rep, o.store = nil, nil
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rep.Close(ctx)
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// Names lists the workspaces whose registration is in the object store.
func (c *Cluster) Names(ctx context.Context) ([]string, error) {
	var out []string
	for obj, err := range c.opts.Store.List(ctx, "workspaces/") {
		if err != nil {
			return out, err
		}
		rest := strings.TrimPrefix(obj.Key, "workspaces/")
		if name, ok := strings.CutSuffix(rest, "/config.json"); ok && !strings.Contains(name, "/") {
			out = append(out, name)
		}
	}
	return out, nil
}

// Status reports the workspace's lease and replication.
func (c *Cluster) Status(name string) *workspace.OwnershipStatus {
	o := c.get(name)
	if o == nil {
		return nil
	}
	r := o.lease.Record()
	st := &workspace.OwnershipStatus{Owner: r.Owner, Address: r.Address, Generation: r.Generation}
	o.mu.Lock()
	rep, s := o.rep, o.store
	o.mu.Unlock()
	if rep != nil {
		rs := rep.Status()
		st.LagSeconds = rs.Lag.Seconds()
		if rs.LastError != nil {
			st.ReplicaError = rs.LastError.Error()
		}
		if rs.Fenced {
			st.ReplicaError = "fenced: the lease was lost"
		}
		st.LastShipped = rs.LastShip
	}
	if s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st.OwedUploads, _ = s.OwedUploads(ctx)
		cancel()
	}
	return st
}

// Release gives up every lease this server holds, after the workspaces'
// stores closed (their replication flushed): another server may then take
// them at once instead of waiting for the leases to run out.
func (c *Cluster) Close(ctx context.Context) error {
	c.mu.Lock()
	all := make([]*owned, 0, len(c.owned))
	for _, o := range c.owned {
		all = append(all, o)
	}
	c.owned = map[string]*owned{}
	c.mu.Unlock()
	var errs []error
	for _, o := range all {
		c.flushRegistration(ctx, o)
		o.cancel()
		if err := o.lease.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
			errs = append(errs, err)
		}
	}
	c.cancel()
	c.bg.Wait()
	return errors.Join(errs...)
}
