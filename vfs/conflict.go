package vfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/watermark"
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

// MaxCopyTries bounds the names tried for one conflict copy.
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
		n := max(len(stem)-over, 1)
		for n > 1 && !utf8.RuneStart(stem[n]) {
			n-- // never cut a character in two
		}
		stem = stem[:n]
	}
	return joinPath(dir, stem+tag+ext)
}

// conflictSet is an Apply's conflict detection state (ApplyOptions.Conflicts).
type conflictSet struct {
	opts ConflictOptions
	peer string
	now  time.Time
	push watermark.Cursor // the peer has our feed through here
	run  BounceRun        // and these revs hold its own entries
	// bases: the batch's base rows (path -> key); loaded: the paths whose
	// rows were read (a loaded path missing from bases has none).
	bases  map[string][]byte
	loaded map[string]bool
	// writes are the base rows to write at the end of the batch (nil
	// value: delete the row).
	writes map[string][]byte
	// restamp are paths whose current state the peer must receive again:
	// stamped after the batch's bounce run, so the next push carries them.
	restamp []string
	found   []Conflict
	// seen are the paths inTheWay already settled in this batch.
	seen map[string]bool
}

// peerHas reports whether the peer holds our state of a path last touched
// at rev (the fallback base rule).
func (c *conflictSet) peerHas(rev int64, path string) bool {
	if rev == 0 {
		return true // never touched here: absent on both sides as far as we know
	}
	if !c.push.Admits(rev, path) {
		return true
	}
	return rev > c.run.From && rev <= c.run.To
}

// loadBases reads the base rows of paths (in pages of 256).
func (t *wtx) loadBases(c *conflictSet, paths []string) error {
	for len(paths) > 0 {
		part := paths[:min(len(paths), 256)]
		paths = paths[len(part):]
		args := make([]any, 0, len(part)+1)
		args = append(args, c.peer)
		for _, p := range part {
			args = append(args, p)
			c.loaded[p] = true
		}
		rows, err := t.tx.QueryContext(t.ctx, `SELECT path, state FROM bases WHERE peer = ? AND path IN (`+
			strings.TrimSuffix(strings.Repeat("?,", len(part)), ",")+`)`, args...)
		if err != nil {
			return fmt.Errorf("bases: %w", err)
		}
		type row struct {
			path string
			key  []byte
		}
		rs, err := scanRows(rows, func(r *sql.Rows, x *row) error { return r.Scan(&x.path, &x.key) })
		if err != nil {
			return fmt.Errorf("bases: %w", err)
		}
		for _, r := range rs {
			c.bases[r.path] = r.key
		}
	}
	return nil
}

// baseRow is path's base row: from the batch's rows (loadBases) or, for a
// path outside the batch (an ancestor in the way), read now.
func (t *wtx) baseRow(c *conflictSet, path string) ([]byte, bool, error) {
	if k, ok := c.bases[path]; ok {
		return k, true, nil
	}
	if c.loaded[path] {
		return nil, false, nil
	}
	var k []byte
	err := t.tx.QueryRowContext(t.ctx, `SELECT state FROM bases WHERE peer = ? AND path = ?`, c.peer, path).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("base %q: %w", path, err)
	}
	return k, true, nil
}

// changeRev is the rev of path's last change here (0: never changed).
func (t *wtx) changeRev(path string) (int64, error) {
	var rev int64
	err := t.tx.QueryRowContext(t.ctx, `SELECT rev FROM changes WHERE path = ?`, path).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return rev, err
}

// base is the key of path's merge base with the peer, given our current
// state of it: its row (or the row this batch will write), or the
// fallback rule where it has none. nil is absent.
func (t *wtx) base(c *conflictSet, path string, cur state) ([]byte, error) {
	if k, ok := c.writes[path]; ok {
		return k, nil
	}
	k, ok, err := t.baseRow(c, path)
	if err != nil || ok {
		return k, err
	}
	if cur.kind == EntryDelete {
		return nil, nil
	}
	rev, err := t.changeRev(path)
	if err != nil {
		return nil, err
	}
	if c.peerHas(rev, path) {
		return cur.key(), nil
	}
	return nil, nil
}

// changedUnder reports whether the live subtree below our directory dir
// (at path) holds a node whose path changed since since, outside run: a
// local change the other side does not have. Such a directory must not be
// removed on the other side's word. It reads the live subtree only (what a
// removal would take anyway), so the tombstones of a large directory the
// peer emptied cost nothing.
func (t *wtx) changedUnder(dir Ino, path string, since watermark.Cursor, run BounceRun) (bool, error) {
	var one int
	err := t.tx.QueryRowContext(t.ctx, `WITH RECURSIVE sub(child, rel) AS (
			SELECT child, name FROM dirents WHERE parent = ?
			UNION ALL
			SELECT d.child, sub.rel || '/' || d.name FROM dirents d JOIN sub ON d.parent = sub.child
		)
		SELECT 1 FROM sub JOIN nodes n ON n.ino = sub.child JOIN changes c ON c.path = ? || '/' || sub.rel
		WHERE n.kind IN `+syncedKinds+`
		AND (c.rev > ? OR (c.rev = ? AND ? AND c.path > ?)) AND NOT (c.rev > ? AND c.rev <= ?) LIMIT 1`,
		dir, path, since.Rev, since.Rev, since.Partial, since.Path, run.From, run.To).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("changes below %q: %w", path, err)
	}
	return true, nil
}

// record adds a conflict record for path (our state cur at rev ours, the
// peer's in at rev theirs).
func (t *wtx) record(c *conflictSet, path string, cur state, ours int64, in state, theirs int64, copyPath, copySide string) error {
	policy := c.opts.Policy
	cf := Conflict{Path: path, Peer: c.peer, Side: c.opts.Side, At: c.now, Policy: policy, Kind: conflictKind(cur, in),
		Server: cur.public(ours), Container: in.public(theirs), Copy: copyPath, CopySide: copySide}
	server, err := json.Marshal(cf.Server)
	if err != nil {
		return err
	}
	container, err := json.Marshal(cf.Container)
	if err != nil {
		return err
	}
	res, err := t.exec(`INSERT INTO conflicts(path, peer, side, at, policy, kind, server, container, copy, copy_side)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, path, c.peer, c.opts.Side, c.now.UnixNano(), string(policy), cf.Kind,
		string(server), string(container), copyPath, copySide)
	if err != nil {
		return fmt.Errorf("record conflict %q: %w", path, err)
	}
	if cf.ID, err = res.LastInsertId(); err != nil {
		return err
	}
	c.found = append(c.found, cf)
	return nil
}

// copyName picks a free name beside path for a conflict copy of side's
// version.
func (t *wtx) copyName(c *conflictSet, parent Ino, path, side string) (string, error) {
	for n := 1; n <= maxCopyTries; n++ {
		p := ConflictCopyName(path, side, c.now, n)
		_, name := splitPath(p)
		_, err := lookupChild(t.ctx, t.tx, parent, name)
		if errors.Is(err, ErrNotExist) {
			return p, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("conflict copy of %q: %w: %d names taken", path, ErrExist, maxCopyTries)
}

// finishConflicts writes the batch's base rows and re-stamps the paths
// the peer must receive again, after the batch's own revs (so they fall
// outside its bounce run and the next push carries them).
func (t *wtx) finishConflicts(c *conflictSet) error {
	if err := t.writeBases(c.peer, c.writes); err != nil {
		return err
	}
	return t.restamp(c.restamp)
}

// baseRows is how many rows one statement writes or deletes (3 and 1
// parameters a row, well under SQLite's limit of 32,766).
const baseRows = 256

// writeBases writes peer's base rows (a nil key deletes the row), a page
// of rows per statement: one statement per row cost as much again as the
// rest of an apply.
func (t *wtx) writeBases(peer string, writes map[string][]byte) error {
	var put, del []string
	for path, k := range writes {
		if k == nil {
			del = append(del, path)
		} else {
			put = append(put, path)
		}
	}
	slices.Sort(put) // rows in key order: B-tree appends, not splits
	for len(put) > 0 {
		part := put[:min(len(put), baseRows)]
		put = put[len(part):]
		args := make([]any, 0, 3*len(part))
		for _, p := range part {
			args = append(args, peer, p, writes[p])
		}
		if _, err := t.exec(`INSERT INTO bases(peer, path, state) VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?),", len(part)), ",")+
			` ON CONFLICT(peer, path) DO UPDATE SET state = excluded.state`, args...); err != nil {
			return fmt.Errorf("bases of %q: %w", peer, err)
		}
	}
	for len(del) > 0 {
		part := del[:min(len(del), baseRows)]
		del = del[len(part):]
		args := make([]any, 0, len(part)+1)
		args = append(args, peer)
		for _, p := range part {
			args = append(args, p)
		}
		if _, err := t.exec(`DELETE FROM bases WHERE peer = ? AND path IN (`+
			strings.TrimSuffix(strings.Repeat("?,", len(part)), ",")+`)`, args...); err != nil {
			return fmt.Errorf("bases of %q: %w", peer, err)
		}
	}
	return nil
}

// restamp records paths as changed again, each in a mutation of its own.
func (t *wtx) restamp(paths []string) error {
	for _, p := range paths {
		t.nextMutation()
		if err := t.touch(p); err != nil {
			return err
		}
	}
	return nil
}

// Delivered records what a peer acknowledged of a push batch, in one
// transaction: the watermarks, the merge base of every entry it applied
// (bases true; the server keeps them, a container does not) and a new rev
// for every path it deferred (it had changes there we have not fetched),
// so the path goes again after the next pull.
func (s *Store) Delivered(ctx context.Context, peer string, ws watermark.Set, sent []ChangeEntry, deferred []string, bases bool) error {
	return s.update(ctx, func(t *wtx) error {
		if err := t.setWatermarks(peer, ws); err != nil {
			return err
		}
		if bases {
			skip := make(map[string]bool, len(deferred))
			for _, p := range deferred {
				skip[p] = true
			}
			c := &conflictSet{peer: peer, writes: make(map[string][]byte, len(sent))}
			for i := range sent {
				if !skip[sent[i].Path] {
					c.writes[sent[i].Path] = entryState(&sent[i]).key()
				}
			}
			if err := t.finishConflicts(c); err != nil {
				return err
			}
		}
		return t.restamp(deferred)
	})
}

// ForgetBases drops every merge base kept for peer: its store was
// replaced (a snapshot bootstrap), so what it held before says nothing.
func (s *Store) ForgetBases(ctx context.Context, peer string) error {
	return s.update(ctx, func(t *wtx) error { return t.forgetBases(peer) })
}

func (t *wtx) forgetBases(peer string) error {
	if _, err := t.exec(`DELETE FROM bases WHERE peer = ?`, peer); err != nil {
		return fmt.Errorf("forget bases %q: %w", peer, err)
	}
	return nil
}

const conflictCols = `id, path, peer, side, at, policy, kind, server, container, copy, copy_side, resolved, resolution`

// Conflicts lists the newest recorded conflicts, newest first, at most
// limit of them (0: every one): the open ones only when open is set.
func (s *Store) Conflicts(ctx context.Context, open bool, limit int) ([]Conflict, error) {
	q := `SELECT ` + conflictCols + ` FROM conflicts`
	if open {
		q += ` WHERE resolved = 0`
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.rq.QueryContext(ctx, q+` ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("conflicts: %w", err)
	}
	out, err := scanRows(rows, scanConflict)
	if err != nil {
		return nil, fmt.Errorf("conflicts: %w", err)
	}
	return out, nil
}

// Conflict returns one conflict record (ErrNotExist when none has the id).
func (s *Store) Conflict(ctx context.Context, id int64) (Conflict, error) {
	rows, err := s.rq.QueryContext(ctx, `SELECT `+conflictCols+` FROM conflicts WHERE id = ?`, id)
	if err != nil {
		return Conflict{}, fmt.Errorf("conflict %d: %w", id, err)
	}
	out, err := scanRows(rows, scanConflict)
	if err != nil {
		return Conflict{}, fmt.Errorf("conflict %d: %w", id, err)
	}
	if len(out) == 0 {
		return Conflict{}, fmt.Errorf("conflict %d: %w", id, ErrNotExist)
	}
	return out[0], nil
}

// OpenConflictAt returns the newest open conflict recorded at path (store
// form); ErrNotExist when there is none.
func (s *Store) OpenConflictAt(ctx context.Context, path string) (Conflict, error) {
	rows, err := s.rq.QueryContext(ctx, `SELECT `+conflictCols+` FROM conflicts
		WHERE path = ? AND resolved = 0 ORDER BY id DESC LIMIT 1`, path)
	if err != nil {
		return Conflict{}, fmt.Errorf("conflict at %q: %w", path, err)
	}
	out, err := scanRows(rows, scanConflict)
	if err != nil {
		return Conflict{}, fmt.Errorf("conflict at %q: %w", path, err)
	}
	if len(out) == 0 {
		return Conflict{}, fmt.Errorf("conflict at %q: %w: no open conflict at that path", path, ErrNotExist)
	}
	return out[0], nil
}

// OpenConflicts counts the conflicts not yet resolved.
func (s *Store) OpenConflicts(ctx context.Context) (int, error) {
	var n int
	if err := s.rq.QueryRowContext(ctx, `SELECT count(*) FROM conflicts WHERE resolved = 0`).Scan(&n); err != nil {
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

// errSkipEntry: the entry is not applied (a directory of the peer's where
// our version wins under ServerWins); the batch goes on.
var errSkipEntry = errors.New("entry skipped")

// dirtyDir is the key detection gives one of our directories whose
// subtree holds changes the peer has not received: it differs from every
// base, so removing it on the peer's word is a conflict.
var dirtyDir = []byte{byte(EntryDir), 1}

// startSync sets up an Apply batch's conflict detection and fence.
func (t *wtx) startSync(entries []ChangeEntry, opts ApplyOptions) error {
	if opts.Conflicts == nil && opts.Fence == nil {
		return nil
	}
	run, err := t.bounceRun(opts.Peer)
	if err != nil {
		return err
	}
	if opts.Fence != nil {
		if t.fence, err = t.loadFence(*opts.Fence, run); err != nil {
			return err
		}
	}
	if opts.Conflicts == nil {
		return nil
	}
	c := &conflictSet{opts: *opts.Conflicts, peer: opts.Peer, push: opts.Watermarks.Push, run: run,
		bases: make(map[string][]byte), loaded: make(map[string]bool, len(entries)), writes: make(map[string][]byte, len(entries)), seen: make(map[string]bool)}
	if c.opts.Policy == "" {
		c.opts.Policy = KeepBoth
	}
	if c.opts.Side == "" {
		c.opts.Side = SideContainer
	}
	if c.opts.Now == nil {
		c.opts.Now = time.Now
	}
	c.now = c.opts.Now().UTC().Truncate(time.Second)
	paths := make([]string, len(entries))
	for i := range entries {
		paths[i] = entries[i].Path
	}
	if err := t.loadBases(c, paths); err != nil {
		return err
	}
	t.cf = c
	return nil
}

// detect runs conflict detection for entry e, whose path holds cur
// (exists) in parent under name. done: the entry is settled here (changed
// says whether the store changed); otherwise the apply goes on as usual,
// with cur and exists updated when detection moved our version aside.
func (t *wtx) detect(e *ChangeEntry, parent Ino, name string, cur *node, exists *bool) (done, changed bool, err error) {
	c := t.cf
	ours := absent
	if *exists {
		ours = nodeState(cur)
	}
	in := entryState(e)
	base, err := t.base(c, e.Path, ours)
	if err != nil {
		return true, false, err
	}
	ourKey := ours.key()
	if ours.isDir() && !in.isDir() && bytes.Equal(ourKey, base) {
		// Our directory did not change itself; what it holds may have.
		dirty, err := t.changedUnder(cur.ino, e.Path, c.push, c.run)
		if err != nil {
			return true, false, err
		}
		if dirty {
			ourKey = dirtyDir
		}
	}
	switch decide(base, ourKey, in.key()) {
	case same, takeTheirs:
		c.writes[e.Path] = in.key()
		return false, false, nil
	case keepOurs:
		// The peer still holds the base: ours goes to it on the next push.
		c.restamp = append(c.restamp, e.Path)
		return true, false, nil
	}
	c.writes[e.Path] = in.key() // what the peer holds now
	ourRev, err := t.changeRev(e.Path)
	if err != nil {
		return true, false, err
	}
	rec := func(copyPath, copySide string) error {
		return t.record(c, e.Path, ours, ourRev, in, e.Rev, copyPath, copySide)
	}
	switch {
	case c.opts.Policy == KeepBoth && ours.isDir() && in.kind == EntryDelete:
		// Our directory stays for what changed below it (modify beats
		// delete); the paths below settle, and record, one by one.
		c.restamp = append(c.restamp, e.Path)
		return true, false, nil
	case c.opts.Policy == ServerWins,
		c.opts.Policy == KeepBoth && in.kind == EntryDelete: // modify beats delete
		c.restamp = append(c.restamp, e.Path)
		return true, false, rec("", "")
	case c.opts.Policy == ContainerWins,
		ours.kind == EntryDelete: // modify beats delete: theirs comes back
		return false, false, rec("", "")
	case ours.sameContent(in):
		// Only the modes differ: ours stays, without a copy or a record.
		c.restamp = append(c.restamp, e.Path)
		return true, false, nil
	case in.isDir():
		// Their directory takes the name; ours (not a directory) goes
		// beside it.
		cp, err := t.moveAside(c, parent, name, e.Path)
		if err != nil {
			return true, false, err
		}
		*exists = false
		return false, false, rec(cp, SideServer)
	}
	// Ours keeps the name; theirs goes beside it.
	cp, err := t.copyName(c, parent, e.Path, c.opts.Side)
	if err != nil {
		return true, false, err
	}
	nn := newNode{attr: NewAttr{Mode: e.Mode, Uid: t.s.opts.Owner.Uid, Gid: t.s.opts.Owner.Gid}, mtime: e.Mtime}
	switch e.Kind {
	case EntryFile:
		for _, r := range e.Chunks {
			if _, ok := t.missing[r.Hash]; ok {
				return true, false, fmt.Errorf("chunk %s: %w", r.Hash, chunkstore.ErrUnknownHash)
			}
		}
		nn.kind, nn.manifest = KindFile, e.Chunks
	case EntrySymlink:
		nn.kind, nn.target = KindSymlink, e.Target
	}
	_, cname := splitPath(cp)
	n, err := t.insertNode(parent, cp, cname, nn)
	if err != nil {
		return true, false, err
	}
	t.inval = append(t.inval, Invalidation{Ino: n.ino, Parent: parent, Name: cname})
	c.writes[cp] = nil // the peer does not hold it yet
	c.restamp = append(c.restamp, e.Path, cp)
	return true, true, rec(cp, SideContainer)
}

// moveAside renames our node (parent, name) at path to a free conflict
// copy name of the server's side, and returns the copy's path.
func (t *wtx) moveAside(c *conflictSet, parent Ino, name, path string) (string, error) {
	cp, err := t.copyName(c, parent, path, SideServer)
	if err != nil {
		return "", err
	}
	_, cname := splitPath(cp)
	if err := t.rename(parent, name, parent, cname, RenameNoReplace); err != nil {
		return "", fmt.Errorf("conflict copy of %q: %w", path, err)
	}
	c.writes[cp] = nil
	c.restamp = append(c.restamp, cp)
	return cp, nil
}

// inTheWay decides, under conflict detection, for our node n at path
// (dir, name), not a directory, where the peer's entry needs a
// directory. Unchanged since the base, it goes as before (false). Changed,
// keep-both moves it beside (true), container-wins lets it go (false) and
// server-wins skips the peer's entry (errSkipEntry); each records the
// conflict once.
func (t *wtx) inTheWay(dir Ino, name, path string, n node) (bool, error) {
	c := t.cf
	ours := nodeState(&n)
	base, err := t.base(c, path, ours)
	if err != nil {
		return false, err
	}
	if bytes.Equal(base, ours.key()) {
		return false, nil
	}
	theirs := state{kind: EntryDir}
	first := !c.seen[path]
	c.seen[path] = true
	if first && c.opts.Policy != KeepBoth {
		open, err := t.openConflictAt(c.peer, path)
		if err != nil {
			return false, err
		}
		first = !open
	}
	rev, err := t.changeRev(path)
	if err != nil {
		return false, err
	}
	switch c.opts.Policy {
	case ServerWins:
		if first {
			c.restamp = append(c.restamp, path)
			if err := t.record(c, path, ours, rev, theirs, 0, "", ""); err != nil {
				return false, err
			}
		}
		return false, errSkipEntry
	case ContainerWins:
		c.writes[path] = theirs.key()
		if first {
			return false, t.record(c, path, ours, rev, theirs, 0, "", "")
		}
		return false, nil
	}
	cp, err := t.moveAside(c, dir, name, path)
	if err != nil {
		return false, err
	}
	c.writes[path] = theirs.key()
	return true, t.record(c, path, ours, rev, theirs, 0, cp, SideServer)
}

// openConflictAt reports whether an open conflict with peer is recorded
// at path.
func (t *wtx) openConflictAt(peer, path string) (bool, error) {
	var n int
	err := t.tx.QueryRowContext(t.ctx, `SELECT count(*) FROM conflicts WHERE resolved = 0 AND peer = ? AND path = ?`, peer, path).Scan(&n)
	return n > 0, err
}

// bounceRun reads peer's bounce run inside the transaction.
func (t *wtx) bounceRun(peer string) (BounceRun, error) {
	var r BounceRun
	err := t.tx.QueryRowContext(t.ctx, `SELECT bounce_from, bounce_to FROM watermarks WHERE peer = ?`, peer).Scan(&r.From, &r.To)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("bounce %q: %w", peer, err)
	}
	return r, nil
}
