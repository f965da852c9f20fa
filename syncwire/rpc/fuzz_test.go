package rpc

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	"github.com/wsync/wsync/internal/testutil"
)

// Seeds for the fuzz targets, also written to testdata/fuzz by
// TestWriteFuzzCorpus (WSYNC_WRITE_CORPUS=1).

func seedFrames() [][]byte {
	var out [][]byte
	for _, f := range []Frame{
		{Type: FrameHello, Payload: AppendHello(nil, Hello{Protocol: ProtocolName, MinVersion: 1, MaxVersion: 1, Window: defaultWindow, MaxCalls: 64})},
		{Type: FrameCall, Flags: FlagStream, ID: 1, Payload: []byte{2, 0}},
		{Type: FrameReply, ID: 1, Payload: []byte("x")},
		{Type: FrameError, ID: 3, Payload: errorPayload(1, "no such file or directory")},
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
	h := Hello{Protocol: ProtocolName, MinVersion: 1, MaxVersion: 3, Features: []string{"zstd", "exec"}, RuntimeID: uuid.MustParse("6f1c1f5e-2d3b-4c1a-9d7e-0a1b2c3d4e5f"), ID: "store-1", Window: defaultWindow, MaxCalls: 64}
	return [][]byte{AppendHello(nil, h), append(AppendHello(nil, h), 1, 2, 3), AppendHello(nil, Hello{Protocol: "other"})}
}

func FuzzDecodeFrame(f *testing.F) {
	testutil.AddSeeds(f, seedFrames())
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
	testutil.AddSeeds(f, seedHellos())
	f.Fuzz(func(t *testing.T, b []byte) {
		testutil.RoundTrip(t, "hello", b, DecodeHello, func(h Hello) []byte { return AppendHello(nil, h) })
	})
}

// errorPayload is an ERROR payload as the callee writes it.
func errorPayload(code Code, msg string) []byte {
	var e Encoder
	e.PutUvarint(uint64(code))
	e.PutString(msg)
	return e.Bytes()
}

// FuzzDecodeError: an ERROR payload that decodes re-encodes to itself.
func FuzzDecodeError(f *testing.F) {
	f.Add(errorPayload(1, "no such file or directory"))
	f.Add(errorPayload(CodeBusy, "peer busy: 64 calls in flight"))
	f.Fuzz(func(t *testing.T, b []byte) {
		code, msg, err := decodeError(b)
		if err != nil {
			return
		}
		if c2, m2, err := decodeError(errorPayload(code, msg)); err != nil || c2 != code || m2 != msg {
			t.Fatalf("error: %v %q vs %v %q, %v", code, msg, c2, m2, err)
		}
	})
}

func TestWriteFuzzCorpus(t *testing.T) {
	testutil.WriteFuzzCorpus(t, map[string][][]byte{
		"FuzzDecodeFrame": seedFrames(),
		"FuzzDecodeHello": seedHellos(),
	})
}
