package vfs

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/wsync/wsync/watermark"
)

// Segment is one run of a store's revs: those stamped from From on by one
// opening of the store, named by a random ID drawn at that opening. A
// store restored from an older copy of itself (a disk snapshot, a volume
// rolled back, a power loss that took the WAL's tail) opens at the copy's
// rev and starts a new segment there, so the revs it stamps again after
// the copy carry another segment's name than the ones a peer fetched
// before the restore.
type Segment struct {
	From int64
	ID   int64
}

// Lineage is a store's segments, oldest first: From strictly increasing,
// each ID nonzero. A store keeps its last MaxLineage.
type Lineage []Segment

// MaxLineage bounds the segments a store keeps and a peer may announce.
const MaxLineage = 256

// Valid reports whether l is a lineage a store could keep.
func (l Lineage) Valid() error {
	if len(l) > MaxLineage {
		return fmt.Errorf("%w: lineage of %d segments (at most %d)", ErrInvalid, len(l), MaxLineage)
	}
	for i, s := range l {
		switch {
		case s.From < 1 || s.From > 1<<62:
			return fmt.Errorf("%w: lineage segment %d starts at rev %d", ErrInvalid, i, s.From)
		case s.ID == 0:
			return fmt.Errorf("%w: lineage segment %d has no id", ErrInvalid, i)
		case i > 0 && s.From <= l[i-1].From:
			return fmt.Errorf("%w: lineage segment %d starts at rev %d, not after %d", ErrInvalid, i, s.From, l[i-1].From)
		}
	}
	return nil
}

// end is the last rev of segment i: the rev before the next segment's
// first, or no bound for the last one.
func (l Lineage) end(i int) int64 {
	if i+1 < len(l) {
		return l[i+1].From - 1
	}
	return math.MaxInt64
}

// index is the segment of l named seg, -1 if none.
func (l Lineage) index(seg Segment) int {
	for i, s := range l {
		if s == seg {
			return i
		}
	}
	return -1
}

// Agreed is how far a store whose lineage is now agrees with the history a
// peer saw through rev, when the peer recorded the store's lineage as was
// (at or after the last rev it saw of the store): the revs through the
// result are the ones the peer saw. It is rev when the store still has
// that history, less when it was restored behind it.
//
// A segment is drawn once, at one opening, so two histories that both hold
// it agree up to it; within it they agree through the earlier of its two
// ends, since a restored store opens a new segment at the rev it was
// restored to. Agreed walks back from the segment holding rev to the last
// segment both lineages hold; it is 0 when they hold none in common (the
// peer saw another history from the start, or one the store has trimmed).
func Agreed(was, now Lineage, rev int64) int64 {
	i := len(was) - 1
	for i >= 0 && was[i].From > rev {
		i--
	}
	for ; i >= 0; i-- {
		j := now.index(was[i])
		if j < 0 {
			continue
		}
		return min(rev, was.end(i), now.end(j))
	}
	return 0
}

// Lineage is the store's lineage as of its opening.
func (s *Store) Lineage() Lineage { return s.lineage }

// beginSegment starts the segment of this opening at the rev after the
// store's, replacing a segment of an opening that stamped no rev, and
// drops what lies beyond the last MaxLineage segments.
func (s *Store) beginSegment(ctx context.Context) error {
	var b [8]byte
	var id int64
	for id == 0 {
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("begin segment: %w", err)
		}
		id = int64(binary.LittleEndian.Uint64(b[:]) >> 1)
	}
	var l Lineage
	err := s.update(ctx, func(t *wtx) error {
		if _, err := t.exec(`INSERT OR REPLACE INTO lineage(from_rev, id) VALUES(?, ?)`, s.rev.Load()+1, id); err != nil {
			return err
		}
		if _, err := t.exec(`DELETE FROM lineage WHERE from_rev <= (SELECT from_rev FROM lineage ORDER BY from_rev DESC LIMIT 1 OFFSET ?)`, MaxLineage); err != nil {
			return err
		}
		rows, err := t.tx.QueryContext(t.ctx, `SELECT from_rev, id FROM lineage ORDER BY from_rev`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seg Segment
			if err := rows.Scan(&seg.From, &seg.ID); err != nil {
				return err
			}
			l = append(l, seg)
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("begin segment: %w", err)
	}
	s.lineage = l
	return nil
}

// appendLineage encodes l for the watermarks row: a uvarint count, then
// each segment's From and ID as uvarints.
func appendLineage(b []byte, l Lineage) []byte {
	if len(l) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(l)))
	for _, s := range l {
		b = binary.AppendUvarint(b, uint64(s.From))
		b = binary.AppendUvarint(b, uint64(s.ID))
	}
	return b
}

// decodeLineage decodes what appendLineage wrote; nil or empty is none.
func decodeLineage(b []byte) (Lineage, error) {
	if len(b) == 0 {
		return nil, nil
	}
	bad := fmt.Errorf("corrupt lineage record of %d bytes", len(b))
	n, k := binary.Uvarint(b)
	if k <= 0 || n > MaxLineage {
		return nil, bad
	}
	b = b[k:]
	l := make(Lineage, 0, n)
	for range n {
		from, k := binary.Uvarint(b)
		if k <= 0 || from > 1<<62 {
			return nil, bad
		}
		b = b[k:]
		id, k := binary.Uvarint(b)
		if k <= 0 || id > math.MaxInt64 {
			return nil, bad
		}
		b = b[k:]
		l = append(l, Segment{From: int64(from), ID: int64(id)})
	}
	if len(b) != 0 || l.Valid() != nil {
		return nil, bad
	}
	return l, nil
}

// Met is what MeetPeer found.
type Met struct {
	// Store: the peer is another store than the one recorded under its
	// name. Restored: the same store, restored behind what our fetch
	// cursor covers of it.
	Store, Restored bool
	// Fetch is the fetch cursor after the meeting.
	Fetch watermark.Cursor
}

// MeetPeer records id, with its lineage lin, as the store behind peer, as
// its sessions announce it (a peer's name outlives its store: a replaced
// or pooled container keeps the runtime's name).
//
// When the store recorded is another one, what is kept under the name
// describes that other store's feed and what it held: the fetch cursor
// and the bounce run go back to the start of the new store's feed and the
// merge bases go, in one transaction, so the next push fences every
// change of the new store and the next pull fetches them all (the push
// cursor is reconciled against what the new store says it holds of ours).
//
// When it is the same store but its lineage shows it restored behind our
// fetch cursor (Agreed against the lineage recorded at the last meeting),
// the revs past the restore were stamped again by another history: the
// fetch cursor goes back to the last rev both histories hold, and the
// bounce run and the merge bases go as above. A lineage of nil (a peer
// that does not announce one, or a caller that does not know it) is not
// checked; a store met for the first time, or whose id or lineage was
// never recorded, is recorded as it is.
func (s *Store) MeetPeer(ctx context.Context, peer, id string, lin Lineage) (Met, error) {
	if id == "" {
		return Met{}, fmt.Errorf("meet peer %q: %w: no store id", peer, ErrInvalid)
	}
	if err := lin.Valid(); err != nil {
		return Met{}, fmt.Errorf("meet peer %q: %w", peer, err)
	}
	enc := appendLineage(nil, lin)
	zero, err := watermark.Cursor{}.AppendBinary(nil)
	if err != nil {
		return Met{}, err
	}
	var met Met
	// The common meeting, the same store and lineage as recorded, writes
	// nothing.
	var prevID string
	var prevLin, fetch []byte
	err = s.committed().QueryRowContext(ctx, `SELECT peer_store, peer_lineage, fetch FROM watermarks WHERE peer = ?`, peer).Scan(&prevID, &prevLin, &fetch)
	if err == nil && prevID == id && (lin == nil || string(prevLin) == string(enc)) {
		if met.Fetch, _, err = watermark.DecodeCursor(fetch); err != nil {
			return Met{}, fmt.Errorf("meet peer %q: %w", peer, err)
		}
		return met, nil
	}
	err = s.update(ctx, func(t *wtx) error {
		var prevID string
		var prevLin, fetch []byte
		err := t.tx.QueryRowContext(t.ctx, `SELECT peer_store, peer_lineage, fetch FROM watermarks WHERE peer = ?`, peer).Scan(&prevID, &prevLin, &fetch)
		if errors.Is(err, sql.ErrNoRows) {
			_, err = t.exec(`INSERT INTO watermarks(peer, push, fetch, applied_push, peer_store, peer_lineage) VALUES(?, ?, ?, ?, ?, ?)`, peer, zero, zero, zero, id, enc)
			return err
		}
		if err != nil {
			return err
		}
		if met.Fetch, _, err = watermark.DecodeCursor(fetch); err != nil {
			return err
		}
		if prevID != "" && prevID != id {
			met.Store, met.Fetch = true, watermark.Cursor{}
		} else if was, err := decodeLineage(prevLin); err != nil {
			return err
		} else if len(was) > 0 && len(lin) > 0 && met.Fetch.Rev > 0 {
			if agreed := Agreed(was, lin, met.Fetch.Rev); agreed < met.Fetch.Rev {
				met.Restored, met.Fetch = true, watermark.At(agreed)
			}
		}
		if !met.Store && !met.Restored {
			if prevID == id && (lin == nil || string(prevLin) == string(enc)) {
				return nil
			}
			if lin == nil {
				enc = prevLin
			}
			_, err = t.exec(`UPDATE watermarks SET peer_store = ?, peer_lineage = ? WHERE peer = ?`, id, enc, peer)
			return err
		}
		at, err := met.Fetch.AppendBinary(nil)
		if err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE watermarks SET peer_store = ?, peer_lineage = ?, fetch = ?, bounce_from = 0, bounce_to = 0 WHERE peer = ?`, id, enc, at, peer); err != nil {
			return err
		}
		return t.forgetBases(peer)
	})
	if err != nil {
		return Met{}, fmt.Errorf("meet peer %q: %w", peer, err)
	}
	return met, nil
}
