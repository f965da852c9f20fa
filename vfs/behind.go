package vfs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
)

// Write-behind of the mount's commonest mutations.
//
// A create, a mkdir, an unlink, an rmdir, a SetAttr without a size and a
// file's commit through the mount are answered from memory and run
// afterwards, in order, by a goroutine of the store: the SQL of one (3-9
// statements, 15-45 us) overlaps the kernel's round trip of the next
// instead of adding to it. What makes the answer right
// without the SQL is the memo: the names of directories in use (name to
// inode number, or free) and the row attributes of their nodes, kept equal
// to what the store will hold once every queued mutation has run. A
// listing is complete when a listing page held the whole directory (the
// mount's READDIRPLUS) or the memo saw the directory made; otherwise it
// learns names one lookup at a time (the kernel looks a name up before it
// creates or removes it, and a name the memo lacks costs one query). A
// mutation is answered from memory only when the memo decides it alone:
// the parent's attributes and what the name holds are known, the name is
// free (a create, or a link of a file or symlink the memo knows) or names
// a file or symlink (an unlink: of its last name only when no handle has
// it open) or an empty directory (an rmdir). The inode number and rev it
// will get are predicted exactly: nothing else writes while mutations are
// queued (every other writer runs them first and stops new ones from
// queueing while it holds the store), and a queued mutation that stamps
// another rev fails as errBehind.
// Anything the memo cannot decide runs as before.
//
// What readers see: a lookup or stat the memo answers sees every mutation
// answered; every read of the store (a listing page, an open, a feed, a
// scan) and every other writer runs the queued mutations first (lockW).
// What a crash may lose is unchanged in kind (ARCHITECTURE "Durability"):
// a queued mutation joins the open group when it runs, fsync and a feed
// read run the queue and commit the group, and a failed queued mutation
// (a full disk) loses it and every mutation answered after it, like a
// failed group commit: logged, counted, returned by the next fsync, so the
// store holds a prefix of the answered mutations.
//
// The memo follows every writer: the queued mutations keep it current as
// they are answered; a mutation that runs at once and declares the rows it
// changes (wtx.carries: a create, an unlink, an rmdir, a commit, a
// SetAttr, a link, a rename of a non-directory) updates the names it
// added and removed and the attributes it declared; any other write (an
// apply, a directory's rename, xattrs, a watermark, the files
// API, a failed group) forgets everything.

const (
	// maxQueued bounds the mutations answered and not yet run.
	maxQueued = 256
	// maxMemo bounds the names and attributes the memo holds.
	maxMemo = 1 << 16
	// maxMemoPage bounds the directories the memo lists (memoPage): a
	// larger one changed between listings would be sorted again each time,
	// holding the memo.
	maxMemoPage = 4096
)

// errBehind is a queued mutation that did not run as it was answered.
var errBehind = errors.New("a queued mutation ran otherwise than it was answered")

// queued is a mutation answered from memory, to run at time now as rev.
type queued struct {
	fn   func(*wtx) error
	now  int64
	rev  int64
	what what
	// create is a file's create, which the file's first commit may fold
	// into while it is the last mutation queued (behindCommit).
	create *queuedCreate
	// bulk: a create, whose rows wait in the group (pending.go).
	bulk bool
}

// queuedCreate is what a queued create of a file makes.
type queuedCreate struct {
	parent Ino
	name   string
	nn     newNode
}

// content is a file's commit as the write-behind may fold it into the
// file's queued create: its chunk list and mtime, the stage holding its
// chunks, the reservation it settles.
type content struct {
	man   chunkstore.Manifest
	mtime int64
	stage *chunkstore.Stage
	own   int64
}

// what names a queued mutation for its errors; formatted only when one
// needs it (a mutation is answered in a few microseconds).
type what struct {
	verb     string // create, remove, link, setattr, commit
	name     string
	ino, dir Ino
}

func (w what) String() string {
	switch w.verb {
	case "create":
		return fmt.Sprintf("create %q in %d", w.name, w.dir)
	case "remove":
		return fmt.Sprintf("remove %q from %d", w.name, w.dir)
	case "link":
		return fmt.Sprintf("link of %d as %q in %d", w.ino, w.name, w.dir)
	case "write":
		return fmt.Sprintf("create of %q in %d with its first content", w.name, w.dir)
	}
	return fmt.Sprintf("%s of %d", w.verb, w.ino)
}

// memo is what the write-behind knows; guarded by mu. Lock order: wmu,
// then mu, then openMu.
type memo struct {
	mu    sync.Mutex
	dirs  map[Ino]*listing // names known per directory
	attrs map[Ino]Attr     // row attributes (GetAttr adds open handles' writes)
	// mans are encoded chunk lists of files in attrs, when small
	// (maxKeptManifest): an open of one reads no row.
	mans map[Ino][]byte
	size int // names and attributes held
	// lastRev is the rev of the last mutation answered. (The inode number
	// the next create gets is one past Store.inoHigh.)
	lastRev int64
	// busy counts writers other than the queue holding the store: no
	// mutation is queued meanwhile.
	busy int
	// gen moves with every queued mutation and every change the memo does
	// not follow: what was read while it stood may be kept.
	gen  uint64
	room bool // the last group found room on the disk (groupMinFree)
	seq  uint64
	// queue is the mutations answered and not yet run.
	queue []queued
}

// listing is what the memo knows of a directory's names: name to inode,
// 0 for a name known to be free. A complete listing holds every name (a
// name it lacks is free); another learns names one lookup at a time.
type listing struct {
	names    map[string]Ino
	complete bool
	n        int // names in use (non-zero)
	// sorted is a complete listing's names in order, kept from the last
	// page answered until a name comes or goes (memoPage).
	sorted []string
}

// lookup reports what the listing says of name: its inode (0: free) and
// whether it knows.
func (l *listing) lookup(name string) (Ino, bool) {
	ino, ok := l.names[name]
	return ino, ok || l.complete
}

// set records name as naming ino (0: free); it returns the change in the
// memo's size.
func (l *listing) set(name string, ino Ino) int {
	old, had := l.names[name]
	if had != (ino != 0) {
		l.sorted = nil
	}
	if had && old != 0 {
		l.n--
	}
	if ino != 0 {
		l.n++
	}
	switch {
	case ino == 0 && l.complete:
		delete(l.names, name)
		if had {
			return -1
		}
		return 0
	case had:
		l.names[name] = ino
		return 0
	}
	l.names[name] = ino
	return 1
}

func (m *memo) reset() {
	m.dirs = make(map[Ino]*listing)
	m.attrs = make(map[Ino]Attr)
	m.mans = make(map[Ino][]byte)
	m.size = 0
}

func (m *memo) dropDir(d Ino) {
	if l, ok := m.dirs[d]; ok {
		m.size -= len(l.names)
		delete(m.dirs, d)
	}
}

func (m *memo) dropAttr(ino Ino) {
	if _, ok := m.attrs[ino]; ok {
		m.size--
		delete(m.attrs, ino)
	}
	m.dropMan(ino)
}

// setMan keeps a file's encoded chunk list, if small, for a node whose
// attributes the memo holds; a larger one is forgotten. man is kept, not
// copied: its callers hand over a slice nobody changes (an encoding made
// for the mutation, or bytes a query scanned).
func (m *memo) setMan(ino Ino, man []byte) {
	if len(man) > maxKeptManifest {
		m.dropMan(ino)
		return
	}
	if _, ok := m.mans[ino]; !ok {
		m.size++
	}
	m.mans[ino] = man
}

func (m *memo) dropMan(ino Ino) {
	if _, ok := m.mans[ino]; ok {
		m.size--
		delete(m.mans, ino)
	}
}

func (m *memo) setAttr(a Attr) {
	if _, ok := m.attrs[a.Ino]; !ok {
		m.size++
	}
	m.attrs[a.Ino] = a
}

// setName records name in dir if the memo lists dir.
func (m *memo) setName(dir Ino, name string, ino Ino) {
	if l, ok := m.dirs[dir]; ok {
		m.size += l.set(name, ino)
	}
}

// behindOn reports whether the store answers mutations from memory.
func (s *Store) behindOn() bool { return s.mem != nil }

// startBehind starts the write-behind of a store whose mount mutations
// commit in groups (not an in-memory store, not a store with a trash).
func (s *Store) startBehind(ctx context.Context) error {
	if s.memory || s.groupWindow() == 0 || s.opts.Trash != nil || s.opts.NoWriteBehind {
		return nil
	}
	m := &memo{lastRev: s.rev.Load()}
	m.reset()
	// The goroutine sleeps in a read of an eventfd, not on a channel: a
	// thread woken by the kernel takes an idle P and runs at once, where a
	// goroutine readied by the handler waits for the handler's own P,
	// which stays with the handler's next read of /dev/fuse (measured: 85%
	// of queued mutations were run by the next request instead).
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("write-behind: %w", err)
	}
	s.mem = m
	s.bhFd = fd
	s.bhDone = make(chan struct{})
	go s.runBehind()
	return nil
}

// behindNap is how long the goroutine naps between runs of the queue
// during a burst of mutations, behindNaps how many empty naps end a burst.
// A mutation answered while it naps wakes nobody: the wake-up, a write
// to the eventfd that sends the other core an interrupt, cost the answer
// 6 us on the request's path (a create and a close each answered one),
// and the queue then runs a few mutations at a time. What waits in the
// queue meanwhile is no less durable: a queued mutation joins a group
// when it runs, and fsync runs the queue first.
const (
	behindNap  = 500 * time.Microsecond
	behindNaps = 4
)

// runBehind runs queued mutations as they come.
func (s *Store) runBehind() {
	defer close(s.bhDone)
	var buf [8]byte
	fds := []unix.PollFd{{Fd: int32(s.bhFd), Events: unix.POLLIN}}
	naps := 0
	for {
		switch {
		case s.queuedN.Load() > 0:
			naps = 0
		case naps < behindNaps:
			naps++
			// Napping, the goroutine is not asleep to the enqueuer: an
			// eventfd write now comes from stopBehind or a wake that
			// raced with the nap's start, and is read below.
			nap := unix.NsecToTimespec(int64(behindNap))
			if n, _ := unix.Ppoll(fds, &nap, nil); n > 0 {
				unix.Read(s.bhFd, buf[:])
			}
		default:
			s.bhSleeping.Store(true)
			if s.queuedN.Load() == 0 && !s.bhStopping.Load() {
				if _, err := unix.Read(s.bhFd, buf[:]); err != nil && err != unix.EINTR {
					s.log.Error("write-behind: wait", "err", err)
				}
			}
			s.bhSleeping.Store(false)
			naps = 0
		}
		if s.bhStopping.Load() {
			return
		}
		if s.queuedN.Load() > 0 {
			s.lockW()
			s.wmu.Unlock()
		}
	}
}

// wakeBehind wakes the goroutine if it sleeps.
func (s *Store) wakeBehind() {
	if s.bhSleeping.Load() {
		one := [8]byte{1}
		unix.Write(s.bhFd, one[:])
	}
}

// stopBehind stops the goroutine (Close runs what is queued after it).
func (s *Store) stopBehind() {
	if s.mem == nil {
		return
	}
	s.bhStopping.Store(true)
	one := [8]byte{1}
	unix.Write(s.bhFd, one[:])
	<-s.bhDone
	unix.Close(s.bhFd)
}

// nextIno is the inode number the next node takes: one past every number
// handed out, committed or not (not SQLite's next: a create answered from
// memory and then lost leaves its number unused in the rows, and the
// kernel may hold that node). Its callers hold the writer as busy writers
// (an apply, a mutation that runs at once), or the memo while no such
// writer works (a mutation answered from memory): one at a time.
func (s *Store) nextIno() Ino { return Ino(s.inoHigh.Load() + 1) }

// sawIno notes an inode number handed out.
func (s *Store) sawIno(ino Ino) {
	for {
		cur := s.inoHigh.Load()
		if int64(ino) <= cur || s.inoHigh.CompareAndSwap(cur, int64(ino)) {
			return
		}
	}
}

// noteRoom records whether the last group found room. Called with wmu held.
func (s *Store) noteRoom(ok bool) {
	if m := s.mem; m != nil {
		m.mu.Lock()
		m.room = ok
		m.mu.Unlock()
	}
}

// revLocked is the rev of the last mutation that ran. Called with wmu held.
func (s *Store) revLocked() int64 {
	if s.grp != nil {
		return s.grp.t.last
	}
	return s.rev.Load()
}

// lockW takes the writer and runs every queued mutation: what its holder
// reads or writes then comes after every mutation answered.
func (s *Store) lockW() {
	s.wmu.Lock()
	s.drainLocked(false)
}

// lockWrite is lockW for a writer other than the queue: until
// unlockWrite no mutation is queued, so the revs and inode numbers the
// queue hands out stay exact.
func (s *Store) lockWrite() {
	s.wmu.Lock()
	s.drainLocked(true)
}

// unlockWrite ends lockWrite. t is the local mutation that ran (nil for
// any other write) and err its result: the memo follows what it changed,
// or forgets everything.
func (s *Store) unlockWrite(t *wtx, err error) {
	if m := s.mem; m != nil {
		m.mu.Lock()
		m.busy--
		m.gen++
		switch {
		case err != nil:
			// Undone (a lost group has forgotten everything already).
		case t != nil && t.carries:
			// It declared every row it changed, and its names.
			for _, c := range t.named {
				m.setName(c.dir, c.name, c.child)
				if a := t.keep[c.child]; a != nil && a.Kind == KindDir {
					// A directory made by a create that carries: empty.
					if _, ok := m.dirs[c.child]; !ok {
						m.dirs[c.child] = &listing{names: make(map[string]Ino), complete: true}
					}
				}
			}
			for d := range t.dirty {
				if a, ok := m.attrs[d]; ok {
					a.Mtime = time.Unix(0, t.now)
					a.Ctime = a.Mtime
					m.attrs[d] = a
				}
			}
			for ino, a := range t.keep {
				switch _, had := m.attrs[ino]; {
				case a == nil:
					m.dropAttr(ino)
					m.dropDir(ino) // a removed directory
				case had || m.size < maxMemo:
					m.setAttr(*a)
					if r, ok := t.rows[ino]; ok {
						m.setMan(ino, r.manifest)
					} else if a.Kind == KindFile {
						m.dropMan(ino)
					}
				default:
					m.dropAttr(ino)
				}
			}
		default:
			s.forgetLocked(m)
		}
		m.lastRev = s.revLocked()
		m.mu.Unlock()
	}
	s.wmu.Unlock()
}

// drainLocked runs the queue until it is empty; with busy, it marks a
// writer holding the store in the same step. Called with wmu held.
func (s *Store) drainLocked(busy bool) {
	m := s.mem
	if m == nil {
		return
	}
	for {
		m.mu.Lock()
		q := m.queue
		m.queue = nil
		if len(q) == 0 {
			if busy {
				m.busy++
				m.gen++
			}
			// Exact now: nothing is queued and the writer is held.
			m.lastRev = s.revLocked()
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		s.runQueued(q)
	}
}

// runQueued runs queued mutations in order. A failure loses the mutation
// and every one answered after it.
func (s *Store) runQueued(q []queued) {
	ctx := context.Background()
	for i := range q {
		fn := q[i].fn
		if behindRunHook != nil {
			if err := behindRunHook(q[i].what.String()); err != nil {
				fn = func(*wtx) error { return err }
			}
		}
		crashpoint.Hit("vfs.behind.run")
		if t, err := s.mutateLocked(ctx, fn, &q[i]); err != nil {
			if t != nil {
				t.releaseStages() // nobody retries a lost commit
			}
			s.running = nil
			s.queuedFailed(&q[i], err, len(q)-i-1)
			break
		}
	}
	// What the run kept is published, at the count its last mutation
	// ended at: nobody writes it any more.
	if p := s.running; p != nil {
		s.running = nil
		s.kept.Store(p)
	}
	s.queuedN.Add(-int64(len(q)))
}

// queuedFailed drops the queue after a queued mutation failed. Called with
// wmu held.
func (s *Store) queuedFailed(q *queued, err error, after int) {
	m := s.mem
	m.mu.Lock()
	after += len(m.queue)
	s.queuedN.Add(-int64(len(m.queue)))
	m.queue = nil
	s.forgetLocked(m)
	m.lastRev = s.revLocked()
	m.mu.Unlock()
	err = fmt.Errorf("%s, answered before it ran, and %d mutations answered after it: %w", q.what, after, err)
	metricBehindLost.Add(float64(after + 1))
	s.log.Error("mutations answered to the kernel were lost", "err", err)
	if s.grpErr == nil {
		s.grpErr = err
	}
	s.lostAnswered()
	if behindFailHook != nil {
		behindFailHook(err)
	}
}

// behindFailHook, when set (tests), sees every lost queued mutation;
// behindRunHook fails the queued mutation it returns an error for.
var (
	behindFailHook func(error)
	behindRunHook  func(what string) error
)

// forget drops everything the memo knows. Called with wmu held.
func (s *Store) forget() {
	if m := s.mem; m != nil {
		m.mu.Lock()
		s.forgetLocked(m)
		m.mu.Unlock()
	}
}

// forgetLocked drops the memo. What was kept of attributes goes with it:
// a queued mutation may have changed a kept node in a way only the memo
// knew. Called with m.mu held.
func (s *Store) forgetLocked(m *memo) {
	m.reset()
	m.gen++
	s.kept.Store(nil)
	s.writes.Add(2)
}

// enqueue queues fn, answered at now as rev. Called with m.mu held.
func (s *Store) enqueue(m *memo, what what, now, rev int64, fn func(*wtx) error) {
	s.enqueueQueued(m, queued{fn: fn, now: now, rev: rev, what: what})
}

// enqueueQueued queues q. Called with m.mu held.
func (s *Store) enqueueQueued(m *memo, q queued) {
	m.answered(q.rev)
	m.queue = append(m.queue, q)
	s.queuedN.Add(1)
	// Kept attributes and listings read before now are stale: their
	// readers (keptAttr, AttrAsOf) see the queue is not empty.
	s.wakeBehind()
}

// memoFor returns the memo locked, ready to answer a mutation of name in
// dir: what dir holds under name and dir's attributes known, nothing
// else writing, room in the queue. nil means the mutation runs at once.
func (s *Store) memoFor(ctx context.Context, dir Ino, name string) *memo {
	m := s.mem
	if m == nil || s.quota.Load() != nil || s.closed.Load() {
		return nil
	}
	for try := 0; ; try++ {
		m.mu.Lock()
		l, listed := m.dirs[dir]
		da, attrs := m.attrs[dir]
		known := false
		if listed {
			_, known = l.lookup(name)
		}
		full := len(m.queue) >= maxQueued
		switch {
		case m.busy > 0 || !m.room || attrs && da.Kind != KindDir:
			m.mu.Unlock()
			return nil
		case known && attrs && !full:
			return m
		}
		m.mu.Unlock()
		if try == 2 {
			return nil
		}
		if full {
			metricBehindFull.Inc()
			s.lockW()
			s.wmu.Unlock()
			continue
		}
		if err := s.learnName(ctx, dir, name); err != nil {
			return nil
		}
	}
}

// learnName reads what the memo lacks for a mutation of name in dir: the
// directory's attributes, what the name holds.
func (s *Store) learnName(ctx context.Context, dir Ino, name string) error {
	m := s.mem
	m.mu.Lock()
	gen := m.gen
	_, attrs := m.attrs[dir]
	m.mu.Unlock()
	var d node
	if !attrs {
		var err error
		if d, err = s.viewAttr(ctx, dir); err != nil {
			return err
		}
		if d.kind != KindDir {
			return ErrNotDir
		}
	}
	var child node
	err := s.view(ctx, func(ctx context.Context, q chunkstore.Querier) (err error) {
		child, err = lookupChildAttrs(ctx, q, dir, name)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotExist) {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen || m.busy > 0 {
		return nil
	}
	if m.size+3 > maxMemo {
		s.forgetLocked(m) // what was just read stays true
	}
	if !attrs {
		m.setAttr(d.attr())
	}
	if _, ok := m.dirs[dir]; !ok {
		m.dirs[dir] = &listing{names: make(map[string]Ino)}
	}
	if err == nil {
		m.setName(dir, name, child.ino)
		if _, ok := m.attrs[child.ino]; !ok {
			m.setAttr(child.attr())
		}
	} else {
		m.setName(dir, name, 0)
	}
	return nil
}

// answered counts a mutation answered from the memo as rev (0: a change
// of local state only, which stamps no rev). Called with m.mu held.
func (m *memo) answered(rev int64) {
	m.seq++
	m.gen++
	if rev != 0 {
		m.lastRev = rev
	}
	metricBehindAnswered.Inc()
}

// snap returns the memo's generation, for learning what is read next.
func (m *memo) snap() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// learnLocked keeps a listing page's attributes and small chunk lists
// (mans, in the page's order), and when complete, the directory's whole
// listing. Called with m.mu held, the generation unchanged since the page
// was read.
func (s *Store) learnLocked(m *memo, dir Ino, page []DirEntryAttr, mans [][]byte, complete bool) {
	if 3*len(page)+2 > maxMemo {
		return // no page of the mount's or the API's is this long
	}
	if m.size+3*len(page)+2 > maxMemo {
		s.forgetLocked(m)
	}
	// Nothing was written since the page was read: it is what the memo
	// would say.
	for i, e := range page {
		if _, ok := m.attrs[e.Attr.Ino]; !ok {
			m.setAttr(e.Attr)
		}
		if _, ok := m.mans[e.Attr.Ino]; !ok && e.Attr.Kind == KindFile && i < len(mans) && (mans[i] != nil || e.Attr.Size == 0) {
			m.setMan(e.Attr.Ino, mans[i])
		}
	}
	if l, ok := m.dirs[dir]; !complete || ok && l.complete {
		return
	}
	m.dropDir(dir)
	l := &listing{names: make(map[string]Ino, len(page)), complete: true}
	for _, e := range page {
		m.size += l.set(e.Name, e.Attr.Ino)
	}
	m.dirs[dir] = l
}

// memoOpen returns the state of a file the memo holds whole
// (attributes and chunk list), as answered, while no other writer works.
func (s *Store) memoOpen(ino Ino) (node, bool) {
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy > 0 || s.quota.Load() != nil {
		// A quota's reservations count open files in the order the
		// writer sees them: such opens wait for it, as before.
		return node{}, false
	}
	a, ok := m.attrs[ino]
	man, known := m.mans[ino]
	if !ok || !known || a.Kind != KindFile {
		return node{}, false
	}
	return nodeOf(a, man), true
}

// memoPage answers a listing page from the memo: the names after after,
// in name order (SQLite's, byte order), at most limit, with their row
// attributes, when the memo holds the directory's whole listing and every
// node in the page, and no other writer works. A directory made through
// the mount, or listed whole before, lists again with no query (rm -rf
// and find list every directory of a tree).
func (s *Store) memoPage(dir Ino, after string, limit int) ([]DirEntryAttr, bool) {
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	a, known := m.attrs[dir]
	l := m.dirs[dir]
	if m.busy > 0 || !known || a.Kind != KindDir || l == nil || !l.complete || len(l.names) > maxMemoPage {
		return nil, false
	}
	if l.sorted == nil && len(l.names) > 0 {
		l.sorted = slices.Sorted(maps.Keys(l.names))
	}
	i, found := slices.BinarySearch(l.sorted, after)
	if found {
		i++
	}
	out := make([]DirEntryAttr, 0, min(limit, len(l.sorted)-i))
	for ; i < len(l.sorted) && len(out) < limit; i++ {
		name := l.sorted[i]
		ea, ok := m.attrs[l.names[name]]
		if !ok {
			return nil, false
		}
		out = append(out, DirEntryAttr{Name: name, Attr: ea})
	}
	return out, true
}

// learnAttr keeps attributes read while the generation stood at gen.
func (s *Store) learnAttr(gen uint64, a Attr) {
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen || m.busy > 0 {
		return
	}
	if _, ok := m.attrs[a.Ino]; ok {
		return
	}
	if m.size+1 > maxMemo {
		s.forgetLocked(m)
	}
	m.setAttr(a)
}

// memoLookup answers a lookup from the memo; ok is false when it cannot,
// and gen is then the generation to learn what the caller reads at.
func (s *Store) memoLookup(parent Ino, name string) (_ Attr, gen uint64, ok bool, _ error) {
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	l, listed := m.dirs[parent]
	if !listed {
		return Attr{}, m.gen, false, nil
	}
	ino, known := l.lookup(name)
	switch {
	case !known:
		return Attr{}, m.gen, false, nil
	case ino == 0:
		return Attr{}, 0, true, ErrNotExist
	}
	a, ok := m.attrs[ino]
	return a, m.gen, ok, nil
}

// learnLookup keeps what a lookup read while the generation stood at gen:
// the name's inode (or that it is free) in a listed directory, and the
// node's attributes.
func (s *Store) learnLookup(gen uint64, parent Ino, name string, a Attr, err error) {
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen || m.busy > 0 || m.size+2 > maxMemo {
		return
	}
	if err == nil {
		m.setName(parent, name, a.Ino)
		if _, ok := m.attrs[a.Ino]; !ok {
			m.setAttr(a)
		}
	} else if errors.Is(err, ErrNotExist) {
		m.setName(parent, name, 0)
	}
}

// memoAttr answers a stat from the memo; ok is false when it cannot, and
// gen is then the generation to learn what the caller reads at.
func (s *Store) memoAttr(ino Ino) (_ Attr, gen uint64, ok bool) {
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.attrs[ino]
	return a, m.gen, ok
}

// behindCreate answers the creation of a file or directory from memory
// and queues it; ok is false when the memo cannot decide it (the caller
// runs it at once). made runs as the node is answered.
func (s *Store) behindCreate(ctx context.Context, parent Ino, name string, nn newNode, made func(node)) (_ Attr, ok bool, _ error) {
	if nn.kind != KindFile && nn.kind != KindDir || len(nn.manifest) > 0 {
		return Attr{}, false, nil
	}
	m := s.memoFor(ctx, parent, name)
	if m == nil {
		return Attr{}, false, nil
	}
	defer m.mu.Unlock()
	l := m.dirs[parent]
	if ino, _ := l.lookup(name); ino != 0 {
		return Attr{}, true, ErrExist
	}
	now := time.Now().UnixNano()
	rev := m.lastRev + 1
	// Every other inserter holds the writer as a busy writer, or is the
	// queue inserting numbers handed out here: inoHigh stands.
	nn.ino = s.nextIno()
	s.sawIno(nn.ino)
	n := rowOf(nn, now, rev)
	n.ino = nn.ino
	a := n.attr()
	m.size += l.set(name, n.ino)
	m.setAttr(a)
	if nn.kind == KindFile {
		m.setMan(n.ino, n.manifest)
	}
	if nn.kind == KindDir {
		m.dirs[n.ino] = &listing{names: make(map[string]Ino), complete: true}
	}
	s.touchParent(m, parent, now)
	if made != nil {
		made(n)
	}
	var qc *queuedCreate
	if nn.kind == KindFile {
		qc = &queuedCreate{parent: parent, name: name, nn: nn}
	}
	s.enqueueQueued(m, queued{fn: s.createFn(parent, name, nn, nil, new(node), true), now: now, rev: rev,
		what: what{verb: "create", name: name, dir: parent}, create: qc, bulk: true})
	return a, true, nil
}

// behindRemove answers an unlink or rmdir from memory and queues it; ok is
// false when the memo cannot decide it.
func (s *Store) behindRemove(ctx context.Context, parent Ino, name string, dir bool) (ok bool, _ error) {
	m := s.memoFor(ctx, parent, name)
	if m == nil {
		return false, nil
	}
	defer m.mu.Unlock()
	l := m.dirs[parent]
	ino, _ := l.lookup(name)
	if ino == 0 {
		return true, ErrNotExist
	}
	a, known := m.attrs[ino]
	if !known {
		return false, nil
	}
	switch {
	case dir && a.Kind != KindDir:
		return true, ErrNotDir
	case !dir && a.Kind == KindDir:
		return true, ErrIsDir
	case dir:
		sub, listed := m.dirs[ino]
		switch {
		case !listed || !sub.complete && sub.n == 0:
			return false, nil // empty or not: a query says
		case sub.n > 0:
			return true, ErrNotEmpty
		}
	case a.Kind != KindFile && a.Kind != KindSymlink, a.Nlink == 0, a.Nlink == 1 && s.isOpen(ino):
		// An open file's last name leaves an orphan: that runs at once.
		return false, nil
	}
	var was *node
	if !dir {
		// The node's number, kind and links as they are before the
		// removal: what it would read.
		was = &node{ino: ino, kind: a.Kind, nlink: a.Nlink}
	}
	now := time.Now().UnixNano()
	rev := m.lastRev + 1
	m.size += l.set(name, 0)
	if !dir && a.Nlink > 1 {
		// One name of several: the node stays, one link fewer.
		a.Nlink--
		a.Ctime = time.Unix(0, now)
		m.setAttr(a)
	} else {
		m.dropAttr(ino)
		m.dropDir(ino)
	}
	s.touchParent(m, parent, now)
	s.enqueue(m, what{verb: "remove", name: name, dir: parent}, now, rev, s.removeFn(parent, name, dir, was))
	return true, nil
}

// behindLink answers a link of a file or symlink the memo knows, under a
// name the memo knows free, and queues fn, the link's mutation; ok is
// false when it cannot.
func (s *Store) behindLink(ctx context.Context, ino, parent Ino, name string, fn func(*wtx) error) (_ Attr, ok bool, _ error) {
	m := s.memoFor(ctx, parent, name)
	if m == nil {
		return Attr{}, false, nil
	}
	defer m.mu.Unlock()
	a, known := m.attrs[ino]
	if !known || a.Kind != KindFile && a.Kind != KindSymlink || a.Nlink == 0 {
		return Attr{}, false, nil
	}
	l := m.dirs[parent]
	if c, _ := l.lookup(name); c != 0 {
		return Attr{}, true, ErrExist
	}
	now := time.Now().UnixNano()
	rev := m.lastRev + 1 // the new path's
	a.Nlink++
	a.Ctime = time.Unix(0, now)
	m.size += l.set(name, ino)
	m.setAttr(a)
	s.touchParent(m, parent, now)
	s.enqueue(m, what{verb: "link", name: name, ino: ino, dir: parent}, now, rev, fn)
	return a, true, nil
}

// memoOf returns the memo locked, ready to answer a mutation of node ino
// whose attributes it knows; nil means the mutation runs at once.
func (s *Store) memoOf(ino Ino) (*memo, Attr) {
	m := s.mem
	if m == nil || s.quota.Load() != nil || s.closed.Load() {
		return nil, Attr{}
	}
	for try := 0; ; try++ {
		m.mu.Lock()
		a, known := m.attrs[ino]
		switch {
		case m.busy > 0 || !m.room || !known:
			m.mu.Unlock()
			return nil, Attr{}
		case len(m.queue) < maxQueued:
			return m, a
		}
		m.mu.Unlock()
		if try == 1 {
			return nil, Attr{}
		}
		metricBehindFull.Inc()
		s.lockW()
		s.wmu.Unlock()
	}
}

// behindSetAttr answers a SetAttr (without a size) of a node the memo
// knows and queues it; ok is false when it cannot.
func (s *Store) behindSetAttr(ino Ino, sa SetAttr) (_ Attr, ok bool) {
	if sa.Size != nil {
		return Attr{}, false
	}
	m, a := s.memoOf(ino)
	if m == nil {
		return Attr{}, false
	}
	defer m.mu.Unlock()
	now := time.Now().UnixNano()
	var rev int64
	if applySetAttr(&a, sa, now) {
		rev = m.lastRev + 1
		a.Rev = rev
	}
	m.setAttr(a)
	s.enqueue(m, what{verb: "setattr", ino: ino}, now, rev, setAttrFn(ino, sa, new(Attr)))
	return a, true
}

// behindCommit answers the commit of a file's new content c when the memo
// knows its node, and queues fn, the commit's mutation; ok is false when
// it cannot. It returns the rev the commit stamps.
//
// When the last mutation queued is the file's create, the commit folds
// into it instead: one mutation inserts the file's row with its content,
// where the two would insert the row, then update it. Nothing else can
// have touched the node in between (any other writer runs the queue
// first), and the row, the change row and the counters end as the two
// would leave them: the create's rev is stamped on nothing, as the
// commit's would have overwritten it on both. A failure loses both, a
// suffix of what was answered as ever.
func (s *Store) behindCommit(ino Ino, c content, fn func(*wtx) error) (rev int64, ok bool) {
	m, a := s.memoOf(ino)
	if m == nil {
		return 0, false
	}
	defer m.mu.Unlock()
	if a.Kind != KindFile || a.Nlink == 0 {
		return 0, false
	}
	now := time.Now().UnixNano()
	rev = m.lastRev + 1
	a.Size, a.Mtime, a.Ctime, a.Rev = c.man.Size(), time.Unix(0, c.mtime), time.Unix(0, now), rev
	m.setAttr(a)
	m.setMan(ino, chunkstore.AppendManifest(nil, c.man))
	if k := len(m.queue) - 1; k >= 0 && m.queue[k].create != nil && m.queue[k].create.nn.ino == ino {
		q := &m.queue[k]
		q.fn, q.rev, q.what.verb = s.foldedCreateFn(q.create, c, rev, now), rev, "write"
		q.create = nil // one fold: a second commit queues as ever
		m.answered(rev)
		metricBehindFolded.Inc()
		return rev, true
	}
	s.enqueue(m, what{verb: "commit", ino: ino}, now, rev, fn)
	return rev, true
}

// foldedCreateFn is the mutation of a file's create (qc) with its first
// commit (c, answered at now as rev) folded in: the create's rev, then
// the commit's, stamped, and the row inserted with the content, the
// commit's times and rev; the parent's times are the create's (the
// queued mutation runs at the create's time).
func (s *Store) foldedCreateFn(qc *queuedCreate, c content, rev, now int64) func(*wtx) error {
	nn := qc.nn
	nn.manifest, nn.mtime, nn.ctime = c.man, c.mtime, now
	create := s.createFn(qc.parent, qc.name, nn, nil, new(node), true)
	return func(t *wtx) error {
		for t.stamp() < rev {
			t.nextMutation()
		}
		t.hold(c.stage)
		t.own = c.own
		return create(t)
	}
}

// touchParent sets a directory's times as a change of its entries does.
func (s *Store) touchParent(m *memo, dir Ino, now int64) {
	if a, ok := m.attrs[dir]; ok {
		a.Mtime = time.Unix(0, now)
		a.Ctime = a.Mtime
		m.attrs[dir] = a
	}
}
