package syncwire

import (
	"fmt"
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
