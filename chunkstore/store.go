package chunkstore

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/wsync/wsync/internal/sqlitemigrate"
)

// Querier is what the store needs of a database handle: *sql.DB, *sql.Conn
// and *sql.Tx all have it. Every method that touches rows takes one, so a
// caller inside a transaction passes its transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DefaultInlineMax is the largest chunk kept as a row in the database by
// default; larger chunks below full size are appended to pack files, full
// ones are files of their own, under Options.Dir. With packs (one fsync per
// pack per commit instead of one per chunk) a record is cheaper to write
// than a row from a few KiB up (8 KiB: 25 us against 53 us on disk with
// fsync) and much cheaper to read; tiny chunks stay rows, one row per small
// file. Measured end to end, the 10,000-file pull of 10 KB files on disk
// went from 900 to 630 ms when 10 KB chunks moved from rows to packs
// (docs/PERFORMANCE.md "chunkstore").
const DefaultInlineMax = 4 << 10

// DefaultInlineMaxNoSync is the default threshold with Options.NoSync
// (tmpfs): the same reasoning without fsyncs.
const DefaultInlineMaxNoSync = 4 << 10

// Options configures a Store.
type Options struct {
	// Dir holds chunk files. Empty keeps every chunk as a database row (the
	// layout of a :memory: store).
	Dir string
	// InlineMax is the largest chunk stored as a row; 0 means
	// DefaultInlineMax, or DefaultInlineMaxNoSync with NoSync. Changing it
	// between opens is safe: chunks are found where they were stored.
	InlineMax int
	// NoSync skips fsync of chunk files (tests, tmpfs).
	NoSync bool
	// Remote, when set, is where non-inline chunks are uploaded (each is
	// owed from its first reference until MarkUploaded) and where reads
	// fetch bytes the local store lacks.
	Remote Remote
	Logger *slog.Logger
}

// Stats are a store's counts.
type Stats struct {
	Chunks       int64 // rows
	InlineBytes  int64 // bytes held in rows
	FileBytes    int64 // bytes held in chunk files
	Unreferenced int64 // rows no manifest references (collectable)
	StagedChunks int64 // chunks held by live stages
}

// GCStats reports what a collection removed.
type GCStats struct {
	Rows  int64 // unreferenced rows deleted
	Files int64 // chunk files unlinked (rows' files and orphans)
	Packs int64 // pack files deleted (emptied, or compacted into the current pack)
	// Bytes freed: inline bytes and pack records of deleted rows, and
	// unlinked chunk files. A pack record becomes dead space, which
	// compaction hands back to the file system later.
	Bytes int64
	Moved int64 // pack records copied out of packs being compacted
	Young int64 // unreferenced rows spared for their grace (GCOptions.Grace)
}

// Store keeps chunk bytes: rows of the caller's database for small chunks,
// content-addressed files under Options.Dir for the others. It holds no
// database handle; see the package documentation for the model.
//
// One Store owns its Dir: two Stores (or processes) sharing a Dir would
// collect each other's staged files.
type Store struct {
	dir       string
	inlineMax int
	noSync    bool
	log       *slog.Logger
	fds       *fdCache   // nil when dir == ""
	packs     *packTable // nil when dir == ""
	// packMax is the largest chunk appended to a pack; larger non-inline
	// chunks get files of their own. 0 writes no packs (the older layout,
	// for benchmarks).
	packMax int

	mu     sync.Mutex
	closed bool
	// pins holds every chunk a live Stage has, with the bytes of inline
	// ones: GC never removes a pinned hash.
	pins map[Hash]*pin
	// released are file chunks whose last pin dropped since the last
	// finished sweep: the places where a rolled-back or abandoned stage may
	// have left an orphan file.
	released map[Hash]struct{}
	// needScan asks the next sweep to list the whole Dir (set on open, for
	// what a crashed process left behind).
	needScan bool
	// sweep is the collection whose Finish may still come; at most one, a
	// newer GC supersedes it.
	sweep *Sweep
	// dirtyDirs are chunk directories with renames not yet fsynced.
	dirtyDirs map[string]struct{}
	// locs remembers where pack chunks were recently appended or found,
	// so reads skip the row lookup. An entry can only be stale by naming a
	// deleted pack (records are never rewritten and pack ids never reused),
	// which a read notices; GC drops the entries of rows it deletes.
	locs map[Hash]packLoc
	// ahead keeps inline chunks Prefetch read for reads to come (ahead.go).
	ahead aheadCache

	syncMu sync.Mutex // serialises syncDirs

	remote  Remote             // nil: none
	fetches singleflight.Group // one remote fetch per hash at a time

	gc gcState // live collection's bookkeeping (gc.go)
}

type pin struct {
	n      int     // stages holding the chunk
	data   []byte  // an inline chunk's bytes; nil for a file chunk
	onDisk bool    // a file or pack chunk's bytes are written
	loc    packLoc // a pack chunk's record (pinned in the pack table)
}

// maxLocs bounds Store.locs (about 3 MiB).
const maxLocs = 1 << 16

// New returns a Store with the given layout. With a Dir it creates the
// directory if needed.
func New(opts Options) (*Store, error) {
	if opts.InlineMax < 0 {
		return nil, fmt.Errorf("new chunk store: negative InlineMax %d", opts.InlineMax)
	}
	s := &Store{
		dir:       opts.Dir,
		inlineMax: pickInlineMax(opts, DefaultInlineMax, DefaultInlineMaxNoSync),
		noSync:    opts.NoSync,
		log:       opts.Logger,
		pins:      make(map[Hash]*pin),
		released:  make(map[Hash]struct{}),
		dirtyDirs: make(map[string]struct{}),
		locs:      make(map[Hash]packLoc),
		packMax:   defaultPackMax,
		remote:    opts.Remote,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "chunkstore")
	if s.dir != "" {
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, fmt.Errorf("new chunk store: %w", err)
		}
		s.fds = newFDCache(defaultFDCacheSize)
		s.needScan = true
		var err error
		if s.packs, err = newPackTable(s.dir, s.noSync); err != nil {
			return nil, fmt.Errorf("new chunk store: %w", err)
		}
	}
	return s, nil
}

// pickInlineMax is opts.InlineMax, or when it is 0 the default for
// opts.NoSync: noSyncDef with NoSync, def without. The defaults are
// parameters so a test can tell the two apart while both are 4 KiB.
func pickInlineMax(opts Options, def, noSyncDef int) int {
	switch {
	case opts.InlineMax != 0:
		return opts.InlineMax
	case opts.NoSync:
		return noSyncDef
	}
	return def
}

// Close releases the store's open files. Stages still live lose their pins.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	clear(s.pins)
	s.sweep = nil
	if s.packs != nil {
		s.packs.close()
	}
	if s.fds != nil {
		return s.fds.close()
	}
	return nil
}

func (s *Store) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// inline reports whether a chunk of n bytes is stored as a row.
func (s *Store) inline(n int) bool { return s.dir == "" || n <= s.inlineMax }

// packed reports whether a new chunk of n bytes is appended to a pack.
func (s *Store) packed(n int) bool { return !s.inline(n) && n <= s.packMax }

// rememberLocLocked records where h's record is, for reads.
func (s *Store) rememberLocLocked(h Hash, loc packLoc) {
	if len(s.locs) >= maxLocs {
		clear(s.locs)
	}
	s.locs[h] = loc
}

// Migrations are the chunk table's schema steps, in order. The table lives
// in the caller's database: a caller with a schema of its own runs each
// step as one of its own versioned steps (vfs: v1, v3 and v9); Schema runs
// them on a database the chunk store has to itself.
var Migrations = []sqlitemigrate.Step{createChunks, addPackColumns, addRemoteColumn}

// Schema brings a database that holds only the chunk table to the current
// layout, versioned by PRAGMA user_version.
func Schema(ctx context.Context, db *sql.DB) error {
	if err := sqlitemigrate.Migrate(ctx, db, Migrations, len(Migrations), nil); err != nil {
		return fmt.Errorf("chunk schema: %w", err)
	}
	return nil
}

// createChunks is the chunk table as the first release made it. IF NOT
// EXISTS: Schema's databases from before versioning have the table at
// version 0.
func createChunks(ctx context.Context, tx *sql.Tx) error {
	for _, stmt := range []string{
		// A rowid table with a UNIQUE hash: large blobs in a WITHOUT ROWID
		// table are the slowest layout. data is the chunk's
		// bytes for an inline chunk, NULL for a file chunk.
		`CREATE TABLE IF NOT EXISTS chunks(
			id   INTEGER PRIMARY KEY,
			hash BLOB NOT NULL UNIQUE,
			size INTEGER NOT NULL,
			refs INTEGER NOT NULL,
			data BLOB
		)`,
		// GC finds its rows without a scan; rows with references never
		// enter the index, so refcount updates stay cheap.
		`CREATE INDEX IF NOT EXISTS chunks_unreferenced ON chunks(id) WHERE refs <= 0`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create chunks: %w", err)
		}
	}
	return nil
}

// addPackColumns adds pack and pack_off, which name a pack chunk's record
// (NULL for inline and file chunks), and an index on them that lets GC
// count a pack's live bytes and find its rows. It adds only the columns
// missing: vfs databases created between packs and vfs schema v3 got
// them at v1, and Schema's databases from before versioning may have them
// at version 0.
func addPackColumns(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info('chunks')`)
	if err != nil {
		return fmt.Errorf("add pack columns: %w", err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("add pack columns: %w", err)
		}
		have[name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("add pack columns: %w", err)
	}
	var stmts []string
	for _, col := range []string{"pack", "pack_off"} {
		if !have[col] {
			stmts = append(stmts, "ALTER TABLE chunks ADD COLUMN "+col+" INTEGER")
		}
	}
	stmts = append(stmts, `CREATE INDEX IF NOT EXISTS chunks_pack ON chunks(pack, size) WHERE pack IS NOT NULL`)
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("add pack columns: %w", err)
		}
	}
	return nil
}

// Stats returns the store's counts.
func (s *Store) Stats(ctx context.Context, q Querier) (Stats, error) {
	var st Stats
	err := q.QueryRowContext(ctx, `SELECT count(*),
		coalesce(sum(CASE WHEN data IS NULL THEN 0 ELSE size END), 0),
		coalesce(sum(CASE WHEN data IS NULL THEN size ELSE 0 END), 0),
		coalesce(sum(refs <= 0), 0)
		FROM chunks`).Scan(&st.Chunks, &st.InlineBytes, &st.FileBytes, &st.Unreferenced)
	if err != nil {
		return Stats{}, fmt.Errorf("chunk stats: %w", err)
	}
	s.mu.Lock()
	st.StagedChunks = int64(len(s.pins))
	s.mu.Unlock()
	return st, nil
}
