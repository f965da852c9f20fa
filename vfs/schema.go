package vfs

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/sqlitemigrate"
)

// migrations are the schema steps: migrations[i] takes a database from
// version i to i+1 (sqlitemigrate). The chunk table's steps
// (chunkstore.Migrations) are steps of this list: v1 creates the table, v3
// adds its pack columns, v9 its remote column.
var migrations = []sqlitemigrate.Step{
	migrateV1,
	migrateV2,
	migrateV3,
	migrateV4,
	migrateV5,
	migrateV6,
	migrateV7,
	migrateV8,
	migrateV9,
	migrateV10,
	migrateV11,
	migrateV12,
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)

func migrateV1(ctx context.Context, tx *sql.Tx) error {
	stmts := []string{
		`CREATE TABLE meta(key TEXT PRIMARY KEY, value ANY) WITHOUT ROWID`,
		// ino is AUTOINCREMENT so inode numbers are never reused: the kernel
		// and open handles may still hold a number after its node is gone.
		`CREATE TABLE nodes(
			ino INTEGER PRIMARY KEY AUTOINCREMENT,
			kind INTEGER NOT NULL,
			mode INTEGER NOT NULL,
			uid INTEGER NOT NULL,
			gid INTEGER NOT NULL,
			nlink INTEGER NOT NULL,
			size INTEGER NOT NULL DEFAULT 0,
			mtime INTEGER NOT NULL,
			ctime INTEGER NOT NULL,
			atime INTEGER NOT NULL,
			manifest BLOB,
			target TEXT,
			rev INTEGER NOT NULL
		)`,
		`CREATE TABLE dirents(
			parent INTEGER NOT NULL,
			name TEXT NOT NULL,
			child INTEGER NOT NULL,
			PRIMARY KEY(parent, name)
		) WITHOUT ROWID`,
		`CREATE INDEX dirents_child ON dirents(child)`,
		// changes holds one row per path ever touched: the rev of its last
		// touch. A row whose path resolves to a live node is a live entry of
		// the feed; one that does not is a tombstone.
		`CREATE TABLE changes(path TEXT PRIMARY KEY, rev INTEGER NOT NULL) WITHOUT ROWID`,
		`CREATE INDEX changes_rev ON changes(rev, path)`,
		`CREATE TABLE watermarks(
			peer TEXT PRIMARY KEY,
			push BLOB NOT NULL,
			fetch BLOB NOT NULL,
			applied_push BLOB NOT NULL
		) WITHOUT ROWID`,
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("v1: %w", err)
		}
	}
	return chunkstore.Migrations[0](ctx, tx)
}

// migrateV2 adds extended attributes (local to each side, never synced).
func migrateV2(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `CREATE TABLE xattrs(
		ino INTEGER NOT NULL,
		name TEXT NOT NULL,
		value BLOB NOT NULL,
		PRIMARY KEY(ino, name)
	) WITHOUT ROWID`)
	if err != nil {
		return fmt.Errorf("v2: %w", err)
	}
	return nil
}

// migrateV3 gives the chunks table its pack-file locations.
func migrateV3(ctx context.Context, tx *sql.Tx) error {
	if err := chunkstore.Migrations[1](ctx, tx); err != nil {
		return fmt.Errorf("v3: %w", err)
	}
	return nil
}

// migrateV4 adds the device number of device nodes (special files, local
// to each side). Adding a column with a constant default rewrites no row.
func migrateV4(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `ALTER TABLE nodes ADD COLUMN rdev INTEGER NOT NULL DEFAULT 0`); err != nil {
		return fmt.Errorf("v4: %w", err)
	}
	return nil
}

// migrateV5 adds each peer's bounce run (BounceRun) to its watermarks.
func migrateV5(ctx context.Context, tx *sql.Tx) error {
	for _, c := range []string{"bounce_from", "bounce_to"} {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE watermarks ADD COLUMN `+c+` INTEGER NOT NULL DEFAULT 0`); err != nil {
			return fmt.Errorf("v5: %w", err)
		}
	}
	return nil
}

// migrateV6 adds the merge bases kept per peer and path, and the conflict
// records (bases.go, conflict.go).
func migrateV6(ctx context.Context, tx *sql.Tx) error {
	stmts := []string{
		`CREATE TABLE bases(
			peer TEXT NOT NULL,
			path TEXT NOT NULL,
			state BLOB NOT NULL,
			PRIMARY KEY(peer, path)
		) WITHOUT ROWID`,
		`CREATE TABLE conflicts(
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			path TEXT NOT NULL,
			peer TEXT NOT NULL,
			side TEXT NOT NULL,
			at INTEGER NOT NULL,
			policy TEXT NOT NULL,
			kind TEXT NOT NULL,
			server TEXT NOT NULL,
			container TEXT NOT NULL,
			copy TEXT NOT NULL,
			copy_side TEXT NOT NULL,
			resolved INTEGER NOT NULL DEFAULT 0,
			resolution TEXT NOT NULL DEFAULT ''
		)`,
		`CREATE INDEX conflicts_open ON conflicts(resolved, id)`,
		`CREATE INDEX conflicts_path ON conflicts(path, resolved)`,
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("v6: %w", err)
		}
	}
	return nil
}

// migrateV7 adds the usage counters (quota.go), counted once from the
// nodes: the bytes of the file nodes and the nodes but the root.
func migrateV7(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value)
		SELECT 'usage_bytes', coalesce(sum(CASE WHEN kind = ? THEN size ELSE 0 END), 0) FROM nodes
		UNION ALL SELECT 'usage_entries', count(*) FROM nodes WHERE ino != ?`, KindFile, RootIno)
	if err != nil {
		return fmt.Errorf("v7: %w", err)
	}
	return nil
}

// migrateV8 adds the trash (trash.go): one row per path whose content
// a delete or an overwrite replaced, holding the old manifest (and a
// reference on each of its chunks) until it expires, is purged, evicted
// or restored; meta keeps its running totals.
func migrateV8(ctx context.Context, tx *sql.Tx) error {
	stmts := []string{
		`CREATE TABLE trash(
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			path TEXT NOT NULL,
			kind INTEGER NOT NULL,
			mode INTEGER NOT NULL,
			size INTEGER NOT NULL,
			mtime INTEGER NOT NULL,
			manifest BLOB,
			target TEXT,
			at INTEGER NOT NULL,
			op TEXT NOT NULL,
			origin TEXT NOT NULL
		)`,
		`CREATE INDEX trash_path ON trash(path, at)`,
		`CREATE INDEX trash_at ON trash(at)`,
		`INSERT OR IGNORE INTO meta(key, value) VALUES('trash_bytes', 0), ('trash_entries', 0)`,
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("trash schema: %w", err)
		}
	}
	return nil
}

// migrateV9 records, per chunk, whether an object store has its bytes
// (chunk uploads of a shared workspace, remote.go).
func migrateV9(ctx context.Context, tx *sql.Tx) error {
	if err := chunkstore.Migrations[2](ctx, tx); err != nil {
		return fmt.Errorf("v9: %w", err)
	}
	return nil
}

// migrateV10 adds the chunk holds (holds.go): the chunks a snapshot being
// staged keeps in the store, each counted as one reference.
func migrateV10(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `CREATE TABLE chunk_holds(hash BLOB PRIMARY KEY) WITHOUT ROWID`); err != nil {
		return fmt.Errorf("v10: %w", err)
	}
	return nil
}

// migrateV11 records the store id each peer's sessions announced
// (MeetPeer): the watermarks kept under a peer's name describe that store.
func migrateV11(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `ALTER TABLE watermarks ADD COLUMN peer_store TEXT NOT NULL DEFAULT ''`); err != nil {
		return fmt.Errorf("v11: %w", err)
	}
	return nil
}

// migrateV12 records the rev a store has served to its peers
// (peers.go): the highest it handed out as a place in its feed. A store
// from before kept no record; all it holds may have been served.
func migrateV12(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO meta(key, value) SELECT 'served', value FROM meta WHERE key = 'rev'`); err != nil {
		return fmt.Errorf("v12: %w", err)
	}
	return nil
}

// migrate brings the database to version `to` (SchemaVersion outside
// tests); init writes a new database's first rows.
func migrate(ctx context.Context, db *sql.DB, to int, init sqlitemigrate.Step) error {
	return sqlitemigrate.Migrate(ctx, db, migrations, to, init)
}
