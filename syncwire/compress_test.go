package syncwire

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestSmallChunksCompressOnlyWhenTheyShrink: small chunks of random bytes
// skip the encode (the byte histogram says it cannot gain a sixteenth),
// text and runs still travel compressed, and every compressed chunk
// decodes to its bytes.
func TestSmallChunksCompressOnlyWhenTheyShrink(t *testing.T) {
	rnd := func(n int) []byte {
		b := make([]byte, n)
		rand.NewChaCha8([32]byte{byte(n)}).Read(b)
		return b
	}
	text := bytes.Repeat([]byte("module.exports = require('./lib/index.js');\n"), 2000)
	for _, n := range []int{1 << 10, 4 << 10, 10 << 10, 64 << 10} {
		if !uniformBytes(rnd(n)) {
			t.Errorf("%d random bytes: not uniform", n)
		}
		if z := compress(rnd(n)); z != nil {
			t.Errorf("%d random bytes compressed to %d", n, len(z))
		}
		for name, data := range map[string][]byte{"text": text[:n], "zeros": make([]byte, n)} {
			z := compress(data)
			if z == nil {
				t.Errorf("%d bytes of %s travel raw", n, name)
				continue
			}
			got, err := decompress(z, len(data))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%d bytes of %s: decompress: %v", n, name, err)
			}
		}
	}
	// A random head does not hide a compressible rest.
	half := append(rnd(8<<10), make([]byte, 8<<10)...)
	if compress(half) == nil {
		t.Error("random head, zero tail: travels raw")
	}
	// Random bytes of only 64 values are 6 bits a byte: the check leaves
	// them to the encoder.
	b := rnd(10 << 10)
	for i := range b {
		b[i] &= 63
	}
	if uniformBytes(b) {
		t.Error("6-bit random bytes: judged uniform")
	}
}

// BenchmarkCompressSmallRandom: what a 10 KB chunk of random bytes costs
// the sender before it goes raw.
func BenchmarkCompressSmallRandom(b *testing.B) {
	data := make([]byte, 10<<10)
	rand.NewChaCha8([32]byte{9}).Read(data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if compress(data) != nil {
			b.Fatal("compressed")
		}
	}
}
