package syncwire

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/vfs"
)

var errCrashed = errors.New("crashed after the apply")

// crashAfterApply is a store whose at-th Apply commits and then fails, as
// if its process died between the apply and whatever followed it (the
// driver's watermark write, the server's reply).
type crashAfterApply struct {
	Backend
	at, calls int
}

func (c *crashAfterApply) Apply(ctx context.Context, es []vfs.ChangeEntry, opts vfs.ApplyOptions) (vfs.ApplyResult, error) {
	res, err := c.Backend.Apply(ctx, es, opts)
	if c.calls++; err == nil && c.calls == c.at {
		return res, errCrashed
	}
	return res, err
}

const bounceBatch = 16

// baselined is a pair with a first tick done (both push cursors cover
// everything) and 100 files written on one side.
func baselined(t *testing.T, on func(p *pair) *vfs.Store) *pair {
	p := newPair(t, DriverOptions{BatchEntries: bounceBatch})
	write(t, p.server, "base/s", []byte("s"))
	write(t, p.cont, "base/c", []byte("c"))
	p.tick()
	s := on(p)
	for i := range 100 {
		write(t, s, fmt.Sprintf("w/%03d", i), []byte(fmt.Sprint(i)))
	}
	return p
}

// A pull whose driver dies right after committing its third batch: the
// resumed pull and the push back must not send the pulled entries back
// (at most one batch may bounce).
func TestCutPullKeepsBounceSuppression(t *testing.T) {
	p := baselined(t, func(p *pair) *vfs.Store { return p.cont })
	ctx := testutil.Context(t, 60*time.Second)
	dead := NewDriver(&crashAfterApply{Backend: p.server, at: 3}, "container", p.client, DriverOptions{BatchEntries: bounceBatch})
	if _, err := dead.PullOnce(ctx); !errors.Is(err, errCrashed) {
		t.Fatalf("pull with a crash after the third apply: %v", err)
	}
	// A restarted server: a new driver on the same store.
	d := NewDriver(p.server, "container", p.client, DriverOptions{BatchEntries: bounceBatch})
	assertNoBounce(ctx, t, p, "pull", d.PullOnce, "push", d.PushOnce)
}

// A push whose third batch the container commits but whose reply is lost
// (the container dies before replying): the resumed push and the pull back
// must not fetch the pushed entries back.
func TestLostPushReplyKeepsBounceSuppression(t *testing.T) {
	p := baselined(t, func(p *pair) *vfs.Store { return p.server })
	ctx := testutil.Context(t, 60*time.Second)
	p.serve(&crashAfterApply{Backend: p.cont, at: 3})
	if _, err := p.drv.PushOnce(ctx); err == nil {
		t.Fatal("push through a container that dies after its third apply succeeded")
	}
	p.serve(p.cont) // the restarted container
	assertNoBounce(ctx, t, p, "push", p.drv.PushOnce, "pull", p.drv.PullOnce)
}

// assertNoBounce runs the resumed transfer, then the one back: the one back
// moves at most one batch of what the resumed one moved, the trees agree,
// and the next tick moves nothing.
func assertNoBounce(ctx context.Context, t *testing.T, p *pair, resumedOp string, resumed func(context.Context) (Result, error), backOp string, back func(context.Context) (Result, error)) {
	t.Helper()
	there, err := resumed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	backRes, err := back(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed %s %d entries; %s back %d entries", resumedOp, there.Entries, backOp, backRes.Entries)
	if backRes.Entries > bounceBatch {
		t.Errorf("%s back moved %d of the %sed entries, want at most one batch (%d)", backOp, backRes.Entries, resumedOp, bounceBatch)
	}
	assertSameTree(t, p.server, p.cont)
	if tr := p.tick(); tr.Pull.Entries != 0 || tr.Push.Entries != 0 {
		t.Errorf("next tick moved entries: %+v", tr)
	}
}
