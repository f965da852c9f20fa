package workspace

import (
	"context"
	"sync"
)

// fifo serialises a workspace's sync phases in arrival order (the seed's
// tail-promise queue). A failed call releases its turn like any other, so
// one failure never poisons the calls queued behind it. A caller whose
// context ends while it waits leaves the queue without running.
type fifo struct {
	mu      sync.Mutex
	busy    bool
	waiters []chan struct{} // each closed when its owner's turn comes
}

// do runs fn when every earlier caller has finished.
func (q *fifo) do(ctx context.Context, fn func() error) error {
	if err := q.acquire(ctx); err != nil {
		return err
	}
	defer q.release()
	return fn()
}

func (q *fifo) acquire(ctx context.Context) error {
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

func (q *fifo) release() {
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

// queued reports how many callers wait (for status and tests).
func (q *fifo) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}
