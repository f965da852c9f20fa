package converge

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
	"golang.org/x/sync/errgroup"
)

// snapReceiver stages a snapshot apart from the live tree: its records in
// a SQLite database of their own beside the store's (store path +
// ".snapshot"; in memory for an in-memory store), holding the declared
// root and the staged records in order; the chunk bytes they reference go
// straight into the store's chunks, written and hashed once, and held
// there (vfs.Store.HoldChunks) until the install references them or the
// staging is dropped. Every page commits with its records, and every
// object call's chunks are held before the call answers, so an
// interrupted snapshot resumes from the staged count. No file of the live
// tree changes before the staged tree hashes to the declared root.
type snapReceiver struct {
	r  *Responder
	mu sync.Mutex // one snapshot call at a time (objects: see there)
	db *sql.DB
	// gen moves whenever a staging begins afresh or is removed: an objects
	// call holds chunks only for the staging it began under. Guarded by mu.
	gen uint64
	// root is built from the records of the staging begun at rootGen as
	// their pages are staged, rootNext the record it takes next: a commit
	// of that staging with every record fed to it takes its root instead
	// of reading the staging back (nil: none). Guarded by mu.
	root     *rootBuilder
	rootGen  uint64
	rootNext int
	// holds is every chunk held for the staging begun at holdsGen, kept
	// when this process began that staging (the begin released every
	// hold before it, and only this receiver holds chunks): the have and
	// page calls answer from it instead of querying the store. nil when
	// unknown (a staging a restarted process resumed, or more than
	// maxKeptHolds chunks): they query. Guarded by mu.
	holds    map[chunkstore.Hash]struct{}
	holdsGen uint64

	// watching: a staging may be on disk; an Apply that is not the
	// install's own (installing) then settles it (afterApply), in a
	// goroutine of bg, one at a time (settling), none after close.
	// owed: the holds of a removed staging failed to go (a full disk);
	// the next such Apply releases them.
	watching, installing, settling, owed atomic.Bool
	bgMu                                 sync.Mutex
	bg                                   sync.WaitGroup
	closed                               bool
	stopObserve                          func()
}

// stagingVersion is the staging format (PRAGMA user_version): a staging
// database of another version is dropped and the snapshot starts over.
// Version 2: records are tagged snapshot records (a file of many refs
// takes several rows, continuations without a path). Version 3: chunks is
// a rowid table, so its hash index holds hashes only (a WITHOUT ROWID
// table keeps the bytes in the key's B-tree: a probe read a page per
// chunk). Version 4: chunk bytes are held in the store itself, the
// staging keeps records only. Version 5: meta holds since, the store's rev
// at the begin (the install's fence).
const stagingVersion = 5

const stagingSchema = `
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value ANY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS records(seq INTEGER PRIMARY KEY, path TEXT UNIQUE, record BLOB NOT NULL);
`

const stagingDrop = `
DROP TABLE IF EXISTS meta;
DROP TABLE IF EXISTS records;
DROP TABLE IF EXISTS chunks;
`

// StagingPath is where the snapshot staging database of a store lives.
func StagingPath(store *vfs.Store) string {
	if store.Path() == vfs.Memory {
		return ""
	}
	return store.Path() + ".snapshot"
}

func (s *snapReceiver) open(ctx context.Context) (*sql.DB, error) {
	if s.db != nil {
		return s.db, nil
	}
	var dsn string
	if p := StagingPath(s.r.store); p == "" {
		dsn = "file:wsync-snapshot-" + uuid.NewString() + "?mode=memory"
	} else {
		dsn = "file:" + (&url.URL{Path: p}).EscapedPath() + "?_pragma=page_size(65536)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("snapshot staging: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	var version int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("snapshot staging: %w", err)
	}
	if version != stagingVersion {
		if _, err := db.ExecContext(ctx, stagingDrop); err != nil {
			db.Close()
			return nil, fmt.Errorf("snapshot staging: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, stagingSchema+fmt.Sprintf("PRAGMA user_version = %d;", stagingVersion)); err != nil {
		db.Close()
		return nil, fmt.Errorf("snapshot staging: %w", err)
	}
	s.db = db
	s.watching.Store(true)
	return db, nil
}

// close closes the staging database (it stays on disk for a resume).
func (s *snapReceiver) close() error {
	s.bgMu.Lock()
	s.closed = true
	s.bgMu.Unlock()
	if s.stopObserve != nil {
		s.stopObserve()
	}
	s.bg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// discard removes the staging database, then gives back the chunks it
// held in the store. In that order: a crash in between leaves holds with
// no staging, which the next start (recoverStaging) or the next snapshot
// (begin) releases; the other order could leave a staging whose chunks
// are no longer held.
func (s *snapReceiver) discard() {
	s.gen++
	s.root, s.holds = nil, nil
	s.watching.Store(false)
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
	if p := StagingPath(s.r.store); p != "" {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(p + suffix)
		}
	}
	s.releaseHolds(context.Background())
}

// releaseHolds gives back the chunks a staging held. A failure (a full
// disk) is logged and owed: the holds stay, counted in their chunks'
// references (space, not data), until the next Apply, start or snapshot
// releases them.
func (s *snapReceiver) releaseHolds(ctx context.Context) {
	var err error
	if releaseHoldsHook != nil {
		err = releaseHoldsHook()
	}
	if err == nil {
		err = s.r.store.ReleaseHeldChunks(ctx)
	}
	switch {
	case err == nil:
		s.owed.Store(false)
	case errors.Is(err, vfs.ErrClosed):
	default:
		s.owed.Store(true)
		s.r.log.Warn("snapshot staging: held chunks not released; retried after the next apply", "err", err)
	}
}

// releaseHoldsHook, when set (tests), runs before each release of a
// removed staging's holds; an error it returns stands for the release
// failing (a full disk).
var releaseHoldsHook func() error

type stagedMeta struct {
	root     Hash
	rev      int64
	since    int64 // the store's rev at the begin: a later one is the container's own change
	total    int
	staged   int
	peer     string
	valid    bool
	verified bool // the staged tree hashed to root; installing
}

// staging opens the staging database and reads its state. Called with
// s.mu held.
func (s *snapReceiver) staging(ctx context.Context) (*sql.DB, stagedMeta, error) {
	db, err := s.open(ctx)
	if err != nil {
		return nil, stagedMeta{}, err
	}
	m, err := readMeta(ctx, db)
	return db, m, err
}

// begun is staging for the calls that only follow a begin (objects, page,
// commit): without a valid staging, the call is refused. Called with
// s.mu held.
func (s *snapReceiver) begun(ctx context.Context, call string) (*sql.DB, stagedMeta, error) {
	db, m, err := s.staging(ctx)
	if err == nil && !m.valid {
		err = badRequest("snapshot %s before begin", call)
	}
	return db, m, err
}

func readMeta(ctx context.Context, db *sql.DB) (stagedMeta, error) {
	var m stagedMeta
	rows, err := db.QueryContext(ctx, `SELECT key, value FROM meta`)
	if err != nil {
		return m, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v any
		if err := rows.Scan(&k, &v); err != nil {
			return m, err
		}
		switch k {
		case "root":
			if b, ok := v.([]byte); ok && len(b) == len(m.root) {
				copy(m.root[:], b)
				m.valid = true
			}
		case "rev":
			m.rev, _ = v.(int64)
		case "total":
			t, _ := v.(int64)
			m.total = int(t)
		case "verified":
			x, _ := v.(int64)
			m.verified = x == 1
		case "peer":
			m.peer, _ = v.(string)
		case "since":
			m.since, _ = v.(int64)
		}
	}
	if err := rows.Err(); err != nil {
		return m, err
	}
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM records`).Scan(&n); err != nil {
		return m, err
	}
	m.staged = int(n)
	return m, nil
}

// begin: root, rev, total -> records already staged for this root.
func (s *snapReceiver) begin(ctx context.Context, c *rpc.Incoming) error {
	d := newDecoder(c.Body)
	root := Hash(d.Fixed32())
	rev := int64(d.Bounded("rev", 1<<62))
	total := int(d.Bounded("total", MaxSnapshotRecords))
	if err := d.Done(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	db, err := s.open(ctx)
	if err != nil {
		return err
	}
	m, err := readMeta(ctx, db)
	if err != nil {
		return fmt.Errorf("snapshot begin: %w", err)
	}
	if m.valid && m.root == root && m.rev == rev && m.total == total {
		// The same snapshot: resume (an install in progress continues too,
		// so the live store may hold part of it already).
		return c.Reply(uvarints(uint64(m.staged)))
	}
	empty, err := s.r.store.Empty(ctx)
	if err != nil {
		return err
	}
	if !empty {
		if m.valid {
			// Staging for another snapshot can no longer install here.
			s.discard()
		}
		return fmt.Errorf("%w: the store already holds a tree", ErrNotEmpty)
	}
	if m.valid || m.staged > 0 {
		// Another snapshot's staging: start from a new file, not from
		// emptied tables, so the file never holds more than one snapshot
		// (SQLite keeps freed pages in the file).
		s.discard()
		if db, err = s.open(ctx); err != nil {
			return err
		}
	}
	// Chunks an abandoned staging held (a crash between its removal and
	// the release) go before this one holds any, and no objects call begun
	// before holds any for this one.
	s.gen++
	if err := s.r.store.ReleaseHeldChunks(ctx); err != nil {
		return fmt.Errorf("snapshot begin: %w", err)
	}
	s.owed.Store(false)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range []string{`DELETE FROM meta`, `DELETE FROM records`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	// The store is empty, its rev where this snapshot starts: a rev past
	// it is a change of the container's own (a process writing in the
	// mount), which the install must not overwrite or delete.
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES('root', ?), ('rev', ?), ('total', ?), ('peer', ?), ('since', ?)`,
		root[:], rev, total, c.Session().Peer().ID, s.r.store.CurrentRev()); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.root, s.rootGen, s.rootNext = newRootBuilder(), s.gen, 0
	s.holds, s.holdsGen = make(map[chunkstore.Hash]struct{}), s.gen
	s.r.log.Info("snapshot staging", "root", root, "rev", rev, "records", total)
	return c.Reply(uvarints(0))
}

func (s *snapReceiver) have(ctx context.Context, c *rpc.Incoming) error {
	hs, err := syncwire.DecodeHashes(c.Body)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The store's chunks count only when held: any other is unreferenced
	// in a store that holds no tree yet, and may be collected before the
	// install.
	bits, err := s.held(ctx, hs)
	if err != nil {
		return err
	}
	return c.Reply(syncwire.AppendBitmap(nil, bits))
}

// objects stages chunk bytes: each is checked against its hash as it
// goes into the store's chunks (the one hash and the one write it gets),
// and they are held (vfs.Store.HoldChunks) every holdEvery bytes and
// before the call answers, so a count it answers is durable. Three
// goroutines share the work: one receives, decodes and hashes each
// message, one writes the chunks of the one before, one holds what was
// written (on one goroutine the receiver took a whole core while the
// sender's waited; with the holds on the writer, the sender stalled
// through each hold's transaction).
func (s *snapReceiver) objects(ctx context.Context, c *rpc.Incoming) error {
	// The call holds s.mu only to find its staging and to hold chunks for
	// it: the page before this call's stages meanwhile. A staging begun
	// again or removed since (gen) takes no hold of this call's.
	s.mu.Lock()
	_, _, err := s.begun(ctx, "objects")
	gen := s.gen
	s.mu.Unlock()
	if err != nil {
		return err
	}
	store := s.r.store
	stage := store.Chunks().NewStage()
	defer func() { stage.Release() }()
	checked := make(chan []chunkstore.Checked, 2)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(checked)
		objs := newSnapObjects()
		for {
			p, err := c.Recv(gctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			err = objs.decode(p, func(cs []chunkstore.Checked) error {
				select {
				case checked <- cs:
					return nil
				case <-gctx.Done():
					return gctx.Err()
				}
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	// The writer hands each holdEvery bytes of written chunks (their
	// stage and refs) to a third goroutine, which holds them while the
	// writer writes the next: a hold is one write transaction, and the
	// receiving side stalled behind it when the writer held in turn. One
	// hold runs and one waits at most, so a call pins at most three
	// stages' chunks.
	type holdJob struct {
		stage *chunkstore.Stage
		refs  []chunkstore.Ref
	}
	holds := make(chan holdJob, 1)
	g.Go(func() error {
		var err error
		for j := range holds {
			if err == nil {
				err = s.holdFor(gctx, gen, j.stage, j.refs)
			}
			if err != nil {
				// A failed hold's stage, and every one queued behind it,
				// is released here (a held one was, by its transaction).
				j.stage.Release()
			}
		}
		return err
	})
	n := 0
	g.Go(func() error {
		defer close(holds)
		var refs []chunkstore.Ref
		pending := 0
		handOff := func() error {
			if len(refs) == 0 {
				return nil
			}
			j := holdJob{stage: stage, refs: refs}
			select {
			case holds <- j:
			case <-gctx.Done():
				return gctx.Err() // the deferred Release drops the stage's pins
			}
			stage, refs, pending = store.Chunks().NewStage(), nil, 0
			return nil
		}
		for cs := range checked {
			for _, ch := range cs {
				if err := stage.PutChecked(gctx, ch); err != nil {
					return fmt.Errorf("snapshot chunk: %w", err)
				}
				r := ch.Ref()
				refs = append(refs, r)
				pending += int(r.Size)
			}
			n += len(cs)
			if pending >= holdEvery {
				if err := handOff(); err != nil {
					return err
				}
			}
		}
		if err := gctx.Err(); err != nil {
			return err // the receiving side failed: its error is the one returned
		}
		return handOff()
	})
	if err := g.Wait(); err != nil {
		return err
	}
	return c.Reply(uvarints(uint64(n)))
}

// holdFor holds refs, the chunks st staged, for the staging of
// generation gen, and keeps them in the set of holds. A staging begun
// again or removed since takes no hold.
func (s *snapReceiver) holdFor(ctx context.Context, gen uint64, st *chunkstore.Stage, refs []chunkstore.Ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return badRequest("snapshot objects: the staging was begun again or removed during the call")
	}
	if err := s.r.store.HoldChunks(ctx, st, refs); err != nil {
		return err
	}
	s.keepHolds(refs)
	return nil
}

// snapObjects decodes the object messages of one SnapObjects call: the
// object messages of FetchObjects (syncwire.DecodeObjectsFunc: each chunk
// raw, aliasing the message, or zstd with its size declared before it is
// decompressed), each chunk checked against its hash as it is decoded. A
// call carries at most syncwire.MaxHashes chunks, none twice (the sender
// sends what a probe found missing, once), and its chunks go on in
// batches of about checkedBatch bytes: what one call holds decoded at a
// time is a few batches, whatever the peer's compression ratio.
type snapObjects struct {
	seen map[chunkstore.Hash]struct{}
}

// checkedBatch is about how many chunk bytes a batch of checked chunks
// holds.
const checkedBatch = 1 << 20

func newSnapObjects() *snapObjects {
	return &snapObjects{seen: make(map[chunkstore.Hash]struct{})}
}

// decode decodes one message and hands its checked chunks to fn in
// batches.
func (s *snapObjects) decode(p []byte, fn func([]chunkstore.Checked) error) error {
	var batch []chunkstore.Checked
	size := 0
	check := func(h chunkstore.Hash, _ int) error {
		if _, dup := s.seen[h]; dup {
			return malformed("chunk %s sent twice in one call", h)
		}
		if len(s.seen) >= syncwire.MaxHashes {
			return malformed("more than %d chunks in one call", syncwire.MaxHashes)
		}
		s.seen[h] = struct{}{}
		return nil
	}
	err := syncwire.DecodeObjectsFunc(p, check, func(o syncwire.Object) error {
		c, err := chunkstore.Check(o.Hash, o.Data)
		if err != nil {
			return fmt.Errorf("snapshot chunk: %w", err)
		}
		batch = append(batch, c)
		size += len(o.Data)
		if size >= checkedBatch {
			err := fn(batch)
			batch, size = nil, 0
			return err
		}
		return nil
	})
	if errors.Is(err, rpc.ErrProtocol) && !errors.Is(err, ErrMalformed) {
		return errAsMalformed(err) // the message's encoding
	}
	if err != nil {
		return err
	}
	if len(batch) > 0 {
		return fn(batch)
	}
	return nil
}

// holdEvery is how many received chunk bytes the receiver holds at a
// time: one write transaction (and one sync of the packs written) each.
// A variable for tests.
var holdEvery = 16 << 20

// maxKeptHolds bounds the chunks the receiver keeps in its set of holds
// (about 80 bytes each); a staging of more queries the store.
const maxKeptHolds = 1 << 18

// keepHolds adds the chunks of refs, just held for the current staging,
// to the set of holds. Called with s.mu held.
func (s *snapReceiver) keepHolds(refs []chunkstore.Ref) {
	if s.holds == nil || s.holdsGen != s.gen {
		return
	}
	for _, r := range refs {
		if r.Hash != chunkstore.HoleHash {
			s.holds[r.Hash] = struct{}{}
		}
	}
	if len(s.holds) > maxKeptHolds {
		s.holds = nil
	}
}

// held reports, in input order, which of hs are held for the current
// staging: from the set of holds when this process knows them all, else
// from the store. Called with s.mu held.
func (s *snapReceiver) held(ctx context.Context, hs []chunkstore.Hash) ([]bool, error) {
	if s.holds == nil || s.holdsGen != s.gen {
		heldQueries.Add(1)
		return s.r.store.HeldChunks(ctx, hs)
	}
	bits := make([]bool, len(hs))
	for i, h := range hs {
		_, bits[i] = s.holds[h]
	}
	return bits, nil
}

// page stages one page of records: first, count, raw length, zstd bytes.
func (s *snapReceiver) page(ctx context.Context, c *rpc.Incoming) error {
	first, recs, err := DecodePage(c.Body)
	if err != nil {
		return err
	}
	n := len(recs)
	s.mu.Lock()
	defer s.mu.Unlock()
	db, m, err := s.begun(ctx, "page")
	if err != nil {
		return err
	}
	switch {
	case m.verified:
		return badRequest("snapshot page after commit")
	case first != m.staged:
		return malformed("page starts at record %d, %d staged", first, m.staged)
	case first+n > m.total:
		return malformed("page runs to record %d of %d", first+n, m.total)
	}
	// Every chunk a record names must be here before the record is: the
	// staged count then implies the bytes too. Holes name no chunk.
	need := recordHashes(recs)
	bits, err := s.held(ctx, need)
	if err != nil {
		return err
	}
	if i := slices.Index(bits, false); i >= 0 {
		return fmt.Errorf("snapshot page at %d: chunk %s: %w", first, need[i], chunkstore.ErrUnknownHash)
	}
	if err := stageRecords(ctx, db, first, recs); err != nil {
		return err
	}
	s.buildRoot(first, recs)
	metricSnapshotRecords.WithLabelValues("staged").Add(float64(n))
	return c.Reply(uvarints(uint64(first+n), uint64(m.total)))
}

// buildRoot feeds the records of a page just staged, from record first
// on, to the staging's root builder, if it has one that took every record
// before them. A record it refuses drops it: the commit then reads the
// staging back and refuses the record there, as it would have anyway.
// Called with s.mu held.
func (s *snapReceiver) buildRoot(first int, recs []snapRecord) {
	if s.root == nil || s.rootGen != s.gen || s.rootNext != first {
		s.root = nil
		return
	}
	for i, rec := range recs {
		if err := s.root.add(first+i, rec); err != nil {
			s.root = nil
			return
		}
	}
	s.rootNext = first + len(recs)
}

// stageRows is how many records one statement of a page stages.
const stageRows = 256

// stageRecords writes a page's records, from record first on, in one
// transaction, stageRows to a statement (a statement a record parsed as
// long as running it). A path staged twice is malformed: the page is then
// staged a record at a time to name it, and nothing of it is kept.
func stageRecords(ctx context.Context, db *sql.DB, first int, recs []snapRecord) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	insert := func(n int) string {
		return `INSERT INTO records(seq, path, record) VALUES ` + strings.Repeat("(?,?,?),", n-1) + `(?,?,?)`
	}
	var full *sql.Stmt
	if len(recs) >= stageRows {
		if full, err = tx.PrepareContext(ctx, insert(stageRows)); err != nil {
			return err
		}
		defer full.Close()
	}
	args := make([]any, 0, 3*stageRows)
	for i := 0; i < len(recs); i += stageRows {
		part := recs[i:min(i+stageRows, len(recs))]
		args = args[:0]
		for j, rec := range part {
			path, body, err := recordRow(rec)
			if err != nil {
				return err
			}
			args = append(args, first+i+j, path, body)
		}
		if len(part) == stageRows {
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, insert(len(part)), args...)
		}
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE") {
				tx.Rollback()
				return stagedTwice(ctx, db, first, recs)
			}
			return err
		}
	}
	return tx.Commit()
}

// recordRow is a record's row in records: its path (none for a
// continuation) and its tagged body.
func recordRow(rec snapRecord) (path any, body []byte, err error) {
	if rec.Tag != recRefs {
		path = rec.Entry.Path
	}
	body, err = appendRecordBody(nil, rec)
	return path, body, err
}

// stagedTwice stages the records one at a time, in a transaction it rolls
// back, to name the first whose path is staged already.
func stagedTwice(ctx context.Context, db *sql.DB, first int, recs []snapRecord) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for i, rec := range recs {
		path, body, err := recordRow(rec)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO records(seq, path, record) VALUES(?, ?, ?)`, first+i, path, body); err != nil {
			if strings.Contains(err.Error(), "UNIQUE") {
				return malformed("record %d: path %q staged twice", first+i, rec.Entry.Path)
			}
			return err
		}
	}
	return malformed("records %d-%d: a path staged twice", first, first+len(recs)-1)
}

// DecodePage decodes a MethodSnapPage body: the index of its first record,
// then its records (see DecodeRecords).
//
//	uvarint(first) uvarint(count) uvarint(raw length) zstd(records)
func DecodePage(p []byte) (int, []snapRecord, error) {
	d := newDecoder(p)
	first := int(d.Bounded("first record", MaxSnapshotRecords))
	n := int(d.Bounded("records", MaxPageRecords))
	raw := int(d.Bounded("page length", MaxPageRaw))
	if err := d.Err(); err != nil {
		return 0, nil, err
	}
	b, err := unzstd(d.Rest(), raw, MaxPageRaw)
	if err != nil {
		return 0, nil, fmt.Errorf("snapshot page at %d: %w", first, err)
	}
	recs, err := DecodeRecords(b, n)
	if err != nil {
		return 0, nil, fmt.Errorf("snapshot page at %d: %w", first, err)
	}
	return first, recs, nil
}

// commit checks the staged tree against the declared root and installs it.
func (s *snapReceiver) commit(ctx context.Context, c *rpc.Incoming) error {
	d := newDecoder(c.Body)
	root := Hash(d.Fixed32())
	if err := d.Done(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	db, m, err := s.begun(ctx, "commit")
	if err != nil {
		return err
	}
	switch {
	case m.root != root:
		return badRequest("commit names root %s, staging holds %s", root, m.root)
	case m.staged != m.total:
		return badRequest("commit with %d of %d records staged", m.staged, m.total)
	}
	t0 := time.Now()
	resumed := m.verified // the install had begun: part of it may be in
	b := s.root
	if s.rootGen != s.gen || s.rootNext != m.total {
		b = nil
	}
	// The install takes the holds over: from here on only the store
	// knows which are left.
	s.root, s.holds = nil, nil
	if !m.verified {
		var got Hash
		var err error
		if b != nil {
			got, err = b.sum()
		} else {
			stagingReads.Add(1)
			got, err = stagedRoot(ctx, db)
		}
		if err != nil {
			s.discard()
			return fmt.Errorf("snapshot commit: %w", err)
		}
		if got != m.root {
			s.discard()
			metricSnapshots.WithLabelValues("refused").Inc()
			return fmt.Errorf("%w: staged records hash to %s, the sender declared %s", ErrRootMismatch, got, m.root)
		}
		if _, err := db.ExecContext(ctx, `INSERT OR REPLACE INTO meta(key, value) VALUES('verified', 1)`); err != nil {
			return err
		}
	}
	t1 := time.Now()
	before := s.r.store.CurrentRev()
	after, err := s.installChecked(ctx, db, m, resumed)
	if err != nil {
		if errors.Is(err, errKilled) {
			return err // the test seam: the process died here, nothing after runs
		}
		if errors.Is(err, errChanged) {
			// The snapshot is in but for the container's own changes: the
			// push carries on as into any store that holds a tree.
			s.r.log.Info("snapshot installed around the container's own changes; staging removed, the push carries on", "root", m.root, "err", err)
			metricSnapshots.WithLabelValues("abandoned").Inc()
			s.discard()
			return fmt.Errorf("%w: %w", ErrNotEmpty, err)
		}
		// The sender bootstraps empty stores only: once part of the tree
		// is in, no commit will come for this staging again.
		if empty, eerr := s.r.store.Empty(context.WithoutCancel(ctx)); eerr != nil || !empty {
			s.r.log.Warn("snapshot install failed; staging removed, the next push re-baselines", "root", m.root, "err", err)
			metricSnapshots.WithLabelValues("abandoned").Inc()
			s.discard()
		}
		return err
	}
	s.r.log.Debug("snapshot timing", "check", t1.Sub(t0), "install", time.Since(t1))
	// The revs the install stamped, not the store's current rev: one the
	// container stamped since is its own change, for the next pull. The
	// sender takes after as its fetch cursor: recorded first, as a feed's
	// head is.
	s.r.store.NoteServed(ctx, after)
	return c.Reply(uvarints(uint64(before), uint64(after)))
}

// installChecked installs a verified staging, checks the live tree
// against its root, and removes the staging. It returns the rev the
// install left the store at: later revs are the container's own changes.
// Called with s.mu held.
func (s *snapReceiver) installChecked(ctx context.Context, db *sql.DB, m stagedMeta, resumed bool) (int64, error) {
	s.installing.Store(true)
	last, err := s.install(ctx, db, m, resumed)
	s.installing.Store(false)
	if err != nil {
		return 0, fmt.Errorf("snapshot install: %w", err)
	}
	s.r.Forget()
	t, err := s.r.Tree(ctx, []string{})
	if err != nil {
		return 0, err
	}
	if t.Root != m.root {
		if s.r.store.CurrentRev() == last {
			return 0, fmt.Errorf("snapshot install: %w: live tree hashes to %s after install", ErrRootMismatch, t.Root)
		}
		// A change of the container's own came after the last batch: it
		// goes to the server with the next pull, and the next verify
		// checks the whole.
		s.r.log.Info("the container changed files right after the snapshot's install; its root is left to the next verify", "root", m.root, "live", t.Root)
	}
	s.discard()
	metricSnapshots.WithLabelValues("installed").Inc()
	s.r.log.Info("snapshot installed", "root", m.root, "records", m.total, "rev", last)
	return last, nil
}

// maxLocalResumes bounds how often a starting responder finishes the same
// cut-short install: a staging whose install kills the process every time
// (out of memory, say) is dropped instead of looping.
const maxLocalResumes = 2

// recoverStaging runs when a responder registers (computerd starting) and
// settles a staging database left by a process that died:
//
//   - verified (the install had begun, so the live store may hold part of
//     the snapshot): the install finishes here, from the staging alone,
//     and the staging is removed; the sender's next push then moves no
//     chunk bytes. After maxLocalResumes tries, or on any error, the
//     staging is removed and the push re-baselines as for any store.
//   - not verified, live store empty: kept; the sender's next bootstrap
//     resumes from the staged count.
//   - not verified, live store not empty: no bootstrap will ever begin
//     here again (the sender bootstraps empty stores only), so removed.
//   - not verified, and the live store cannot say whether it is empty
//     (Empty fails): kept, and the failure logged.
//   - none on disk: the chunks a staging held, if any (a crash between
//     the staging's removal and their release), are released.
func (s *snapReceiver) recoverStaging(ctx context.Context) {
	p := StagingPath(s.r.store)
	if p == "" {
		return
	}
	if _, err := os.Stat(p); err != nil {
		// No staging: chunks held by one removed just before a crash go.
		s.releaseHolds(ctx)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.r.log.With("staging", p)
	db, m, err := s.staging(ctx)
	if err != nil {
		log.Warn("snapshot staging unreadable; removed", "err", err)
		s.discard()
		return
	}
	if m.valid && m.verified && m.staged == m.total {
		var tries int64
		if err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'resumes'`).Scan(&tries); err != nil && !errors.Is(err, sql.ErrNoRows) {
			log.Warn("snapshot staging unreadable; removed", "err", err)
			s.discard()
			return
		}
		if tries >= maxLocalResumes {
			log.Warn("cut-short snapshot install failed to finish; staging removed", "tries", tries, "root", m.root)
			metricSnapshots.WithLabelValues("abandoned").Inc()
			s.discard()
			return
		}
		if _, err := db.ExecContext(ctx, `INSERT OR REPLACE INTO meta(key, value) VALUES('resumes', ?)`, tries+1); err != nil {
			log.Warn("snapshot staging unwritable; removed", "err", err)
			s.discard()
			return
		}
		log.Info("finishing a cut-short snapshot install", "root", m.root, "records", m.total)
		if _, err := s.installChecked(ctx, db, m, true); err != nil {
			log.Warn("cut-short snapshot install did not finish; staging removed", "err", err)
			metricSnapshots.WithLabelValues("abandoned").Inc()
			s.discard()
		}
		return
	}
	empty, err := s.r.store.Empty(ctx)
	if err != nil {
		// The store cannot say whether it holds a tree: keep the staging
		// (a resumable bootstrap) rather than drop it on a guess.
		log.Warn("snapshot staging kept: the store's emptiness is unknown", "err", err)
		return
	}
	if empty {
		return
	}
	log.Info("snapshot staging can no longer install; removed", "root", m.root, "staged", m.staged, "total", m.total)
	metricSnapshots.WithLabelValues("abandoned").Inc()
	s.discard()
}

// afterApply observes the store's Apply commits. One that is not the
// install's own (a push, a repair) while a staging is on disk settles the
// staging: once the store holds a tree, the sender, which bootstraps empty
// stores only, will never begin or commit a snapshot here again. While
// holds are owed, it releases them.
func (s *snapReceiver) afterApply([]vfs.Invalidation) {
	if !s.watching.Load() && !s.owed.Load() || s.installing.Load() {
		return
	}
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed || !s.settling.CompareAndSwap(false, true) {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.settling.Store(false)
		s.settle(context.Background())
	}()
}

// settle removes the staging when the live store holds a tree and no
// install is running (an install holds s.mu, so settle runs after it);
// with no staging, it releases owed holds.
func (s *snapReceiver) settle(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.watching.Load() {
		if s.owed.Load() {
			s.releaseHolds(ctx)
		}
		return
	}
	empty, err := s.r.store.Empty(ctx)
	if err != nil {
		s.r.log.Warn("snapshot staging kept: the store's emptiness is unknown", "err", err)
		return
	}
	if empty {
		return
	}
	s.r.log.Info("snapshot staging can no longer install (the store holds a tree); removed")
	metricSnapshots.WithLabelValues("abandoned").Inc()
	s.discard()
}

// stagedRecords calls fn for each staged record in order.
func stagedRecords(ctx context.Context, db *sql.DB, fn func(seq int, rec snapRecord) error) error {
	rows, err := db.QueryContext(ctx, `SELECT seq, record FROM records ORDER BY seq`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var b []byte
		if err := rows.Scan(&seq, &b); err != nil {
			return err
		}
		rec, err := decodeRecordBody(b)
		if err != nil {
			return malformed("staged record %d does not decode: %v", seq, err)
		}
		if err := fn(seq, rec); err != nil {
			return err
		}
	}
	return rows.Err()
}

// fileParts follows the records of a file split over several: they must
// come in one run, head first, adding up to the head's count, every ref
// valid where it stands (checked ref by ref, as chunkstore's Validate
// would check the whole manifest, without holding it).
type fileParts struct {
	open  bool
	path  string
	want  int   // refs the head declared
	got   int   // refs seen
	size  int64 // bytes they cover
	prev  chunkstore.Ref
	onRef func(r chunkstore.Ref)
}

// start begins a file from its head record.
func (f *fileParts) start(rec *snapRecord) error {
	*f = fileParts{open: true, path: rec.Entry.Path, want: rec.Refs, onRef: f.onRef}
	return f.add(rec.Entry.Chunks)
}

// add takes the next refs of the open file; it reports whether they close
// it.
func (f *fileParts) add(refs chunkstore.Manifest) error {
	if !f.open {
		return malformed("refs continue no file")
	}
	if f.got+len(refs) > f.want {
		return malformed("%q: more than its %d refs", f.path, f.want)
	}
	for _, r := range refs {
		if f.got > 0 {
			// The previous ref is not the last: check it as such.
			if err := (chunkstore.Manifest{f.prev, {Hash: chunkstore.Hash{1}, Size: 1}}).Validate(); err != nil {
				return malformed("%q: ref %d: %v", f.path, f.got-1, err)
			}
		}
		f.size += int64(r.Size)
		if f.size > chunkstore.MaxFileSize {
			return malformed("%q: more than %d bytes", f.path, int64(chunkstore.MaxFileSize))
		}
		f.prev = r
		f.got++
		if f.onRef != nil {
			f.onRef(r)
		}
	}
	if f.got == f.want {
		if err := (chunkstore.Manifest{f.prev}).Validate(); err != nil {
			return malformed("%q: last ref: %v", f.path, err)
		}
		f.open = false
	}
	return nil
}

// stagingReads counts the commits that read the staging back for its
// root (tests).
var stagingReads atomic.Int64

// heldQueries counts the have and page calls that asked the store which
// chunks are held (tests).
var heldQueries atomic.Int64

// stagedRoot rebuilds the Merkle root of the staged records, read back
// from the staging (a commit whose pages this process did not all see
// staged: see rootBuilder).
func stagedRoot(ctx context.Context, db *sql.DB) (Hash, error) {
	b := newRootBuilder()
	if err := stagedRecords(ctx, db, b.add); err != nil {
		return Hash{}, err
	}
	return b.sum()
}

// rootBuilder folds snapshot records, taken in staging order, into the
// Merkle root of the tree they describe. Records come parents first; a
// record whose parent is not a staged directory, a path staged twice, or
// the parts of a split file out of their run, is malformed. A split
// file's content hash is computed as its parts stream by (sha256 of the
// manifest's encoding: count, then the refs), so the builder holds no
// manifest whole: what it holds is each directory's children (name, kind,
// mode, hash), the tree the root is folded from.
//
// The receiver feeds each page's records to one as the page is staged, so
// a commit finds the root built (snapReceiver.root); a commit whose pages
// were not all fed to it in this process reads the staging back instead
// (stagedRoot).
type rootBuilder struct {
	top   *sdir
	dirs  map[string]*sdir
	split fileParts
	// The split file being added: its content hash so far, its directory
	// and its entry there.
	splitHash  hash.Hash
	splitDir   *sdir
	splitChild Child
	refBuf     []byte
}

// sdir is a staged directory: its children, and its subdirectories by
// name.
type sdir struct {
	kids []Child
	subs map[string]*sdir
}

func newRootBuilder() *rootBuilder {
	top := &sdir{subs: map[string]*sdir{}}
	b := &rootBuilder{top: top, dirs: map[string]*sdir{"": top}}
	b.split.onRef = func(r chunkstore.Ref) {
		b.refBuf = append(b.refBuf[:0], r.Hash[:]...)
		b.refBuf = binary.AppendUvarint(b.refBuf, uint64(r.Size))
		b.splitHash.Write(b.refBuf)
	}
	return b
}

// add takes record seq, the next in staging order.
func (b *rootBuilder) add(seq int, rec snapRecord) error {
	if rec.Tag == recRefs {
		if err := b.split.add(rec.More); err != nil {
			return fmt.Errorf("record %d: %w", seq, err)
		}
		if !b.split.open {
			b.splitHash.Sum(b.splitChild.Hash[:0])
			b.splitDir.kids = append(b.splitDir.kids, b.splitChild)
		}
		return nil
	}
	if b.split.open {
		return malformed("record %d: %q ends before its %d refs", seq, b.split.path, b.split.want)
	}
	e := &rec.Entry
	d := b.dirs[parentOf(e.Path)]
	if d == nil {
		return malformed("record %d: parent of %q is not a staged directory", seq, e.Path)
	}
	c := Child{Name: baseOf(e.Path), Mode: e.Mode}
	switch e.Kind {
	case vfs.EntryFile:
		c.Kind = vfs.KindFile
		if rec.Tag == recHead {
			b.splitHash = sha256.New()
			b.splitHash.Write(binary.AppendUvarint(nil, uint64(rec.Refs)))
			b.splitDir, b.splitChild = d, c
			if err := b.split.start(&rec); err != nil {
				return fmt.Errorf("record %d: %w", seq, err)
			}
			return nil
		}
		c.Hash = sha256Sum(chunkstore.AppendManifest(nil, e.Chunks))
	case vfs.EntrySymlink:
		c.Kind = vfs.KindSymlink
		c.Hash = sha256Sum([]byte(e.Target))
	case vfs.EntryDir:
		c.Kind = vfs.KindDir
		if b.dirs[e.Path] != nil {
			return malformed("record %d: %q staged twice", seq, e.Path)
		}
		sub := &sdir{subs: map[string]*sdir{}}
		b.dirs[e.Path] = sub
		d.subs[c.Name] = sub
	}
	d.kids = append(d.kids, c)
	return nil
}

// sum folds what was added into the root. The builder is spent after it.
func (b *rootBuilder) sum() (Hash, error) {
	if b.split.open {
		return Hash{}, malformed("%q ends before its %d refs", b.split.path, b.split.want)
	}
	var fold func(d *sdir) (Hash, error)
	fold = func(d *sdir) (Hash, error) {
		slices.SortFunc(d.kids, func(a, b Child) int { return strings.Compare(a.Name, b.Name) })
		for i := range d.kids {
			if i > 0 && d.kids[i].Name == d.kids[i-1].Name {
				return Hash{}, malformed("name %q staged twice", d.kids[i].Name)
			}
			if d.kids[i].Kind == vfs.KindDir {
				h, err := fold(d.subs[d.kids[i].Name])
				if err != nil {
					return Hash{}, err
				}
				d.kids[i].Hash = h
			}
		}
		return ChildrenHash(d.kids), nil
	}
	return fold(b.top)
}

// install applies the staged records as upstream in batches, each with
// the chunks it needs held in the store. Apply is idempotent, so an
// install cut short runs again from the start on the next commit and
// skips what it already applied.
//
// The store was empty at the begin, but a process in the container may
// write in the mount while the snapshot stages or installs: such a change
// of the container's own is never overwritten or deleted. Each batch
// applies behind a fence at the begin's rev (ApplyOptions.Fence, as a push
// does), which holds back an entry whose path the container changed, and
// no live path is deleted. A change of the container's own (an entry held
// back, or a rev stamped between the begin and the first batch or
// between two batches) makes the install errChanged once every batch is
// in: the watermarks stay as they were, and the server's push carries on
// entry by entry, fenced, as for any container that holds a tree, so the
// path's two versions meet in its conflict detection. resumed: the install
// had begun before (a commit or start after a failure), whose earlier
// batches' revs are not told apart from the container's own until a
// batch of this run stamps one.
func (s *snapReceiver) install(ctx context.Context, db *sql.DB, m stagedMeta, resumed bool) (int64, error) {
	store := s.r.store
	ws, err := store.Watermarks(ctx, m.peer)
	if err != nil {
		return 0, err
	}
	fence := watermark.At(m.since)
	// Into an empty store every record creates a free name, which Apply
	// writes in bulk (multi-row inserts): transactions then grow to
	// installBulkBatch, so each B-tree page (of the chunk rows above all,
	// keyed by random hashes) is written a few times rather than once per
	// 256 records. A store holding part of the tree (an install resumed)
	// keeps batches of installBatch.
	empty, err := store.Empty(ctx)
	if err != nil {
		return 0, err
	}
	seen, known := m.since, !resumed
	var held []string // held back by the fence (the first few)
	heldN, between := 0, false
	batches, stop := readStaged(ctx, db, m.total, empty)
	defer stop()
	for batch := range batches {
		if batch.err != nil {
			return 0, batch.err
		}
		res, err := s.applyStaged(ctx, batch.entries, m, &ws, &fence)
		if err != nil {
			return 0, err
		}
		heldN += len(res.Deferred)
		held = append(held, res.Deferred[:min(len(res.Deferred), 3-len(held))]...)
		if res.LastRev > 0 {
			between = between || known && res.RevBefore != seen
			seen, known = res.LastRev, true
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err // the reader stopped early
	}
	cur := store.CurrentRev()
	if known && cur != seen {
		between = true
	}
	if heldN > 0 || between {
		return 0, fmt.Errorf("%w: %d of its entries held back (%q), other changes %v", errChanged, heldN, held, between)
	}
	ws.AppliedPush, ws.Fetch = watermark.At(m.rev), watermark.At(m.rev)
	return cur, store.SetWatermarks(ctx, m.peer, ws)
}

// errChanged is an install that met changes of the container's own.
var errChanged = errors.New("the container changed its files during the snapshot")

// stagedRead is one batch of staged records read for the install, or why
// none could be.
type stagedRead struct {
	entries []vfs.ChangeEntry
	err     error
}

// readStaged reads the staged records for the install, in batches of
// installBatch records (doubling to installBulkBatch when grow), on a
// goroutine of its own: the next batch is read and decoded while the
// install applies this one. The channel ends after the last batch, after
// a failed read (its error sent last), or when ctx ends. stop ends the
// reader and returns once it is gone (nothing of db in use after it).
func readStaged(ctx context.Context, db *sql.DB, total int, grow bool) (batches <-chan stagedRead, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan stagedRead) // the reader holds the one batch ahead
	go func() {
		defer close(out)
		size := installBatch
		for seq := 0; seq < total; {
			entries, next, err := stagedBatch(ctx, db, seq, size)
			if err == nil && len(entries) == 0 {
				err = malformed("staged records end at %d of %d", seq, total)
			}
			select {
			case out <- stagedRead{entries, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
			seq = next
			if grow {
				size = min(2*size, installBulkBatch)
			}
		}
	}()
	return out, func() {
		cancel()
		for range out {
		}
	}
}

// stagedBatch reads the entries of up to n staged records from seq on,
// putting a split file's parts back together (a batch then reads past n
// records to finish its last file; it stops after the file once it holds
// installRefs refs). It returns the entries and the record after them.
func stagedBatch(ctx context.Context, db *sql.DB, seq, n int) ([]vfs.ChangeEntry, int, error) {
	var out []vfs.ChangeEntry
	var split fileParts
	refs := 0
	for {
		rows, err := db.QueryContext(ctx, `SELECT seq, record FROM records WHERE seq >= ? ORDER BY seq LIMIT ?`, seq, n)
		if err != nil {
			return nil, seq, err
		}
		read := 0
		for rows.Next() {
			var got int
			var b []byte
			if err := rows.Scan(&got, &b); err != nil {
				rows.Close()
				return nil, seq, err
			}
			rec, err := decodeRecordBody(b)
			if err != nil || got != seq {
				rows.Close()
				return nil, seq, malformed("staged record %d does not decode", got)
			}
			switch {
			case rec.Tag == recRefs:
				if err = split.add(rec.More); err == nil {
					last := &out[len(out)-1]
					last.Chunks = append(last.Chunks, rec.More...)
					last.Size = last.Chunks.Size()
				}
			case split.open:
				err = malformed("staged %q ends before its %d refs", split.path, split.want)
			case rec.Tag == recHead:
				err = split.start(&rec)
				e := rec.Entry
				// Grown as the parts come, not sized from the head's count.
				e.Chunks = slices.Clone(rec.Entry.Chunks)
				out = append(out, e)
			default:
				out = append(out, rec.Entry)
			}
			if err != nil {
				rows.Close()
				return nil, seq, fmt.Errorf("staged record %d: %w", got, err)
			}
			refs += len(rec.refs())
			seq++
			read++
			if !split.open && (len(out) >= n || refs >= installRefs) {
				rows.Close()
				return out, seq, nil
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, seq, err
		}
		if read == 0 {
			if split.open {
				return nil, seq, malformed("staged %q ends before its %d refs", split.path, split.want)
			}
			return out, seq, nil
		}
	}
}

// installRefs is where an install batch is cut by refs, so a batch of many
// large files holds no more than about this many refs beyond its last file.
const installRefs = 1 << 16

// applyStaged applies one batch of staged records, whose chunks the store
// holds, behind fence; the batch's revs join the peer's bounce run, with
// ws written as it is.
func (s *snapReceiver) applyStaged(ctx context.Context, batch []vfs.ChangeEntry, m stagedMeta, ws *watermark.Set, fence *watermark.Cursor) (vfs.ApplyResult, error) {
	// The staged chunks are held: each batch takes over the holds of the
	// chunks it names, as their first references.
	opts := vfs.ApplyOptions{Source: vfs.Upstream, Held: true, Peer: m.peer, Watermarks: ws, Bounce: true, Fence: fence}
	res, err := s.r.store.Apply(ctx, batch, opts)
	crashpoint.Hit("converge.install.batch")
	if err == nil && installBatchHook != nil {
		err = installBatchHook()
	}
	return res, err
}

// installBatchHook, when set (tests), runs after each install batch
// commits; an error it returns cuts the install short there, and errKilled
// stands for the process dying there (commit then cleans nothing up).
var installBatchHook func() error

// errKilled is installBatchHook's stand-in for a process killed inside an
// install.
var errKilled = errors.New("killed inside the install (test seam)")

// installBatch is how many staged records one install transaction applies
// into a store that holds part of the tree (larger batches measured slower
// there: 2.5 s against 1.9 s for 50,000 records, entry by entry).
const installBatch = syncwire.BatchEntries

// installBulkBatch is where the transactions of an install into an empty
// store stop growing (they double from installBatch): it bounds what one
// holds in memory (the records; the install holds two batches, the one it
// applies and the one read ahead) and what a kill inside it takes back.
const installBulkBatch = 4096
