package syncwire

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/vfs"
	"github.com/wsync/wsync/watermark"
)

// Seeds for the fuzz targets, also written to testdata/fuzz by
// TestWriteFuzzCorpus (WSYNC_WRITE_CORPUS=1).

func sampleEntries() []vfs.ChangeEntry {
	data := []byte("hello")
	h := chunkstore.Sum(data)
	return []vfs.ChangeEntry{
		{Kind: vfs.EntryDir, Rev: 1, Path: "src", Mode: 0o755, Mtime: 1700000000000000000},
		{Kind: vfs.EntryFile, Rev: 2, Path: "src/main.go", Mode: 0o644, Mtime: -5, Size: 5, Chunks: chunkstore.Manifest{{Hash: h, Size: 5}}},
		{Kind: vfs.EntrySymlink, Rev: 2, Path: "src/link", Mode: 0o777, Target: "main.go"},
		{Kind: vfs.EntryDelete, Rev: 3, Path: "src/old.txt"},
		{Kind: vfs.EntryFile, Rev: 3, Path: "empty", Mode: 0o600},
	}
}

func seedFrames() [][]byte {
	var out [][]byte
	for _, f := range []Frame{
		{Type: FrameHello, Payload: AppendHello(nil, Hello{Protocol: ProtocolName, MinVersion: 1, MaxVersion: 1, Window: defaultWindow, MaxCalls: 64})},
		{Type: FrameCall, Flags: FlagStream, ID: 1, Payload: []byte{2, 0}},
		{Type: FrameReply, ID: 1, Payload: []byte("x")},
		{Type: FrameError, ID: 3, Payload: encodeError(vfs.ErrNotExist)},
		{Type: FrameData, ID: 1 << 40, Payload: bytes.Repeat([]byte{7}, 40)},
		{Type: FrameEnd, ID: 5},
		{Type: FrameCredit, ID: 5, Payload: []byte{0x80, 0x80, 0x01}},
		{Type: FrameCancel, ID: 9},
	} {
		b, _ := AppendFrame(nil, f)
		out = append(out, b)
	}
	return out
}

func seedHellos() [][]byte {
	h := Hello{Protocol: ProtocolName, MinVersion: 1, MaxVersion: 3, Features: []string{"zstd", "exec"}, RuntimeID: uuid.MustParse("6f1c1f5e-2d3b-4c1a-9d7e-0a1b2c3d4e5f"), StoreID: "store-1", Window: defaultWindow, MaxCalls: 64}
	return [][]byte{AppendHello(nil, h), append(AppendHello(nil, h), 1, 2, 3), AppendHello(nil, Hello{Protocol: "other"})}
}

func seedEntries() [][]byte {
	es := sampleEntries()
	all, _ := AppendEntries(nil, es)
	one, _ := AppendEntries(nil, es[1:2])
	none, _ := AppendEntries(nil, nil)
	return [][]byte{all, one, none}
}

func seedObjects() [][]byte {
	var out [][]byte
	for _, data := range [][]byte{[]byte("raw bytes"), bytes.Repeat([]byte("compressible "), 4000)} {
		var e enc
		e.uvarint(1)
		b, _ := appendObject(e.b, Object{Hash: chunkstore.Sum(data), Data: data})
		out = append(out, b)
	}
	return out
}

func seedHashes() [][]byte {
	return [][]byte{AppendHashes(nil, nil), AppendHashes(nil, []chunkstore.Hash{chunkstore.Sum(nil), chunkstore.Sum([]byte("a"))})}
}

func seedMessages() [][]byte {
	var out [][]byte
	add := func(b []byte, err error) {
		if err == nil {
			out = append(out, b)
		}
	}
	add(PushRequest{SenderRev: 9, SenderCursor: watermark.Within(9, "a/b"), Stage: 3}.appendTo(nil))
	add(PushResponse{RevBefore: 4, RevAfter: 9, Applied: 5, AppliedPush: watermark.At(9)}.appendTo(nil))
	add(FetchRequest{After: watermark.Within(2, "x")}.appendTo(nil))
	add(FetchRequest{After: watermark.At(2), Through: watermark.At(7), Ignore: []string{"node_modules", ".git"}}.appendTo(nil))
	add(FetchRequest{Ignore: []string{}}.appendTo(nil))
	add(FetchResponse{Current: watermark.At(7), AppliedPush: watermark.Within(3, "z")}.appendTo(nil))
	add(PeerState{StoreID: "s", CurrentRev: 8, Set: watermark.Set{Push: watermark.At(1), Fetch: watermark.Within(2, "p"), AppliedPush: watermark.At(3)}}.appendTo(nil))
	out = append(out, encodeError(fmt.Errorf("x: %w", chunkstore.ErrUnknownHash)))
	out = append(out, PushObjectsRequest{Stage: 5, Hashes: []chunkstore.Hash{chunkstore.Sum([]byte("a"))}}.appendTo(nil), PushObjectsResponse{Chunks: 3, Bytes: 1 << 20}.appendTo(nil))
	return out
}

func addSeeds(f *testing.F, seeds [][]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	addSeeds(f, seedFrames())
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		enc, err := AppendFrame(nil, fr)
		if err != nil {
			t.Fatalf("decoded frame does not encode: %v", err)
		}
		fr2, err := DecodeFrame(enc)
		if err != nil || fr2.Type != fr.Type || fr2.Flags != fr.Flags || fr2.ID != fr.ID || !bytes.Equal(fr2.Payload, fr.Payload) {
			t.Fatalf("re-decode = %+v, %v; want %+v", fr2, err, fr)
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	addSeeds(f, seedHellos())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHello(b)
		if err != nil {
			return
		}
		h2, err := DecodeHello(AppendHello(nil, h))
		if err != nil || !reflect.DeepEqual(h, h2) {
			t.Fatalf("re-decode = %+v, %v; want %+v", h2, err, h)
		}
	})
}

func FuzzDecodeEntries(f *testing.F) {
	addSeeds(f, seedEntries())
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := DecodeEntries(b)
		if err != nil {
			return
		}
		for i := range es {
			if err := es[i].Validate(); err != nil {
				t.Fatalf("decoded entry %d does not validate: %v", i, err)
			}
		}
		enc, err := AppendEntries(nil, es)
		if err != nil {
			t.Fatalf("decoded entries do not encode: %v", err)
		}
		es2, err := DecodeEntries(enc)
		if err != nil || !reflect.DeepEqual(es, es2) {
			t.Fatalf("re-decode = %v, %v; want %v", es2, err, es)
		}
	})
}

// longSample is a file entry long enough to travel as three entry parts.
func longSample() vfs.ChangeEntry {
	h := chunkstore.Sum([]byte("x"))
	m := chunkstore.Manifest{}
	for range 2*partRefs + 10 {
		m = append(m, chunkstore.Ref{Hash: h, Size: chunkstore.ChunkSize}, chunkstore.Ref{Hash: chunkstore.HoleHash, Size: chunkstore.ChunkSize})
	}
	m = m[:2*partRefs+10]
	return vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: 7, Path: "big/file", Mode: 0o644, Mtime: 1, Chunks: m, Size: m.Size()}
}

// seedParts are entry-part messages: the three parts of longSample, and a
// whole sparse entry as one part.
func seedParts() [][]byte {
	en := longSample()
	parts, _ := AppendEntryParts(&en)
	m := chunkstore.Manifest{}.AppendHole(1 << 40)
	small := vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: 1, Path: "sparse", Chunks: m, Size: m.Size()}
	one, _ := AppendEntryParts(&small)
	return append(parts, one...)
}

// FuzzEntryParts feeds an EntryDecoder the input as a message on its own,
// then after the first part of a long entry: whatever it accepts
// validates, and a stream never ends inside an entry unnoticed.
func FuzzEntryParts(f *testing.F) {
	addSeeds(f, seedParts())
	first := seedParts()[0]
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, prefix := range [][]byte{nil, first} {
			var x EntryDecoder
			if prefix != nil {
				if es, err := x.Decode(prefix); err != nil || len(es) != 0 {
					t.Fatalf("first part: %v, %d entries", err, len(es))
				}
			}
			es, err := x.Decode(b)
			if err != nil {
				continue
			}
			for i := range es {
				if err := es[i].Validate(); err != nil {
					t.Fatalf("decoded entry %d does not validate: %v", i, err)
				}
			}
			if x.pending == nil && x.Finish() != nil || x.pending != nil && x.Finish() == nil {
				t.Fatal("Finish disagrees with the pending entry")
			}
		}
	})
}

func TestEntryPartsRoundTrip(t *testing.T) {
	en := longSample()
	parts, err := AppendEntryParts(&en)
	if err != nil || len(parts) != 3 {
		t.Fatalf("%d parts, %v", len(parts), err)
	}
	var x EntryDecoder
	var got []vfs.ChangeEntry
	for i, p := range parts {
		if len(p) > MaxPayload {
			t.Fatalf("part %d of %d bytes", i, len(p))
		}
		es, err := x.Decode(p)
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		got = append(got, es...)
	}
	if err := x.Finish(); err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], en) {
		t.Fatalf("round trip: %v, %d entries", err, len(got))
	}
	// Out of order, repeated, cut short, interleaved: typed errors.
	bad := map[string][][]byte{
		"second part first": {parts[1]},
		"part repeated":     {parts[0], parts[0]},
		"part skipped":      {parts[0], parts[2]},
		"ordinary inside":   {parts[0], mustAppend(AppendEntries(nil, sampleEntries()))},
	}
	for name, msgs := range bad {
		var x EntryDecoder
		var err error
		for _, p := range msgs {
			if _, err = x.Decode(p); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: err = %v, want ErrProtocol", name, err)
		}
	}
	var cut EntryDecoder
	cut.Decode(parts[0])
	if err := cut.Finish(); !errors.Is(err, ErrProtocol) {
		t.Errorf("cut short: Finish = %v, want ErrProtocol", err)
	}
}

func FuzzDecodeObjects(f *testing.F) {
	addSeeds(f, seedObjects())
	f.Fuzz(func(t *testing.T, b []byte) {
		// A check that refuses everything stops the decoder before any
		// object is decompressed or handed on.
		refused := errors.New("refused")
		if err := DecodeObjectsFunc(b, func(chunkstore.Hash, int) error { return refused }, func(Object) error {
			t.Fatal("an object passed a refusing check")
			return nil
		}); err == nil && len(b) > 0 && b[0] != 0 {
			t.Fatal("a message with objects decoded past a refusing check")
		}
		objs, err := decodeAllObjects(b)
		if err != nil {
			return
		}
		var e enc
		e.uvarint(uint64(len(objs)))
		for _, o := range objs {
			if len(o.Data) == 0 || len(o.Data) > chunkstore.ChunkSize {
				t.Fatalf("object of %d bytes decoded", len(o.Data))
			}
			e.b, _ = appendObject(e.b, o)
		}
		objs2, err := decodeAllObjects(e.b)
		if err != nil || !reflect.DeepEqual(objs, objs2) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeHashes(f *testing.F) {
	addSeeds(f, seedHashes())
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := DecodeHashes(b)
		if err != nil {
			return
		}
		hs2, err := DecodeHashes(AppendHashes(nil, hs))
		if err != nil || !reflect.DeepEqual(hs, hs2) {
			t.Fatalf("re-decode: %v", err)
		}
		bits, err := DecodeBitmap(b, len(b)*8)
		if err == nil && len(bits) != len(b)*8 {
			t.Fatal("bitmap length")
		}
	})
}

// FuzzDecodeMessage feeds every request/response decoder the same input.
func FuzzDecodeMessage(f *testing.F) {
	addSeeds(f, seedMessages())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodePushRequest(b); err == nil {
			if r2, err := DecodePushRequest(mustAppend(r.appendTo(nil))); err != nil || r2 != r {
				t.Fatalf("push request: %+v vs %+v, %v", r, r2, err)
			}
		}
		if r, err := DecodePushResponse(b); err == nil {
			if r2, err := DecodePushResponse(mustAppend(r.appendTo(nil))); err != nil || r2 != r {
				t.Fatalf("push response: %+v vs %+v, %v", r, r2, err)
			}
		}
		if r, err := DecodeFetchRequest(b); err == nil {
			if r2, err := DecodeFetchRequest(mustAppend(r.appendTo(nil))); err != nil || !reflect.DeepEqual(r, r2) {
				t.Fatalf("fetch request: %+v vs %+v, %v", r, r2, err)
			}
		}
		if r, err := DecodeFetchResponse(b); err == nil {
			if r2, err := DecodeFetchResponse(mustAppend(r.appendTo(nil))); err != nil || r2 != r {
				t.Fatalf("fetch response: %+v vs %+v, %v", r, r2, err)
			}
		}
		if r, err := DecodePeerState(b); err == nil {
			if r2, err := DecodePeerState(mustAppend(r.appendTo(nil))); err != nil || r2 != r {
				t.Fatalf("peer state: %+v vs %+v, %v", r, r2, err)
			}
		}
		if r, err := DecodePushObjectsRequest(b); err == nil {
			if r2, err := DecodePushObjectsRequest(r.appendTo(nil)); err != nil || !reflect.DeepEqual(r2, r) {
				t.Fatalf("push objects request: %+v vs %+v, %v", r, r2, err)
			}
		}
		if r, err := DecodePushObjectsResponse(b); err == nil {
			if r2, err := DecodePushObjectsResponse(r.appendTo(nil)); err != nil || r2 != r {
				t.Fatalf("push objects response: %+v vs %+v, %v", r, r2, err)
			}
		}
		if code, msg, err := decodeError(b); err == nil {
			var e enc
			e.uvarint(uint64(code))
			e.str(msg)
			if c2, m2, err := decodeError(e.b); err != nil || c2 != code || m2 != msg {
				t.Fatalf("error: %v %q vs %v %q, %v", code, msg, c2, m2, err)
			}
		}
	})
}

func TestMessagesRoundTrip(t *testing.T) {
	es := sampleEntries()
	b, err := AppendEntries(nil, es)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEntries(b)
	if err != nil || !reflect.DeepEqual(got, es) {
		t.Errorf("entries = %v, %v", got, err)
	}
	for _, seed := range seedMessages() {
		if len(seed) == 0 {
			t.Error("empty seed")
		}
	}
	fr := FetchRequest{After: watermark.At(2), Through: watermark.At(7), Ignore: []string{}}
	fr2, err := DecodeFetchRequest(mustAppend(fr.appendTo(nil)))
	if err != nil || fr2.Ignore == nil || len(fr2.Ignore) != 0 || fr2.Through != fr.Through {
		t.Errorf("an empty ignore list must survive as empty, not nil: %+v, %v", fr2, err)
	}
	fr3, _ := DecodeFetchRequest(mustAppend(FetchRequest{}.appendTo(nil)))
	if fr3.Ignore != nil {
		t.Error("a nil ignore list must survive as nil (the default)")
	}
}

func TestDecodersRejectBadInput(t *testing.T) {
	h := chunkstore.Sum([]byte("x"))
	huge := AppendHashes(nil, nil)
	huge[0] = 0xff // a count larger than the message
	cases := map[string]func() error{
		"entry count beyond message": func() error { _, err := DecodeEntries([]byte{0xff, 0x01}); return err },
		"bad kind": func() error {
			var e enc
			e.uvarint(1)
			e.byte(9)
			e.b = append(e.b, 1, 0, 1, 'a', 0, 0)
			_, err := DecodeEntries(e.b)
			return err
		},
		"prefix past previous path": func() error {
			var e enc
			e.uvarint(1)
			appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: "a"}, "")
			e.b[3] = 5 // shared prefix 5 of ""
			_, err := DecodeEntries(e.b)
			return err
		},
		"ragged manifest": func() error {
			var e enc
			e.uvarint(1)
			appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: 1, Path: "f", Size: 3,
				Chunks: chunkstore.Manifest{{Hash: h, Size: 1}, {Hash: h, Size: 2}}}, "")
			_, err := DecodeEntries(e.b)
			return err
		},
		"hash count beyond message": func() error { _, err := DecodeHashes(huge); return err },
		"shared-prefix path bomb": func() error {
			// One 4 KiB path, then entries that share all but its last
			// byte: ~10 bytes each on the wire, 4 KiB each decoded.
			long := strings.Repeat("d/", 2047) + "x"
			var e enc
			n := 16000
			e.uvarint(uint64(n))
			prev := ""
			for i := range n {
				p := long[:len(long)-1] + string(rune('a'+i%26))
				appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: p, Mode: 0o755}, prev)
				prev = p
			}
			_, err := DecodeEntries(e.b)
			return err
		},
		"trailing bytes": func() error { _, err := DecodeHashes(append(AppendHashes(nil, nil), 0)); return err },
		"zstd bomb": func() error {
			data := make([]byte, chunkstore.ChunkSize)
			z := compress(data)
			var e enc
			e.uvarint(1)
			e.hash(h)
			e.byte(objZstd)
			e.uvarint(100) // claims 100 bytes; decodes to 512 KiB
			e.bytes(z)
			putCompressBuf(z)
			_, err := decodeAllObjects(e.b)
			return err
		},
		"bitmap bits past n": func() error { _, err := DecodeBitmap([]byte{0xff}, 3); return err },
		"hello wrong protocol": func() error {
			_, err := DecodeHello(AppendHello(nil, Hello{Protocol: "http", MinVersion: 1, MaxVersion: 1, Window: defaultWindow, MaxCalls: 1}))
			return err
		},
		"hello tiny window": func() error {
			_, err := DecodeHello(AppendHello(nil, Hello{Protocol: ProtocolName, MinVersion: 1, MaxVersion: 1, Window: 10, MaxCalls: 1}))
			return err
		},
	}
	for name, fn := range cases {
		if err := fn(); err == nil {
			t.Errorf("%s: decoded", name)
		} else if !errorsIsAny(err, ErrProtocol, vfs.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrProtocol or ErrInvalid", name, err)
		}
	}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if CodeOf(err) == CodeOf(t) {
			return true
		}
	}
	return false
}

// TestWriteFuzzCorpus writes the seeds as corpus files under
// testdata/fuzz (run with WSYNC_WRITE_CORPUS=1 after changing a seed).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("WSYNC_WRITE_CORPUS") == "" {
		t.Skip("set WSYNC_WRITE_CORPUS=1 to rewrite testdata/fuzz")
	}
	for name, seeds := range map[string][][]byte{
		"FuzzDecodeFrame":   seedFrames(),
		"FuzzDecodeHello":   seedHellos(),
		"FuzzDecodeEntries": seedEntries(),
		"FuzzDecodeObjects": seedObjects(),
		"FuzzEntryParts":    seedParts(),
		"FuzzDecodeHashes":  seedHashes(),
		"FuzzDecodeMessage": seedMessages(),
	} {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// decodeAllObjects decodes a message's objects with a check that admits
// any hash up to a chunk.
func decodeAllObjects(p []byte) ([]Object, error) {
	var out []Object
	err := DecodeObjectsFunc(p, func(chunkstore.Hash, int) error { return nil }, func(o Object) error {
		out = append(out, o)
		return nil
	})
	return out, err
}

// Honest entries shaped like the shared-prefix bomb (thousands of siblings
// under a 4 KiB-deep directory) still round-trip: AppendEntries stops
// sharing prefixes where the receiver's bound would refuse the message.
func TestDeepSiblingsRoundTrip(t *testing.T) {
	long := strings.Repeat("d/", 2047)
	var es []vfs.ChangeEntry
	for i := range 2000 {
		es = append(es, vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: long + fmt.Sprintf("%c", 'a'+i%26), Mode: 0o755})
	}
	b, err := AppendEntries(nil, es)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEntries(b)
	if err != nil || !reflect.DeepEqual(got, es) {
		t.Fatalf("round trip of deep siblings: %v", err)
	}
	t.Logf("%d entries of %d-byte paths in %d bytes", len(es), len(es[0].Path), len(b))
}
