package vfs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/wsync/wsync/watermark"
)

// What a store knows of the stores it syncs with, and what they may know
// of it.
//
// A peer keeps a fetch cursor into this store's feed: the revs at or
// before it, it has seen. The cursor is only ever a rev this store handed
// out as a place in its feed (a feed's head, a pushed batch's last rev, a
// snapshot install's). The store records the highest it handed out,
// served, before the answer that carries it leaves: so served is at or
// past every peer's cursor, in the store and in any copy of it taken
// later. A store restored from an older copy of itself (a disk snapshot,
// a rolled-back volume or sandbox, a power loss that took the WAL's
// tail) holds the copy's served, and a peer whose cursor is past it
// fetched revs this store has since stamped again with other changes:
// MeetPeer takes the peer's cursor back to served, where both histories
// still agree (served is at or before the copy's rev). Whether the
// process was restarted or restored with it (a memory snapshot) makes no
// difference.

// Served is the highest rev the store handed out as a place in its feed
// (NoteServed).
func (s *Store) Served() int64 { return s.served.Load() }

// NoteServed records that rev (capped at the store's) is handed out as a
// place in the store's feed, before the answer that carries it goes. It
// writes only when rev is past what was recorded. A record that fails (a
// full disk) is logged and counted (wsync_vfs_write_errors_total, where
// "served"), not returned, and the answer goes anyway: a rev handed out
// unrecorded can only make a later meeting take a peer's cursor back
// further than it had to (a refetch), never hide a restore, and a full
// container must still be pulled from.
func (s *Store) NoteServed(ctx context.Context, rev int64) {
	if rev <= s.served.Load() {
		return // recorded already: nothing read, nothing written
	}
	if rev = min(rev, s.CurrentRev()); rev <= s.served.Load() {
		return
	}
	err := s.update(ctx, func(t *wtx) error {
		if noteServedHook != nil {
			if err := noteServedHook(); err != nil {
				return err
			}
		}
		_, err := t.exec(`INSERT INTO meta(key, value) VALUES('served', ?) ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)`, rev)
		return err
	})
	if err != nil {
		countWriteError("served", err)
		s.log.Warn("the rev handed out to a peer was not recorded; a peer meeting this store later may fetch again from an older rev", "rev", rev, "err", err)
		return
	}
	for {
		old := s.served.Load()
		if old >= rev || s.served.CompareAndSwap(old, rev) {
			return
		}
	}
}

// noteServedHook, when set (tests), fails NoteServed's record with the
// error it returns.
var noteServedHook func() error

// loadServed reads what NoteServed recorded (0 when nothing was).
func (s *Store) loadServed(ctx context.Context) error {
	var served int64
	err := s.w.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'served'`).Scan(&served)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("read served rev: %w", err)
	}
	s.served.Store(served)
	return nil
}

// Met is what MeetPeer found.
type Met struct {
	// Store: the peer is another store than the one recorded under its
	// name. Restored: the same store, which served less of its feed than
	// our fetch cursor covers.
	Store, Restored bool
	// Fetch is the fetch cursor after the meeting.
	Fetch watermark.Cursor
}

// MeetPeer records id as the store behind peer, as its sessions announce
// it with the highest rev it has served (a peer's name outlives its
// store: a replaced or pooled container keeps the runtime's name).
//
// When the store recorded is another one, what is kept under the name
// describes that other store's feed and what it held: the fetch cursor
// and the bounce run go back to the start of the new store's feed and the
// merge bases go, in one transaction, so the next push fences every
// change of the new store and the next pull fetches them all (the push
// cursor is reconciled against what the new store says it holds of ours).
//
// When it is the same store but our fetch cursor is past served, the
// store was restored behind it: the revs after served may hold other
// changes than the ones we fetched. The fetch cursor goes back to served,
// and the bounce run and the merge bases go as above. A served below 0 is
// not known (a caller that does not have it) and not checked. A name met
// for the first time, or whose store was never recorded, is recorded as
// it is.
func (s *Store) MeetPeer(ctx context.Context, peer, id string, served int64) (Met, error) {
	if id == "" {
		return Met{}, fmt.Errorf("meet peer %q: %w: no store id", peer, ErrInvalid)
	}
	// The common meeting, the same store holding what we fetched, writes
	// nothing.
	var met Met
	var prev string
	var fetch []byte
	err := s.committed().QueryRowContext(ctx, `SELECT peer_store, fetch FROM watermarks WHERE peer = ?`, peer).Scan(&prev, &fetch)
	if err == nil {
		if met.Fetch, _, err = watermark.DecodeCursor(fetch); err != nil {
			return Met{}, fmt.Errorf("meet peer %q: %w", peer, err)
		}
		if prev == id && (served < 0 || met.Fetch.Rev <= served) {
			return met, nil
		}
	} else if !errors.Is(err, sql.ErrNoRows) {
		return Met{}, fmt.Errorf("meet peer %q: %w", peer, err)
	}
	zero, err := watermark.Cursor{}.AppendBinary(nil)
	if err != nil {
		return Met{}, err
	}
	met = Met{}
	err = s.update(ctx, func(t *wtx) error {
		err := t.tx.QueryRowContext(t.ctx, `SELECT peer_store, fetch FROM watermarks WHERE peer = ?`, peer).Scan(&prev, &fetch)
		if errors.Is(err, sql.ErrNoRows) {
			_, err = t.exec(`INSERT INTO watermarks(peer, push, fetch, applied_push, peer_store) VALUES(?, ?, ?, ?, ?)`, peer, zero, zero, zero, id)
			return err
		}
		if err != nil {
			return err
		}
		if met.Fetch, _, err = watermark.DecodeCursor(fetch); err != nil {
			return err
		}
		switch {
		case prev != "" && prev != id:
			met.Store, met.Fetch = true, watermark.Cursor{}
		case served >= 0 && met.Fetch.Rev > served:
			met.Restored, met.Fetch = true, watermark.At(served)
		default:
			_, err = t.exec(`UPDATE watermarks SET peer_store = ? WHERE peer = ?`, id, peer)
			return err
		}
		at, err := met.Fetch.AppendBinary(nil)
		if err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE watermarks SET peer_store = ?, fetch = ?, bounce_from = 0, bounce_to = 0 WHERE peer = ?`, id, at, peer); err != nil {
			return err
		}
		return t.forgetBases(peer)
	})
	if err != nil {
		return Met{}, fmt.Errorf("meet peer %q: %w", peer, err)
	}
	return met, nil
}
