package chunkstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

// sqliteDSN is how the store's callers open a database file: WAL, a busy
// timeout, synchronous=NORMAL (modernc's _pragma DSN syntax).
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)"
}

// openFileDB opens (creating) a database file with the chunk schema.
func openFileDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := Schema(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// openMemDB opens a :memory: database; one connection, since every
// connection of a :memory: DSN is a database of its own.
func openMemDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if err := Schema(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

func newTestStore(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// splitStore is the layout of a store on disk: a database file and a chunk
// directory beside it.
func splitStore(t testing.TB, inlineMax int, noSync bool) (*Store, *sql.DB) {
	dir := t.TempDir()
	db := openFileDB(t, filepath.Join(dir, "state.db"))
	return newTestStore(t, Options{Dir: filepath.Join(dir, "chunks"), InlineMax: inlineMax, NoSync: noSync}), db
}

// chunkBytes returns size deterministic pseudo-random bytes for seed.
func chunkBytes(seed uint64, size int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, (size+7)/8*8)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:size]
}

// inTx runs fn in a transaction and commits it.
func inTx(t testing.TB, db *sql.DB, fn func(tx *sql.Tx) error) {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
