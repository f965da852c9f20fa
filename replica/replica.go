package replica

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
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/litestream"
	lss3 "github.com/benbjohnson/litestream/s3"

	"github.com/wsync/wsync/objstore"
)

// DefaultInterval is how often a Replicator ships when Options.Interval
// is 0: the replication-lag bound of an idle bucket.
const DefaultInterval = time.Second

// DefaultShipTimeout bounds one ship when Options.ShipTimeout is 0.
const DefaultShipTimeout = 30 * time.Second

// gateTimeout bounds the step under the gate (litestream's DB.Sync). It
// is local work, except the first ship of a Replicator, which opens
// litestream's view of the database and lists the bucket to compare
// positions.
const gateTimeout = 10 * time.Second

// closeGateTimeout bounds litestream's own close, which runs under the
// gate (it copies the WAL once more and makes one upload attempt).
const closeGateTimeout = 3 * time.Second

// Options configures Start.
type Options struct {
	// DBPath is the workspace's store.db. It must exist (vfs opened it).
	DBPath string
	// Store is the bucket and prefix; Prefix the database's key prefix
	// in it (e.g. "workspaces/NAME/db").
	Store  *objstore.Store
	Prefix string
	// Generation is this owner's lease generation: the replica goes to
	// Prefix/gen-<G>/ (GenerationDir).
	Generation int64
	// Interval is how often to ship (DefaultInterval): the bound on
	// replication lag while the bucket answers.
	Interval time.Duration
	// ShipTimeout bounds one ship, upload included (DefaultShipTimeout).
	ShipTimeout time.Duration
	// Gate, when set, runs the step of every ship that turns the WAL into
	// what is shipped (ship): the server drains the chunk uploads the
	// database references, then calls ship holding the store's writer
	// (vfs.Store.Exclusive), so the shipped WAL references only chunks
	// already in the bucket. The upload runs after the gate released.
	// Gate must call ship once and return its error. nil: ship directly.
	Gate func(ctx context.Context, ship func(context.Context) error) error
	// Fence is called before every write to the bucket (uploads,
	// compactions, snapshots, deletes); an error (the lease is lost)
	// refuses the write with ErrFenced, and the replicator stops counting
	// as caught up. nil: never fenced.
	Fence  func() error
	Logger *slog.Logger
}

// GenerationDir is the key segment of generation g below the prefix,
// zero-padded so that keys sort by generation.
func GenerationDir(g int64) string { return fmt.Sprintf("gen-%016d", g) }

// parseGenerationDir reads GenerationDir's name back.
func parseGenerationDir(name string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, "gen-")
	if !ok || digits == "" {
		return 0, false
	}
	g, err := strconv.ParseInt(digits, 10, 64)
	return g, err == nil && g >= 0
}

// Status is what a Replicator reports.
type Status struct {
	Generation int64
	Dir        string // the generation's prefix in the bucket (relative to the store's prefix)
	// Lag is Lag(): 0 when the bucket holds every commit.
	Lag time.Duration
	// TXID is litestream's transaction ID of the last LTX file the bucket
	// holds; LocalTXID of the last one made from the WAL.
	TXID, LocalTXID uint64
	// LastShip is when the last successful ship ended.
	LastShip time.Time
	// LastError is the last ship's error (nil after a success).
	LastError error
	// Fenced: a write was refused by Options.Fence; nothing more is
	// written and the replicator never counts as caught up again.
	Fenced bool
	// Ships and Failures count ship attempts that reached the bucket and
	// that did not.
	Ships, Failures int64
}

// Replicator streams one workspace database to its generation's prefix.
type Replicator struct {
	o       Options
	dir     string // Prefix/gen-G
	log     *slog.Logger
	db      *litestream.DB
	rep     *litestream.Replica
	ls      *litestream.Store
	client  *fencedClient
	probe   *sql.DB   // one connection: PRAGMA data_version
	probeC  *sql.Conn // pinned, so data_version compares on one connection
	probeMu sync.Mutex

	shipMu sync.Mutex // one ship at a time
	// synced: a DB.Sync of litestream's succeeded (see ship). Under shipMu.
	synced bool

	mu sync.Mutex // guards what follows
	// cleanAt: every commit made before it is in the bucket. Advanced to
	// a ship's gate entry when the ship succeeds, and to the time of a
	// check that found nothing committed since the last good ship.
	cleanAt time.Time
	// shipped: the last ship succeeded, and ver is data_version as it
	// left the gate (what the bucket now holds).
	shipped  bool
	ver      int64
	lastErr  error
	fenceErr error
	lastShip time.Time
	ships    int64
	failures int64
	closed   bool

	stop chan struct{}
	done chan struct{}
}

// Start begins replicating o.DBPath to o.Prefix/gen-<o.Generation>/ and
// ships once at once (in the background). A database whose local
// litestream state (the .NAME-litestream directory beside it) was made
// for another prefix or generation has it removed first, so the new
// generation starts from a snapshot. Start does not wait for the first
// ship: a new owner calls Flush before it serves writes, so its
// generation holds a snapshot before any commit of its own.
func Start(ctx context.Context, o Options) (*Replicator, error) {
	if o.Store == nil || o.Prefix == "" || o.DBPath == "" {
		return nil, errors.New("replica: start: DBPath, Store and Prefix are required")
	}
	if o.Generation < 0 {
		return nil, fmt.Errorf("replica: start: negative generation %d", o.Generation)
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.ShipTimeout <= 0 {
		o.ShipTimeout = DefaultShipTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	dir := strings.Trim(o.Prefix, "/") + "/" + GenerationDir(o.Generation)
	log = log.With("component", "replica", "db", o.DBPath, "dir", dir)
	if _, err := os.Stat(o.DBPath); err != nil {
		return nil, fmt.Errorf("replica: start: %w", err)
	}
	client, err := newClient(ctx, o.Store, dir)
	if err != nil {
		return nil, fmt.Errorf("replica: start %s: %w", dir, err)
	}
	r := &Replicator{o: o, dir: dir, log: log, cleanAt: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}

	db := litestream.NewDB(o.DBPath)
	if err := resetForeignState(db.MetaPath(), o.Store.Key(dir)); err != nil {
		return nil, fmt.Errorf("replica: start %s: %w", dir, err)
	}
	fc := &fencedClient{ReplicaClient: client, fence: o.Fence, refused: r.refused}
	rep := litestream.NewReplicaWithClient(db, fc)
	// We call Replica.Sync ourselves, after the gate.
	rep.MonitorEnabled = false
	db.Replica = rep
	levels := litestream.CompactionLevels{
		{Level: 0},
		{Level: 1, Interval: 30 * time.Second},
		{Level: 2, Interval: 10 * time.Minute},
	}
	ls := litestream.NewStore([]*litestream.DB{db}, levels)
	ls.Logger = log.With("subsystem", "litestream")
	// NewStore copied its settings into db; ours go on after it. No
	// monitor of litestream's own calls DB.Sync: every copy of the WAL is
	// a ship's, under the gate. Its Close (under the gate too) makes one
	// upload attempt, bounded by closeGateTimeout.
	db.MonitorInterval = 0
	db.ShutdownSyncTimeout = 0
	db.SetLogger(ls.Logger)
	if err := ls.Open(ctx); err != nil {
		return nil, fmt.Errorf("replica: start %s: %w", dir, caBundleHint(err))
	}
	r.db, r.rep, r.ls, r.client = db, rep, ls, fc

	if err := r.openProbe(ctx); err != nil {
		ls.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("replica: start %s: %w", dir, err)
	}
	// Fill litestream's cache of each level's last file while the bucket
	// answers. A compaction monitor that finds a level uncached lists the
	// bucket holding the lock DB.Sync takes under the gate: with the
	// bucket hanging, the gate, and so the store's writer, hung with it
	// (a TestOutage run stopped there for minutes).
	for _, lvl := range []int{0, 1, 2, litestream.SnapshotLevel} {
		if _, err := db.MaxLTXFileInfo(ctx, lvl); err != nil {
			ls.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("replica: start %s: level %d: %w", dir, lvl, err)
		}
	}
	go r.run()
	return r, nil
}

// newClient is litestream's S3 client for dir (relative to st's prefix),
// with st's endpoint and credentials.
func newClient(ctx context.Context, st *objstore.Store, dir string) (*lss3.ReplicaClient, error) {
	cfg := st.Config()
	id, secret, err := st.Credentials(ctx)
	if err != nil {
		return nil, err
	}
	c := lss3.NewReplicaClient()
	c.Bucket = cfg.Bucket
	c.Path = st.Key(dir)
	c.Region = cfg.Region
	c.Endpoint = cfg.Endpoint
	c.ForcePathStyle = cfg.PathStyle
	c.AccessKeyID, c.SecretAccessKey = id, secret
	return c, nil
}

// caBundleHint explains litestream's S3 client's refusal of
// AWS_CA_BUNDLE (it builds its own *http.Client, which the SDK cannot
// give extra roots): Go reads SSL_CERT_FILE and SSL_CERT_DIR instead.
func caBundleHint(err error) error {
	if err != nil && strings.Contains(err.Error(), "custom RootCAs") {
		return fmt.Errorf("%w (litestream's S3 client cannot use AWS_CA_BUNDLE: unset it and name the CA in SSL_CERT_FILE)", err)
	}
	return err
}

// stateFile names, in litestream's directory beside the database, the
// bucket path its local state was made for.
const stateFile = "wsync-replica"

// resetForeignState removes litestream's local state when it was made
// for another bucket path (another generation): its LTX files and
// position would otherwise be taken for the new generation's. It then
// records key as the state's owner.
func resetForeignState(meta, key string) error {
	b, err := os.ReadFile(filepath.Join(meta, stateFile))
	switch {
	case err == nil && string(b) == key:
		return nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := os.RemoveAll(meta); err != nil {
		return fmt.Errorf("reset litestream state: %w", err)
	}
	if err := os.MkdirAll(meta, 0o755); err != nil {
		return fmt.Errorf("reset litestream state: %w", err)
	}
	if err := os.WriteFile(filepath.Join(meta, stateFile), []byte(key), 0o644); err != nil {
		return fmt.Errorf("reset litestream state: %w", err)
	}
	return nil
}

// openProbe opens the connection that tells whether anything was
// committed since a ship (PRAGMA data_version changes when another
// connection commits).
func (r *Replicator) openProbe(ctx context.Context) error {
	dsn := "file:" + (&url.URL{Path: r.o.DBPath}).EscapedPath() + "?_pragma=query_only(1)&_pragma=busy_timeout(5000)&_pragma=wal_autocheckpoint(0)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("open probe: %w", err)
	}
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return fmt.Errorf("open probe: %w", err)
	}
	r.probe, r.probeC = db, c
	return nil
}

// dataVersion reads PRAGMA data_version on the probe's connection.
func (r *Replicator) dataVersion(ctx context.Context) (int64, error) {
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	var v int64
	if err := r.probeC.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("data_version: %w", err)
	}
	return v, nil
}

// refused records a fenced write (from the client, on any goroutine).
func (r *Replicator) refused(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fenceErr == nil {
		r.log.Error("replication fenced: the lease is lost, nothing more is written", "err", err)
		r.fenceErr = err
	}
	r.shipped = false
}

func (r *Replicator) run() {
	defer close(r.done)
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var lastLog time.Time
	for first := true; ; first = false {
		if !first {
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
		if r.clean(ctx) {
			continue
		}
		if err := r.ship(ctx); err != nil && ctx.Err() == nil && time.Since(lastLog) > 30*time.Second {
			r.log.Warn("ship failed; retrying every interval", "err", err, "lag", r.Lag())
			lastLog = time.Now()
		}
	}
}

// clean reports whether the bucket holds every commit (the last ship
// succeeded and nothing was committed since it left the gate), advancing
// cleanAt when it does.
func (r *Replicator) clean(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.shipped || r.fenceErr != nil || r.closed {
		return false
	}
	now := time.Now()
	v, err := r.dataVersion(ctx)
	if err != nil || v != r.ver {
		return false
	}
	r.cleanAt = now
	return true
}

// ship runs one ship: under the gate litestream's DB.Sync turns the WAL
// into LTX files (and checkpoints when it wants to), then Replica.Sync
// uploads every LTX file not yet in the bucket. Every LTX file is made
// under a gate: no monitor of litestream's copies the WAL, so an upload
// carries only what some gate covered.
func (r *Replicator) ship(ctx context.Context) (err error) {
	r.shipMu.Lock()
	defer r.shipMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.o.ShipTimeout)
	defer cancel()
	t0 := time.Now()
	var entered time.Time
	var ver int64
	gated := func(ctx context.Context) error {
		if !entered.IsZero() {
			return errors.New("replica: the gate called ship twice")
		}
		entered = time.Now()
		parent := ctx
		if !r.synced {
			// litestream's first Sync opens its connection, then its
			// file of the database: cancelled in between (a Close's
			// stop), it keeps the connection without the file, takes
			// itself for open, and every later Sync fails with EINVAL
			// (litestream v0.5.18, DB.init; TestGenerations failed 2
			// times in 100 under load). Until one Sync succeeds, only the
			// gate's timeout bounds it.
			parent = context.WithoutCancel(ctx)
		}
		gctx, gcancel := context.WithTimeout(parent, gateTimeout)
		defer gcancel()
		if err := r.db.Sync(gctx); err != nil {
			return fmt.Errorf("copy the WAL: %w", err)
		}
		r.synced = true
		v, err := r.dataVersion(gctx)
		if err != nil {
			return err
		}
		ver = v
		metricGateSeconds.Observe(time.Since(entered).Seconds())
		return nil
	}
	if r.o.Gate != nil {
		err = r.o.Gate(ctx, gated)
	} else {
		err = gated(ctx)
	}
	if err == nil && entered.IsZero() {
		err = errors.New("replica: the gate returned without calling ship")
	}
	if err == nil {
		if err = r.rep.Sync(ctx); err != nil {
			err = fmt.Errorf("upload: %w", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.fenceErr != nil {
		err = r.fenceErr // a compaction was refused meanwhile
	}
	if err != nil {
		err = fmt.Errorf("replica: ship %s: %w", r.dir, err)
		r.lastErr, r.shipped = err, false
		r.failures++
		if errors.Is(err, ErrFenced) {
			metricShips.WithLabelValues("fenced").Inc()
		} else {
			metricShips.WithLabelValues("error").Inc()
		}
		return err
	}
	r.lastErr, r.shipped, r.ver = nil, true, ver
	if entered.After(r.cleanAt) {
		r.cleanAt = entered
	}
	r.lastShip = time.Now()
	r.ships++
	metricShips.WithLabelValues("ok").Inc()
	metricShipSeconds.Observe(time.Since(t0).Seconds())
	return nil
}

// Flush ships now and returns once the bucket holds everything committed
// before the call (with the server's Gate, every mutation answered before
// it: Exclusive commits the open group first).
func (r *Replicator) Flush(ctx context.Context) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return errors.New("replica: flush: replicator closed")
	}
	return r.ship(ctx)
}

// Lag is how far the bucket is behind the database: 0 when it holds
// every commit, else the time since the gate of the last ship that
// reached the bucket or, if later, since the last check that found
// nothing committed after that ship (every Interval, and each call). It
// is an upper bound on the age of the oldest commit not in the bucket,
// off by at most Interval for a commit on an idle database. Once fenced
// it never returns to 0.
func (r *Replicator) Lag() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lagLocked()
}

func (r *Replicator) lagLocked() time.Duration {
	if r.shipped && r.fenceErr == nil && !r.closed {
		now := time.Now()
		if v, err := r.dataVersion(context.Background()); err == nil && v == r.ver {
			r.cleanAt = now
			return 0
		}
	}
	return time.Since(r.cleanAt)
}

// Status reports lag, positions, the last error and counts.
func (r *Replicator) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{
		Generation: r.o.Generation,
		Dir:        r.dir,
		Lag:        r.lagLocked(),
		TXID:       uint64(r.rep.Pos().TXID),
		LastShip:   r.lastShip,
		LastError:  r.lastErr,
		Fenced:     r.fenceErr != nil,
		Ships:      r.ships,
		Failures:   r.failures,
	}
	if st.LastError == nil && r.fenceErr != nil {
		st.LastError = r.fenceErr
	}
	if pos, err := r.db.Pos(); err == nil {
		st.LocalTXID = uint64(pos.TXID)
	}
	return st
}

// Close stops replicating: a last ship (bounded by ctx, and by
// ShipTimeout), then litestream's close under the gate (one more copy of
// the WAL and one upload attempt, bounded by closeGateTimeout). It
// returns the last ship's error: nil means the bucket holds everything
// committed before the call.
func (r *Replicator) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	ferr := r.ship(ctx)
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()

	// litestream's Close copies the WAL once more (DB.Sync's work), so it
	// runs under the gate. If the gate does not run it (the store closed
	// first, or the chunk drain failed), litestream closes with its
	// uploads refused, and its local state is marked foreign so the next
	// Start drops the LTX files that copy made instead of shipping them.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeGateTimeout)
	defer cancel()
	ran := false
	var cerr error
	closeLS := func(ctx context.Context) error {
		ran = true
		cerr = r.ls.Close(ctx)
		return nil
	}
	if r.o.Gate != nil {
		if err := r.o.Gate(cctx, closeLS); err != nil && !ran {
			r.log.Info("closing litestream outside the gate; its last copy will not ship", "err", err)
		}
	} else {
		closeLS(cctx)
	}
	if !ran {
		r.client.ungated.Store(true)
		closeLS(cctx)
		if err := os.Remove(filepath.Join(r.db.MetaPath(), stateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("mark litestream state foreign", "err", err)
		}
	}
	if cerr != nil && ferr == nil && !errors.Is(cerr, ErrFenced) {
		r.log.Warn("litestream close", "err", cerr)
	}
	perr := errors.Join(r.probeC.Close(), r.probe.Close())
	if ferr != nil {
		return ferr
	}
	if perr != nil {
		return fmt.Errorf("replica: close: %w", perr)
	}
	return nil
}

// Dir is the generation's prefix in the bucket, relative to the store's
// prefix: Prefix/gen-<G>.
func (r *Replicator) Dir() string { return r.dir }
