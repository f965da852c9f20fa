package testutil

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Linger is the body of an RPC handler slow to stop: it counts itself
// started, waits for its call's context to end (the caller's cancel), then
// keeps running until Release. The call-accounting tests of rpc and
// syncwire fill a session's slots with it.
type Linger struct {
	started atomic.Int64
	release chan struct{}
	once    sync.Once
}

// NewLinger returns a Linger not yet released.
func NewLinger() *Linger { return &Linger{release: make(chan struct{})} }

// Handle is the handler's body.
func (l *Linger) Handle(ctx context.Context) error {
	l.started.Add(1)
	<-ctx.Done()
	<-l.release
	return ctx.Err()
}

// Started is how many handlers have started.
func (l *Linger) Started() int64 { return l.started.Load() }

// Release lets every handler, running or to come, return. It may be called
// more than once (a test calls it, and registers it as a cleanup too).
func (l *Linger) Release() { l.once.Do(func() { close(l.release) }) }

// Start makes n calls with call, each on one context, and waits until n
// more handlers have started. stop cancels the calls and waits for them
// to return: their handlers go on until Release.
func (l *Linger) Start(t testing.TB, n int, call func(ctx context.Context)) (stop func()) {
	t.Helper()
	want := l.Started() + int64(n)
	ctx, cancel := context.WithCancel(Context(t, 30*time.Second))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { call(ctx) })
	}
	WaitFor(t, "the lingering calls to start", 10*time.Second, func() bool { return l.Started() == want })
	return func() {
		cancel()
		wg.Wait()
	}
}

// Abandon is Start, then stop: n handlers left stopping.
func (l *Linger) Abandon(t testing.TB, n int, call func(ctx context.Context)) {
	t.Helper()
	l.Start(t, n, call)()
}
