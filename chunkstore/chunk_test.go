package chunkstore

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

func TestManifestValidate(t *testing.T) {
	h := Sum([]byte("x"))
	tests := []struct {
		name string
		m    Manifest
		ok   bool
	}{
		{"empty file", nil, true},
		{"one short chunk", Manifest{{h, 1}}, true},
		{"one full chunk", Manifest{{h, ChunkSize}}, true},
		{"full chunks then a tail", Manifest{{h, ChunkSize}, {h, ChunkSize}, {h, 7}}, true},
		{"empty chunk", Manifest{{h, 0}}, false},
		{"oversized chunk", Manifest{{h, ChunkSize + 1}}, false},
		{"ragged window before the last", Manifest{{h, ChunkSize - 1}, {h, 5}}, false},
		{"empty last chunk", Manifest{{h, ChunkSize}, {h, 0}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate()
			if got := err == nil; got != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrBadManifest) {
				t.Fatalf("Validate() = %v, want ErrBadManifest", err)
			}
		})
	}
}

func TestParseHashRoundTripAndRefusals(t *testing.T) {
	h := Sum([]byte("hello"))
	got, err := ParseHash(h.String())
	if err != nil || got != h {
		t.Fatalf("ParseHash(%s) = %v, %v; want %v", h, got, err, h)
	}
	for _, s := range []string{"", "ab", h.String()[:63], h.String() + "0", "zz" + h.String()[2:]} {
		if _, err := ParseHash(s); !errors.Is(err, ErrBadHash) {
			t.Errorf("ParseHash(%q) = %v, want ErrBadHash", s, err)
		}
	}
}

// manifestGen draws valid manifests: full chunks and a 1..ChunkSize tail.
var manifestGen = rapid.Custom(func(t *rapid.T) Manifest {
	n := rapid.IntRange(0, 40).Draw(t, "chunks")
	m := make(Manifest, n)
	for i := range m {
		copy(m[i].Hash[:], rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, "hash"))
		m[i].Size = ChunkSize
		if i == n-1 {
			m[i].Size = uint32(rapid.IntRange(1, ChunkSize).Draw(t, "tail"))
		}
	}
	return m
})

func TestManifestEncodeDecodeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := manifestGen.Draw(t, "manifest")
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "prefix")
		suffix := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "suffix")
		b := append(AppendManifest(append([]byte(nil), prefix...), m), suffix...)
		if !bytes.HasPrefix(b, prefix) {
			t.Fatalf("AppendManifest clobbered its prefix")
		}
		got, rest, err := DecodeManifest(b[len(prefix):])
		if err != nil {
			t.Fatalf("DecodeManifest: %v", err)
		}
		if len(got) == 0 && len(m) == 0 {
			got, m = nil, nil
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip = %v, want %v", got, m)
		}
		if !bytes.Equal(rest, suffix) {
			t.Fatalf("rest = %x, want %x", rest, suffix)
		}
		var wantSize int64
		if n := len(m); n > 0 {
			wantSize = int64(n-1)*ChunkSize + int64(m[n-1].Size)
		}
		if got := got.Size(); got != wantSize {
			t.Fatalf("Size() = %d, want %d", got, wantSize)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	h := Sum([]byte("seed"))
	f.Add(AppendManifest(nil, nil))
	f.Add(AppendManifest(nil, Manifest{{h, 10}}))
	f.Add(AppendManifest(nil, Manifest{{h, ChunkSize}, {h, ChunkSize}, {h, 1}}))
	f.Add(append(AppendManifest(nil, Manifest{{h, 3}}), "trailing bytes"...))
	f.Add(AppendManifest(nil, Manifest{{h, ChunkSize - 1}, {h, 1}})) // ragged
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x80, 0x00}) // overlong zero count
	f.Fuzz(func(t *testing.T, b []byte) {
		m, rest, err := DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, ErrBadManifest) {
				t.Fatalf("DecodeManifest error %v is not ErrBadManifest", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded manifest does not validate: %v", err)
		}
		if !bytes.HasSuffix(b, rest) {
			t.Fatalf("rest is not a suffix of the input")
		}
		// Re-encoding is canonical: never longer than what was consumed
		// (the input may hold overlong varints), and decodes to the same.
		enc := AppendManifest(nil, m)
		if len(enc) > len(b)-len(rest) {
			t.Fatalf("re-encoding is %d bytes, the input used %d", len(enc), len(b)-len(rest))
		}
		again, rest2, err := DecodeManifest(enc)
		if err != nil || len(rest2) != 0 || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-decoding = %v, %x, %v; want %v", again, rest2, err, m)
		}
	})
}
