package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Deletion safety of a pull (PullOptions.Guard).
//
// A pull that would delete a large share of the local tree (a container
// whose tree was emptied, a bad rm -rf) must stop before it deletes
// anything, not after the first batches did. The count is known only
// once the feed has been read, and the feed streams, so the receive
// path does this: batches with no delete of a live local path apply as
// they come. At the first batch that would delete a live path, nothing of
// it is fetched or applied; the reader goes on through the rest of the
// feed, entries only (no chunks), counting the live deletes, and asks the
// guard after each batch. If the guard refuses, the pull ends with its
// error: the fetch cursor stays before that batch, every deletion of the
// pull is still in the container's feed, and nothing is lost on either
// side (the guard's caller holds pushes back while the pull is owed). If
// the feed ends first, the count is under the limit: when the deleting
// batch was the feed's last, it applies at once; otherwise the pull
// opens the feed again from its fetch cursor and applies it, the entries
// counted already not counted again (GuardState.Through).
//
// The cost falls on pulls that delete: a pull with no live deletes reads
// its feed once; one that deletes reads what follows its first deleting
// batch twice (entries, not chunk bytes). A pull's GuardState carries
// over to its next slice (a pull in slices is one sync): its deletes add
// up, and its checked entries are not read ahead again. Entries a
// container writes past the checked stretch while the pull runs are
// checked when they come, adding to the same count; should they cross the
// limit, the deletions applied before them stay applied (they were under
// it when checked) and the rest pauses.

// DeleteGuard decides whether a pull may apply the deletions its feed
// holds. Calls come from the pull's reader goroutine, one at a time.
type DeleteGuard interface {
	// Live returns how many of paths name a live local node: what their
	// delete entries would remove.
	Live(ctx context.Context, paths []string) (int, error)
	// Refuse returns the error that pauses a pull whose feed deletes
	// deletes live paths, or nil while it may go on.
	Refuse(ctx context.Context, deletes int) error
}

// GuardState is how far a pull's feed has been checked: the live deletes
// counted in its entries through Through, of the peer store Peer.
type GuardState struct {
	Peer    string
	Through watermark.Cursor
	Deletes int
}

// checked reports whether the feed entry of (rev, path) was counted.
func (g GuardState) checked(rev int64, path string) bool {
	return g.Through.Covers(watermark.Within(rev, path))
}

// errGuardReopen: the deletes of the feed were counted to its end and
// are under the guard's limit; the feed is opened again to apply them.
var errGuardReopen = errors.New("deletes counted: reopen the feed")

// maxGuardRounds bounds the reopens of one pull (each one counts a
// further stretch of a feed that grows while it is read).
const maxGuardRounds = 8

// guarded is the guard of one receive: nil when the pull has none.
type guarded struct {
	g  DeleteGuard
	st *GuardState
}

// liveDeletes counts the live deletes of batch not counted already.
func (gd *guarded) liveDeletes(ctx context.Context, batch []vfs.ChangeEntry) (int, error) {
	var dels []string
	for i := range batch {
		e := &batch[i]
		if e.Kind == vfs.EntryDelete && !gd.st.checked(e.Rev, e.Path) {
			dels = append(dels, e.Path)
		}
	}
	if len(dels) == 0 {
		return 0, nil
	}
	n, err := gd.g.Live(ctx, dels)
	if err != nil {
		return 0, fmt.Errorf("deletion check: %w", err)
	}
	return n, nil
}

// check runs on each batch read from the feed, before its chunks are
// fetched. nil: apply the batch. errGuardReopen: the rest of the feed was
// read and counted, under the limit; reopen. Any other error (the
// guard's refusal) ends the pull before the batch.
func (gd *guarded) check(ctx context.Context, batch []vfs.ChangeEntry, next func(context.Context, int) ([]vfs.ChangeEntry, error), max int) error {
	last := batch[len(batch)-1]
	n, err := gd.liveDeletes(ctx, batch)
	if err != nil {
		return err
	}
	through := watermark.Within(last.Rev, last.Path)
	if n == 0 {
		gd.advance(through, 0)
		return nil
	}
	total := gd.st.Deletes + n
	if err := gd.g.Refuse(ctx, total); err != nil {
		return err
	}
	read := false // the look-ahead consumed entries after batch
	for {
		b, err := next(ctx, max)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if len(b) == 0 {
			continue
		}
		read = true
		l := b[len(b)-1]
		through = watermark.Within(l.Rev, l.Path)
		k, err := gd.liveDeletes(ctx, b)
		if err != nil {
			return err
		}
		total += k
		if err := gd.g.Refuse(ctx, total); err != nil {
			return err
		}
	}
	gd.advance(through, total-gd.st.Deletes)
	if read {
		return errGuardReopen
	}
	return nil
}

func (gd *guarded) advance(through watermark.Cursor, deletes int) {
	if gd.st.Through.Less(through) {
		gd.st.Through = through
	}
	gd.st.Deletes += deletes
}
