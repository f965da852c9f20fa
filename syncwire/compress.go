package syncwire

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/syncwire/rpc"
)

// One encoder and one decoder serve the process: EncodeAll and DecodeAll
// are safe for concurrent use and reuse their internal state.
var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithWindowSize(chunkstore.ChunkSize),
			zstd.WithZeroFrames(true))
		if err != nil {
			panic(err)
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(2*chunkstore.ChunkSize),
			zstd.WithDecoderMaxWindow(chunkstore.ChunkSize),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(err)
		}
		return d
	})
	compressBufs = sync.Pool{New: func() any { b := make([]byte, 0, chunkstore.ChunkSize); return &b }}
)

// minCompressGain is the fraction (1/n) a chunk must shrink by before we
// send it compressed: below that the receiver's decode costs more than the
// bytes saved on loopback.
const minCompressGain = 16

// compress returns data zstd-compressed, or nil when that would not make it
// meaningfully smaller. A non-nil result goes back with putCompressBuf.
func compress(data []byte) []byte {
	if len(data) < 256 {
		return nil
	}
	if len(data) > 4*sampleSize && !compressible(data) {
		return nil
	}
	if len(data) <= 4*sampleSize && len(data) >= entropySample && uniformBytes(data) && uniformBytes(data[len(data)/2:]) {
		return nil
	}
	bp := compressBufs.Get().(*[]byte)
	z := zstdEncoder().EncodeAll(data, (*bp)[:0])
	if len(z) >= len(data)-len(data)/minCompressGain {
		*bp = z[:0]
		compressBufs.Put(bp)
		return nil
	}
	return z
}

// sampleSize is how much of a large chunk is test-compressed first, so
// incompressible chunks (media, archives, random data) cost a fraction of a
// full encode.
const sampleSize = 16 << 10

// compressible test-compresses samples from the start and the middle of data.
func compressible(data []byte) bool {
	var buf [sampleSize + 512]byte
	for _, off := range []int{0, len(data) / 2} {
		sample := data[off : off+sampleSize]
		if z := zstdEncoder().EncodeAll(sample, buf[:0]); len(z) < len(sample)-len(sample)/minCompressGain {
			return true
		}
	}
	return false
}

// uniformBytes reports whether the first entropySample bytes of sample (a
// small chunk's head and middle are both looked at) are spread so evenly over
// the 256 values that no coding of single bytes could shrink them by a
// sixteenth (minCompressGain): a histogram, where a full encode of a small
// chunk cost several times as much, and small chunks of random,
// compressed or encrypted bytes end here (a pull of 10,000 such files
// spent 2.6% of its CPU on encodes it threw away). The estimate is the
// order-0 entropy; what it misses, repeats of incompressible blocks inside
// one small chunk, travels raw.
func uniformBytes(sample []byte) bool {
	sample = sample[:min(len(sample), entropySample)]
	var hist [256]uint16
	for _, b := range sample {
		hist[b]++
	}
	// bits = log2(n) - sum(c log2 c) / n
	t := clog2c()
	sum := 0.0
	for _, c := range hist {
		sum += t[c]
	}
	n := float64(len(sample))
	// A sample of 1 KiB of uniform random bytes estimates about 7.8 bits;
	// text is 4-5; a sixteenth smaller is 7.5.
	return math.Log2(n)-sum/n > 8-8.0/minCompressGain
}

// entropySample is how many bytes uniformBytes looks at.
const entropySample = 1 << 10

// clog2c is c*log2(c) for every count a sample's histogram can hold.
var clog2c = sync.OnceValue(func() *[entropySample + 1]float64 {
	var t [entropySample + 1]float64
	for c := 2; c <= entropySample; c++ {
		t[c] = float64(c) * math.Log2(float64(c))
	}
	return &t
})

func putCompressBuf(z []byte) {
	z = z[:0]
	compressBufs.Put(&z)
}

// decompressed counts the bytes decompress produced (tests check that
// refused objects cost none).
var decompressed atomic.Int64

// decompress decodes one compressed chunk of exactly raw bytes into a
// buffer of that size: the decoder stops at its capacity, so a frame that
// claims or yields more is an error, never a larger allocation.
func decompress(z []byte, raw int) ([]byte, error) {
	defer func() { decompressed.Add(int64(raw)) }()
	out, err := zstdDecoder().DecodeAll(z, make([]byte, 0, raw))
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %v", rpc.ErrProtocol, err)
	}
	if len(out) != raw {
		return nil, protoErr("zstd chunk of %d bytes, header says %d", len(out), raw)
	}
	return out, nil
}
