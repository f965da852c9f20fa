package syncwire

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
)

const methodLinger rpc.Method = 310

// The same load on the session a real Driver uses between two stores: 64
// abandoned calls plus one, then 1,000 concurrent quick calls, and the
// driver's push and pull still run on that session (no redial).
func TestDriverSyncsOnASessionAfterCallLoad(t *testing.T) {
	p := newPair(t, DriverOptions{})
	l := testutil.NewLinger()
	p.srv.Load().Handle(methodLinger, func(ctx context.Context, c *rpc.Incoming) error { return l.Handle(ctx) })
	p.srv.Load().Handle(methodEcho, func(ctx context.Context, c *rpc.Incoming) error { return c.Reply(c.Body) })
	t.Cleanup(l.Release)
	write(t, p.server, "before.txt", []byte("before"))
	p.tick()
	s, epoch, err := p.client.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Peer().MaxCalls
	l.Abandon(t, int(n), func(ctx context.Context) { s.Call(ctx, methodLinger, nil) })
	var wg sync.WaitGroup
	var busy, failed atomic.Int64
	for i := range 1000 {
		wg.Go(func() {
			_, err := s.Call(testutil.Context(t, 30*time.Second), methodEcho, []byte{byte(i)})
			switch {
			case errors.Is(err, rpc.ErrBusy):
				busy.Add(1)
			case err != nil:
				failed.Add(1)
				t.Errorf("call: %v", err)
			}
		})
	}
	wg.Wait()
	write(t, p.server, "pushed.txt", []byte("pushed"))
	write(t, p.cont, "pulled.txt", []byte("pulled"))
	tr := p.tick()
	if tr.Pull.Applied != 1 || tr.Push.Applied < 1 {
		t.Errorf("tick after the load: pull %+v push %+v", tr.Pull, tr.Push)
	}
	if _, e2, _ := p.client.Session(t.Context()); e2 != epoch {
		t.Errorf("the driver redialled (epoch %d -> %d): the load ended the session", epoch, e2)
	}
	assertSameTree(t, p.server, p.cont)
	t.Logf("1,000 quick calls after %d abandoned: %d busy", n, busy.Load())
	l.Release()
}
