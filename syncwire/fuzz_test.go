package syncwire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/testutil"
	"github.com/wsync/wsync/syncwire/rpc"
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
		e.PutUvarint(1)
		b, _ := appendObject(e.Bytes(), Object{Hash: chunkstore.Sum(data), Data: data})
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
	add(PushRequest{SenderRev: 9, SenderCursor: watermark.At(9), Fence: watermark.Within(4, "PLAN.md")}.appendTo(nil))
	add(PushResponse{RevBefore: 4, RevAfter: 9, Applied: 5, AppliedPush: watermark.At(9)}.appendTo(nil))
	add(PushResponse{RevBefore: 4, RevAfter: 4, Skipped: 1, AppliedPush: watermark.At(9), Deferred: []string{"PLAN.md", "d/e"}}.appendTo(nil))
	add(FetchRequest{After: watermark.Within(2, "x")}.appendTo(nil))
	add(FetchRequest{After: watermark.At(2), Through: watermark.At(7), Ignore: []string{"node_modules", ".git"}}.appendTo(nil))
	add(FetchRequest{Ignore: []string{}}.appendTo(nil))
	add(FetchResponse{Current: watermark.At(7), AppliedPush: watermark.Within(3, "z")}.appendTo(nil))
	add(PeerState{StoreID: "s", CurrentRev: 8, Set: watermark.Set{Push: watermark.At(1), Fetch: watermark.Within(2, "p"), AppliedPush: watermark.At(3)}, Served: 5}.appendTo(nil))
	// An ERROR payload (what rpc writes for fmt.Errorf("x: %w", chunkstore.ErrUnknownHash)).
	var e enc
	e.PutUvarint(uint64(CodeUnknownHash))
	e.PutString("x: " + chunkstore.ErrUnknownHash.Error())
	out = append(out, e.Bytes())
	out = append(out, PushObjectsRequest{Stage: 5, Hashes: []chunkstore.Hash{chunkstore.Sum([]byte("a"))}}.appendTo(nil), PushObjectsResponse{Chunks: 3, Bytes: 1 << 20}.appendTo(nil))
	// Gitignore patterns (protocol version 5), last so the older seeds keep their files.
	add(FetchRequest{Ignore: []string{"# build output", "dist/", "*.log", "!keep.log", "/build", "**/.cache/"}}.appendTo(nil))
	return out
}

func FuzzDecodeEntries(f *testing.F) {
	testutil.AddSeeds(f, seedEntries())
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
	testutil.AddSeeds(f, seedParts())
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
		if len(p) > rpc.MaxPayload {
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
		if !errors.Is(err, rpc.ErrProtocol) {
			t.Errorf("%s: err = %v, want rpc.ErrProtocol", name, err)
		}
	}
	var cut EntryDecoder
	cut.Decode(parts[0])
	if err := cut.Finish(); !errors.Is(err, rpc.ErrProtocol) {
		t.Errorf("cut short: Finish = %v, want rpc.ErrProtocol", err)
	}
}

func FuzzDecodeObjects(f *testing.F) {
	testutil.AddSeeds(f, seedObjects())
	f.Fuzz(func(t *testing.T, b []byte) {
		// A check that refuses everything stops the decoder before any
		// object is decompressed or handed on.
		refused := errors.New("refused")
		refusedErr := DecodeObjectsFunc(b, func(chunkstore.Hash, int) error { return refused }, func(Object) error {
			t.Fatal("an object passed a refusing check")
			return nil
		})
		objs, err := decodeAllObjects(b)
		if err != nil {
			return
		}
		// Only a message of no objects (its count 0, in any of the
		// uvarint's encodings: the seed "\x80\x00") decodes past it.
		if refusedErr == nil && len(objs) > 0 {
			t.Fatalf("a message with %d objects decoded past a refusing check", len(objs))
		}
		var e enc
		e.PutUvarint(uint64(len(objs)))
		msg := e.Bytes()
		for _, o := range objs {
			if len(o.Data) == 0 || len(o.Data) > chunkstore.ChunkSize {
				t.Fatalf("object of %d bytes decoded", len(o.Data))
			}
			msg, _ = appendObject(msg, o)
		}
		objs2, err := decodeAllObjects(msg)
		if err != nil || !reflect.DeepEqual(objs, objs2) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeHashes(f *testing.F) {
	testutil.AddSeeds(f, seedHashes())
	f.Fuzz(func(t *testing.T, b []byte) {
		testutil.RoundTrip(t, "hashes", b, DecodeHashes, func(hs []chunkstore.Hash) []byte { return AppendHashes(nil, hs) })
		bits, err := DecodeBitmap(b, len(b)*8)
		if err == nil && len(bits) != len(b)*8 {
			t.Fatal("bitmap length")
		}
	})
}

// FuzzDecodeMessage feeds every request/response decoder the same input.
func FuzzDecodeMessage(f *testing.F) {
	testutil.AddSeeds(f, seedMessages())
	f.Fuzz(func(t *testing.T, b []byte) {
		testutil.RoundTrip(t, "push request", b, DecodePushRequest, func(r PushRequest) []byte { return mustAppend(r.appendTo(nil)) })
		testutil.RoundTrip(t, "push response", b, DecodePushResponse, func(r PushResponse) []byte { return mustAppend(r.appendTo(nil)) })
		testutil.RoundTrip(t, "fetch request", b, DecodeFetchRequest, func(r FetchRequest) []byte { return mustAppend(r.appendTo(nil)) })
		testutil.RoundTrip(t, "fetch response", b, DecodeFetchResponse, func(r FetchResponse) []byte { return mustAppend(r.appendTo(nil)) })
		testutil.RoundTrip(t, "peer state", b, DecodePeerState, func(r PeerState) []byte { return mustAppend(r.appendTo(nil)) })
		testutil.RoundTrip(t, "push objects request", b, DecodePushObjectsRequest, func(r PushObjectsRequest) []byte { return r.appendTo(nil) })
		testutil.RoundTrip(t, "push objects response", b, DecodePushObjectsResponse, func(r PushObjectsResponse) []byte { return r.appendTo(nil) })
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
			e.PutUvarint(1)
			e.PutByte(9)
			e.PutFixed([]byte{1, 0, 1, 'a', 0, 0})
			_, err := DecodeEntries(e.Bytes())
			return err
		},
		"prefix past previous path": func() error {
			var e enc
			e.PutUvarint(1)
			appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: "a"}, "")
			e.Bytes()[3] = 5 // shared prefix 5 of ""
			_, err := DecodeEntries(e.Bytes())
			return err
		},
		"ragged manifest": func() error {
			var e enc
			e.PutUvarint(1)
			appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryFile, Rev: 1, Path: "f", Size: 3,
				Chunks: chunkstore.Manifest{{Hash: h, Size: 1}, {Hash: h, Size: 2}}}, "")
			_, err := DecodeEntries(e.Bytes())
			return err
		},
		"hash count beyond message": func() error { _, err := DecodeHashes(huge); return err },
		"shared-prefix path bomb": func() error {
			// One 4 KiB path, then entries that share all but its last
			// byte: ~10 bytes each on the wire, 4 KiB each decoded.
			long := strings.Repeat("d/", 2047) + "x"
			var e enc
			n := 16000
			e.PutUvarint(uint64(n))
			prev := ""
			for i := range n {
				p := long[:len(long)-1] + string(rune('a'+i%26))
				appendEntry(&e, &vfs.ChangeEntry{Kind: vfs.EntryDir, Rev: 1, Path: p, Mode: 0o755}, prev)
				prev = p
			}
			_, err := DecodeEntries(e.Bytes())
			return err
		},
		"trailing bytes": func() error { _, err := DecodeHashes(append(AppendHashes(nil, nil), 0)); return err },
		"zstd bomb": func() error {
			data := make([]byte, chunkstore.ChunkSize)
			z := compress(data)
			var e enc
			e.PutUvarint(1)
			e.hash(h)
			e.PutByte(objZstd)
			e.PutUvarint(100) // claims 100 bytes; decodes to 512 KiB
			e.PutBytes(z)
			putCompressBuf(z)
			_, err := decodeAllObjects(e.Bytes())
			return err
		},
		"bitmap bits past n": func() error { _, err := DecodeBitmap([]byte{0xff}, 3); return err },
		"ignore pattern malformed": func() error {
			_, err := DecodeFetchRequest(mustAppend(FetchRequest{Ignore: []string{"src/[z-"}}.appendTo(nil)))
			return err
		},
		"ignore pattern with a line break": func() error {
			_, err := DecodeFetchRequest(mustAppend(FetchRequest{Ignore: []string{"a\nb"}}.appendTo(nil)))
			return err
		},
		"ignore count past the message": func() error {
			d := rpc.NewDecoder([]byte{1, 5, 1, 'a'})
			DecodeIgnore(&d)
			return d.Done()
		},
		"bad ignore flag": func() error {
			d := rpc.NewDecoder([]byte{2})
			DecodeIgnore(&d)
			return d.Done()
		},
		"hello wrong protocol": func() error {
			_, err := rpc.DecodeHello(rpc.AppendHello(nil, rpc.Hello{Protocol: "http", MinVersion: 1, MaxVersion: 1, Window: 4 << 20, MaxCalls: 1}))
			return err
		},
		"hello tiny window": func() error {
			_, err := rpc.DecodeHello(rpc.AppendHello(nil, rpc.Hello{Protocol: rpc.ProtocolName, MinVersion: 1, MaxVersion: 1, Window: 10, MaxCalls: 1}))
			return err
		},
	}
	for name, fn := range cases {
		if err := fn(); err == nil {
			t.Errorf("%s: decoded", name)
		} else if !errorsIsAny(err, rpc.ErrProtocol, vfs.ErrInvalid) {
			t.Errorf("%s: err = %v, want rpc.ErrProtocol or ErrInvalid", name, err)
		}
	}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if rpc.CodeOf(err) == rpc.CodeOf(t) {
			return true
		}
	}
	return false
}

// TestWriteFuzzCorpus writes the seeds as corpus files under
// testdata/fuzz (run with WSYNC_WRITE_CORPUS=1 after changing a seed);
// syncwire/rpc writes the frame and hello corpora.
func TestWriteFuzzCorpus(t *testing.T) {
	testutil.WriteFuzzCorpus(t, map[string][][]byte{
		"FuzzDecodeEntries": seedEntries(),
		"FuzzDecodeObjects": seedObjects(),
		"FuzzEntryParts":    seedParts(),
		"FuzzDecodeHashes":  seedHashes(),
		"FuzzDecodeMessage": seedMessages(),
	})
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
