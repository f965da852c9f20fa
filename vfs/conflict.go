package vfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wsync/wsync/chunkstore"
)

// Conflicts (docs/ARCHITECTURE.md, "Conflicts").
//
// A store that syncs with peers keeps, per peer and path, the merge base:
// the state of the path the two last agreed on (a row of the bases table,
// written in the transaction that applied or acknowledged the entry). When
// a peer's entry arrives, Apply compares three states: the base, the
// store's current state and the incoming one. Only the peer changed the
// path: the entry applies. Only this store did: its version stays (and goes
// to the peer on the next push). Both changed it to the same state: nothing
// to do. Both changed it differently: a conflict, resolved by the policy and
// recorded in the conflicts table, in the same transaction.
//
// Where a path has no base row (a store older than the bases table, or a
// peer re-baselined by a snapshot), the base is inferred from the
// watermarks: a path whose last rev the peer has (the push cursor covers
// it, or it is in the peer's bounce run) has the store's state as base;
// any other has none (absent).

// ConflictPolicy says how a conflict is resolved.
type ConflictPolicy string

// The policies.
const (
	// KeepBoth (the default): the server's version keeps the name; the
	// other is written beside it as NAME.conflict-SIDE-YYYYMMDD-HHMMSS.EXT.
	// Modify beats delete. When one side is a directory and the other not,
	// the directory keeps the name and the other version goes beside it.
	KeepBoth ConflictPolicy = "keep-both"
	// ServerWins and ContainerWins keep only the named side's version and
	// still record the conflict.
	ServerWins    ConflictPolicy = "server-wins"
	ContainerWins ConflictPolicy = "container-wins"
)

// ParseConflictPolicy parses a policy name; "" is KeepBoth.
func ParseConflictPolicy(s string) (ConflictPolicy, error) {
	switch p := ConflictPolicy(s); p {
	case "":
		return KeepBoth, nil
	case KeepBoth, ServerWins, ContainerWins:
		return p, nil
	}
	return "", fmt.Errorf("%w: conflict policy %q (want keep-both, server-wins or container-wins)", ErrInvalid, s)
}

// Conflict sides, as copy names and resolutions name them.
const (
	SideServer    = "server"
	SideContainer = "container"
)

// ConflictOptions turns on conflict detection for an Apply of a sync
// peer's entries (needs Peer, Watermarks and Bounce): the store is the
// server, the peer a container.
type ConflictOptions struct {
	Policy ConflictPolicy // "" is KeepBoth
	// Side names the peer in conflict copies' names ("container", or the
	// runtime's name); empty is SideContainer.
	Side string
	// Now is the clock of conflict times and copy names (nil: time.Now).
	Now func() time.Time
}

// Conflict kinds.
const (
	// ConflictModified: both sides changed the path, to different contents.
	ConflictModified = "both-modified"
	// ConflictType: the two versions are of different types.
	ConflictType = "type"
	// ConflictServerDeleted: the server deleted what the container changed.
	ConflictServerDeleted = "server-deleted"
	// ConflictContainerDeleted: the container deleted what the server changed.
	ConflictContainerDeleted = "container-deleted"
)

// PathState is one side's state of a path in a conflict record.
type PathState struct {
	Type   string `json:"type"` // "file", "dir", "symlink" or "absent"
	Mode   uint32 `json:"mode,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Digest string `json:"digest,omitempty"` // files: sha256 of the chunk list (hex)
	Target string `json:"target,omitempty"`
	Rev    int64  `json:"rev,omitempty"` // the side's rev that last touched the path
}

// Conflict is one recorded conflict.
type Conflict struct {
	ID     int64
	Path   string // store form
	Peer   string // the store's name for the peer
	Side   string // the peer's side name (ConflictOptions.Side)
	At     time.Time
	Policy ConflictPolicy
	Kind   string // ConflictModified, ...
	// Server is this store's version, Container the peer's.
	Server, Container PathState
	// Copy is where the version that lost the name went (store form; ""
	// when none was kept), and CopySide whose version it is.
	Copy, CopySide string
	// Resolved is when `conflicts resolve` settled it (zero: open), and
	// Resolution what it kept ("server", "container" or "both").
	Resolved   time.Time
	Resolution string
}

// state is a path's state as conflict detection compares it. key is nil
// for an absent path; otherwise the kind, then for files the mode and the
// manifest's sha256, for symlinks the target's sha256. Directories compare
// by kind only: their children merge path by path.
type state struct {
	kind   EntryKind // EntryDelete when absent
	mode   uint32
	size   int64
	digest [32]byte
	target string
}

var absent = state{kind: EntryDelete}

func (s state) key() []byte {
	switch s.kind {
	case EntryFile:
		b := []byte{byte(EntryFile)}
		b = binary.BigEndian.AppendUint32(b, s.mode)
		return append(b, s.digest[:]...)
	case EntrySymlink:
		return append([]byte{byte(EntrySymlink)}, s.digest[:]...)
	case EntryDir:
		return []byte{byte(EntryDir)}
	}
	return nil
}

// sameContent: the same kind and bytes, whatever the modes.
func (s state) sameContent(o state) bool { return s.kind == o.kind && s.digest == o.digest }

func (s state) isDir() bool { return s.kind == EntryDir }

func entryState(e *ChangeEntry) state {
	s := state{kind: e.Kind, mode: e.Mode}
	switch e.Kind {
	case EntryFile:
		s.size = e.Size
		s.digest = sha256.Sum256(chunkstore.AppendManifest(nil, e.Chunks))
	case EntrySymlink:
		s.target = e.Target
		s.digest = sha256.Sum256([]byte(e.Target))
	case EntryDir:
	default:
		return absent
	}
	return s
}

func nodeState(n *node) state {
	switch n.kind {
	case KindFile:
		return state{kind: EntryFile, mode: n.mode, size: n.size, digest: sha256.Sum256(n.manifest)}
	case KindSymlink:
		return state{kind: EntrySymlink, mode: n.mode, target: n.target, digest: sha256.Sum256([]byte(n.target))}
	case KindDir:
		return state{kind: EntryDir, mode: n.mode}
	}
	return absent // special files read as absent
}

func (s state) public(rev int64) PathState {
	p := PathState{Type: "absent"}
	switch s.kind {
	case EntryFile:
		p = PathState{Type: "file", Mode: s.mode, Size: s.size, Digest: hex.EncodeToString(s.digest[:])}
	case EntrySymlink:
		p = PathState{Type: "symlink", Target: s.target}
	case EntryDir:
		p = PathState{Type: "dir", Mode: s.mode}
	}
	p.Rev = rev
	return p
}

// verdict is what detection decides for one incoming entry.
type verdict uint8

const (
	takeTheirs verdict = iota + 1 // only the peer changed the path: apply
	same                          // both hold the same state: nothing to do
	keepOurs                      // only this store changed it: keep ours
	conflicted                    // both changed it, differently
)

// decide is the detection rule over the keys of the base, this store's
// current state and the incoming one (state.key; nil is absent).
func decide(base, cur, in []byte) verdict {
	switch {
	case bytes.Equal(in, cur):
		return same
	case bytes.Equal(in, base):
		return keepOurs
	case bytes.Equal(cur, base):
		return takeTheirs
	}
	return conflicted
}

// conflictKind names a conflict between our state cur and their state in.
func conflictKind(cur, in state) string {
	switch {
	case cur.kind == EntryDelete:
		return ConflictServerDeleted
	case in.kind == EntryDelete:
		return ConflictContainerDeleted
	case cur.kind != in.kind:
		return ConflictType
	}
	return ConflictModified
}

// maxCopyTries bounds the names tried for one conflict copy.
const maxCopyTries = 100

// ConflictCopyName is the name a conflict copy of path gets: the side and
// the time before the extension, "PLAN.md" -> "PLAN.conflict-container-
// 20261202-051500.md", with "-N" after the time for the Nth try (n > 1).
// A name that would be too long loses the end of its stem.
func ConflictCopyName(path, side string, at time.Time, n int) string {
	dir, name := splitPath(path)
	ext := ""
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		ext = name[i:]
	}
	if len(ext) > 32 {
		ext = ""
	}
	stem := name[:len(name)-len(ext)]
	tag := ".conflict-" + side + "-" + at.UTC().Format("20060102-150405")
	if n > 1 {
		tag += fmt.Sprintf("-%d", n)
	}
	if over := len(stem) + len(tag) + len(ext) - MaxNameLen; over > 0 {
		keep := max(len(stem)-over, 1)
		for keep > 1 && !utf8.RuneStart(stem[keep]) {
			keep-- // never cut a character in two
		}
		stem = stem[:keep]
	}
	return joinPath(dir, stem+tag+ext)
}

// Conflicts lists the newest recorded conflicts, newest first, at most
// limit of them (0: every one): the open ones only when open is set.
func (s *Store) Conflicts(ctx context.Context, open bool, limit int) ([]Conflict, error) {
	where := `1`
	if open {
		where = `resolved = 0`
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	out, err := s.conflicts(ctx, where+` ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("conflicts: %w", err)
	}
	return out, nil
}

// Conflict returns one conflict record (ErrNotExist when none has the id).
func (s *Store) Conflict(ctx context.Context, id int64) (Conflict, error) {
	out, err := s.conflicts(ctx, `id = ?`, id)
	if err == nil && len(out) == 0 {
		err = ErrNotExist
	}
	if err != nil {
		return Conflict{}, fmt.Errorf("conflict %d: %w", id, err)
	}
	return out[0], nil
}

// OpenConflictAt returns the newest open conflict recorded at path (store
// form); ErrNotExist when there is none.
func (s *Store) OpenConflictAt(ctx context.Context, path string) (Conflict, error) {
	out, err := s.conflicts(ctx, `path = ? AND resolved = 0 ORDER BY id DESC LIMIT 1`, path)
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("%w: no open conflict at that path", ErrNotExist)
	}
	if err != nil {
		return Conflict{}, fmt.Errorf("conflict at %q: %w", path, err)
	}
	return out[0], nil
}

// conflicts reads the records a WHERE clause (with its ORDER BY and LIMIT)
// selects.
func (s *Store) conflicts(ctx context.Context, where string, args ...any) ([]Conflict, error) {
	rows, err := s.committed().QueryContext(ctx, `SELECT id, path, peer, side, at, policy, kind, server, container, copy, copy_side,
		resolved, resolution FROM conflicts WHERE `+where, args...)
	if err != nil {
		return nil, err
	}
	return scanRows(rows, scanConflict)
}

// OpenConflicts counts the conflicts not yet resolved.
func (s *Store) OpenConflicts(ctx context.Context) (int, error) {
	var n int
	if err := s.committed().QueryRowContext(ctx, `SELECT count(*) FROM conflicts WHERE resolved = 0`).Scan(&n); err != nil {
		return 0, fmt.Errorf("conflicts: %w", err)
	}
	return n, nil
}

// MarkResolved records that the open conflict id was settled keeping
// resolution ("server", "container" or "both"). A settled one is
// ErrNotExist.
func (s *Store) MarkResolved(ctx context.Context, id int64, resolution string) error {
	return s.update(ctx, func(t *wtx) error {
		res, err := t.exec(`UPDATE conflicts SET resolved = ?, resolution = ? WHERE id = ? AND resolved = 0`, t.now, resolution, id)
		if err != nil {
			return fmt.Errorf("resolve conflict %d: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("resolve conflict %d: %w: no open conflict with that id", id, ErrNotExist)
		}
		return nil
	})
}

func scanConflict(r *sql.Rows, c *Conflict) error {
	var at, resolved int64
	var policy, server, container string
	if err := r.Scan(&c.ID, &c.Path, &c.Peer, &c.Side, &at, &policy, &c.Kind, &server, &container, &c.Copy, &c.CopySide, &resolved, &c.Resolution); err != nil {
		return err
	}
	c.Policy = ConflictPolicy(policy)
	c.At = time.Unix(0, at).UTC()
	if resolved != 0 {
		c.Resolved = time.Unix(0, resolved).UTC()
	}
	if err := json.Unmarshal([]byte(server), &c.Server); err != nil {
		return fmt.Errorf("conflict %d: server state: %w", c.ID, err)
	}
	if err := json.Unmarshal([]byte(container), &c.Container); err != nil {
		return fmt.Errorf("conflict %d: container state: %w", c.ID, err)
	}
	return nil
}
