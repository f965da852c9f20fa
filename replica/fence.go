package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// ErrFenced is what a write to the bucket returns once Options.Fence
// refused it (the lease is lost): errors.Is(err, ErrFenced), with the
// fence's own error joined.
var ErrFenced = errors.New("replica: write to the bucket refused: this server no longer holds the workspace's lease")

// fencedClient is litestream's replica client with Fence in front of
// every write: LTX uploads (level 0 from Replica.Sync, compactions and
// snapshots from litestream's Store) and deletes (retention). Reads go
// straight through. Only the ReplicaClient interface is delegated, so
// litestream sees no v0.3 client (ReplicaClientV3) behind it.
type fencedClient struct {
	litestream.ReplicaClient
	fence   func() error
	refused func(error) // called with every refusal (Replicator.fenced)
	// ungated refuses every write: litestream is being closed outside
	// the gate, and what its last copy of the WAL made must not ship.
	ungated atomic.Bool
}

// errUngated refuses the uploads of a litestream closed outside the gate.
var errUngated = errors.New("replica: closing outside the gate: upload refused")

var _ litestream.ReplicaClient = (*fencedClient)(nil)

func (c *fencedClient) check(op string) error {
	if c.ungated.Load() {
		return fmt.Errorf("%s: %w", op, errUngated)
	}
	if c.fence == nil {
		return nil
	}
	if err := c.fence(); err != nil {
		err = fmt.Errorf("%s: %w: %w", op, ErrFenced, err)
		if c.refused != nil {
			c.refused(err)
		}
		return err
	}
	return nil
}

func (c *fencedClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, r io.Reader) (*ltx.FileInfo, error) {
	if err := c.check(fmt.Sprintf("write ltx %d/%s", level, ltx.FormatFilename(minTXID, maxTXID))); err != nil {
		return nil, err
	}
	return c.ReplicaClient.WriteLTXFile(ctx, level, minTXID, maxTXID, r)
}

func (c *fencedClient) DeleteLTXFiles(ctx context.Context, a []*ltx.FileInfo) error {
	if err := c.check(fmt.Sprintf("delete %d ltx files", len(a))); err != nil {
		return err
	}
	return c.ReplicaClient.DeleteLTXFiles(ctx, a)
}

func (c *fencedClient) DeleteAll(ctx context.Context) error {
	if err := c.check("delete all"); err != nil {
		return err
	}
	return c.ReplicaClient.DeleteAll(ctx)
}
