package converge

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/crashpoint"
	"github.com/wsync/wsync/syncwire"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
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
	// objectsTarget is where the sender cuts an object message (raw bytes);
	// compressed it stays under one frame.
	objectsTarget = 768 << 10
	// maxObjectsRaw bounds an object message on the receiver.
	maxObjectsRaw = objectsTarget + chunkstore.ChunkSize + 64<<10
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

// A page's raw payload is a run of records, each length-framed:
//
//	uvarint(len) || one entry-stream message holding one entry (syncwire.AppendEntries)
//
// so a record's decode is bounded by its own frame.

// appendRecord appends one length-framed record.
func appendRecord(b []byte, e vfs.ChangeEntry) ([]byte, error) {
	rec, err := syncwire.AppendEntries(nil, []vfs.ChangeEntry{e})
	if err != nil {
		return b, err
	}
	w := writer{b: b}
	w.uvarint(uint64(len(rec)))
	return append(w.b, rec...), nil
}

// DecodeRecords decodes a page's raw payload of n records. Each record is
// one valid non-delete entry.
func DecodeRecords(p []byte, n int) ([]vfs.ChangeEntry, error) {
	if n < 0 || n > MaxPageRecords {
		return nil, malformed("%d records in a page", n)
	}
	r := reader{b: p}
	out := make([]vfs.ChangeEntry, 0, min(n, len(p)/8))
	for i := range n {
		rec := r.bytes("record", vfs.MaxPathLen+64+43*chunkstore.MaxManifestChunks)
		if r.err != nil {
			return nil, r.err
		}
		es, err := syncwire.DecodeEntries(rec)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, errAsMalformed(err))
		}
		if len(es) != 1 || es[0].Kind == vfs.EntryDelete {
			return nil, malformed("record %d: not one live entry", i)
		}
		out = append(out, es[0])
	}
	return out, r.done()
}

// errAsMalformed keeps an error's text but makes it ErrMalformed.
func errAsMalformed(err error) error {
	return fmt.Errorf("%w: %v", ErrMalformed, err)
}

// Object messages of MethodSnapObjects: zstd of
//
//	uvarint(count) || count × (hash || uvarint(len) || bytes)
//
// preceded, uncompressed, by uvarint(raw length).

func appendObjects(objs []syncwire.Object) []byte {
	w := writer{}
	w.uvarint(uint64(len(objs)))
	for _, o := range objs {
		w.b = append(w.b, o.Hash[:]...)
		w.uvarint(uint64(len(o.Data)))
		w.b = append(w.b, o.Data...)
	}
	h := writer{}
	h.uvarint(uint64(len(w.b)))
	return zenc().EncodeAll(w.b, h.b)
}

// DecodeObjects decodes one object message and checks every chunk's bytes
// against its hash.
func DecodeObjects(p []byte) ([]syncwire.Object, error) {
	r := reader{b: p}
	raw := int(r.bounded("objects length", maxObjectsRaw))
	if r.err != nil {
		return nil, r.err
	}
	b, err := unzstd(r.b, raw, maxObjectsRaw)
	if err != nil {
		return nil, err
	}
	r = reader{b: b}
	n := r.count("objects", syncwire.MaxHashes, 34)
	out := make([]syncwire.Object, 0, n)
	for range n {
		var o syncwire.Object
		copy(o.Hash[:], r.raw(32))
		o.Data = r.bytes("chunk", chunkstore.ChunkSize)
		if r.err != nil {
			return nil, r.err
		}
		if len(o.Data) == 0 {
			return nil, malformed("empty chunk")
		}
		if sha256.Sum256(o.Data) != o.Hash {
			return nil, fmt.Errorf("snapshot chunk %s: %w", chunkstore.Hash(o.Hash), chunkstore.ErrHashMismatch)
		}
		out = append(out, o)
	}
	return out, r.done()
}

// BootstrapOptions configures Bootstrap.
type BootstrapOptions struct {
	// Peer names the local watermarks kept for the peer.
	Peer string
	// Progress, if set, is called after each page the peer staged with
	// the records staged so far and the total.
	Progress func(staged, total int)

	// For tests: a page size other than pageTarget, and a root to declare
	// instead of ours.
	pageBytes int
	claim     *Hash
	noCommit  bool
}

// BootstrapReport is what one Bootstrap did.
type BootstrapReport struct {
	Root  Hash
	Rev   int64 // the local rev the snapshot is of
	Total int   // records in the snapshot
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

// Bootstrap sends the whole local tree to a peer whose store is empty, as
// zstd-compressed pages of length-framed records. The peer stages them
// apart from its live state (resuming where an interrupted bootstrap of
// the same root stopped), checks the staged tree against our root, and
// installs it in place of its (empty) tree. Afterwards our push cursor is
// at the snapshot's rev, so the next push sends only later changes.
func Bootstrap(ctx context.Context, local *vfs.Store, sess *syncwire.Session, opts BootstrapOptions) (rep BootstrapReport, _ error) {
	start := time.Now()
	var st callStats
	var wc syncwire.WireCounter
	ctx = syncwire.WithWireCounter(ctx, &wc)
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
	rep.Root, rep.Rev, rep.Total = t.Root, t.Rev, len(recs)

	declared := t.Root
	if opts.claim != nil {
		declared = *opts.claim
	}
	pageBytes := pageTarget
	if opts.pageBytes > 0 {
		pageBytes = opts.pageBytes
	}
	next, err := snapBegin(ctx, sess, &st, declared, t.Rev, len(recs))
	if err != nil {
		return rep, fmt.Errorf("bootstrap: %w", err)
	}
	rep.ResumedAt = next
	for i := next; i < len(recs); {
		var raw []byte
		var es []vfs.ChangeEntry
		for j := i; j < len(recs) && len(es) < MaxPageRecords && len(raw) < pageBytes; j++ {
			e, err := recs[j].n.entry(recs[j].path, t.Rev)
			if err != nil {
				return rep, fmt.Errorf("bootstrap: %w", err)
			}
			if raw, err = appendRecord(raw, e); err != nil {
				return rep, fmt.Errorf("bootstrap: %w", err)
			}
			es = append(es, e)
		}
		if err := sendChunks(ctx, sess, &st, local, es, &rep); err != nil {
			return rep, fmt.Errorf("bootstrap: %w", err)
		}
		staged, total, z, err := snapPage(ctx, sess, &st, i, len(es), raw)
		if err != nil {
			return rep, fmt.Errorf("bootstrap: %w", err)
		}
		crashpoint.Hit("converge.snapshot.paged")
		rep.Pages++
		rep.Sent += len(es)
		metricSnapshotRecords.WithLabelValues("sent").Add(float64(len(es)))
		rep.RawBytes += int64(len(raw))
		rep.PageBytes += int64(z)
		i += len(es)
		if staged != i || total != len(recs) {
			return rep, fmt.Errorf("bootstrap: %w", malformed("peer staged %d of %d, expected %d of %d", staged, total, i, len(recs)))
		}
		if opts.Progress != nil {
			opts.Progress(staged, total)
		}
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
	if after > before && ws.Fetch.Covers(watermark.At(before)) {
		// The revs the install stamped hold our own entries.
		ws.Fetch = watermark.At(after)
	}
	if err := local.SetWatermarks(ctx, opts.Peer, ws); err != nil {
		return rep, err
	}
	return rep, nil
}

// sendChunks probes the peer for the page's chunks and sends the missing
// ones into its staging.
func sendChunks(ctx context.Context, sess *syncwire.Session, st *callStats, local *vfs.Store, es []vfs.ChangeEntry, rep *BootstrapReport) error {
	need := chunkHashes(es)
	for len(need) > 0 {
		part := need[:min(len(need), syncwire.MaxHashes)]
		need = need[len(part):]
		b, err := call(ctx, sess, st, MethodSnapHave, syncwire.AppendHashes(nil, part))
		if err != nil {
			return fmt.Errorf("snapshot have: %w", err)
		}
		have, err := syncwire.DecodeBitmap(b, len(part))
		if err != nil {
			return fmt.Errorf("snapshot have: %w", err)
		}
		var missing []chunkstore.Hash
		for i, ok := range have {
			if !ok {
				missing = append(missing, part[i])
			}
		}
		if len(missing) == 0 {
			continue
		}
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
			var objs []syncwire.Object
			size := 0
			flush := func() error {
				if len(objs) == 0 {
					return nil
				}
				p := appendObjects(objs)
				objs, size = objs[:0], 0
				return o.Send(ctx, p)
			}
			for _, h := range missing {
				data, err := local.ReadChunk(ctx, h)
				if err != nil {
					return err
				}
				if size+len(data) > objectsTarget {
					if err := flush(); err != nil {
						return err
					}
				}
				objs = append(objs, syncwire.Object{Hash: h, Data: data})
				size += len(data) + 40
				rep.Chunks++
				rep.ChunkBytes += int64(len(data))
			}
			if err := flush(); err != nil {
				return err
			}
			if err := o.CloseSend(); err != nil {
				return err
			}
			_, err := o.Reply(ctx)
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

func snapBegin(ctx context.Context, sess *syncwire.Session, st *callStats, root Hash, rev int64, total int) (int, error) {
	w := writer{}
	w.hash(root)
	w.uvarint(uint64(rev))
	w.uvarint(uint64(total))
	b, err := call(ctx, sess, st, MethodSnapBegin, w.b)
	if err != nil {
		return 0, fmt.Errorf("snapshot begin: %w", err)
	}
	r := reader{b: b}
	next := int(r.bounded("staged", uint64(total)))
	if err := r.done(); err != nil {
		return 0, fmt.Errorf("snapshot begin: %w", err)
	}
	return next, nil
}

// snapPage sends one page of n records starting at record first; raw is
// their framed encoding. It returns what the peer has staged, the total,
// and the compressed size.
func snapPage(ctx context.Context, sess *syncwire.Session, st *callStats, first, n int, raw []byte) (int, int, int, error) {
	w := writer{}
	w.uvarint(uint64(first))
	w.uvarint(uint64(n))
	w.uvarint(uint64(len(raw)))
	body := zenc().EncodeAll(raw, w.b)
	z := len(body) - len(w.b)
	b, err := call(ctx, sess, st, MethodSnapPage, body)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("snapshot page at %d: %w", first, err)
	}
	r := reader{b: b}
	staged := int(r.bounded("staged", MaxSnapshotRecords))
	total := int(r.bounded("total", MaxSnapshotRecords))
	if err := r.done(); err != nil {
		return 0, 0, 0, fmt.Errorf("snapshot page at %d: %w", first, err)
	}
	return staged, total, z, nil
}

func snapCommit(ctx context.Context, sess *syncwire.Session, st *callStats, root Hash) (int64, int64, error) {
	w := writer{}
	w.hash(root)
	b, err := call(ctx, sess, st, MethodSnapCommit, w.b)
	if err != nil {
		return 0, 0, fmt.Errorf("snapshot commit: %w", err)
	}
	r := reader{b: b}
	before := int64(r.bounded("rev", 1<<62))
	after := int64(r.bounded("rev", 1<<62))
	if err := r.done(); err != nil {
		return 0, 0, fmt.Errorf("snapshot commit: %w", err)
	}
	return before, after, nil
}
