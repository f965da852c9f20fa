package converge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
	"golang.org/x/sync/errgroup"
)

// Snapshot bounds.
const (
	// MaxPageRaw bounds a snapshot page before compression.
	MaxPageRaw = 4 << 20
	// MaxPageRecords bounds the records of one page.
	MaxPageRecords = 16384
	// MaxSnapshotRecords bounds the records of one snapshot.
	MaxSnapshotRecords = 1 << 26
	// pageTarget is where the sender cuts a page (raw bytes).
	pageTarget = 512 << 10
)

var (
	zenc = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
		if err != nil {
			panic(err)
		}
		return e
	})
	zdec = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(MaxPageRaw), zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(err)
		}
		return d
	})
)

// unzstd decompresses z, which must hold exactly raw bytes (at most max).
func unzstd(z []byte, raw, max int) ([]byte, error) {
	if raw < 0 || raw > max {
		return nil, malformed("declared %d bytes, at most %d", raw, max)
	}
	out, err := zdec().DecodeAll(z, make([]byte, 0, raw))
	if err != nil {
		return nil, malformed("zstd: %v", err)
	}
	if len(out) != raw {
		return nil, malformed("decompressed %d bytes, declared %d", len(out), raw)
	}
	return out, nil
}

// A page's raw payload is a run of records, each length-framed and tagged:
//
//	uvarint(len) || recEntry || one entry-stream message holding one live entry
//	uvarint(len) || recHead  || uvarint(refs) || entry message of a file with its first refs
//	uvarint(len) || recRefs  || uvarint(n) || n × (hash || uvarint(size))
//
// A file of more than maxPartRefs refs is split: a head record carrying
// its first maxPartRefs refs and the file's whole ref count, then
// continuation records of at most maxPartRefs refs each, which may run
// over several pages. So no record is larger than maxRecordLen, whatever
// the file's size, and a record's decode is bounded by its own frame.

// Record tags.
const (
	recEntry byte = iota
	recHead
	recRefs
)

const (
	// maxPartRefs bounds the refs of one record (about 344 KiB of them).
	maxPartRefs = 8192
	// maxRecordLen bounds one record's encoding.
	maxRecordLen = 128 + vfs.MaxPathLen + vfs.MaxTargetLen + 43*maxPartRefs
)

// snapRecord is one decoded record.
type snapRecord struct {
	Tag byte
	// Entry: the entry of a recEntry or recHead (a head's Chunks are the
	// file's first refs, its Size theirs).
	Entry vfs.ChangeEntry
	// Refs: a head's whole ref count.
	Refs int
	// More: a continuation's refs.
	More chunkstore.Manifest
}

// refs returns the refs the record carries.
func (r *snapRecord) refs() chunkstore.Manifest {
	if r.Tag == recRefs {
		return r.More
	}
	return r.Entry.Chunks
}

// appendRecordBody appends a record's tag and body (no length frame).
func appendRecordBody(b []byte, rec snapRecord) ([]byte, error) {
	b = append(b, rec.Tag)
	switch rec.Tag {
	case recHead:
		b = binary.AppendUvarint(b, uint64(rec.Refs))
		fallthrough
	case recEntry:
		return syncwire.AppendEntries(b, []vfs.ChangeEntry{rec.Entry})
	case recRefs:
		return chunkstore.AppendManifest(b, rec.More), nil
	}
	return b, fmt.Errorf("record tag %d: %w", rec.Tag, vfs.ErrInvalid)
}

// appendRecord appends one length-framed record.
func appendRecord(b []byte, rec snapRecord) ([]byte, error) {
	body, err := appendRecordBody(nil, rec)
	if err != nil {
		return b, err
	}
	e := rpc.NewEncoder(b)
	e.PutBytes(body)
	return e.Bytes(), nil
}

// splitEntry returns e's records: one, or for a file of more than
// partRefs refs a head and its continuations.
func splitEntry(e vfs.ChangeEntry, partRefs int) []snapRecord {
	if len(e.Chunks) <= partRefs {
		return []snapRecord{{Tag: recEntry, Entry: e}}
	}
	all := e.Chunks
	head := e
	head.Chunks = all[:partRefs:partRefs]
	head.Size = head.Chunks.Size()
	out := []snapRecord{{Tag: recHead, Entry: head, Refs: len(all)}}
	for i := partRefs; i < len(all); i += partRefs {
		out = append(out, snapRecord{Tag: recRefs, More: all[i:min(i+partRefs, len(all)):min(i+partRefs, len(all))]})
	}
	return out
}

// recordCount is how many records an entry of n refs takes.
func recordCount(n, partRefs int) int {
	if n <= partRefs {
		return 1
	}
	return (n + partRefs - 1) / partRefs
}

// decodeRecordBody decodes one record's tag and body. Each record is
// checked on its own: a valid live entry, a head's count at least its refs
// and at most MaxManifestChunks, a continuation of 1..maxPartRefs refs.
// That the parts of a file follow each other is checked where the records
// are put together (stagedRoot).
func decodeRecordBody(b []byte) (snapRecord, error) {
	d := newDecoder(b)
	rec := snapRecord{Tag: d.Byte()}
	if err := d.Err(); err != nil {
		return rec, err
	}
	switch rec.Tag {
	case recHead:
		rec.Refs = int(d.Bounded("file refs", chunkstore.MaxManifestChunks))
		if err := d.Err(); err != nil {
			return rec, err
		}
		fallthrough
	case recEntry:
		es, err := syncwire.DecodeEntries(d.Rest())
		if err != nil {
			return rec, errAsMalformed(err)
		}
		if len(es) != 1 || es[0].Kind == vfs.EntryDelete {
			return rec, malformed("not one live entry")
		}
		rec.Entry = es[0]
		if n := len(rec.Entry.Chunks); n > maxPartRefs {
			return rec, malformed("record of %d refs exceeds %d", n, maxPartRefs)
		}
		if rec.Tag == recHead && (rec.Entry.Kind != vfs.EntryFile || len(rec.Entry.Chunks) == 0 || rec.Refs <= len(rec.Entry.Chunks)) {
			return rec, malformed("head of %d refs for a file of %d", len(rec.Entry.Chunks), rec.Refs)
		}
	case recRefs:
		// chunkstore's decoder: refs bounded by the record's bytes, sizes
		// and windows checked as for a whole manifest (fileParts checks
		// each ref again where it stands in the file).
		m, rest, err := chunkstore.DecodeManifest(d.Rest())
		switch {
		case err != nil:
			return rec, errAsMalformed(err)
		case len(m) == 0 || len(m) > maxPartRefs:
			return rec, malformed("continuation of %d refs", len(m))
		case len(rest) > 0:
			return rec, malformed("%d bytes after a continuation", len(rest))
		}
		rec.More = m
	default:
		return rec, malformed("record tag %d", rec.Tag)
	}
	return rec, nil
}

// DecodeRecords decodes a page's raw payload of n records.
func DecodeRecords(p []byte, n int) ([]snapRecord, error) {
	if n < 0 || n > MaxPageRecords {
		return nil, malformed("%d records in a page", n)
	}
	d := newDecoder(p)
	out := make([]snapRecord, 0, min(n, len(p)/8))
	for i := range n {
		b := d.Bytes("record", maxRecordLen)
		if err := d.Err(); err != nil {
			return nil, err
		}
		rec, err := decodeRecordBody(b)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		out = append(out, rec)
	}
	return out, d.Done()
}

// recordHashes is the union of the records' data chunk hashes, in
// first-use order.
func recordHashes(recs []snapRecord) []chunkstore.Hash {
	return syncwire.ManifestHashes(func(yield func(chunkstore.Manifest) bool) {
		for i := range recs {
			if !yield(recs[i].refs()) {
				return
			}
		}
	}, nil)
}

// errAsMalformed keeps an error's text but makes it ErrMalformed.
func errAsMalformed(err error) error {
	return fmt.Errorf("%w: %v", ErrMalformed, err)
}

// BootstrapOptions configures Bootstrap.
type BootstrapOptions struct {
	// Peer names the local watermarks kept for the peer.
	Peer string
	// Progress, if set, is called with the report so far once the peer
	// has answered the start (Total known, ResumedAt staged already) and
	// after each page it staged, from Bootstrap's goroutine: Staged counts
	// the records staged of Total (a file of more than maxPartRefs refs
	// takes several records), Chunks and ChunkBytes what was sent.
	Progress func(BootstrapReport)

	// For tests: a page size other than pageTarget, and a root to declare
	// instead of ours.
	pageBytes int
	partRefs  int
	claim     *Hash
	noCommit  bool
}

// BootstrapReport is what one Bootstrap did.
type BootstrapReport struct {
	Root  Hash
	Rev   int64 // the local rev the snapshot is of
	Total int   // records in the snapshot (one per entry, more for a file of many refs)
	// ResumedAt is the record the peer had staged already (0: a fresh
	// start), Sent the records this call sent.
	ResumedAt, Sent int
	Pages           int
	Chunks          int
	ChunkBytes      int64
	// RawBytes are the pages' bytes before compression, PageBytes after.
	RawBytes, PageBytes int64
	WireBytes           int64
	Duration            time.Duration
}

// Staged is the records the peer holds staged: those it had and those
// this call sent.
func (r BootstrapReport) Staged() int { return r.ResumedAt + r.Sent }

// Bootstrap sends the whole local tree to a peer whose store is empty, as
// zstd-compressed pages of length-framed records. The peer stages them
// apart from its live state (resuming where an interrupted bootstrap of
// the same root stopped), checks the staged tree against our root, and
// installs it in place of its (empty) tree. Afterwards our push cursor is
// at the snapshot's rev, so the next push sends only later changes.
func Bootstrap(ctx context.Context, local *vfs.Store, sess *rpc.Session, opts BootstrapOptions) (rep BootstrapReport, err error) {
	defer func() {
		// The peer's refusal arrives as a wire ENOTEMPTY, which unwraps to
		// vfs.ErrNotEmpty only; callers test for ErrNotEmpty.
		var re *rpc.RemoteError
		if errors.As(err, &re) && re.Code == syncwire.CodeNotEmpty && !errors.Is(err, ErrNotEmpty) {
			err = fmt.Errorf("%w: %w", ErrNotEmpty, err)
		}
	}()
	start := time.Now()
	var st callStats
	var wc rpc.WireCounter
	ctx = rpc.WithWireCounter(ctx, &wc)
	defer func() {
		rep.WireBytes = st.WireBytes + wc.In.Load() + wc.Out.Load()
		rep.Duration = time.Since(start)
	}()
	if err := local.FlushAll(ctx); err != nil {
		return rep, fmt.Errorf("bootstrap: flush: %w", err)
	}
	// The snapshot carries everything, as a push does: the ignore list is
	// the puller's, not the pusher's.
	t, err := BuildTree(ctx, local, vfs.NewIgnore([]string{}))
	if err != nil {
		return rep, fmt.Errorf("bootstrap: %w", err)
	}
	type rec struct {
		path string
		n    *node
	}
	recs := make([]rec, 0, t.Len())
	t.walk(func(p string, n *node) error { recs = append(recs, rec{p, n}); return nil })
	partRefs := maxPartRefs
	if opts.partRefs > 0 {
		partRefs = opts.partRefs
	}
	// Records: one per entry, more for a file of many refs. The count is
	// read off each manifest's encoded length.
	parts := func(n *node) int {
		if n.Kind != vfs.KindFile {
			return 1
		}
		refs, _ := binary.Uvarint(n.manifest)
		return recordCount(int(min(refs, chunkstore.MaxManifestChunks)), partRefs)
	}
	total := 0
	for _, r := range recs {
		total += parts(r.n)
	}
	rep.Root, rep.Rev, rep.Total = t.Root, t.Rev, total

	declared := t.Root
	if opts.claim != nil {
		declared = *opts.claim
	}
	pageBytes := pageTarget
	if opts.pageBytes > 0 {
		pageBytes = opts.pageBytes
	}
	next, err := snapBegin(ctx, sess, &st, declared, t.Rev, total)
	if err != nil {
		return rep, fmt.Errorf("bootstrap: %w", err)
	}
	// The peer's store is empty (or holds part of this snapshot): a fetch
	// cursor we keep for the peer is another store's. From the start of
	// its feed, whatever happens next (an install around changes of the
	// peer's own, a failure partway), a push fences all of the peer's own
	// changes and a pull fetches them. The peer's store is recorded as the
	// one the watermarks now describe, so the exchange's reconcile after
	// this bootstrap keeps what it sets.
	if id := sess.Peer().ID; id != "" {
		if _, err := local.MeetPeer(ctx, opts.Peer, id, -1); err != nil {
			return rep, fmt.Errorf("bootstrap: %w", err)
		}
	}
	if err := resetFetch(ctx, local, opts.Peer); err != nil {
		return rep, fmt.Errorf("bootstrap: %w", err)
	}
	rep.ResumedAt = next
	progress := func() {
		if opts.Progress != nil {
			opts.Progress(rep)
		}
	}
	progress()
	// Find the entry and part the peer resumes at.
	ei, part := 0, next
	for ei < len(recs) && part >= parts(recs[ei].n) {
		part -= parts(recs[ei].n)
		ei++
	}
	var pending []snapRecord // the current entry's records not sent yet
	if ei < len(recs) {
		e, err := recs[ei].n.entry(recs[ei].path, t.Rev)
		if err != nil {
			return rep, fmt.Errorf("bootstrap: %w", err)
		}
		pending = splitEntry(e, partRefs)[part:]
		ei++
	}
	// Pages go out in order, each after its chunks; the chunks of the next
	// page are read and sent while the peer stages this one (the peer
	// stages a page and receives objects at once), so neither side waits
	// for the other between pages. At most two pages are in hand.
	type outPage struct {
		first  int
		recs   []snapRecord
		raw    []byte
		chunks int
		bytes  int64
	}
	pages := make(chan outPage)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(pages)
		for i := next; i < total; {
			// A cancelled bootstrap starts no page: the peer stays where
			// the last answered page left it (a page with no new chunks
			// would otherwise go out with only the page call to notice).
			if err := gctx.Err(); err != nil {
				return err
			}
			pg := outPage{first: i}
			for len(pg.recs) < MaxPageRecords && len(pg.raw) < pageBytes {
				if len(pending) == 0 {
					if ei == len(recs) {
						break
					}
					e, err := recs[ei].n.entry(recs[ei].path, t.Rev)
					if err != nil {
						return err
					}
					pending = splitEntry(e, partRefs)
					ei++
				}
				var err error
				if pg.raw, err = appendRecord(pg.raw, pending[0]); err != nil {
					return err
				}
				pg.recs = append(pg.recs, pending[0])
				pending = pending[1:]
			}
			if len(pg.recs) == 0 {
				return fmt.Errorf("records end at %d of %d", i, total)
			}
			err := sendChunks(gctx, sess, &st, local, recordHashes(pg.recs), func(raw int) {
				pg.chunks++
				pg.bytes += int64(raw)
			})
			if err != nil {
				return err
			}
			select {
			case pages <- pg:
			case <-gctx.Done():
				return gctx.Err()
			}
			i += len(pg.recs)
		}
		return nil
	})
	g.Go(func() error {
		for pg := range pages {
			staged, peerTotal, z, err := snapPage(gctx, sess, &st, pg.first, len(pg.recs), pg.raw)
			if err != nil {
				return err
			}
			crashpoint.Hit("converge.snapshot.paged")
			i := pg.first + len(pg.recs)
			rep.Pages++
			rep.Sent += len(pg.recs)
			rep.Chunks += pg.chunks
			rep.ChunkBytes += pg.bytes
			metricSnapshotRecords.WithLabelValues("sent").Add(float64(len(pg.recs)))
			rep.RawBytes += int64(len(pg.raw))
			rep.PageBytes += int64(z)
			if staged != i || peerTotal != total {
				return malformed("peer staged %d of %d, expected %d of %d", staged, peerTotal, i, total)
			}
			progress()
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return rep, fmt.Errorf("bootstrap: %w", err)
	}
	if opts.noCommit {
		return rep, nil
	}
	before, after, err := snapCommit(ctx, sess, &st, declared)
	if err != nil {
		return rep, fmt.Errorf("bootstrap: %w", err)
	}
	ws, err := local.Watermarks(ctx, opts.Peer)
	if err != nil {
		return rep, err
	}
	ws.Push = watermark.At(t.Rev)
	// The revs the install stamped hold our own entries: from the start
	// of the peer's feed (the cursor was reset above) to their end, when
	// the install began there (a store with revs of its own before it is
	// fetched from the start).
	ws.Fetch = vfs.BounceRun{From: before, To: after}.Skip(ws.Fetch)
	// The peer's store was replaced: the merge bases kept for it describe
	// what it no longer holds (the push cursor, which now covers the whole
	// snapshot, makes our state the base of every path).
	if err := local.ForgetBases(ctx, opts.Peer); err != nil {
		return rep, err
	}
	if err := local.SetWatermarks(ctx, opts.Peer, ws); err != nil {
		return rep, err
	}
	return rep, nil
}

// resetFetch moves our fetch cursor for peer back to the start of its feed.
func resetFetch(ctx context.Context, local *vfs.Store, peer string) error {
	ws, err := local.Watermarks(ctx, peer)
	if err != nil {
		return err
	}
	ws.Fetch = watermark.Cursor{}
	return local.SetWatermarks(ctx, peer, ws)
}

// sendChunks probes the peer for the page's chunks and sends the missing
// ones into its staging; sent learns each chunk's raw size.
func sendChunks(ctx context.Context, sess *rpc.Session, st *callStats, local *vfs.Store, need []chunkstore.Hash, sent func(raw int)) error {
	missing, err := syncwire.Missing(ctx, need, func(ctx context.Context, hs []chunkstore.Hash) ([]chunkstore.Hash, error) {
		return syncwire.Probe(ctx, hs, func(ctx context.Context, body []byte) ([]byte, error) {
			return call(ctx, sess, st, MethodSnapHave, body)
		})
	})
	if err != nil {
		return fmt.Errorf("snapshot have: %w", err)
	}
	for len(missing) > 0 {
		part := missing[:min(len(missing), syncwire.MaxHashes)]
		missing = missing[len(part):]
		o, err := sess.Open(ctx, MethodSnapObjects, nil, true)
		if err != nil {
			return fmt.Errorf("snapshot objects: %w", err)
		}
		err = func() error {
			defer func() {
				o.Close()
				in, out := o.WireBytes()
				st.add(1, 0, in+out)
			}()
			err := syncwire.SendObjects(ctx, o.Send, part, local.ReadChunks, func(raw, _ int) { sent(raw) })
			if err != nil {
				return err
			}
			if err := o.CloseSend(); err != nil {
				return err
			}
			_, err = o.Reply(ctx)
			return err
		}()
		if err != nil {
			if _, rerr := o.Reply(ctx); rerr != nil {
				err = rerr
			}
			return fmt.Errorf("snapshot objects: %w", err)
		}
	}
	return nil
}

func snapBegin(ctx context.Context, sess *rpc.Session, st *callStats, root Hash, rev int64, total int) (int, error) {
	var e rpc.Encoder
	e.PutFixed(root[:])
	e.PutUvarint(uint64(rev))
	e.PutUvarint(uint64(total))
	b, err := call(ctx, sess, st, MethodSnapBegin, e.Bytes())
	if err != nil {
		return 0, fmt.Errorf("snapshot begin: %w", err)
	}
	d := newDecoder(b)
	next := int(d.Bounded("staged", uint64(total)))
	if err := d.Done(); err != nil {
		return 0, fmt.Errorf("snapshot begin: %w", err)
	}
	return next, nil
}

// snapPage sends one page of n records starting at record first; raw is
// their framed encoding. It returns what the peer has staged, the total,
// and the compressed size.
func snapPage(ctx context.Context, sess *rpc.Session, st *callStats, first, n int, raw []byte) (int, int, int, error) {
	head := uvarints(uint64(first), uint64(n), uint64(len(raw)))
	body := zenc().EncodeAll(raw, head)
	z := len(body) - len(head)
	b, err := call(ctx, sess, st, MethodSnapPage, body)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("snapshot page at %d: %w", first, err)
	}
	d := newDecoder(b)
	staged := int(d.Bounded("staged", MaxSnapshotRecords))
	total := int(d.Bounded("total", MaxSnapshotRecords))
	if err := d.Done(); err != nil {
		return 0, 0, 0, fmt.Errorf("snapshot page at %d: %w", first, err)
	}
	return staged, total, z, nil
}

func snapCommit(ctx context.Context, sess *rpc.Session, st *callStats, root Hash) (int64, int64, error) {
	b, err := call(ctx, sess, st, MethodSnapCommit, root[:])
	if err != nil {
		return 0, 0, fmt.Errorf("snapshot commit: %w", err)
	}
	d := newDecoder(b)
	before := int64(d.Bounded("rev", 1<<62))
	after := int64(d.Bounded("rev", 1<<62))
	if err := d.Done(); err != nil {
		return 0, 0, fmt.Errorf("snapshot commit: %w", err)
	}
	return before, after, nil
}
