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
		{"a hole run between chunks", Manifest{{h, ChunkSize}, {HoleHash, 5 * ChunkSize}, {h, 9}}, true},
		{"a hole as the whole file", Manifest{{HoleHash, 3}}, true},
		{"a ragged hole at the end", Manifest{{h, ChunkSize}, {HoleHash, 2*ChunkSize + 1}}, true},
		{"the longest hole run", Manifest{{HoleHash, MaxHoleRun}, {h, 1}}, true},
		{"a ragged hole before the last", Manifest{{HoleHash, ChunkSize + 1}, {h, 1}}, false},
		{"an empty hole", Manifest{{HoleHash, 0}}, false},
		{"a hole past the longest run", Manifest{{HoleHash, MaxHoleRun + 1}}, false},
		{"holes up to the largest file", holes(MaxFileSize), true},
		{"holes past the largest file", holes(MaxFileSize + 1), false},
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

// holes returns a manifest of n bytes of zeros, in maximal runs.
func holes(n int64) Manifest { return Manifest(nil).AppendHole(n) }

func TestManifestHoleHelpers(t *testing.T) {
	h1, h2 := Sum([]byte("1")), Sum([]byte("2"))
	m := Manifest{{h1, ChunkSize}}.AppendHole(2 * ChunkSize).AppendHole(ChunkSize).Append(Ref{h2, ChunkSize}).Append(Ref{HoleHash, 100})
	want := Manifest{{h1, ChunkSize}, {HoleHash, 3 * ChunkSize}, {h2, ChunkSize}, {HoleHash, 100}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("appended = %v, want %v (adjacent holes merge)", m, want)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := m.Size(), int64(5*ChunkSize+100); got != want {
		t.Fatalf("Size() = %d, want %d", got, want)
	}
	if got, want := m.DataRefs(), []Ref{{h1, ChunkSize}, {h2, ChunkSize}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("DataRefs() = %v, want %v", got, want)
	}
	if got, want := m.Hashes(), []Hash{h1, h2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Hashes() = %v, want %v", got, want)
	}
	var offs []int64
	for off := range m.Runs() {
		offs = append(offs, off)
	}
	if want := []int64{0, ChunkSize, 4 * ChunkSize, 5 * ChunkSize}; !reflect.DeepEqual(offs, want) {
		t.Fatalf("Runs() offsets = %v, want %v", offs, want)
	}
	x := m.Index()
	for i, want := range []Ref{{h1, ChunkSize}, {HoleHash, ChunkSize}, {HoleHash, ChunkSize}, {HoleHash, ChunkSize}, {h2, ChunkSize}, {HoleHash, 100}} {
		if got, ok := x.Chunk(int64(i)); !ok || got != want {
			t.Errorf("Chunk(%d) = %v, %v; want %v", i, got, ok, want)
		}
	}
	for _, i := range []int64{-1, 6, 1 << 40} {
		if got, ok := x.Chunk(i); ok {
			t.Errorf("Chunk(%d) = %v, want none", i, got)
		}
	}
	// Any chunk range copies out as the same bytes, holes merged.
	for lo := int64(0); lo <= 6; lo++ {
		for hi := lo; hi <= 6; hi++ {
			got := x.AppendChunks(Manifest{{HoleHash, ChunkSize}}, lo, hi)
			want := Manifest{{HoleHash, ChunkSize}}
			for i := lo; i < hi; i++ {
				r, _ := x.Chunk(i)
				want = want.Append(r)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("AppendChunks(%d, %d) = %v, want %v", lo, hi, got, want)
			}
		}
	}
	// The largest file, all holes, then one chunk: 1025 refs, not 8M.
	big := holes(MaxFileSize - ChunkSize).Append(Ref{h1, ChunkSize})
	if err := big.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(big) > 1100 {
		t.Fatalf("a 4 TiB hole took %d refs", len(big))
	}
	last := int64(MaxFileSize/ChunkSize - 1)
	if got, ok := big.Index().Chunk(last); !ok || got != (Ref{h1, ChunkSize}) {
		t.Fatalf("Chunk(last) = %v, %v", got, ok)
	}
	if got, ok := big.Index().Chunk(last - 1); !ok || got != (Ref{HoleHash, ChunkSize}) {
		t.Fatalf("Chunk(last-1) = %v, %v", got, ok)
	}
	// Without holes the index is the manifest itself.
	plain := Manifest{{h1, ChunkSize}, {h2, 3}}
	if got := plain.DataRefs(); &got[0] != &plain[0] {
		t.Fatalf("DataRefs of a manifest without holes copied it")
	}
}

func TestIsZero(t *testing.T) {
	b := make([]byte, ChunkSize)
	if !IsZero(b) || !IsZero(nil) {
		t.Fatal("zeros are not zero")
	}
	for _, i := range []int{0, 1, 16<<10 - 1, 16 << 10, ChunkSize - 1} {
		b[i] = 1
		if IsZero(b) {
			t.Fatalf("a one at %d went unseen", i)
		}
		b[i] = 0
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

// manifestGen draws valid manifests: full chunks and hole runs, and a
// 1..ChunkSize tail or a ragged hole.
var manifestGen = rapid.Custom(func(t *rapid.T) Manifest {
	n := rapid.IntRange(0, 40).Draw(t, "chunks")
	m := make(Manifest, n)
	for i := range m {
		if rapid.IntRange(0, 3).Draw(t, "kind") == 0 {
			m[i].Size = uint32(rapid.IntRange(1, MaxHoleRun/ChunkSize).Draw(t, "run")) * ChunkSize
			if i == n-1 {
				m[i].Size -= uint32(rapid.IntRange(0, ChunkSize-1).Draw(t, "short"))
			}
			continue
		}
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
		for _, r := range m {
			wantSize += int64(r.Size)
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
	f.Add(AppendManifest(nil, Manifest{{h, ChunkSize}, {HoleHash, 4 * ChunkSize}, {h, 5}}))
	f.Add(AppendManifest(nil, Manifest{{HoleHash, 2*ChunkSize + 7}}))            // ragged hole at the end
	f.Add(AppendManifest(nil, Manifest{{HoleHash, ChunkSize + 7}, {h, 1}}))      // ragged hole before the last
	f.Add(AppendManifest(nil, Manifest{{HoleHash, MaxHoleRun + 1}}))             // run too long
	f.Add(AppendManifest(nil, Manifest{{h, ChunkSize}}.AppendHole(MaxFileSize))) // past the largest file
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
