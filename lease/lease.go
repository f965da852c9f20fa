// Package lease gives a server exclusive ownership of a name for a while,
// through one object in an S3-compatible store and its conditional writes:
// exactly one of several servers racing for a free or expired lease wins
// (If-None-Match: * on the first write, If-Match: etag on every later one),
// and the holder renews it before it runs out.
//
// # Time
//
// A lease record carries the holder's wall-clock expiry, which other
// servers compare with their own clocks: they treat it as expired only
// MaxSkew after that, so clocks that disagree by less than MaxSkew cannot
// make two holders. The holder itself never trusts a wall clock: it counts
// its lease valid until the monotonic instant it sent the write that
// granted or renewed it, plus the TTL, minus a tenth of the TTL; a process
// that was stopped (SIGSTOP, a VM pause) past that instant finds its lease
// lost the moment it runs again, before it writes anything (Valid).
//
// # Generations
//
// Each acquisition after another holder (or after expiry) increments the
// record's generation; renewals keep it. A holder tags what it writes with
// its generation (the replica of a workspace's database goes under a
// prefix per generation), so a holder that lost its lease and did not yet
// notice writes only where no later holder reads.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wsync/wsync/objstore"
)

// ErrLost: the lease ran out or another server took it.
var ErrLost = errors.New("lease lost")

// MaxSkew is how much two servers' clocks may disagree.
const MaxSkew = 2 * time.Second

// Record is the lease object's body.
type Record struct {
	Owner      string    `json:"owner"`   // the holder's server id
	Address    string    `json:"address"` // where the holder serves (its advertised URL)
	Generation int64     `json:"generation"`
	Expires    time.Time `json:"expires"` // the holder's wall clock
	Released   bool      `json:"released,omitempty"`
}

// Free reports whether another server may take the lease at now.
func (r Record) Free(now time.Time) bool {
	return r.Released || now.After(r.Expires.Add(MaxSkew))
}

// HeldError says who holds a lease this server could not take.
type HeldError struct{ Record Record }

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease held by %s (%s) until %s", e.Record.Owner, e.Record.Address, e.Record.Expires.Format(time.RFC3339))
}

// Read returns the lease record under key and its ETag.
func Read(ctx context.Context, st *objstore.Store, key string) (Record, string, error) {
	b, o, err := st.Get(ctx, key)
	if err != nil {
		return Record{}, "", err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, "", fmt.Errorf("lease %s: %w: %v", key, objstore.ErrInvalid, err)
	}
	return r, o.ETag, nil
}

// Lease is a held lease.
type Lease struct {
	st  *objstore.Store
	key string
	ttl time.Duration

	mu       sync.Mutex
	rec      Record
	etag     string
	deadline time.Time // monotonic: valid before it
	lost     bool
}

// Acquire takes the lease under key for owner, if it is free, missing, or
// already owner's (a restarted server takes its own lease back at once,
// with a new generation). Otherwise it returns a *HeldError.
func Acquire(ctx context.Context, st *objstore.Store, key, owner, address string, ttl time.Duration) (*Lease, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("lease %s: %w: ttl %v", key, objstore.ErrInvalid, ttl)
	}
	cur, etag, err := Read(ctx, st, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		etag = ""
	case err != nil:
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	case cur.Owner != owner && !cur.Free(time.Now()):
		return nil, &HeldError{Record: cur}
	}
	l := &Lease{st: st, key: key, ttl: ttl}
	rec := Record{Owner: owner, Address: address, Generation: cur.Generation + 1}
	if err := l.write(ctx, rec, etag); err != nil {
		if errors.Is(err, objstore.ErrPrecondition) {
			// Another server won the race: say who.
			if r, _, rerr := Read(ctx, st, key); rerr == nil {
				return nil, &HeldError{Record: r}
			}
		}
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	return l, nil
}

// write stores rec (its expiry set from now) conditionally on etag ("" for
// absent) and, on success, moves the deadline.
func (l *Lease) write(ctx context.Context, rec Record, etag string) error {
	start := time.Now() // monotonic reading: the deadline counts from before the request
	rec.Expires = start.Add(l.ttl).UTC().Round(time.Millisecond)
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	var tag string
	if etag == "" {
		tag, err = l.st.PutIfAbsent(ctx, l.key, b)
	} else {
		tag, err = l.st.PutIfMatch(ctx, l.key, b, etag)
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rec, l.etag = rec, tag
	l.deadline = start.Add(l.ttl - l.ttl/10)
	return nil
}

// Record is the lease as last written.
func (l *Lease) Record() Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec
}

// Generation is the holder's generation.
func (l *Lease) Generation() int64 { return l.Record().Generation }

// Valid is nil while the lease is held by this process's monotonic clock;
// ErrLost once it ran out or a renewal found it taken.
func (l *Lease) Valid() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || !time.Now().Before(l.deadline) {
		l.lost = true
		return fmt.Errorf("%w: %s (generation %d)", ErrLost, l.key, l.rec.Generation)
	}
	return nil
}

// Renew extends the lease by its TTL. A lease that ran out or was taken
// stays lost: its holder must Acquire again (a new generation).
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Valid(); err != nil {
		return err
	}
	l.mu.Lock()
	rec, etag := l.rec, l.etag
	l.mu.Unlock()
	err := l.write(ctx, rec, etag)
	if errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound) {
		l.mu.Lock()
		l.lost = true
		l.mu.Unlock()
		return fmt.Errorf("%w: %s was taken", ErrLost, l.key)
	}
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	return nil
}

// Release gives the lease up so another server may take it at once. The
// holder must have stopped writing first.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.Valid(); err != nil {
		return err
	}
	l.mu.Lock()
	rec, etag := l.rec, l.etag
	l.mu.Unlock()
	rec.Released = true
	err := l.write(ctx, rec, etag)
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// Keep renews the lease every TTL/3 until ctx ends or the lease is lost,
// then calls lost (once, unless ctx ended first) and returns. A failed
// renewal is retried until the deadline passes.
func (l *Lease) Keep(ctx context.Context, lost func(error)) {
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, l.ttl/3)
		err := l.Renew(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue
		}
		if verr := l.Valid(); verr != nil {
			if errors.Is(err, ErrLost) {
				lost(err)
			} else {
				lost(fmt.Errorf("%w: %v", verr, err))
			}
			return
		}
	}
}
