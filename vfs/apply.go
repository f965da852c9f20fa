package vfs

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/watermark"
)

// Source says who produced the entries handed to Apply.
type Source uint8

const (
	// Upstream: a sync peer's entries (senderRev > 0).
	Upstream Source = iota + 1
	// Local: an external writer's entries (senderRev == 0), applied as local
	// writes whose revs ship onward on the next sync.
	Local
)

// ApplyOptions configures one Apply batch.
type ApplyOptions struct {
	Source Source
	// Stage holds chunks received for this batch; entries may reference
	// chunks in it or already stored.
	Stage *chunkstore.Stage
	// Peer and Watermarks, when Watermarks is non-nil, are written in the
	// same transaction as the batch.
	Peer       string
	Watermarks *watermark.Set
	// Bounce, for a sync peer's batch (needs Peer and Watermarks), records
	// the revs the batch stamps in the peer's bounce run (BounceRun), in the
	// same transaction, so they are not sent back to it.
	Bounce bool
	// Conflicts, for a sync peer's batch on the server (needs Bounce),
	// detects conflicts against the merge bases kept for Peer, resolves
	// them by its policy, records them, and keeps the bases (detect.go).
	Conflicts *ConflictOptions
	// Fence, for a sync peer's batch on a container, protects local changes
	// the peer has not fetched: Fence is how far the peer has our feed. An
	// entry whose path, non-directory ancestor or replaced subtree holds a
	// change after it (other than the peer's own entries, in its bounce
	// run) is not applied but listed in ApplyResult.Deferred.
	Fence *watermark.Cursor
	// Quota enforces the store's quota on the batch (quota.go: a pull into
	// the server): a batch that would grow the usage past it fails as a
	// whole with a *QuotaError. Other batches apply whatever the quota.
	Quota bool
	// Ignore leaves out the entries it ignores (Ignore.IgnoresEntry), and
	// a delete whose path holds a directory it excludes: the pulls' apply
	// on the server, with the same list the peer's feed was asked with.
	Ignore Ignore
	// Held, for a snapshot's install (converge), hands the holds of the
	// batch's chunks (HoldChunks) over to the batch: each held chunk the
	// batch names is present without a probe, its hold goes in the same
	// transaction, and the reference the hold counted becomes the first
	// the batch adds (takeHolds). A chunk no batch names keeps its hold
	// until ReleaseHeldChunks.
	Held bool
}

// ApplyResult reports what a batch did.
type ApplyResult struct {
	Applied   int   // entries that changed the store
	Skipped   int   // entries that already matched (idempotent)
	FirstRev  int64 // first rev stamped (0 when none)
	LastRev   int64 // last rev stamped (0 when none)
	RevBefore int64 // the store's rev before the batch
	// Conflicts are the conflicts the batch recorded (ApplyOptions.Conflicts).
	Conflicts []Conflict
	// Deferred are the paths of the entries the fence held back
	// (ApplyOptions.Fence), in batch order.
	Deferred []string
	// Created counts the applied entries whose path held nothing before
	// (a pull's deletion safety weighs deletes against them).
	Created int
	// Ignored counts the entries ApplyOptions.Ignore left out.
	Ignored int
}

// Apply applies a batch of entries in one transaction, each entry stamped
// with a rev of its own (entries that create free names are written in
// bulk, bulk.go). An entry whose
// content, mode and target already match is skipped and stamps nothing, so
// re-applying a batch is a no-op. Missing parents are created; a node of a
// different type at a path (or at a parent path) is replaced, its subtree
// discarded (last writer wins). If any entry fails, nothing of the batch is
// applied and the error is an *EntryError naming the entry.
//
// Both sources apply the same way; they differ in what the caller does with
// watermarks, which it passes in ApplyOptions to be written in the same
// transaction.
func (s *Store) Apply(ctx context.Context, entries []ChangeEntry, opts ApplyOptions) (ApplyResult, error) {
	var res ApplyResult
	if opts.Source != Upstream && opts.Source != Local {
		return res, fmt.Errorf("apply: %w: source %d", ErrInvalid, opts.Source)
	}
	if opts.Bounce && opts.Watermarks == nil {
		return res, fmt.Errorf("apply: %w: bounce without watermarks", ErrInvalid)
	}
	if (opts.Conflicts != nil || opts.Fence != nil) && !opts.Bounce {
		return res, fmt.Errorf("apply: %w: conflict detection and fences are for a sync peer's batch (bounce)", ErrInvalid)
	}
	for i := range entries {
		if err := entries[i].Validate(); err != nil {
			return res, &EntryError{Index: i, Rev: entries[i].Rev, Path: entries[i].Path, Err: err}
		}
	}
	var inval []Invalidation
	err := s.update(ctx, func(t *wtx) error {
		t.unlimited = !opts.Quota
		t.origin = OriginSync
		res.RevBefore = t.last
		missing, err := t.missingChunks(entries, opts.Held)
		if err != nil {
			return err
		}
		t.missing = missing
		t.batch = namesByDir(entries)
		if err := t.startSync(entries, opts); err != nil {
			return err
		}
		bulk := &bulkRows{t: t}
		t.ignore = opts.Ignore
		for i := range entries {
			e := &entries[i]
			if opts.Ignore.IgnoresEntry(*e) {
				res.Ignored++
				continue
			}
			t.nextMutation()
			if t.fence != nil {
				if !t.fence.quiet() {
					// The check reads the tree.
					if err := bulk.flush(); err != nil {
						return err
					}
				}
				held, err := t.fenced(e)
				if err != nil {
					return &EntryError{Index: i, Rev: e.Rev, Path: e.Path, Err: err}
				}
				if held {
					res.Deferred = append(res.Deferred, e.Path)
					continue
				}
			}
			handled, changed, err := bulk.create(e)
			if handled && changed {
				res.Created++
			}
			if err == nil && !handled {
				if err = bulk.flush(); err == nil {
					changed, err = t.applyEntry(e)
				}
			}
			if err != nil {
				return &EntryError{Index: i, Rev: e.Rev, Path: e.Path, Err: err}
			}
			if !changed {
				res.Skipped++
				continue
			}
			res.Applied++
			if res.FirstRev == 0 {
				res.FirstRev = t.cur
			}
			res.LastRev = t.cur
		}
		if err := bulk.flush(); err != nil {
			return err
		}
		if bulk.written > 0 {
			// Rows written in bulk, not yet committed (a snapshot
			// install's large transactions).
			crashpoint.Hit("vfs.apply.bulk")
		}
		if opts.Watermarks != nil {
			if err := t.setWatermarks(opts.Peer, *opts.Watermarks); err != nil {
				return err
			}
		}
		if opts.Bounce {
			if err := t.extendBounce(opts.Peer, res.RevBefore, res.LastRev); err != nil {
				return err
			}
		}
		if t.cf != nil {
			// After the bounce run: what the peer must receive again
			// gets revs outside it.
			if err := t.finishConflicts(t.cf); err != nil {
				return err
			}
			res.Conflicts = t.cf.found
		}
		inval = t.inval
		res.Created += t.created
		res.Ignored += t.ignored
		return nil
	})
	if err != nil {
		return ApplyResult{}, err
	}
	for _, c := range res.Conflicts {
		metricConflicts.WithLabelValues(string(c.Policy), c.Kind).Inc()
	}
	s.markStale(inval)
	s.notify(inval)
	return res, nil
}

// applyEntry applies one entry; it reports whether anything changed.
func (t *wtx) applyEntry(e *ChangeEntry) (bool, error) {
	dir, name := splitPath(e.Path)
	parent, err := t.ensureDir(dir, e.Kind == EntryDelete)
	if errors.Is(err, errSkipEntry) {
		return false, nil
	}
	if err != nil || parent == 0 {
		return false, err
	}
	var cur node
	err = ErrNotExist
	if e.Kind == EntryDelete || !t.knownAbsent(dir, parent, name) {
		cur, err = lookupChild(t.ctx, t.tx, parent, name)
	}
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotExist) {
		return false, err
	}
	if e.Kind == EntryDelete && exists && cur.kind == KindDir && t.ignore.Excludes(e.Path, true) {
		t.ignored++ // the delete of an ignored directory: ours stays
		return false, nil
	}
	if t.cf != nil {
		done, changed, err := t.detect(e, parent, name, &cur, &exists)
		if err != nil || done {
			return changed, err
		}
	}
	owner := NewAttr{Mode: e.Mode, Uid: t.s.opts.Owner.Uid, Gid: t.s.opts.Owner.Gid}
	// create puts a new node in place of what stands at the path.
	create := func(nn newNode) (bool, error) {
		if exists {
			if err := t.removeAt(parent, name, e.Path, cur); err != nil {
				return false, err
			}
		} else {
			t.created++
		}
		n, err := t.insertNode(parent, e.Path, name, nn)
		t.inval = append(t.inval, Invalidation{Ino: n.ino, Parent: parent, Name: name, New: true})
		return true, err
	}
	switch e.Kind {
	case EntryDelete:
		if !exists || cur.kind.Special() {
			// A special file reads as absent: the delete is already so,
			// and a local FIFO or socket is not the peer's to remove.
			return false, nil
		}
		return true, t.removeAt(parent, name, e.Path, cur)

	case EntryDir:
		if exists && cur.kind == KindDir {
			// Directory idempotence is mode-only: mtime drift on matching
			// directories is not sync traffic.
			if cur.mode == e.Mode {
				return false, nil
			}
			if _, err := t.exec(`UPDATE nodes SET mode = ?, ctime = ? WHERE ino = ?`, e.Mode, t.now, cur.ino); err != nil {
				return false, err
			}
			t.inval = append(t.inval, Invalidation{Ino: cur.ino})
			return true, t.touchNode(cur.ino)
		}
		return create(newNode{kind: KindDir, attr: owner, mtime: e.Mtime})

	case EntrySymlink:
		if exists && cur.kind == KindSymlink && cur.target == e.Target {
			return false, nil
		}
		return create(newNode{kind: KindSymlink, attr: owner, mtime: e.Mtime, target: e.Target})

	case EntryFile:
		for _, r := range e.Chunks {
			if _, ok := t.missing[r.Hash]; ok {
				return false, fmt.Errorf("chunk %s: %w", r.Hash, chunkstore.ErrUnknownHash)
			}
		}
		if exists && cur.kind == KindFile {
			old, err := cur.decodeManifest()
			if err != nil {
				return false, err
			}
			same := slices.Equal(old, e.Chunks)
			if same && cur.mode == e.Mode && cur.mtime == e.Mtime {
				return false, nil
			}
			// In place keeps the inode (open handles and hardlink siblings
			// follow) for metadata-only changes and single-name files; new
			// content for one name of a hardlinked file gets a node of its
			// own, since the wire does not carry hardlink identity.
			if same || cur.nlink <= 1 {
				if _, err := t.exec(`UPDATE nodes SET mode = ? WHERE ino = ?`, e.Mode, cur.ino); err != nil {
					return false, err
				}
				if _, err := t.setContent(&cur, e.Chunks, e.Mtime, nil); err != nil {
					return false, err
				}
				t.inval = append(t.inval, Invalidation{Ino: cur.ino, Parent: parent, Name: name})
				return true, nil
			}
		}
		return create(newNode{kind: KindFile, attr: owner, mtime: e.Mtime, manifest: e.Chunks})
	}
	return false, fmt.Errorf("%w: entry kind %d", ErrInvalid, e.Kind)
}

// missingChunks returns the chunks the batch's file entries name that are
// neither stored nor staged; with held, it takes the holds of those held
// first (takeHolds) and probes only the rest.
func (t *wtx) missingChunks(entries []ChangeEntry, held bool) (map[chunkstore.Hash]struct{}, error) {
	var refs []chunkstore.Ref
	for i := range entries {
		for _, r := range entries[i].Chunks {
			if r.Hash != chunkstore.HoleHash { // holes have no bytes to miss
				refs = append(refs, r)
			}
		}
	}
	if len(refs) == 0 {
		return nil, nil
	}
	if held {
		var err error
		if refs, err = t.takeHolds(refs); err != nil {
			return nil, err
		}
	}
	missing := make(map[chunkstore.Hash]struct{})
	if len(refs) == 0 {
		return missing, nil
	}
	probe := refHashes(refs)
	have, err := t.s.chunks.Has(t.ctx, t.tx, probe)
	if err != nil {
		return nil, fmt.Errorf("probe chunks: %w", err)
	}
	for _, h := range probe {
		missing[h] = struct{}{}
	}
	for _, h := range have {
		delete(missing, h)
	}
	return missing, nil
}

// namesByDir groups a batch's names by parent directory path, for the
// presence probe below.
func namesByDir(entries []ChangeEntry) map[string][]string {
	m := make(map[string][]string)
	for i := range entries {
		d, n := splitPath(entries[i].Path)
		m[d] = append(m[d], n)
	}
	return m
}

// A batch of new files would cost one lookup per entry to learn that its
// name is free. Instead the first entry that needs a directory probes, in
// one query, which of the batch's names under it exist; the answers stay
// true for the rest of the transaction because every mutation of a name
// (addDirent, removeAt, rename) updates them. A directory this
// transaction created holds only the names it added.

// dirNames is what the transaction knows of one directory's names.
type dirNames struct {
	complete bool            // every name is listed (a directory created here)
	names    map[string]bool // name -> exists
}

func (t *wtx) names(dir Ino) *dirNames {
	if t.known == nil {
		t.known = make(map[Ino]*dirNames)
	}
	dn := t.known[dir]
	if dn == nil {
		dn = &dirNames{names: make(map[string]bool)}
		t.known[dir] = dn
	}
	return dn
}

// noteName records that name now exists (or not) in dir, where the
// transaction tracks dir.
func (t *wtx) noteName(dir Ino, name string, exists bool) {
	if dn := t.known[dir]; dn != nil {
		dn.names[name] = exists
	}
}

// knownAbsent reports whether name is certainly absent from dir (at path
// dirPath), probing the batch's names under dir on first use.
func (t *wtx) knownAbsent(dirPath string, dir Ino, name string) bool {
	dn := t.known[dir]
	if dn == nil {
		dn = t.names(dir)
		if err := t.probeNames(dir, dn, t.batch[dirPath]); err != nil {
			delete(t.known, dir)
			return false
		}
	}
	exists, listed := dn.names[name]
	if !listed {
		return dn.complete
	}
	return !exists
}

func (t *wtx) probeNames(dir Ino, dn *dirNames, names []string) error {
	for len(names) > 0 {
		part := names[:min(len(names), 256)]
		names = names[len(part):]
		args := make([]any, 0, len(part)+1)
		args = append(args, dir)
		for _, n := range part {
			args = append(args, n)
			dn.names[n] = false
		}
		rows, err := t.tx.QueryContext(t.ctx, `SELECT name FROM dirents WHERE parent = ? AND name IN (`+
			chunkstore.Placeholders(len(part))+`)`, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return err
			}
			dn.names[n] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// ensureDir resolves the directory at path for an apply, creating missing
// directories and replacing any non-directory in the way (a file or a
// symlink: symlinks are never followed). For a delete (lookupOnly) nothing
// is created and a missing directory resolves to 0.
func (t *wtx) ensureDir(path string, lookupOnly bool) (Ino, error) {
	if path == "" {
		return RootIno, nil
	}
	if ino, ok := t.dirs[path]; ok {
		return ino, nil
	}
	// From the deepest directory above path the transaction resolved (each
	// directory walked is remembered): a batch of new files in a deep tree
	// looked up every directory from the root for each new directory.
	from, fromIno := "", RootIno
	for dir := path; dir != ""; {
		dir, _ = splitPath(dir)
		if ino, ok := t.dirs[dir]; ok && dir != "" {
			from, fromIno = dir, ino
			break
		}
	}
	rest := path
	if from != "" {
		rest = path[len(from)+1:]
	}
	remember := func(walked string, ino Ino) {
		if t.dirs == nil {
			t.dirs = make(map[string]Ino)
		}
		t.dirs[walked] = ino
	}
	ino, err := t.walkDirsFrom(fromIno, from, rest, func(dir Ino, name, walked string, n node, found bool) (Ino, error) {
		if lookupOnly {
			return 0, nil
		}
		if found && t.cf != nil {
			// A node of ours in the way of the peer's directory.
			kept, err := t.inTheWay(dir, name, walked, n)
			if err != nil {
				return 0, err
			}
			found = !kept
		}
		if found {
			if err := t.removeAt(dir, name, walked, n); err != nil {
				return 0, err
			}
		}
		d, err := t.insertNode(dir, walked, name, newNode{kind: KindDir, attr: NewAttr{Mode: 0o755, Uid: t.s.opts.Owner.Uid, Gid: t.s.opts.Owner.Gid}})
		if err != nil {
			return 0, err
		}
		t.inval = append(t.inval, Invalidation{Ino: d.ino, Parent: dir, Name: name, New: true})
		return d.ino, nil
	}, remember)
	if err != nil || ino == 0 {
		return 0, err
	}
	if t.dirs == nil {
		t.dirs = make(map[string]Ino)
	}
	t.dirs[path] = ino
	return ino, nil
}
