package syncwire

import (
	"context"
	"runtime"
	"sync"

	"github.com/wsync/wsync/chunkstore"
)

// stager hashes and stages received chunks on several goroutines, so
// hashing and writing one chunk overlaps receiving the next. The first
// failure (ErrHashMismatch for bytes that do not hash to their address)
// stops it.
type stager struct {
	st     *chunkstore.Stage
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan Object
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error
}

func newStager(ctx context.Context, st *chunkstore.Stage) *stager {
	n := min(runtime.GOMAXPROCS(0), 4)
	ctx, cancel := context.WithCancel(ctx)
	g := &stager{st: st, ctx: ctx, cancel: cancel, ch: make(chan Object, n)}
	for range n {
		g.wg.Go(func() {
			for o := range g.ch {
				if g.failed() {
					continue
				}
				if err := st.Put(ctx, o.Hash, o.Data); err != nil {
					g.setErr(err)
				}
			}
		})
	}
	return g
}

func (g *stager) failed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err != nil
}

func (g *stager) setErr(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
		g.cancel()
	}
	g.mu.Unlock()
}

// put queues one object; it returns the first failure so far.
func (g *stager) put(o Object) error {
	select {
	case g.ch <- o:
	case <-g.ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil && g.ctx.Err() != nil {
		return g.ctx.Err()
	}
	return g.err
}

// wait stages what is queued and returns the first failure.
func (g *stager) wait() error {
	close(g.ch)
	g.wg.Wait()
	g.cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}
