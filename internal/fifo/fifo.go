// Package fifo is the one queue that serialises sync work in arrival order
// (the seed's tail-promise queue): a workspace's sync phases, and a sync
// driver's calls on its session.
//
// A failed call releases its turn like any other, so one failure never
// poisons the calls queued behind it. A caller whose context ends while it
// waits leaves the queue without running; the callers behind it keep their
// order.
package fifo

import (
	"context"
	"sync"
)

// Queue runs functions one at a time in arrival order. The zero value is
// an empty queue.
type Queue struct {
	mu      sync.Mutex
	busy    bool
	waiters []chan struct{} // each closed when its owner's turn comes
}

// Do runs fn when every earlier caller has finished, and returns its
// error; or returns ctx.Err() without running fn if ctx ends first.
func (q *Queue) Do(ctx context.Context, fn func() error) error {
	if err := q.acquire(ctx); err != nil {
		return err
	}
	defer q.release()
	return fn()
}

func (q *Queue) acquire(ctx context.Context) error {
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	q.waiters = append(q.waiters, turn)
	q.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		for i, w := range q.waiters {
			if w == turn {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				q.mu.Unlock()
				return ctx.Err()
			}
		}
		q.mu.Unlock()
		// The turn was handed over as the context ended: pass it on.
		q.release()
		return ctx.Err()
	}
}

func (q *Queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) == 0 {
		q.busy = false
		return
	}
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	close(next) // busy stays true: the turn passes to next
}

// Queued reports how many callers wait (not counting the one running).
func (q *Queue) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}
