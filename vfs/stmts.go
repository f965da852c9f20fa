package vfs

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
)

// Parsing SQL costs more than running it in modernc's SQLite, so hot
// statements are prepared once per database handle and reused: inside a
// transaction through Tx.StmtContext (which reuses the statement prepared
// on the same connection), outside one directly.

// maxCached bounds the statement cache (queries with variable IN lists
// would otherwise fill it).
const maxCached = 256

// maxCachedParams: statements with more parameters are not cached.
const maxCachedParams = 16

type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
	// seen are the batch statements missed once, batches how many
	// batch statements the cache keeps (repeated).
	seen    map[string]bool
	batches int
}

// maxCachedBatches bounds the batch statements cached, so they never
// crowd out the hot ones.
const maxCachedBatches = 32

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: make(map[string]*sql.Stmt), seen: make(map[string]bool)}
}

// repeated reports whether the batch statement q was missed before and
// may join the cache, and remembers it (at most maxCached of them).
func (c *stmtCache) repeated(q string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[q] {
		if c.batches >= maxCachedBatches {
			return false
		}
		delete(c.seen, q)
		c.batches++
		return true
	}
	if len(c.seen) >= maxCached {
		clear(c.seen)
	}
	c.seen[q] = true
	return false
}

func (c *stmtCache) get(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[q]
}

// prepare prepares queries at the database level. It must not run while
// the caller holds a transaction on a database with a single connection.
func (c *stmtCache) prepare(ctx context.Context, qs []string) {
	for _, q := range qs {
		if strings.Count(q, "?") > maxCachedParams && !c.repeated(q) {
			// Batch statements (IN lists, multi-row inserts) come in
			// many lengths; caching them all would crowd out the hot
			// ones. One that comes again (a full batch) is kept.
			continue
		}
		c.mu.Lock()
		_, ok := c.m[q]
		full := len(c.m) >= maxCached
		c.mu.Unlock()
		if ok || full {
			continue
		}
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue // the query will fail where it is used, with its context
		}
		c.mu.Lock()
		if _, ok := c.m[q]; ok {
			st.Close()
		} else {
			c.m[q] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.m {
		st.Close()
		delete(c.m, q)
	}
}

// dbQuerier runs queries on the database with cached statements. It is for
// the reader pool of a file store, which always has a spare connection.
type dbQuerier struct{ c *stmtCache }

func (d dbQuerier) stmt(ctx context.Context, q string) *sql.Stmt {
	if h := stmtHook.Load(); h != nil {
		(*h)(d.c, q)
	}
	if st := d.c.get(q); st != nil {
		return st
	}
	d.c.prepare(ctx, []string{q})
	return d.c.get(q)
}

func (d dbQuerier) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := d.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return d.c.db.ExecContext(ctx, q, args...)
}

func (d dbQuerier) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := d.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return d.c.db.QueryContext(ctx, q, args...)
}

func (d dbQuerier) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := d.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.c.db.QueryRowContext(ctx, q, args...)
}

// txQuerier runs queries in a transaction: cached statements rebound to
// it, others prepared in it and remembered so the cache can prepare them
// once the transaction is over.
type txQuerier struct {
	tx     *sql.Tx
	c      *stmtCache
	stmts  map[string]*sql.Stmt
	misses []string
	// detached: statements ignore their context's cancellation (a
	// group's transaction, which an interrupt would roll back whole).
	detached bool
	// pending, on a group's transaction, are rows of queued creates,
	// written before any other statement runs (pending.go).
	pending  *pendingRows
	flushing bool
}

// flushPending writes the pending rows before a statement; a failure is
// kept in them (the group cannot commit) and returned.
func (t *txQuerier) flushPending(ctx context.Context) error {
	if t.pending == nil || t.flushing {
		return nil
	}
	t.flushing = true
	defer func() { t.flushing = false }()
	return t.pending.flush(ctx, t)
}

func (t *txQuerier) ctx(ctx context.Context) context.Context {
	if t.detached {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func newTxQuerier(tx *sql.Tx, c *stmtCache) *txQuerier {
	return &txQuerier{tx: tx, c: c, stmts: make(map[string]*sql.Stmt)}
}

var TraceStmts func(q string)

// stmtHook, when set (by tests), sees every statement a transaction or a
// read outside one runs, with the cache of the database it runs on.
var stmtHook atomic.Pointer[func(c *stmtCache, q string)]

func (t *txQuerier) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if h := stmtHook.Load(); h != nil {
		(*h)(t.c, q)
	}
	if TraceStmts != nil {
		TraceStmts(q)
	}
	if st, ok := t.stmts[q]; ok {
		return st, nil
	}
	var st *sql.Stmt
	if cached := t.c.get(q); cached != nil {
		st = t.tx.StmtContext(ctx, cached)
	} else {
		var err error
		if st, err = t.tx.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
		t.misses = append(t.misses, q)
	}
	t.stmts[q] = st
	return st, nil
}

// done closes the transaction's statements and prepares the misses; call
// it after commit or rollback.
func (t *txQuerier) done(ctx context.Context) {
	for _, st := range t.stmts {
		st.Close()
	}
	t.c.prepare(ctx, t.misses)
}

func (t *txQuerier) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	ctx = t.ctx(ctx)
	if err := t.flushPending(ctx); err != nil {
		return nil, err
	}
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (t *txQuerier) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	ctx = t.ctx(ctx)
	if err := t.flushPending(ctx); err != nil {
		return nil, err
	}
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (t *txQuerier) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	ctx = t.ctx(ctx)
	// A failed write of pending rows stays in them: the group does not
	// commit, whatever this read returns.
	t.flushPending(ctx)
	st, err := t.stmt(ctx, q)
	if err != nil {
		return t.tx.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}
