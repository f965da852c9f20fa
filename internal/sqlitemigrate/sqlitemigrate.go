// Package sqlitemigrate brings a SQLite database's schema up to date by
// numbered steps, the one migration mechanism of vfs and chunkstore.
//
// PRAGMA user_version holds the version: the number of steps applied.
// Migrate runs the missing steps and sets the version in one transaction,
// so a crash leaves the database at the old version or the new one. A
// database above the last step was written by a newer build and is
// refused with ErrTooNew.
package sqlitemigrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrTooNew: the database is at a version beyond the steps this build has.
var ErrTooNew = errors.New("database schema is newer than this build")

// Step takes a database from one version to the next, inside the
// migration's transaction.
type Step func(ctx context.Context, tx *sql.Tx) error

// Migrate brings db to version to (len(steps) outside tests) by running
// steps[v:to] for a database at version v. init, when not nil, runs after
// the steps on a database that was at version 0, to write its first rows.
func Migrate(ctx context.Context, db *sql.DB, steps []Step, to int, init Step) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if v > len(steps) {
		return fmt.Errorf("%w: database is at schema version %d, this build knows versions up to %d", ErrTooNew, v, len(steps))
	}
	if v >= to {
		return nil
	}
	for i := v; i < to; i++ {
		if err := steps[i](ctx, tx); err != nil {
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
	}
	if v == 0 && init != nil {
		if err := init(ctx, tx); err != nil {
			return fmt.Errorf("migrate: initialise: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, to)); err != nil {
		return fmt.Errorf("migrate: set version: %w", err)
	}
	return tx.Commit()
}
