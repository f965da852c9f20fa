package vfs

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// Checkpoints off the writer.
//
// SQLite's automatic checkpoint runs inside the commit that crosses 1,000
// WAL pages: that commit copies the WAL into the database file (and, with
// synchronous=NORMAL, syncs both) while the store's writer lock is held,
// so every mutation of the mount and every apply waits for it. Instead a
// checkpointer goroutine on a connection of its own runs a PASSIVE
// checkpoint (which never blocks the writer or readers) after commits, at
// most once per checkpointEvery, and copies the frames in the background.
// A background checkpoint cannot end the WAL under a steady stream of
// commits, though: the WAL restarts from its beginning only after a
// checkpoint that copied every frame, and frames keep arriving while it
// copies. So the writer keeps an automatic checkpoint at walBackstop pages
// (TestCheckpointsKeepTheWALBounded): by then the background has copied
// all but the last frames, the writer's own checkpoint copies those, and
// its next transaction restarts the WAL. Close truncates it.
//
// Options.ExternalCheckpoint hands checkpoints to another owner of the
// database: litestream (package replica), which holds a read transaction
// to keep the WAL from restarting behind it and checkpoints itself after
// it has copied the frames. Then no checkpointer runs, the writer's
// wal_autocheckpoint is 0 (no backstop) and Close does not truncate the
// WAL (a TRUNCATE would wait out the busy timeout on litestream's read
// transaction); SQLite folds it when the last connection closes.
// TestExternalCheckpointLeavesTheWAL checks that the store then never
// checkpoints; package replica checks that its replica stays equal to
// the database under many commits.

// walBackstop is the writer's automatic checkpoint, in WAL pages (16 MiB
// of 4 KiB pages).
const walBackstop = 4096

// checkpointEvery bounds how often checkpoints run.
const checkpointEvery = 100 * time.Millisecond

type checkpointer struct {
	db   *sql.DB
	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// walAutocheckpoint is the writer's wal_autocheckpoint pragma.
func (s *Store) walAutocheckpoint() int {
	if s.opts.ExternalCheckpoint {
		return 0
	}
	return walBackstop
}

// startCheckpointer opens the checkpointer's connection (dsn) and starts
// it; with Options.ExternalCheckpoint it starts none (s.ckpt stays nil).
func (s *Store) startCheckpointer(dsn string) error {
	if s.opts.ExternalCheckpoint {
		return nil
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("open checkpointer: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	c := &checkpointer{db: db, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	s.ckpt = c
	c.wg.Add(1)
	go c.run(s)
	return nil
}

// kickCheckpoint asks for a checkpoint after a commit.
func (s *Store) kickCheckpoint() {
	if s.ckpt == nil {
		return
	}
	select {
	case s.ckpt.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run(s *Store) {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		var busy, log, done int
		err := c.db.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done)
		if err != nil {
			s.log.Warn("wal checkpoint", "err", err)
		}
		select {
		case <-c.stop:
			return
		case <-time.After(checkpointEvery):
		}
	}
}

// close stops the checkpointer and closes its connection.
func (c *checkpointer) close() error {
	close(c.stop)
	c.wg.Wait()
	return c.db.Close()
}
