package syncwire

import (
	"context"
	"fmt"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
)

// TestSendEntriesStartsSmall: an entry stream's first message is cut at
// firstEntryFrame and each next one's target doubles up to
// entryFrameTarget, so the receiver starts on the first entries while the
// sender still reads its feed; every entry arrives once, in order.
func TestSendEntriesStartsSmall(t *testing.T) {
	const n = 20_000
	feed := func(yield func(vfs.ChangeEntry, error) bool) {
		for i := range n {
			data := fmt.Appendf(nil, "file %d", i)
			en := vfs.ChangeEntry{Kind: vfs.EntryFile, Path: fmt.Sprintf("d%02d/f%05d", i%50, i), Mode: 0o644,
				Rev: int64(i + 1), Size: int64(len(data)), Chunks: chunkstore.Manifest{{Hash: chunkstore.Sum(data), Size: uint32(len(data))}}}
			if !yield(en, nil) {
				return
			}
		}
	}
	var sizes []int
	var got []vfs.ChangeEntry
	err := SendEntries(context.Background(), func(_ context.Context, p []byte) error {
		sizes = append(sizes, len(p))
		es, err := DecodeEntries(p)
		got = append(got, es...)
		return err
	}, feed)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d entries arrived, want %d", len(got), n)
	}
	for i, en := range got {
		if en.Rev != int64(i+1) {
			t.Fatalf("entry %d has rev %d: out of order", i, en.Rev)
		}
	}
	// The cut counts each entry's largest encoding (entrySize); a path
	// shares its prefix with the one before, so a message comes out
	// smaller than its target, never larger.
	target := firstEntryFrame
	for i, s := range sizes[:len(sizes)-1] { // the last message is what was left
		if s > target || s < target/4 {
			t.Fatalf("message %d of %d is %d bytes, want up to %d (sizes %v)", i, len(sizes), s, target, sizes)
		}
		target = min(2*target, entryFrameTarget)
	}
	if target != entryFrameTarget {
		t.Fatalf("the messages never reached %d bytes: %v", entryFrameTarget, sizes)
	}
}
