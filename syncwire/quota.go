package syncwire

import (
	"context"
	"errors"
	"fmt"

	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
)

// Quotas on the wire.
//
// The workspace's quota lives with the driving side's store (the server's:
// vfs.Store.SetQuota). The container learns it from the driver: the first
// transfer on every session, and the first after it changed, calls
// SetQuota with the local store's quota, and the peer's store enforces it
// on its mount from then on (vfs: EDQUOT once its usage would pass it). A
// peer that does not know the method (an older computerd) answers
// rpc.ErrUnknownMethod: its mount stays unbounded, and the server's own
// pulls still hold the quota.
//
// The pulls hold it on the driving side, in the receive path: each batch
// the feed brings is admitted against the local store's quota before its
// chunks are fetched (vfs.Store.Admit, onto the usage the batches admitted
// before it leave), and applied with ApplyOptions.Quota, which checks the
// exact usage in the batch's transaction. A batch that has no room stops
// the pull before it, with a *vfs.QuotaError: the batches before it are
// applied with their fetch cursor, the batch and what follows stay in the
// container, and the next pull after the quota is raised goes on from
// there.

// MethodSetQuota gives the peer's store the workspace's quota: a body of
// three uvarints (max bytes, max entries, max file size; 0 is no bound),
// an empty reply.
const MethodSetQuota rpc.Method = 7

func appendQuota(b []byte, q vfs.Quota) ([]byte, error) {
	e := newEnc(b)
	e.PutUvarint(uint64(q.MaxBytes))
	e.PutUvarint(uint64(q.MaxEntries))
	e.PutUvarint(uint64(q.MaxFileSize))
	return e.Bytes(), e.Err()
}

// DecodeQuota decodes a SetQuota body; a value past vfs's bounds is a
// malformed message.
func DecodeQuota(p []byte) (vfs.Quota, error) {
	d := newDec(p)
	var q vfs.Quota
	q.MaxBytes = int64(d.Bounded("max bytes", vfs.MaxQuotaBytes))
	q.MaxEntries = int64(d.Bounded("max entries", vfs.MaxQuotaEntries))
	q.MaxFileSize = int64(d.Bounded("max file size", vfs.MaxQuotaBytes))
	if err := d.Done(); err != nil {
		return q, err
	}
	if err := q.Validate(); err != nil {
		return q, protoErr("set quota: %v", err)
	}
	return q, nil
}

// setQuota serves SetQuota.
func (s *Server) setQuota(ctx context.Context, c *rpc.Incoming) error {
	q, err := DecodeQuota(c.Body)
	if err != nil {
		return err
	}
	if err := s.b.SetQuota(q); err != nil {
		return err
	}
	return c.Reply(nil)
}

// SetQuota gives the peer's store q.
func (p Peer) SetQuota(ctx context.Context, q vfs.Quota) error {
	body, err := appendQuota(nil, q)
	if err != nil {
		return err
	}
	o, done, err := p.open(ctx, MethodSetQuota, body, false)
	if err != nil {
		return err
	}
	defer done()
	if _, err := o.Reply(ctx); err != nil {
		return fmt.Errorf("set quota: %w", err)
	}
	return nil
}

// quotaState is what the driver told the peer of the quota: on which
// session, and what. Used inside the driver's FIFO only.
type quotaState struct {
	epoch       uint64
	sent        vfs.Quota
	unsupported bool
}

// tellQuota gives the peer the local store's quota when this session has
// not heard it yet.
func (x *Exchange) tellQuota(ctx context.Context) error {
	d := x.d
	q := d.local.Quota()
	st := &d.quota
	if st.epoch == x.epoch && (st.unsupported || st.sent == q) {
		return nil
	}
	err := x.s.SetQuota(ctx, q)
	switch {
	case errors.Is(err, rpc.ErrUnknownMethod):
		d.log.Info("the peer does not know quotas; its mount is not bounded by the workspace's")
		*st = quotaState{epoch: x.epoch, unsupported: true}
		return nil
	case err != nil:
		return err
	}
	*st = quotaState{epoch: x.epoch, sent: q}
	return nil
}
