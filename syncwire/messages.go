package syncwire

import (
	"encoding/binary"
	"fmt"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// The sync methods. Other packages take numbers from 256 up (see
// Server.Handle); exec uses 256..511 and convergence 512..767.
const (
	MethodWatermarks   rpc.Method = 1
	MethodPush         rpc.Method = 2
	MethodFetchChanges rpc.Method = 3
	MethodHasObjects   rpc.Method = 4
	MethodFetchObjects rpc.Method = 5
	MethodPushObjects  rpc.Method = 6

	// FirstExtensionMethod is the lowest number Server.Handle accepts.
	FirstExtensionMethod rpc.Method = 256
)

// Bounds every decoder enforces.
const (
	// MaxHashes bounds the hashes of one HasObjects or FetchObjects request
	// (they fit one frame); callers split longer lists.
	MaxHashes = 16384
	// MaxPushEntries bounds the entries of one Push.
	MaxPushEntries = 16384
	// MaxPushBytes bounds the encoded entries of one Push: room for the
	// longest manifest (split across frames as entry parts) plus a batch
	// of ordinary entries.
	MaxPushBytes = 64<<20 + chunkstore.MaxManifestChunks*maxRefSize
	// maxRefSize bounds one encoded ref: 32 hash bytes, a uvarint size.
	maxRefSize = 32 + 5
	// entryPartMarker opens an entry-stream message carrying one part of a
	// file entry too long for one frame (docs/PROTOCOL.md, "Entry parts").
	// It is above any entry count, so it cannot start an ordinary message.
	entryPartMarker = 1 << 24
	// partRefs is how many refs one entry part carries (about 256 KiB).
	partRefs = entryFrameTarget / maxRefSize
	// maxStoreID bounds a store id (as rpc bounds the handshake's id).
	maxStoreID = 256
	// minEntrySize is the smallest encoded entry (kind, rev, prefix,
	// suffix length, one path byte, mode, mtime).
	minEntrySize = 7
	// minObjectSize is the smallest encoded object (hash, flags, length, one byte).
	minObjectSize = 35
	// entryFrameTarget is where an entry or object stream message is cut.
	entryFrameTarget = 256 << 10
	// firstEntryFrame is where an entry stream's first message is cut;
	// each next one's target doubles, up to entryFrameTarget. A first
	// message of 256 KiB (about 2,900 entries of one chunk) kept the
	// receiver idle while the sender read that much of its feed: 50 ms of a
	// pull of 10,000 files.
	firstEntryFrame = 16 << 10
)

// PeerState is what Watermarks returns: the peer's identity, its current
// rev, the watermarks it keeps for the caller, and the highest rev its
// store handed out as a place in its feed (protocol 7; vfs.Store.Served).
type PeerState struct {
	StoreID    string
	CurrentRev int64
	Set        watermark.Set
	Served     int64
}

func (p PeerState) appendTo(b []byte) ([]byte, error) {
	e := newEnc(b)
	e.PutString(p.StoreID)
	e.rev(p.CurrentRev)
	e.cursor(p.Set.Push)
	e.cursor(p.Set.Fetch)
	e.cursor(p.Set.AppliedPush)
	e.rev(p.Served)
	return e.Bytes(), e.Err()
}

// DecodePeerState decodes a Watermarks response.
func DecodePeerState(p []byte) (PeerState, error) {
	d := newDec(p)
	var s PeerState
	s.StoreID = d.UTF8("store id", maxStoreID)
	s.CurrentRev = d.rev()
	s.Set.Push = d.cursor()
	s.Set.Fetch = d.cursor()
	s.Set.AppliedPush = d.cursor()
	s.Served = d.rev()
	return s, d.Done()
}

// PushRequest opens a Push. Its request stream carries the entries.
type PushRequest struct {
	// SenderRev is the sender's current rev: > 0 for a sync peer (apply as
	// upstream), 0 for an external writer (apply as local).
	SenderRev int64
	// SenderCursor is how far in the sender's feed this batch reaches; the
	// receiver records it as its applied-push cursor.
	SenderCursor watermark.Cursor
	// Stage names the chunks PushObjects sent for this batch (0: none).
	Stage uint64
	// Fence is how far the sender has fetched the receiver's feed: a sync
	// peer's entry that would replace a receiver's change after it waits
	// (PushResponse.Deferred) instead of overwriting it. Protocol 3.
	Fence watermark.Cursor
}

func (r PushRequest) appendTo(b []byte) ([]byte, error) {
	e := newEnc(b)
	e.rev(r.SenderRev)
	e.cursor(r.SenderCursor)
	e.PutUvarint(r.Stage)
	e.cursor(r.Fence)
	return e.Bytes(), e.Err()
}

// DecodePushRequest decodes a Push request body.
func DecodePushRequest(p []byte) (PushRequest, error) {
	d := newDec(p)
	var r PushRequest
	r.SenderRev = d.rev()
	r.SenderCursor = d.cursor()
	r.Stage = d.Uvarint()
	r.Fence = d.cursor()
	return r, d.Done()
}

// PushResponse is the receiver's answer to a Push.
type PushResponse struct {
	// RevBefore and RevAfter bracket the revs the apply stamped on the
	// receiver: every rev in (RevBefore, RevAfter] came from this batch.
	// Equal when the batch changed nothing.
	RevBefore, RevAfter int64
	Applied, Skipped    int
	// AppliedPush is the receiver's applied-push cursor after the batch.
	AppliedPush watermark.Cursor
	// Deferred are the paths of the batch's entries the receiver's fence
	// held back (PushRequest.Fence), in batch order. Protocol 3.
	Deferred []string
}

func (r PushResponse) appendTo(b []byte) ([]byte, error) {
	e := newEnc(b)
	e.rev(r.RevBefore)
	e.rev(r.RevAfter)
	e.PutUvarint(uint64(r.Applied))
	e.PutUvarint(uint64(r.Skipped))
	e.cursor(r.AppliedPush)
	e.PutUvarint(uint64(len(r.Deferred)))
	for _, p := range r.Deferred {
		e.PutString(p)
	}
	return e.Bytes(), e.Err()
}

// DecodePushResponse decodes a Push response body.
func DecodePushResponse(p []byte) (PushResponse, error) {
	d := newDec(p)
	var r PushResponse
	r.RevBefore = d.rev()
	r.RevAfter = d.rev()
	r.Applied = int(d.Bounded("applied", MaxPushEntries))
	r.Skipped = int(d.Bounded("skipped", MaxPushEntries))
	r.AppliedPush = d.cursor()
	if n := d.Count("deferred paths", MaxPushEntries, 2); n > 0 {
		r.Deferred = make([]string, 0, n)
		for range n {
			p := d.String("deferred path", vfs.MaxPathLen)
			if d.Err() == nil {
				if err := vfs.ValidatePath(p); err != nil {
					d.Fail("deferred path %q: %v", p, err)
				}
			}
			r.Deferred = append(r.Deferred, p)
		}
	}
	if d.Err() == nil && r.RevAfter < r.RevBefore {
		d.Fail("rev after %d < rev before %d", r.RevAfter, r.RevBefore)
	}
	return r, d.Done()
}

// FetchRequest opens a FetchChanges.
type FetchRequest struct {
	After watermark.Cursor
	// Through bounds the feed; the zero Cursor means the peer's current rev.
	Through watermark.Cursor
	// Ignore is the ignore list: nil means the default (vfs.DefaultIgnore),
	// an empty non-nil list disables ignoring.
	Ignore []string
}

func (r FetchRequest) appendTo(b []byte) ([]byte, error) {
	e := newEnc(b)
	e.cursor(r.After)
	if r.Through == (watermark.Cursor{}) {
		e.PutByte(0)
	} else {
		e.PutByte(1)
		e.cursor(r.Through)
	}
	AppendIgnore(&e.Encoder, r.Ignore)
	return e.Bytes(), e.Err()
}

// DecodeFetchRequest decodes a FetchChanges request body.
func DecodeFetchRequest(p []byte) (FetchRequest, error) {
	d := newDec(p)
	var r FetchRequest
	r.After = d.cursor()
	switch d.Byte() {
	case 0:
	case 1:
		r.Through = d.cursor()
	default:
		d.Fail("bad through flag")
	}
	r.Ignore = DecodeIgnore(&d.Decoder)
	return r, d.Done()
}

// AppendIgnore appends an ignore list as FetchRequest and converge's Root
// and Node requests carry it: 0 for nil (the default list), otherwise 1,
// the count and the gitignore patterns in order (an empty list disables
// ignoring).
func AppendIgnore(e *rpc.Encoder, list []string) {
	if list == nil {
		e.PutByte(0)
		return
	}
	e.PutByte(1)
	e.PutUvarint(uint64(len(list)))
	for _, s := range list {
		e.PutString(s)
	}
}

// DecodeIgnore reads what AppendIgnore wrote: at most vfs.MaxIgnore
// patterns, each one vfs.ValidateIgnorePattern accepts. A bad list is d's
// failure, so each protocol reports it with its own malformed-message
// error.
func DecodeIgnore(d *rpc.Decoder) []string {
	switch d.Byte() {
	case 0:
		return nil
	case 1:
	default:
		d.Fail("bad ignore flag")
		return nil
	}
	n := d.Count("ignore patterns", vfs.MaxIgnore, 1)
	list := make([]string, 0, n)
	for range n {
		s := d.String("ignore pattern", vfs.MaxIgnorePatternLen)
		if d.Err() == nil {
			if err := vfs.ValidateIgnorePattern(s); err != nil {
				d.Fail("%v", err)
			}
		}
		list = append(list, s)
	}
	return list
}

// FetchResponse heads a FetchChanges response stream.
type FetchResponse struct {
	// Current is the cursor the stream runs to: the puller persists it after
	// a clean drain.
	Current watermark.Cursor
	// AppliedPush is the peer's applied-push cursor (the invariant).
	AppliedPush watermark.Cursor
}

func (r FetchResponse) appendTo(b []byte) ([]byte, error) {
	e := newEnc(b)
	e.cursor(r.Current)
	e.cursor(r.AppliedPush)
	return e.Bytes(), e.Err()
}

// DecodeFetchResponse decodes a FetchChanges response body.
func DecodeFetchResponse(p []byte) (FetchResponse, error) {
	d := newDec(p)
	var r FetchResponse
	r.Current = d.cursor()
	r.AppliedPush = d.cursor()
	return r, d.Done()
}

// PushObjectsRequest opens a PushObjects; its request stream carries the
// objects Hashes names, in that order, each at most a chunk: the receiver
// refuses any other object before decompressing it, so a call decodes at
// most len(Hashes) chunks, one at a time.
type PushObjectsRequest struct {
	Stage  uint64 // nonzero; later named by PushRequest.Stage
	Hashes []chunkstore.Hash
}

func (r PushObjectsRequest) appendTo(b []byte) []byte {
	e := newEnc(b)
	e.PutUvarint(r.Stage)
	return AppendHashes(e.Bytes(), r.Hashes)
}

// DecodePushObjectsRequest decodes a PushObjects request body.
func DecodePushObjectsRequest(p []byte) (PushObjectsRequest, error) {
	d := newDec(p)
	r := PushObjectsRequest{Stage: d.Uvarint()}
	if d.Err() == nil && r.Stage == 0 {
		d.Fail("push objects: stage 0")
	}
	if err := d.Err(); err != nil {
		return PushObjectsRequest{}, err
	}
	hs, err := DecodeHashes(d.Rest())
	if err != nil {
		return PushObjectsRequest{}, err
	}
	if err := noHoles("push objects", hs); err != nil {
		return PushObjectsRequest{}, err
	}
	r.Hashes = hs
	return r, nil
}

// PushObjectsResponse reports what the receiver staged.
type PushObjectsResponse struct {
	Chunks int64
	Bytes  int64
}

func (r PushObjectsResponse) appendTo(b []byte) []byte {
	e := newEnc(b)
	e.PutUvarint(uint64(r.Chunks))
	e.PutUvarint(uint64(r.Bytes))
	return e.Bytes()
}

// DecodePushObjectsResponse decodes a PushObjects response body.
func DecodePushObjectsResponse(p []byte) (PushObjectsResponse, error) {
	d := newDec(p)
	var r PushObjectsResponse
	r.Chunks = int64(d.Bounded("chunks", 1<<40))
	r.Bytes = int64(d.Bounded("bytes", 1<<60))
	return r, d.Done()
}

// AppendEntries appends one entry-stream message: a count, then the
// entries. Each path is stored as the length of the prefix it shares with
// the previous entry's path in the same message, then the rest.
//
// A path shares its prefix only while the message's paths and targets stay
// within maxStringsPerByte bytes per encoded byte (the receiver's bound);
// past that it is sent whole.
func AppendEntries(b []byte, entries []vfs.ChangeEntry) ([]byte, error) {
	e := newEnc(b)
	start := e.Len()
	e.PutUvarint(uint64(len(entries)))
	prev := ""
	strs := 0
	for i := range entries {
		en := &entries[i]
		strs += len(en.Path) + len(en.Target)
		mark := e.Len()
		appendEntry(&e, en, prev)
		if strs > maxStringsPerByte*(e.Len()-start) {
			e.Truncate(mark)
			appendEntry(&e, en, "")
		}
		prev = en.Path
	}
	return e.Bytes(), e.Err()
}

func sharedPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func appendEntry(e *enc, en *vfs.ChangeEntry, prev string) {
	e.PutByte(byte(en.Kind))
	e.rev(en.Rev)
	k := sharedPrefix(prev, en.Path)
	e.PutUvarint(uint64(k))
	e.PutString(en.Path[k:])
	e.PutUvarint(uint64(en.Mode))
	e.PutVarint(en.Mtime)
	switch en.Kind {
	case vfs.EntryFile:
		e.manifest(en.Chunks)
	case vfs.EntrySymlink:
		e.PutString(en.Target)
	}
}

// entrySize is an upper bound of an entry's encoding, to cut messages.
func entrySize(en *vfs.ChangeEntry) int {
	return 40 + len(en.Path) + len(en.Target) + maxRefSize*len(en.Chunks)
}

// longEntry reports whether en is sent as entry parts: a manifest that
// would take more than half a frame.
func longEntry(en *vfs.ChangeEntry) bool {
	return en.Kind == vfs.EntryFile && entrySize(en) > rpc.MaxPayload/2
}

// AppendEntryParts encodes a long file entry as entry-part messages, each
// well within one frame: the first carries the entry with its first refs,
// the others the following refs. Every part is marker, the manifest's
// total ref count, the index of the part's first ref, then (first part)
// the entry with a manifest of the part's refs, or (later parts) those
// refs as a manifest.
func AppendEntryParts(en *vfs.ChangeEntry) ([][]byte, error) {
	if en.Kind != vfs.EntryFile {
		return nil, fmt.Errorf("%w: entry parts for a %s entry", vfs.ErrInvalid, en.Kind)
	}
	m := en.Chunks
	var out [][]byte
	for off := 0; off == 0 || off < len(m); {
		k := min(partRefs, len(m)-off)
		var e enc
		e.PutUvarint(entryPartMarker)
		e.PutUvarint(uint64(len(m)))
		e.PutUvarint(uint64(off))
		if off == 0 {
			first := *en
			first.Chunks = m[:k]
			appendEntry(&e, &first, "")
		} else {
			e.manifest(m[off : off+k])
		}
		if err := e.Err(); err != nil {
			return nil, err
		}
		out = append(out, e.Bytes())
		off += k
		if len(m) == 0 {
			break
		}
	}
	return out, nil
}

// EntryDecoder decodes an entry stream: ordinary messages (DecodeEntries)
// and the parts of long entries. It holds at most one partial entry, whose
// refs grow only with the parts received, up to MaxManifestChunks.
type EntryDecoder struct {
	pending *vfs.ChangeEntry
	total   int // refs the pending entry's manifest has in all
}

// Decode decodes one message of the stream; a part that does not complete
// its entry returns no entries.
func (x *EntryDecoder) Decode(p []byte) ([]vfs.ChangeEntry, error) {
	d := newDec(p)
	if v, n := binary.Uvarint(p); n <= 0 || v != entryPartMarker {
		if x.pending != nil {
			return nil, protoErr("entry part %d of %d refs of %q: an ordinary message before its end", len(x.pending.Chunks), x.total, x.pending.Path)
		}
		return DecodeEntries(p)
	}
	d.Uvarint()
	total := int(d.Bounded("entry part total refs", chunkstore.MaxManifestChunks))
	off := int(d.Bounded("entry part offset", uint64(total)))
	if err := d.Err(); err != nil {
		return nil, err
	}
	if off == 0 {
		if x.pending != nil {
			return nil, protoErr("entry part: a new entry before %q ended", x.pending.Path)
		}
		en, err := decodeEntry(&d, 0, "")
		if err != nil {
			return nil, err
		}
		if en.Kind != vfs.EntryFile {
			return nil, protoErr("entry part: a %s entry", en.Kind)
		}
		x.pending, x.total = &en, total
	} else {
		if x.pending == nil || off != len(x.pending.Chunks) || total != x.total {
			return nil, protoErr("entry part at ref %d of %d out of order", off, total)
		}
		m := d.manifest()
		if err := d.Err(); err != nil {
			return nil, err
		}
		x.pending.Chunks = append(x.pending.Chunks, m...)
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	en := x.pending
	switch got := len(en.Chunks); {
	case got > x.total:
		return nil, protoErr("entry part: %d refs of %d", got, x.total)
	case got == off && x.total > 0:
		return nil, protoErr("entry part at ref %d carries no refs", off)
	case got < x.total:
		return nil, nil
	}
	x.pending = nil
	if len(en.Chunks) == 0 {
		en.Chunks = nil
	}
	en.Size = en.Chunks.Size()
	if err := en.Validate(); err != nil {
		return nil, fmt.Errorf("long entry (rev %d): %w", en.Rev, err)
	}
	return []vfs.ChangeEntry{*en}, nil
}

// Finish reports a stream that ended inside a long entry.
func (x *EntryDecoder) Finish() error {
	if x.pending != nil {
		return protoErr("entry stream ended after %d of %d refs of %q", len(x.pending.Chunks), x.total, x.pending.Path)
	}
	return nil
}

// DecodeEntries decodes one entry-stream message. Every entry is checked
// with ChangeEntry.Validate: a bad path is vfs.ErrInvalid, never a write.
func DecodeEntries(p []byte) ([]vfs.ChangeEntry, error) {
	d := newDec(p)
	n := d.Count("entries", MaxPushEntries, minEntrySize)
	if err := d.Err(); err != nil {
		return nil, err
	}
	out := make([]vfs.ChangeEntry, 0, n)
	prev := ""
	// Shared prefixes let a few bytes stand for a 4 KiB path: bound what
	// the message's strings may add up to by its length.
	strBudget := maxStringsPerByte * len(p)
	for i := range n {
		en, err := decodeEntry(&d, i, prev)
		if err != nil {
			return nil, err
		}
		if strBudget -= len(en.Path) + len(en.Target); strBudget < 0 {
			return nil, protoErr("entries: paths and targets of more than %d bytes in a message of %d", maxStringsPerByte*len(p), len(p))
		}
		if err := en.Validate(); err != nil {
			return nil, fmt.Errorf("entry %d (rev %d): %w", i, en.Rev, err)
		}
		out = append(out, en)
		prev = en.Path
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	return out, nil
}

// An entry message's decoded paths and targets total at most
// maxStringsPerByte bytes per message byte, so a stream's strings are
// bounded by the bytes sent (a 4 KiB path differing from the previous one
// in its last byte would otherwise cost ~10 wire bytes). AppendEntries
// stops sharing prefixes where a message would pass it: a path sent whole
// costs at least its length.
const maxStringsPerByte = 16

// decodeEntry decodes entry i of a message whose previous path is prev. It
// does not validate: an entry part is validated once complete.
func decodeEntry(d *dec, i int, prev string) (vfs.ChangeEntry, error) {
	var en vfs.ChangeEntry
	en.Kind = vfs.EntryKind(d.Byte())
	en.Rev = d.rev()
	k := int(d.Bounded("shared prefix", uint64(len(prev))))
	suffix := d.Bytes("path", vfs.MaxPathLen)
	if d.Err() == nil && k+len(suffix) > vfs.MaxPathLen {
		d.Fail("path of %d bytes", k+len(suffix))
	}
	en.Path = prev[:k] + string(suffix)
	en.Mode = uint32(d.Bounded("mode", 07777))
	en.Mtime = d.Varint()
	switch en.Kind {
	case vfs.EntryFile:
		if en.Chunks = d.manifest(); len(en.Chunks) == 0 {
			en.Chunks = nil // an empty file: no chunks
		}
		en.Size = en.Chunks.Size()
	case vfs.EntrySymlink:
		en.Target = d.String("symlink target", vfs.MaxTargetLen)
	case vfs.EntryDir, vfs.EntryDelete:
	default:
		d.Fail("entry %d: kind %d", i, en.Kind)
	}
	return en, d.Err()
}

// AppendHashes appends a hash list: a count, then 32 bytes each.
func AppendHashes(b []byte, hs []chunkstore.Hash) []byte {
	e := newEnc(b)
	e.PutUvarint(uint64(len(hs)))
	for _, h := range hs {
		e.hash(h)
	}
	return e.Bytes()
}

// DecodeHashes decodes a hash list of at most MaxHashes.
func DecodeHashes(p []byte) ([]chunkstore.Hash, error) {
	d := newDec(p)
	n := d.Count("hashes", MaxHashes, len(chunkstore.Hash{}))
	out := make([]chunkstore.Hash, n)
	for i := range out {
		out[i] = d.hash()
	}
	return out, d.Done()
}

// AppendBitmap encodes which of n requested hashes are present: bit i of
// byte i/8 (least significant first).
func AppendBitmap(b []byte, have []bool) []byte {
	bm := make([]byte, (len(have)+7)/8)
	for i, ok := range have {
		if ok {
			bm[i/8] |= 1 << (i % 8)
		}
	}
	return append(b, bm...)
}

// DecodeBitmap decodes a HasObjects response for a request of n hashes.
func DecodeBitmap(p []byte, n int) ([]bool, error) {
	if len(p) != (n+7)/8 {
		return nil, protoErr("bitmap of %d bytes for %d hashes", len(p), n)
	}
	out := make([]bool, n)
	for i := range out {
		out[i] = p[i/8]&(1<<(i%8)) != 0
	}
	if n%8 != 0 && p[len(p)-1]>>(n%8) != 0 {
		return nil, protoErr("bitmap has bits past %d", n)
	}
	return out, nil
}

// Object is one chunk on an object stream.
type Object struct {
	Hash chunkstore.Hash
	Data []byte
}

// Object flags.
const objZstd = 1 << 0

// objectHeader bounds one object's encoding beyond its data.
const objectHeader = 32 + 1 + 2*binaryMaxVarint

const binaryMaxVarint = 10

// appendObject appends one object, zstd-compressed when that is smaller.
// It returns the bytes the data took on the wire.
func appendObject(b []byte, o Object) ([]byte, int) {
	e := newEnc(b)
	e.hash(o.Hash)
	z := compress(o.Data)
	if z != nil {
		e.PutByte(objZstd)
		e.PutUvarint(uint64(len(o.Data)))
		e.PutBytes(z)
		putCompressBuf(z)
		return e.Bytes(), len(z)
	}
	e.PutByte(0)
	e.PutBytes(o.Data)
	return e.Bytes(), len(o.Data)
}

// AppendObjects appends one object message holding objs (SendObjects
// builds them from a chunk reader; this is for callers holding the bytes).
func AppendObjects(b []byte, objs []Object) []byte {
	b = binary.AppendUvarint(b, uint64(len(objs)))
	for _, o := range objs {
		b, _ = appendObject(b, o)
	}
	return b
}

// ObjectCheck is called with each object's hash and raw size, before its
// bytes are decompressed: it refuses an object nobody asked for (or one
// larger than asked) with an error, which DecodeObjectsFunc returns.
type ObjectCheck func(h chunkstore.Hash, raw int) error

// DecodeObjectsFunc decodes one object-stream message one object at a
// time: check vets each object's hash and size before anything is
// decompressed or allocated, then fn takes the object before the next one
// is decoded. A compressed object decodes into a buffer of exactly its
// declared size (zstd is told that cap and refuses a frame that yields
// more), so the memory a message costs is one object at a time whatever
// its compression ratio. Data of an uncompressed object aliases p. It
// checks sizes, not hashes: the receiver hashes each object as it stages
// it.
func DecodeObjectsFunc(p []byte, check ObjectCheck, fn func(Object) error) error {
	d := newDec(p)
	n := d.Count("objects", MaxHashes, minObjectSize)
	for range n {
		var o Object
		o.Hash = d.hash()
		flags := d.Byte()
		var raw int
		var z []byte
		switch flags {
		case 0:
			o.Data = d.Bytes("chunk", chunkstore.ChunkSize)
			raw = len(o.Data)
		case objZstd:
			raw = int(d.Bounded("chunk length", chunkstore.ChunkSize))
			z = d.Bytes("compressed chunk", rpc.MaxPayload)
		default:
			d.Fail("bad object flags %#x", flags)
		}
		if d.Err() == nil && raw == 0 {
			d.Fail("empty chunk")
		}
		if d.Err() == nil && isHole(o.Hash) {
			d.Fail("object named by the hole hash")
		}
		if err := d.Err(); err != nil {
			return err
		}
		if err := check(o.Hash, raw); err != nil {
			return err
		}
		if z != nil {
			data, err := decompress(z, raw)
			if err != nil {
				return err
			}
			o.Data = data
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return d.Done()
}

// objectQueue is what one object call asked for, in order: each object
// must be the next one asked. With DecodeObjectsFunc's bound of a chunk per
// object, it bounds a call's decoded bytes by len(hs) chunks.
type objectQueue struct {
	what string
	hs   []chunkstore.Hash
	next int
}

// newObjectQueue expects hs in order.
func newObjectQueue(what string, hs []chunkstore.Hash) *objectQueue {
	return &objectQueue{what: what, hs: hs}
}

func (q *objectQueue) check(h chunkstore.Hash, _ int) error {
	if q.next >= len(q.hs) {
		return protoErr("%s: object %s beyond the %d asked for", q.what, h, len(q.hs))
	}
	if want := q.hs[q.next]; h != want {
		return protoErr("%s: object %d is %s, asked for %s", q.what, q.next, h, want)
	}
	q.next++
	return nil
}

func (q *objectQueue) finish() error {
	if q.next != len(q.hs) {
		return protoErr("%s: stream ended after %d of %d objects", q.what, q.next, len(q.hs))
	}
	return nil
}

// isHole reports whether h is the hole hash: a run of zeros, never an
// object (never probed, fetched, pushed or stored).
func isHole(h chunkstore.Hash) bool { return h == chunkstore.HoleHash }
