package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/wsync/wsync/chunkstore"
)

// Options configures Open.
type Options struct {
	// Owner is the uid/gid (and, for the root, the mode) of the root and of
	// nodes created by Apply. Mode 0 means 0755 for the root.
	Owner NewAttr
	// ChunkDir holds full-size chunk files; default: the database path + ".chunks".
	ChunkDir string
	// InlineMax overrides chunkstore's inline threshold (0: default).
	InlineMax int
	// NoSync: synchronous=OFF and no fsync of chunk files (tests, tmpfs).
	NoSync bool
	// GC configures live chunk collection (gc.go); the zero value runs
	// none in the background.
	GC GCOptions
	// GroupWindow is how long local mutations may wait, answered but
	// uncommitted, to share one commit (group.go): 0 means
	// DefaultGroupWindow, negative commits every mutation before it
	// returns. An in-memory store never groups.
	GroupWindow time.Duration
	// NoWriteBehind answers every mount mutation after it ran, instead of
	// answering creates and removals the memo decides first (behind.go).
	NoWriteBehind bool
	// Trash keeps what deletes and overwrites replace (trash.go); nil
	// keeps nothing (a container's store).
	Trash *TrashOptions
	// ExternalCheckpoint leaves checkpoints to another owner of the
	// database (litestream, package replica): no checkpointer runs, the
	// writer's wal_autocheckpoint is 0 and Close does not fold the WAL
	// (checkpoint.go).
	ExternalCheckpoint bool
	// ChunkRemote is a second home for the store's chunks (an object
	// store): every non-inline chunk committed is owed to it until
	// UploadOwed, and reads fetch from it what the local store lacks
	// (remote.go). nil: none.
	ChunkRemote chunkstore.Remote
	// DetachChunks says the database was restored from a replica made on
	// another machine: at open, every non-inline chunk is recorded as the
	// remote's and fetched from it on first read (it needs ChunkRemote).
	DetachChunks bool
	Logger       *slog.Logger
}

// Store is one workspace's VFS: a SQLite database of nodes, directory
// entries, changes and watermarks, and a chunk store for file bytes.
type Store struct {
	path   string
	opts   Options
	log    *slog.Logger
	w      *sql.DB // the one writer connection
	r      *sql.DB // readers (== w for :memory:)
	wc     *stmtCache
	rc     *stmtCache
	rq     dbQuerier // reads outside transactions
	chunks *chunkstore.Store
	id     string
	// served is the highest rev handed out as a place in the feed
	// (peers.go).
	served atomic.Int64
	memory bool

	wmu      sync.Mutex     // serialises write transactions
	dirCache map[Ino]string // directory paths; guarded by wmu
	xattrs   xattrInos      // the nodes that may have xattrs; guarded by wmu
	rev      atomic.Int64   // last committed rev
	// writes moves at the start and at the end of every write transaction
	// (a group's mutation, an update): a reader that saw it unchanged
	// across a span knows nothing was written meanwhile (AttrAsOf).
	writes atomic.Uint64
	// kept is what GetAttr keeps of directories (kept.go).
	kept atomic.Pointer[keptAttrs]
	// marks are the watermarks read, kept the same way (misc.go).
	marks atomic.Pointer[keptMarks]
	// running is what a run of queued mutations keeps, carried in place
	// while the run lasts (kept.go: carryQueued); guarded by wmu.
	running *keptAttrs
	grp     *group      // the open group of local mutations; guarded by wmu
	grpOpen atomic.Bool // grp != nil, for reads that take no lock
	grpErr  error       // a group failure not yet returned by Sync; guarded by wmu
	// groupMinFree is the free space a group needs (group.go; tests lower it).
	groupMinFree uint64
	// room keeps the disk reserve back from local writes (reserve.go).
	room reserve

	openMu sync.Mutex
	open   map[Ino]*openFile

	obsMu     sync.Mutex
	observers []*observer

	hashSem chan struct{} // bounds chunks being hashed and stored in the background

	closed atomic.Bool

	// Quota and usage (quota.go): useBytes and useEntries are the usage
	// every answered mutation left (committed, or in the open group),
	// changed under wmu; reserved is the open files' buffered growth.
	quota      atomic.Pointer[Quota]
	useBytes   atomic.Int64
	useEntries atomic.Int64
	resMu      sync.Mutex
	reserved   int64 // guarded by resMu

	ckpt *checkpointer // nil for an in-memory store

	ahead readAhead // which directory's small files are being read (ahead.go)

	// Write-behind of mount mutations (behind.go): mem is nil when off;
	// queuedN counts the mutations answered and not yet run. inoHigh is
	// the largest inode number handed out, committed or not (a queued
	// create answered and then lost): every node gets one past it, so no
	// number is handed out twice while the store is open.
	mem        *memo
	queuedN    atomic.Int64
	inoHigh    atomic.Int64
	bhFd       int // an eventfd the goroutine sleeps on
	bhSleeping atomic.Bool
	bhStopping atomic.Bool
	bhDone     chan struct{}

	gcState // live chunk collection (gc.go)
}

// maxDirCache bounds the cache of directory paths.
const maxDirCache = 1 << 16

// Memory is the path that opens a store held entirely in memory.
const Memory = ":memory:"

// Open opens (creating if needed) the store at path, or an in-memory store
// for Memory. It migrates an older schema and refuses a newer one.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	s := &Store{path: path, opts: opts, open: make(map[Ino]*openFile), hashSem: make(chan struct{}, 3), dirCache: make(map[Ino]string), groupMinFree: groupMinFree}
	s.log = opts.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "vfs")
	if path != Memory {
		s.room.path = path
	}
	if err := s.openDB(); err != nil {
		s.closeDBs()
		return nil, err
	}
	if err := s.init(ctx); err != nil {
		s.closeDBs()
		s.chunks.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	var seq int64
	if err := s.w.QueryRowContext(ctx, `SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'nodes'), 0), (SELECT max(ino) FROM nodes))`).Scan(&seq); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: read the last inode number: %w", path, err)
	}
	s.sawIno(Ino(seq))
	if err := s.startBehind(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.startGC()
	return s, nil
}

func (s *Store) openDB() error {
	sync := "NORMAL"
	if s.opts.NoSync {
		sync = "OFF"
	}
	chunkDir := s.opts.ChunkDir
	if s.path == Memory {
		s.memory = true
		// One connection: every in-memory connection would otherwise be a
		// database of its own. Reads queue behind writes in this mode.
		// auto_vacuum=INCREMENTAL lets GC hand deleted chunks' pages back
		// (gc.go: vacuum), or they would stay in memory as free pages.
		db, err := sql.Open("sqlite", "file:wsync?mode=memory&_pragma=foreign_keys(0)&_pragma=auto_vacuum(2)")
		if err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		db.SetMaxOpenConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		s.w, s.r = db, db
		chunkDir = ""
	} else {
		if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		base := "file:" + (&url.URL{Path: s.path}).EscapedPath()
		q := "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(" + sync + ")&_pragma=foreign_keys(0)"
		// Checkpoints run off the writer (checkpoint.go).
		w, err := sql.Open("sqlite", base+q+"&_pragma=wal_autocheckpoint("+strconv.Itoa(s.walAutocheckpoint())+")&_txlock=immediate")
		if err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		w.SetConnMaxLifetime(0)
		w.SetConnMaxIdleTime(0)
		r, err := sql.Open("sqlite", base+q+"&_pragma=query_only(1)")
		if err != nil {
			w.Close()
			return fmt.Errorf("open store: %w", err)
		}
		r.SetMaxOpenConns(4)
		r.SetMaxIdleConns(4)
		r.SetConnMaxIdleTime(0)
		s.w, s.r = w, r
		if err := s.startCheckpointer(base + q); err != nil {
			return err
		}
		if chunkDir == "" {
			chunkDir = s.path + ".chunks"
		}
	}
	s.wc, s.rc = newStmtCache(s.w), newStmtCache(s.r)
	s.rq = dbQuerier{s.rc}
	cs, err := chunkstore.New(chunkstore.Options{Dir: chunkDir, InlineMax: s.opts.InlineMax, NoSync: s.opts.NoSync, Remote: s.opts.ChunkRemote, Logger: s.opts.Logger})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	s.chunks = cs
	return nil
}

// closeDBs closes the database handles of a store that failed to open.
func (s *Store) closeDBs() {
	if s.ckpt != nil {
		s.ckpt.close()
	}
	if s.r != nil && s.r != s.w {
		s.r.Close()
	}
	if s.w != nil {
		s.w.Close()
	}
}

func (s *Store) init(ctx context.Context) error {
	// The writer connection must exist before the WAL switch so the pragma
	// runs on it; a ping forces that.
	if err := s.w.PingContext(ctx); err != nil {
		return err
	}
	if err := migrate(ctx, s.w, SchemaVersion, s.initRows); err != nil {
		return err
	}
	var rev int64
	if err := s.w.QueryRowContext(ctx, `SELECT value FROM meta WHERE key='rev'`).Scan(&rev); err != nil {
		return fmt.Errorf("read rev: %w", err)
	}
	s.rev.Store(rev)
	if err := s.loadUsage(ctx); err != nil {
		return err
	}
	if err := s.xattrs.load(ctx, s.w); err != nil {
		return err
	}
	if err := s.w.QueryRowContext(ctx, `SELECT value FROM meta WHERE key='store_id'`).Scan(&s.id); err != nil {
		return fmt.Errorf("read store id: %w", err)
	}
	if err := s.loadServed(ctx); err != nil {
		return err
	}
	return s.recover(ctx)
}

// initRows creates the root and the meta rows of a fresh database.
func (s *Store) initRows(ctx context.Context, tx *sql.Tx) error {
	now := time.Now().UnixNano()
	mode := s.opts.Owner.Mode
	if mode == 0 {
		mode = 0o755
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO nodes(ino, kind, mode, uid, gid, nlink, size, mtime, ctime, atime, rev)
		VALUES(?, ?, ?, ?, ?, 1, 0, ?, ?, ?, 0)`, RootIno, KindDir, mode, s.opts.Owner.Uid, s.opts.Owner.Gid, now, now, now); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES('rev', 0), ('store_id', ?)`, uuid.NewString())
	return err
}

// recover removes what a crash left behind: nodes with no names that were
// kept only for open handles, and chunk bytes no committed row references.
func (s *Store) recover(ctx context.Context) error {
	err := s.update(ctx, func(t *wtx) error {
		if s.opts.DetachChunks {
			n, err := s.chunks.Detach(ctx, t.tx)
			if err != nil {
				return err
			}
			s.log.Info("restored store: chunks are read from the remote until cached", "chunks", n)
		}
		rows, err := t.tx.QueryContext(ctx, `SELECT ino FROM nodes WHERE nlink = 0 AND ino != ?`, RootIno)
		if err != nil {
			return err
		}
		var orphans []Ino
		for rows.Next() {
			var ino Ino
			if err := rows.Scan(&ino); err != nil {
				rows.Close()
				return err
			}
			orphans = append(orphans, ino)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, ino := range orphans {
			if err := t.deleteNode(ino); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if _, err := s.GC(ctx); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// Close flushes open handles and closes the store.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stopGC()
	ferr := s.FlushAll(context.WithValue(context.Background(), closingKey{}, true))
	s.stopBehind()
	s.lockW()
	defer s.wmu.Unlock()
	var errs []error
	errs = append(errs, ferr, s.commitGroup())
	if s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	if !s.memory && !s.opts.ExternalCheckpoint {
		// Fold the WAL back so the database file stands alone.
		_, err := s.w.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		errs = append(errs, err)
	}
	s.wc.close()
	s.rc.close()
	errs = append(errs, s.w.Close(), s.chunks.Close())
	return errors.Join(errs...)
}

// ID is the store's identity, fixed when it was created.
func (s *Store) ID() string { return s.id }

// CurrentRev is the rev of the last mutation. It commits the open group
// first, so a feed read through it sees every mutation answered before.
func (s *Store) CurrentRev() int64 {
	s.settle()
	return s.rev.Load()
}

// Chunks is the store's chunk store (staging received chunks, probing).
func (s *Store) Chunks() *chunkstore.Store { return s.chunks }

// Path is the database path (Memory for an in-memory store).
func (s *Store) Path() string { return s.path }

// Observe registers fn, called after every commit that Apply made (not local
// writes), outside every store lock, with the inodes and entries to
// invalidate; and with one Invalidation with All set when a failure lost
// mutations answered to the kernel. fn must not call back into the store synchronously. The
// returned cancel unregisters it.
func (s *Store) Observe(fn func([]Invalidation)) (cancel func()) {
	o := &observer{fn: fn}
	s.obsMu.Lock()
	s.observers = append(s.observers, o)
	s.obsMu.Unlock()
	return func() {
		s.obsMu.Lock()
		defer s.obsMu.Unlock()
		for i, x := range s.observers {
			if x == o {
				s.observers = append(s.observers[:i:i], s.observers[i+1:]...)
				return
			}
		}
	}
}

type observer struct{ fn func([]Invalidation) }

// lostAnswered tells the observers that mutations answered to the kernel
// were lost (Invalidation.All). From a goroutine of its own: observers run
// outside store locks, and the caller holds the writer.
func (s *Store) lostAnswered() {
	go s.notify([]Invalidation{{All: true}})
}

func (s *Store) notify(inv []Invalidation) {
	if len(inv) == 0 {
		return
	}
	s.obsMu.Lock()
	obs := s.observers
	s.obsMu.Unlock()
	for _, o := range obs {
		o.fn(inv)
	}
}

// Invalidation names what a committed mutation changed, for kernel caches:
// the node's attributes and content, and the (Parent, Name) entry.
type Invalidation struct {
	Ino    Ino
	Parent Ino    // 0 when no entry changed
	Name   string // the entry's name in Parent
	// New: the commit made the node Ino. Inode numbers are never reused
	// and a node is visible only once its commit is, so no kernel can
	// hold it, nor an entry in it, from before the commit: what it
	// learns of either it learnt since, and is current.
	New bool
	// All, alone in its list: mutations answered to the kernel were lost
	// (a failed group or queued mutation, a full disk). What the kernel
	// was told of them no longer holds, and the store cannot name every
	// entry they touched: everything cached of the store goes.
	All bool
}

// wtx is one write transaction. A mutation inside it stamps one rev; Apply
// runs many mutations (one per entry) in one transaction.
type wtx struct {
	ctx   context.Context
	s     *Store
	sqltx *sql.Tx
	tx    *txQuerier
	last  int64 // highest rev assigned in this transaction
	cur   int64 // rev of the current mutation, 0 before its first stamp
	inval []Invalidation
	now   int64
	dirty map[Ino]struct{} // directories whose times change at commit
	// carries: the mutation changes node rows only by the times of the
	// directories in dirty and by the rows it declares in keep, so kept
	// attributes carry over it (kept.go).
	carries bool
	keep    map[Ino]*Attr
	rows    map[Ino]keptRow
	// before is the write count a group's mutation started from
	// (wtx.keptAttr).
	before  uint64
	dirs    map[string]Ino   // directory paths resolved by this transaction
	adds    []chunkstore.Ref // chunk references to take at commit
	drops   []chunkstore.Ref // and to release
	dirAdds map[Ino]string   // directory paths learnt, cached at commit
	forgot  bool             // the cache of directory paths was dropped
	// pend, for a queued create, commit or SetAttr that works on the
	// group's waiting rows (pending.go), are those rows: a create adds its
	// own instead of writing them, the others change theirs in place.
	pend *pendingRows
	// grp is the group's transaction when this is one of its mutations:
	// the directory paths the group's earlier mutations learnt are good
	// for this one too (unless it drops them, forgot).
	grp *wtx
	// touched are the change rows of a group's mutations, path -> rev,
	// written at the group's commit (touch): nothing a group's mutation
	// runs reads them (the feed, a scan and Apply commit the group first).
	touched map[string]int64
	// stages hold chunks this transaction references until it ends (hold).
	stages []*chunkstore.Stage
	// known is what the transaction knows of directories' names, batch
	// the names of an Apply batch by directory path (see knownAbsent).
	known map[Ino]*dirNames
	batch map[string][]string
	// missing are the chunks an Apply batch names that are not present.
	missing map[chunkstore.Hash]struct{}
	// taken are the chunks whose holds an Apply batch took over
	// (ApplyOptions.Held): flushRefs counts each hold's reference as
	// the first the batch adds.
	taken map[chunkstore.Hash]chunkstore.Ref
	// cf and fence are an Apply batch's conflict detection and fence
	// (ApplyOptions.Conflicts and Fence).
	cf    *conflictSet
	fence *fenceSet
	// use is the usage the transaction changed (quota.go); grown the
	// largest size a file grew to; own the reservation of the open file
	// a commit settles; unlimited: the quota does not apply (an Apply
	// that did not ask for it).
	use       Usage
	grown     int64
	own       int64
	unlimited bool
	// origin names who mutates, for the trash rows it writes ("sync",
	// "restore", "local"; "" is a path operation of the files API);
	// trashBytes and trashEntries are what its rows add to the trash's
	// totals, written at commit (trash.go).
	origin       string
	trashBytes   int64
	trashEntries int64
	// named are the names the transaction added and removed, in order
	// (the write-behind's memo follows them: behind.go).
	named []nameChange
	// created counts the entries of an Apply that took a free path.
	created int
	// ignore is an Apply batch's ApplyOptions.Ignore; ignored counts the
	// deletes it kept from removing a directory.
	ignore  Ignore
	ignored int
}

// update runs fn in one write transaction of its own and commits it
// before it returns (after committing the open group, if any).
func (s *Store) update(ctx context.Context, fn func(*wtx) error) error {
	if s.closed.Load() && ctx.Value(closingKey{}) == nil {
		return ErrClosed
	}
	if s.holdsWriter(ctx) {
		return s.updateLocked(ctx, fn)
	}
	s.lockWrite()
	defer s.unlockWrite(nil, nil)
	return s.updateLocked(ctx, fn)
}

// updateLocked is update with wmu held. A failed group commit is the
// group's (logged, kept for Sync); the transaction goes on.
func (s *Store) updateLocked(ctx context.Context, fn func(*wtx) error) error {
	s.commitGroup()
	s.writes.Add(1)
	defer s.writes.Add(1)
	t, err := s.begin(ctx)
	if err != nil {
		return err
	}
	err = t.run(fn)
	if err == nil {
		err = t.commit()
	} else {
		t.rollback()
	}
	t.tx.done(ctx)
	if err == nil {
		t.s.addLive(t.use, t.own)
		t.releaseStages()
	}
	return err
}

// run runs fn as the transaction's mutation, then the quota rule on what
// it did: the one place every write transaction is checked.
func (t *wtx) run(fn func(*wtx) error) error {
	if err := fn(t); err != nil {
		return err
	}
	return t.checkQuota()
}

// hold makes the transaction the owner of st, whose chunks its
// references need until it commits: released after a commit; after a
// failure the caller keeps it (to retry).
func (t *wtx) hold(st *chunkstore.Stage) { t.stages = append(t.stages, st) }

func (t *wtx) releaseStages() {
	for _, st := range t.stages {
		st.Release()
	}
	t.stages = nil
}

type closingKey struct{}

func (s *Store) begin(ctx context.Context) (*wtx, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	last := s.rev.Load()
	return &wtx{ctx: ctx, s: s, sqltx: tx, tx: newTxQuerier(tx, s.wc), last: last, now: time.Now().UnixNano()}, nil
}

func (t *wtx) commit() error {
	if err := t.tx.flushPending(t.ctx); err != nil {
		t.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	if err := t.settleTrash(); err != nil {
		t.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	if err := t.flushRefs(); err != nil {
		t.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	if err := t.touchDirs(); err != nil {
		t.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	if err := t.flushUsage(); err != nil {
		t.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	if err := t.flushTouched(); err != nil {
		t.rollback()
		return fmt.Errorf("commit: %w", err)
	}
	if t.last != t.s.rev.Load() {
		if _, err := t.tx.ExecContext(t.ctx, `UPDATE meta SET value = ? WHERE key = 'rev'`, t.last); err != nil {
			t.rollback()
			return fmt.Errorf("commit: %w", err)
		}
	}
	if err := t.sqltx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	t.s.kickCheckpoint()
	t.s.rev.Store(t.last)
	if len(t.s.dirCache)+len(t.dirAdds) > maxDirCache {
		clear(t.s.dirCache)
	}
	for ino, p := range t.dirAdds {
		t.s.dirCache[ino] = p
	}
	return nil
}

func (t *wtx) rollback() {
	t.sqltx.Rollback()
}

// stamp returns the rev of the current mutation, assigning the next rev on
// first use.
func (t *wtx) stamp() int64 {
	if t.cur == 0 {
		t.last++
		t.cur = t.last
	}
	return t.cur
}

// nextMutation ends the current mutation: the next stamp takes a new rev.
func (t *wtx) nextMutation() { t.cur = 0 }

func (t *wtx) exec(query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(t.ctx, query, args...)
}
