package remote

import (
	"sync"

	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/workspace"
)

var _ workspace.SessionNotifier = (*Remote)(nil)

// NotifySession makes the remote tell fn of every session with computerd
// that comes up (with computerd's runtime id) and of its end (with the
// reason), in order: a session's end before the next one's start, each
// once. Sessions are dialled by the first call that needs one, so a lost
// session is told at once and the next connected one at the next call.
func (r *Remote) NotifySession(fn func(workspace.SessionChange)) {
	r.watch.mu.Lock()
	r.watch.fn = fn
	r.watch.mu.Unlock()
}

// sessions watches the rpc client's sessions for NotifySession.
type sessions struct {
	mu  sync.Mutex
	fn  func(workspace.SessionChange)
	cur *rpc.Session // told as connected, not yet as lost
	wg  sync.WaitGroup
}

// up is the client's OnSession: sess has just come up.
func (s *sessions) up(sess *rpc.Session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostLocked(s.cur) // the client redials once the last one died: tell that first
	s.cur = sess
	if s.fn != nil {
		s.fn(workspace.SessionChange{Connected: true, RuntimeID: sess.Peer().RuntimeID.String()})
	}
	s.wg.Go(func() {
		<-sess.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lostLocked(sess)
	})
}

// lostLocked tells of sess's end, unless it was told already. s.mu is held.
func (s *sessions) lostLocked(sess *rpc.Session) {
	if sess == nil || sess != s.cur {
		return
	}
	s.cur = nil
	if s.fn != nil {
		s.fn(workspace.SessionChange{RuntimeID: sess.Peer().RuntimeID.String(), Err: sess.Err()})
	}
}

// wait waits for the watchers of the sessions that ended.
func (s *sessions) wait() { s.wg.Wait() }
