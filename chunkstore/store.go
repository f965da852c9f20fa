package chunkstore

// API CONTRACT (the implementation replaces the bodies; signatures are fixed
// because vfs is written against them).

import (
	"context"
	"database/sql"
	"log/slog"
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
// default; larger chunks live in files under Options.Dir.
const DefaultInlineMax = 64 << 10

// Options configures a Store.
type Options struct {
	// Dir holds chunk files. Empty keeps every chunk as a database row (the
	// layout of a :memory: store).
	Dir string
	// InlineMax is the largest chunk stored as a row; 0 means DefaultInlineMax.
	InlineMax int
	// NoSync skips fsync of chunk files (tests, tmpfs).
	NoSync bool
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
	Bytes int64 // bytes freed
}

func Schema(ctx context.Context, q Querier) error                         { panic("contract") }
func New(opts Options) (*Store, error)                                    { panic("contract") }
func (s *Store) Close() error                                             { panic("contract") }
func (s *Store) NewStage() *Stage                                         { panic("contract") }
func (st *Stage) Put(ctx context.Context, h Hash, data []byte) error      { panic("contract") }
func (st *Stage) PutHashed(ctx context.Context, data []byte) (Ref, error) { panic("contract") }
func (st *Stage) Release()                                                { panic("contract") }
func (s *Store) AddRefs(ctx context.Context, q Querier, refs []Ref) error { panic("contract") }
func (s *Store) DropRefs(ctx context.Context, q Querier, refs []Ref) error {
	panic("contract")
}
func (s *Store) Has(ctx context.Context, q Querier, hashes []Hash) ([]Hash, error) {
	panic("contract")
}
func (s *Store) ReadAt(ctx context.Context, q Querier, r Ref, p []byte, off int64) (int, error) {
	panic("contract")
}
func (s *Store) Get(ctx context.Context, q Querier, h Hash) ([]byte, error) { panic("contract") }
func (s *Store) GC(ctx context.Context, q Querier) (*Sweep, error)          { panic("contract") }
func (sw *Sweep) Finish() (GCStats, error)                                  { panic("contract") }
func (s *Store) Stats(ctx context.Context, q Querier) (Stats, error)        { panic("contract") }

type Store struct{}
type Stage struct{}
type Sweep struct{}
