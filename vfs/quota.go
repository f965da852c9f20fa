package vfs

import (
	"context"
	"errors"
	"fmt"

	"github.com/wsync/wsync/chunkstore"
)

// Quotas and usage.
//
// A store counts its usage in two counters kept in the meta table
// (usage_bytes, usage_entries), moved in the same transaction as every
// mutation that changes them, so knowing the usage costs nothing and a
// crash cannot make the counters disagree with the rows:
//
//   - Bytes is the sum of the logical sizes of the file nodes (st_size),
//     holes included, each node once however many names it has. Not the
//     stored chunks: a write's effect on it is known from its offset and
//     length alone, before any byte is hashed (a chunk that turns out to be
//     all zeros becomes a hole only at commit), so the write that crosses
//     the quota is the one refused, and the server can check a pulled
//     entry from its size without fetching a chunk. The price: a sparse
//     file counts its holes (truncate -s 1T is refused under a 10 GiB
//     quota), and chunks shared by several files count once per file, as
//     with any per-file quota.
//   - Entries is the number of nodes (files, directories, symlinks, special
//     files), the root not included; a hardlink is one entry.
//
// A node unlinked while open counts until its last release, as on a local
// file system.
//
// A Quota (SetQuota) bounds the bytes, the entries and the size of any one
// file; the zero value of a field is no bound. It is enforced on local
// mutations (the mount's, the path API's) and on Apply batches that ask
// for it (ApplyOptions.Quota: the server's pulls), never on other applies
// (a push from the server to its container, a snapshot install): the
// authoritative side decided those already. The rule, in one place
// (checkQuota): a mutation that grows a counter past its bound, or a file
// past the largest size, fails with a *QuotaError and changes nothing.
// One that does not grow them always succeeds, so a quota lowered below
// the usage keeps every byte already stored, lets deletes and in-place
// rewrites through and refuses what would add more.
//
// Writes through a Handle are buffered until their commit, so they
// reserve the growth they make (what the file's buffered size exceeds its
// committed size) when they make it: a WriteAt, Truncate or Allocate that
// would take the usage plus every open file's reservation past the bound
// fails whole (nothing of it is written) with the *QuotaError, and a
// commit counts the other files' reservations but not its own. So
// concurrent writers racing for the last bytes never overshoot the quota:
// the reservations and the check are one step under Store.resMu.

// Bounds a Quota's fields may take: larger is refused (ErrInvalid), as a
// typo rather than a wish for no bound (which is 0).
const (
	MaxQuotaBytes   = 1 << 60 // 1 EiB
	MaxQuotaEntries = 1 << 40
)

// Quota bounds a store's usage. Zero fields are unbounded.
type Quota struct {
	MaxBytes    int64 `json:"max_bytes,omitempty"`
	MaxEntries  int64 `json:"max_entries,omitempty"`
	MaxFileSize int64 `json:"max_file_size,omitempty"`
}

// IsZero reports whether q bounds nothing.
func (q Quota) IsZero() bool { return q == Quota{} }

// Validate checks q's fields: none negative, bytes and entries at most
// MaxQuotaBytes and MaxQuotaEntries, a file size at most
// chunkstore.MaxFileSize.
func (q Quota) Validate() error {
	check := func(name string, v, max int64) error {
		switch {
		case v < 0:
			return fmt.Errorf("%w: quota %s %d is negative (0 means no limit)", ErrInvalid, name, v)
		case v > max:
			return fmt.Errorf("%w: quota %s %d is larger than %d", ErrInvalid, name, v, max)
		}
		return nil
	}
	if err := check("max bytes", q.MaxBytes, MaxQuotaBytes); err != nil {
		return err
	}
	if err := check("max entries", q.MaxEntries, MaxQuotaEntries); err != nil {
		return err
	}
	return check("max file size", q.MaxFileSize, chunkstore.MaxFileSize)
}

// Usage is what a store holds, as the quota counts it.
type Usage struct {
	Bytes   int64 `json:"bytes"`
	Entries int64 `json:"entries"`
}

func (u Usage) add(d Usage) Usage { return Usage{u.Bytes + d.Bytes, u.Entries + d.Entries} }

// The limits a QuotaError names.
const (
	LimitBytes    = "bytes"
	LimitEntries  = "entries"
	LimitFileSize = "file size"
)

// QuotaError is an operation refused by the store's quota. It is
// ErrQuota (EDQUOT) for the bytes and entries, and both ErrQuota and
// ErrFileTooBig (EFBIG, as the kernel answers a write past RLIMIT_FSIZE)
// for the file size.
type QuotaError struct {
	Limit string // LimitBytes, LimitEntries or LimitFileSize
	Max   int64  // the bound
	// Used is the usage before the operation (for LimitFileSize, 0), Need
	// what it would add (for LimitFileSize, the size the file would have).
	Used, Need int64
}

func (e *QuotaError) Error() string {
	switch e.Limit {
	case LimitFileSize:
		return fmt.Sprintf("%v: a file of %d bytes is over the workspace's max file size of %d", ErrQuota, e.Need, e.Max)
	case LimitEntries:
		return fmt.Sprintf("%v: %d entries + %d would be over the workspace's max entries of %d", ErrQuota, e.Used, e.Need, e.Max)
	}
	return fmt.Sprintf("%v: %d bytes + %d would be over the workspace's max bytes of %d", ErrQuota, e.Used, e.Need, e.Max)
}

func (e *QuotaError) Unwrap() []error {
	if e.Limit == LimitFileSize {
		return []error{ErrFileTooBig, ErrQuota}
	}
	return []error{ErrQuota}
}

// SetQuota replaces the store's quota (validated). It holds from the next
// mutation on; nothing stored is removed when it is lowered.
func (s *Store) SetQuota(q Quota) error {
	if err := q.Validate(); err != nil {
		return err
	}
	s.quota.Store(&q)
	return nil
}

// Quota is the store's quota (the zero Quota when none was set).
func (s *Store) Quota() Quota {
	if q := s.quota.Load(); q != nil {
		return *q
	}
	return Quota{}
}

// Usage is the store's usage: every answered mutation, committed or in the
// open group. It reads two counters.
func (s *Store) Usage() Usage {
	if s.queuedN.Load() > 0 {
		// Mutations answered from memory count when they run.
		s.lockW()
		s.wmu.Unlock()
	}
	return s.live()
}

// live is the usage every answered mutation left. Changed under wmu.
func (s *Store) live() Usage {
	return Usage{Bytes: s.useBytes.Load(), Entries: s.useEntries.Load()}
}

// addLive moves the usage by d and hands back released bytes of
// reservations, in one step under resMu: a commit's growth moves from its
// file's reservation to the usage without a moment where a check counts
// it twice (refusing a write, or another file's commit, that fits) or not
// at all. Called with wmu held.
func (s *Store) addLive(d Usage, released int64) {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	s.useBytes.Add(d.Bytes)
	s.useEntries.Add(d.Entries)
	s.reserved -= released
}

// overQuota is the quota rule: a change d to the usage base, making a file
// grow to grown bytes (0: none grew), is refused when it grows a counter
// past its bound. reserved is the open files' buffered growth not
// already in d.
func overQuota(q *Quota, base, d Usage, grown, reserved int64) error {
	if q == nil {
		return nil
	}
	if q.MaxFileSize > 0 && grown > q.MaxFileSize {
		return refuse(&QuotaError{Limit: LimitFileSize, Max: q.MaxFileSize, Need: grown})
	}
	if q.MaxEntries > 0 && d.Entries > 0 && base.Entries+d.Entries > q.MaxEntries {
		return refuse(&QuotaError{Limit: LimitEntries, Max: q.MaxEntries, Used: base.Entries, Need: d.Entries})
	}
	if q.MaxBytes > 0 && d.Bytes > 0 && base.Bytes+reserved+d.Bytes > q.MaxBytes {
		return refuse(&QuotaError{Limit: LimitBytes, Max: q.MaxBytes, Used: base.Bytes + reserved, Need: d.Bytes})
	}
	return nil
}

// refuse counts a refusal by the quota and returns it.
func refuse(e *QuotaError) error {
	metricQuotaRefusals.WithLabelValues(e.Limit).Inc()
	return e
}

// checkQuota applies the rule to the mutation t made, before it is
// merged or committed. Called with wmu held.
func (t *wtx) checkQuota() error {
	q := t.s.quota.Load()
	if q == nil || t.unlimited {
		return nil
	}
	t.s.resMu.Lock()
	reserved := t.s.reserved - t.own
	t.s.resMu.Unlock()
	return overQuota(q, t.s.live(), t.use, t.grown, reserved)
}

// useNode counts a new node (a file of size bytes) in the mutation's usage.
func (t *wtx) useNode(k Kind, size int64) {
	t.use.Entries++
	if k == KindFile {
		t.useFile(0, size)
	}
}

// useFile counts a file's size changing from old to size.
func (t *wtx) useFile(old, size int64) {
	t.use.Bytes += size - old
	if size > old {
		t.grown = max(t.grown, size)
	}
}

// flushUsage moves the persisted counters by the transaction's usage.
func (t *wtx) flushUsage() error {
	if t.use == (Usage{}) {
		return nil
	}
	_, err := t.exec(`UPDATE meta SET value = value + CASE key WHEN 'usage_bytes' THEN ? ELSE ? END
		WHERE key IN ('usage_bytes', 'usage_entries')`, t.use.Bytes, t.use.Entries)
	return err
}

// loadUsage reads the persisted counters (Open).
func (s *Store) loadUsage(ctx context.Context) error {
	var b, e int64
	err := s.w.QueryRowContext(ctx, `SELECT (SELECT value FROM meta WHERE key = 'usage_bytes'), (SELECT value FROM meta WHERE key = 'usage_entries')`).Scan(&b, &e)
	if err != nil {
		return fmt.Errorf("read usage: %w", err)
	}
	s.useBytes.Store(b)
	s.useEntries.Store(e)
	return nil
}

// settled is the part of f's reservation a commit that reserved own has
// moved to the usage (addLive). Called with f.mu held.
func (f *openFile) settled(own int64) { f.charged -= own }

// reserve makes f's reservation cover a buffered size of size bytes,
// refusing (with nothing changed) a growth the quota has no room for.
// Called with f.mu held.
func (f *openFile) reserve(size int64) error {
	s := f.s
	q := s.quota.Load()
	if q != nil && q.MaxFileSize > 0 && size > q.MaxFileSize && size > f.size {
		return refuse(&QuotaError{Limit: LimitFileSize, Max: q.MaxFileSize, Need: size})
	}
	want := max(0, size-f.baseSize)
	s.resMu.Lock()
	defer s.resMu.Unlock()
	if grow := want - f.charged; grow > 0 && q != nil {
		if err := overQuota(q, s.live(), Usage{Bytes: grow}, 0, s.reserved); err != nil {
			return err
		}
	}
	s.reserved += want - f.charged
	f.charged = want
	return nil
}

// recharge sets f's reservation to what its buffered size exceeds its
// committed size by, refusing nothing (after a commit or a reload, which
// only lower it). Called with f.mu held.
func (f *openFile) recharge() {
	want := int64(0)
	if !f.released {
		want = max(0, f.size-f.baseSize)
	}
	f.s.resMu.Lock()
	f.s.reserved += want - f.charged
	f.charged = want
	f.s.resMu.Unlock()
}

// streamCheck returns the check a file written at path by the path API
// makes as its bytes arrive, so an upload past the quota is refused early
// (its commit checks exactly): the max file size, and the room left under
// the max bytes plus what the file at path holds now.
func (s *Store) streamCheck(ctx context.Context, path string) func(total int64) error {
	q := s.quota.Load()
	if q == nil || q.MaxFileSize == 0 && q.MaxBytes == 0 {
		return nil
	}
	var old int64
	if q.MaxBytes > 0 {
		if a, err := s.Stat(ctx, path); err == nil && a.Kind == KindFile {
			old = a.Size
		}
	}
	return func(total int64) error {
		if q.MaxFileSize > 0 && total > q.MaxFileSize {
			return refuse(&QuotaError{Limit: LimitFileSize, Max: q.MaxFileSize, Need: total})
		}
		if total <= old {
			return nil
		}
		s.resMu.Lock()
		defer s.resMu.Unlock()
		return overQuota(q, s.live(), Usage{Bytes: total - old}, 0, s.reserved)
	}
}

// Admit is the quota rule for a batch about to be fetched and applied
// (a pull, ApplyOptions.Quota): it returns what applying entries would
// change in the usage, read from the paths' current state (parents the
// apply would create and subtrees it would replace are not counted), and
// refuses with a *QuotaError a batch that grows a counter past the quota
// from the usage it applies onto: from, the usage after the batches
// admitted before it (the caller adds each admitted batch's change; the
// first batch's from is Usage), or the store's usage when that is larger
// (local writes since). The batches of one feed name distinct paths, so
// each one's change does not depend on the others being applied. The
// apply checks the exact usage again in its transaction; Admit spares the
// fetch of a batch that would fail it. Without a quota it reads nothing.
func (s *Store) Admit(ctx context.Context, entries []ChangeEntry, from Usage) (Usage, error) {
	var d Usage
	q := s.quota.Load()
	if q == nil || q.IsZero() {
		return d, nil
	}
	var grown int64
	rq := s.committed()
	for i := range entries {
		e := &entries[i]
		cur, err := resolve(ctx, rq, e.Path)
		exists := err == nil && !cur.kind.Special()
		if err != nil && !errors.Is(err, ErrNotExist) && !errors.Is(err, ErrNotDir) {
			return Usage{}, fmt.Errorf("admit %q: %w", e.Path, err)
		}
		var old int64
		if exists && cur.kind == KindFile {
			old = cur.size
		}
		switch {
		case e.Kind == EntryDelete:
			if exists {
				d.Entries--
				d.Bytes -= old
			}
			continue
		case !exists:
			d.Entries++
		}
		if e.Kind == EntryFile {
			d.Bytes += e.Size - old
			if e.Size > old {
				grown = max(grown, e.Size)
			}
		} else {
			d.Bytes -= old
		}
	}
	s.resMu.Lock()
	defer s.resMu.Unlock()
	live := s.live()
	base := Usage{Bytes: max(live.Bytes, from.Bytes), Entries: max(live.Entries, from.Entries)}
	return d, overQuota(q, base, d, grown, s.reserved)
}
