package vfs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
)

// Group commit of local mutations.
//
// A mutation made through the mount (create, mkdir, unlink, rename,
// setattr, link, symlink, xattrs, a file's commit at close) joins the open
// group: one write transaction that stays open across mutations, each
// mutation inside a savepoint so that a failed one undoes only itself. The
// group commits when it is Options.GroupWindow old, when it holds groupMax
// mutations, before any other write transaction (an apply, a watermark
// move, GC, a path operation of the files API), before a read that is not
// a mount read (a feed page, a scan, a stat of the counts), on Sync and at
// Close. Mount reads made while a group is open run inside its transaction
// (view), so they see every mutation already answered.
//
// What this trades, written down in docs/ARCHITECTURE.md "Durability": a
// mutation the kernel was answered for but whose group has not committed is
// lost by a SIGKILL of the daemon, like a local filesystem's metadata
// before its journal commits; fsync (Sync) and every feed read commit the
// group first, so nothing fsynced and nothing a pull has seen can be lost.
// Groups open only while the store's filesystem has groupMinFree bytes
// free: a nearly full disk commits every mutation before answering it, so
// ENOSPC reaches the writer instead of failing a group the kernel was
// already answered for.

// DefaultGroupWindow is how long a group of local mutations may stay
// uncommitted.
const DefaultGroupWindow = 5 * time.Millisecond

// groupMax bounds the mutations of one group (and so the WAL frames its
// commit writes).
const groupMax = 1024

// groupMinFree is the free space below which mutations commit one by one.
const groupMinFree = 64 << 20

// group is the open group commit: its transaction carries the bookkeeping
// (revs, chunk references, directory paths) of every mutation merged in.
type group struct {
	t     *wtx
	n     int
	timer *time.Timer
}

// groupWindow is the store's group window, 0 when groups are off.
func (s *Store) groupWindow() time.Duration {
	switch w := s.opts.GroupWindow; {
	case s.memory || w < 0:
		return 0
	case w == 0:
		return DefaultGroupWindow
	default:
		return w
	}
}

// mutate runs fn as one local mutation in the open group, opening one if
// needed; with groups off (or a nearly full disk) it is update.
func (s *Store) mutate(ctx context.Context, fn func(*wtx) error) error {
	if s.groupWindow() == 0 {
		return s.update(ctx, func(t *wtx) error { t.origin = OriginLocal; return fn(t) })
	}
	if s.closed.Load() && ctx.Value(closingKey{}) == nil {
		return ErrClosed
	}
	// An interrupted write statement rolls back the whole transaction in
	// SQLite: a cancelled request must not take the group with it (the
	// group's statements are detached from their contexts as well).
	ctx = context.WithoutCancel(ctx)
	s.lockWrite()
	t, err := s.mutateLocked(ctx, fn, nil)
	s.unlockWrite(t, err)
	return err
}

// mutateLocked is mutate with the writer held; q, when not nil, is the
// queued mutation being run (behind.go): it runs at the time it was
// answered and must stamp the rev it was answered with. It returns the
// mutation's transaction (nil if it never started).
func (s *Store) mutateLocked(ctx context.Context, fn func(*wtx) error, q *queued) (*wtx, error) {
	local := fn
	fn = func(t *wtx) error { t.origin = OriginLocal; return local(t) }
	win := s.groupWindow()
	g := s.grp
	if g == nil {
		// A queued mutation was answered already: it joins a group
		// whatever the free space, and tells the memo what it found, so
		// that mutations stop being answered early once the disk fills.
		room := s.roomForGroup()
		s.noteRoom(room)
		if !room && q == nil {
			return nil, s.updateLocked(ctx, fn)
		}
		// The group outlives the context of the mutation that opened it.
		t, err := s.begin(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		t.tx.detached = true
		t.tx.pending = new(pendingRows)
		g = &group{t: t}
		g.timer = time.AfterFunc(win, func() { s.expire(g) })
		s.grp = g
		s.grpOpen.Store(true)
	}
	gt := g.t
	before := s.writes.Add(1) - 1
	ended := false
	defer func() {
		if !ended {
			s.writes.Add(1)
		}
	}()
	// A queued create keeps its rows in the group instead of writing
	// them, and a queued commit or SetAttr of a node whose row waits
	// there changes it in place (pending.go): they need no savepoint.
	pend := gt.tx.pending
	onPending := q != nil && (q.bulk || (q.what.verb == "commit" || q.what.verb == "setattr") && pend.row(q.what.ino) != nil)
	if !onPending {
		if _, err := gt.tx.ExecContext(ctx, `SAVEPOINT mutation`); err != nil {
			return nil, s.abortGroup(fmt.Errorf("savepoint: %w", err))
		}
	}
	t := &wtx{ctx: ctx, s: s, sqltx: gt.sqltx, tx: gt.tx, last: gt.last, now: time.Now().UnixNano(), grp: gt,
		touched: make(map[string]int64), before: before}
	var mark pendingMark
	if q != nil {
		t.now = q.now
	}
	if onPending {
		t.pend, mark = pend, pend.mark()
	}
	err := t.run(fn)
	if err == nil && q != nil && t.cur != q.rev {
		err = fmt.Errorf("%s: ran as rev %d, answered as rev %d: %w", q.what, t.cur, q.rev, errBehind)
	}
	if err == nil {
		// Directory times change with the mutation, not at the group's
		// commit: a stat of the parent must see them now (a queued
		// create's are written with its rows, before any read).
		if onPending {
			for d := range t.dirty {
				pend.touchDir(d, t.now)
			}
		} else {
			err = t.touchDirs()
		}
	}
	if err == nil && pend.err != nil {
		// Rows of earlier creates failed to write during this mutation.
		return t, s.abortGroup(pend.err)
	}
	if err != nil {
		if onPending {
			if !pend.dropSince(mark) {
				return t, errors.Join(err, s.abortGroup(fmt.Errorf("%s failed after the rows of queued creates were written", q.what)))
			}
			return t, err
		}
		if _, rerr := gt.tx.ExecContext(ctx, `ROLLBACK TO mutation`); rerr != nil {
			return t, errors.Join(err, s.abortGroup(fmt.Errorf("rollback to savepoint: %w", rerr)))
		}
		if _, rerr := gt.tx.ExecContext(ctx, `RELEASE mutation`); rerr != nil {
			return t, errors.Join(err, s.abortGroup(fmt.Errorf("release savepoint: %w", rerr)))
		}
		return t, err
	}
	if !onPending {
		if _, err := gt.tx.ExecContext(ctx, `RELEASE mutation`); err != nil {
			return t, s.abortGroup(fmt.Errorf("release savepoint: %w", err))
		}
	}
	gt.merge(t)
	s.addLive(t.use, t.own)
	g.n++
	metricGroupMutations.Inc()
	ended = true
	// A queued mutation carries too: what it keeps is the rows' state
	// after it, which the next queued mutation starts from (readers get
	// nothing kept while mutations are queued: keptAttr), carried in
	// place through the run and published at its end (runQueued).
	if q != nil {
		s.carryQueued(t, before, s.writes.Add(1))
	} else {
		s.carryKept(t, before, s.writes.Add(1))
	}
	if g.n >= groupMax {
		return t, s.commitGroup()
	}
	return t, nil
}

// merge takes a committed-to-savepoint mutation's bookkeeping into the
// group's transaction.
func (g *wtx) merge(t *wtx) {
	g.last = t.last
	g.use = g.use.add(t.use)
	g.stages = append(g.stages, t.stages...)
	g.adds = append(g.adds, t.adds...)
	g.drops = append(g.drops, t.drops...)
	g.trashBytes += t.trashBytes
	g.trashEntries += t.trashEntries
	if t.forgot {
		g.dirAdds = nil
	}
	for ino, p := range t.dirAdds {
		if g.dirAdds == nil {
			g.dirAdds = make(map[Ino]string)
		}
		g.dirAdds[ino] = p
	}
	if g.touched == nil {
		g.touched = t.touched
	} else {
		for p, rev := range t.touched {
			g.touched[p] = rev // a later mutation's rev is higher
		}
	}
}

// roomForGroup reports whether the store's filesystem has room for a
// group's commit. Called with wmu held, once per group.
func (s *Store) roomForGroup() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(s.path, &st); err != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) >= s.groupMinFree
}

// expire commits g when its window is over (the timer's goroutine).
func (s *Store) expire(g *group) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.grp == g {
		s.commitGroup()
	}
}

// commitGroup commits the open group, if any. Called with wmu held. A
// failure loses the group's mutations, which the kernel was answered for:
// it is logged, counted, and returned by the next Sync.
func (s *Store) commitGroup() error {
	g := s.grp
	if g == nil {
		return nil
	}
	s.grp = nil
	g.timer.Stop()
	crashpoint.Hit("vfs.group.commit")
	t0 := time.Now()
	err := g.t.commit()
	metricGroupCommit.Observe(time.Since(t0).Seconds())
	if err == nil {
		crashpoint.Hit("vfs.group.committed")
	}
	g.t.tx.done(context.Background())
	g.t.releaseStages()
	s.grpOpen.Store(false)
	if err != nil {
		g.t.rollback()
		s.addLive(Usage{-g.t.use.Bytes, -g.t.use.Entries}, 0)
		return s.groupFailed(g.n, err)
	}
	return nil
}

// abortGroup rolls the open group back after a statement that keeps it
// consistent failed. Called with wmu held.
func (s *Store) abortGroup(cause error) error {
	g := s.grp
	s.grp = nil
	g.timer.Stop()
	g.t.rollback()
	g.t.tx.done(context.Background())
	g.t.releaseStages()
	s.grpOpen.Store(false)
	s.addLive(Usage{-g.t.use.Bytes, -g.t.use.Entries}, 0)
	return s.groupFailed(g.n, cause)
}

func (s *Store) groupFailed(n int, err error) error {
	// What the group's mutations wrote is gone: readers that validate
	// against the write counter (AttrAsOf, keptAttr) must not trust
	// what they read inside it. By two, as every write moves it: an odd
	// count is a write in progress (ReadDirAttrs).
	s.writes.Add(2)
	s.kept.Store(nil)
	s.forget()
	err = fmt.Errorf("group commit of %d mutations: %w", n, err)
	metricGroupFailures.Inc()
	s.log.Error("mutations answered to the kernel were lost", "err", err)
	if s.grpErr == nil {
		s.grpErr = err
	}
	s.lostAnswered()
	return err
}

// Sync commits the open group of local mutations: after it returns
// without error, every mutation answered before the call survives a crash
// of the process. It returns (once) a group failure since the last Sync.
func (s *Store) Sync(ctx context.Context) error {
	s.lockW()
	defer s.wmu.Unlock()
	if s.grp == nil {
		return s.takeGroupErr()
	}
	err := s.commitGroup()
	if err != nil {
		s.grpErr = nil
		return err
	}
	return s.takeGroupErr()
}

func (s *Store) takeGroupErr() error {
	err := s.grpErr
	s.grpErr = nil
	return err
}

// settle commits the open group so the readers' connections see it; a
// failure stays for Sync (the reader goes on with what is committed).
func (s *Store) settle() {
	if !s.grpOpen.Load() && s.queuedN.Load() == 0 {
		return
	}
	s.lockW()
	s.commitGroup()
	s.wmu.Unlock()
}

// committed returns the readers' querier after settling the open group:
// for reads that must see every mutation (a feed page, a scan).
func (s *Store) committed() chunkstore.Querier {
	s.settle()
	return s.rq
}

// viewNode reads a node for the mount (view).
func (s *Store) viewNode(ctx context.Context, ino Ino) (n node, err error) {
	err = s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		n, err = getNode(ctx, q, ino)
		return err
	})
	return n, err
}

// viewAttr is viewNode without the manifest (getAttrs).
func (s *Store) viewAttr(ctx context.Context, ino Ino) (n node, err error) {
	err = s.view(ctx, func(ctx context.Context, q chunkstore.Querier) error {
		n, err = getAttrs(ctx, q, ino)
		return err
	})
	return n, err
}

// view runs a mount read: inside the open group's transaction when there
// is one (it sees every mutation already answered; the group's statements
// ignore cancellation), on a reader connection otherwise. fn must not call back into the store.
func (s *Store) view(ctx context.Context, fn func(ctx context.Context, q chunkstore.Querier) error) error {
	if !s.grpOpen.Load() && s.queuedN.Load() == 0 {
		return fn(ctx, s.rq)
	}
	s.lockW()
	defer s.wmu.Unlock()
	return s.viewLocked(ctx, fn)
}

// viewLocked is view with wmu held.
func (s *Store) viewLocked(ctx context.Context, fn func(ctx context.Context, q chunkstore.Querier) error) error {
	if s.grp == nil {
		return fn(ctx, s.rq)
	}
	return fn(ctx, s.grp.t.tx)
}
