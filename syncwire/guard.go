package syncwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

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
// they come, their creations of new paths counted from their applies
// (vfs.ApplyResult.Created). At the first batch that would delete a live
// path, nothing of it is fetched or applied; the reader goes on through
// the rest of the feed, entries only (no chunks), counting live deletes
// and creations of new paths, and asks the guard once, at the end, about
// the net count: deletes less creations, so a directory renamed in the
// container (a delete of every old path, a create of every new one) is
// no mass delete. If the guard refuses, the pull ends with its error: the
// fetch cursor stays before that batch, every deletion of the pull is
// still in the container's feed, and nothing is lost on either side (the
// guard's caller holds pushes back while the pull is owed). Otherwise,
// when the deleting batch was the feed's last it applies at once; else
// the pull opens the feed again from its fetch cursor and applies it, the
// entries counted already not counted again (GuardState.Through).
//
// The cost falls on pulls that delete: a pull with no live deletes reads
// its feed once and asks about its delete entries only; one that deletes
// reads what follows its first deleting batch twice (entries, not chunk
// bytes). The creations of the batches applied just before the deleting
// one may still be applying when it is checked: they are left out, which
// errs towards pausing. A pull's GuardState carries over to its next
// slice (a pull in slices is one sync). Entries a container writes past
// the checked stretch while the pull runs are checked when they come,
// adding to the same counts; should they cross the limit, the deletions
// applied before them stay applied (they were under it when checked) and
// the rest pauses.

// DeleteGuard decides whether a pull may apply the deletions its feed
// holds. Calls come from the pull's reader goroutine, one at a time.
type DeleteGuard interface {
	// Live returns how many of paths name a live local node: what their
	// delete entries would remove (and what their other entries would not
	// create anew).
	Live(ctx context.Context, paths []string) (int, error)
	// Refuse returns the error that pauses a pull whose feed would remove
	// deletes live paths (net of the paths it creates), or nil.
	Refuse(ctx context.Context, deletes int) error
}

// GuardState is how far a pull's feed has been checked: the live deletes
// and the creations of new paths counted in its entries through Through,
// of the peer store Peer.
type GuardState struct {
	Peer    string
	Through watermark.Cursor
	Deletes int
	Creates int
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

// guarded is the guard of one receive: nil when the pull has none. st is
// the reader goroutine's; applied counts the creations of the batches the
// apply loop committed that check left to it (fetchedBatch.countCreates),
// folded into st when the receive ends (settle).
type guarded struct {
	g       DeleteGuard
	st      *GuardState
	applied atomic.Int64
}

// liveDeletes counts the live deletes among the entries of batch not
// counted already, and reports whether every entry of batch was uncounted.
func (gd *guarded) liveDeletes(ctx context.Context, batch []vfs.ChangeEntry) (int, bool, error) {
	var dp []string
	fresh := true
	for i := range batch {
		e := &batch[i]
		switch {
		case gd.st.checked(e.Rev, e.Path):
			fresh = false
		case e.Kind == vfs.EntryDelete:
			dp = append(dp, e.Path)
		}
	}
	if len(dp) == 0 {
		return 0, fresh, nil
	}
	n, err := gd.g.Live(ctx, dp)
	if err != nil {
		return 0, false, fmt.Errorf("deletion check: %w", err)
	}
	return n, fresh, nil
}

// creations counts the entries of batch not counted already that would
// make a path the local store does not hold.
func (gd *guarded) creations(ctx context.Context, batch []vfs.ChangeEntry) (int, error) {
	var cp []string
	for i := range batch {
		e := &batch[i]
		if e.Kind != vfs.EntryDelete && !gd.st.checked(e.Rev, e.Path) {
			cp = append(cp, e.Path)
		}
	}
	if len(cp) == 0 {
		return 0, nil
	}
	live, err := gd.g.Live(ctx, cp)
	if err != nil {
		return 0, fmt.Errorf("deletion check: %w", err)
	}
	return len(cp) - live, nil
}

// check runs on each batch f read from the feed, before its chunks are
// fetched. nil: apply the batch. errGuardReopen: the rest of the feed was
// read and counted, under the limit; reopen. Any other error (the
// guard's refusal) ends the pull before the batch.
//
// What is weighed is net: the live paths the pull deletes less the new
// paths it creates, so a directory renamed in the container (a delete of
// every old path and a create of every new one) is no mass delete. A batch
// without live deletes applies as it comes, and its creations are counted
// from its apply (countCreates); at the first batch with one, the rest of
// the feed is read, both counted, and the guard asked once, at the end.
func (gd *guarded) check(ctx context.Context, f *fetchedBatch, next func(context.Context, int) ([]vfs.ChangeEntry, error), max int) error {
	batch := f.batch
	last := batch[len(batch)-1]
	through := watermark.Within(last.Rev, last.Path)
	dels, fresh, err := gd.liveDeletes(ctx, batch)
	if err != nil {
		return err
	}
	if dels == 0 {
		f.countCreates = fresh
		gd.advance(through, 0, 0)
		return nil
	}
	creates, err := gd.creations(ctx, batch)
	if err != nil {
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
		d, _, err := gd.liveDeletes(ctx, b)
		if err != nil {
			return err
		}
		c, err := gd.creations(ctx, b)
		if err != nil {
			return err
		}
		dels, creates = dels+d, creates+c
	}
	net := gd.st.Deletes + dels - (gd.st.Creates + int(gd.applied.Load()) + creates)
	if err := gd.g.Refuse(ctx, net); err != nil {
		return err
	}
	gd.advance(through, dels, creates)
	if read {
		return errGuardReopen
	}
	return nil
}

func (gd *guarded) advance(through watermark.Cursor, deletes, creates int) {
	if gd.st.Through.Less(through) {
		gd.st.Through = through
	}
	gd.st.Deletes += deletes
	gd.st.Creates += creates
}

// settle folds the creations the apply loop counted into the state, once
// the receive's goroutines are done.
func (gd *guarded) settle() {
	if gd != nil {
		gd.st.Creates += int(gd.applied.Swap(0))
	}
}
