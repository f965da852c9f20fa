package rpc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
)

// Call accounting (issue 9 item 6): both sides count a call's slot the same
// way, so an honest caller never exceeds the callee's MaxCalls; a call over
// the limit is refused with ErrBusy, never by ending the session.

const methodLinger Method = 310

// lingerSession is a client's session on a server that serves methodLinger
// with the returned Linger: the handler starts, waits for its context to
// end (the caller's CANCEL), then keeps running until Release (registered
// as a cleanup after the server's, so it runs first), like a handler slow
// to stop.
func lingerSession(t *testing.T) (*Client, *Session, *testutil.Linger) {
	t.Helper()
	srv := testServer(t, ServerOptions{})
	l := testutil.NewLinger()
	srv.Handle(methodLinger, func(ctx context.Context, c *Incoming) error { return l.Handle(ctx) })
	c := wsClient(t, testutil.WSServer(t, srv, "/rpc"), "")
	t.Cleanup(l.Release)
	return c, session(t, c), l
}

// callLinger is a call that lingers, for Linger.Start.
func callLinger(s *Session) func(ctx context.Context) {
	return func(ctx context.Context) { s.Call(ctx, methodLinger, nil) }
}

// sessionStillWorks checks the session is the one we started with and that
// unary and streaming calls still work on it.
func sessionStillWorks(t *testing.T, c *Client, s *Session) {
	t.Helper()
	ctx := testutil.Context(t, 20*time.Second)
	if got, err := s.Call(ctx, methodEcho, []byte("after")); err != nil || string(got) != "after" {
		t.Fatalf("echo after the load: %q, %v (session err %v)", got, err, s.Err())
	}
	if got, err := recvAll(ctx, s, methodRange, []byte{3}); err != nil || len(got) != 3 {
		t.Fatalf("stream after the load: %d messages, %v", len(got), err)
	}
	now, _, err := c.Session(ctx)
	if err != nil || now != s {
		t.Fatalf("the session was replaced (%v): the load ended it (err %v)", err, s.Err())
	}
}

func TestAbandonedCallsPlusOneKeepTheSession(t *testing.T) {
	c, s, l := lingerSession(t)
	n := s.Peer().MaxCalls
	// The caller abandons all of them; the handlers keep running.
	l.Abandon(t, int(n), callLinger(s))
	// One more call, and then the session's ordinary traffic.
	if got, err := s.Call(testutil.Context(t, 10*time.Second), methodEcho, []byte("one more")); err != nil && !errors.Is(err, ErrBusy) {
		t.Fatalf("call %d: %v (session err %v)", n+1, err, s.Err())
	} else if err == nil && string(got) != "one more" {
		t.Fatalf("call %d = %q", n+1, got)
	}
	sessionStillWorks(t, c, s)
}

func TestConcurrentQuickCallsKeepTheSession(t *testing.T) {
	for _, n := range []int{64, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			srv := testServer(t, ServerOptions{})
			c := wsClient(t, testutil.WSServer(t, srv, "/rpc"), "")
			s := session(t, c)
			rounds := 3
			if os.Getenv("WSYNC_LONG") != "" {
				rounds = 30
			}
			ctx := testutil.Context(t, 60*time.Second)
			var ok, busy atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Go(func() {
					for r := range rounds {
						want := fmt.Sprintf("%d.%d", i, r)
						got, err := s.Call(ctx, methodEcho, []byte(want))
						switch {
						case errors.Is(err, ErrBusy):
							busy.Add(1)
						case err != nil:
							errs <- err
							return
						case string(got) != want:
							errs <- fmt.Errorf("echo %q = %q", want, got)
							return
						default:
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("call failed: %v (session err %v)", err, s.Err())
			}
			t.Logf("%d calls: %d completed, %d busy", n*rounds, ok.Load(), busy.Load())
			if ok.Load() == 0 {
				t.Fatal("no call completed")
			}
			sessionStillWorks(t, c, s)
		})
	}
}

// A peer that ignores our MaxCalls gets EBUSY for the calls over it, and
// its session stays up.
func TestCallsOverTheLimitGetErrBusy(t *testing.T) {
	c, s, l := lingerSession(t)
	n := int(s.Peer().MaxCalls)
	// Pretend the peer allows more than it does: our side no longer queues.
	s.slots = make(chan struct{}, 4*n)
	stop := l.Start(t, n, callLinger(s)) // the peer's slots fill
	_, err := s.Call(testutil.Context(t, 10*time.Second), methodEcho, []byte("x"))
	if !errors.Is(err, ErrBusy) || CodeOf(err) != CodeBusy {
		t.Fatalf("call over the limit: %v, want ErrBusy", err)
	}
	l.Release()
	stop()
	sessionStillWorks(t, c, s)
}

// Cancelled calls whose handlers are slow to stop are bounded: past
// 2*MaxCalls of them new calls get ErrBusy (the session stays up), and
// once they stop calls are served again.
func TestStoppingHandlersAreBounded(t *testing.T) {
	c, s, l := lingerSession(t)
	n := int(s.Peer().MaxCalls)
	for range 2 {
		l.Abandon(t, n, callLinger(s))
	}
	ctx := testutil.Context(t, 20*time.Second)
	if _, err := s.Call(ctx, methodEcho, []byte("x")); !errors.Is(err, ErrBusy) {
		t.Fatalf("call with %d handlers stopping: %v, want ErrBusy", 2*n, err)
	}
	l.Release()
	testutil.WaitFor(t, "calls to be served again", 10*time.Second, func() bool {
		_, err := s.Call(ctx, methodEcho, []byte("x"))
		return err == nil
	})
	sessionStillWorks(t, c, s)
}
