package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsync/wsync/chunkstore"
	"github.com/wsync/wsync/internal/fusetest"
)

// fsx: a seeded, replayable random sequence of reads, writes, truncations,
// fallocates, fsyncs, reopens and (in the mmap mode) mapped reads and
// writes over one file in a real mount, every read checked against an
// in-memory model of the file, in the manner of the classic fsx tool.
//
// The sequence runs in a child process (this test binary, helper "fsx"):
// a page fault on a mapping of the mount blocks the faulting thread until
// the server answers, and the server lives in the test process.
//
//	WSYNC_FSX_SEED=n  replays seed n (the seed is logged on every run)
//	WSYNC_FSX_OPS=n   sets the number of operations of each mode
//	WSYNC_LONG=1      runs 100,000 operations in each mode
//
// By default CI runs fewer (fsxCIOps): each operation costs about 1.5 ms
// of CPU (2.2 ms with mappings), most of it the commits that truncate,
// fsync, close and fallocate make, so 100,000 would take minutes a mode on
// CI's 2 cores.

const (
	fsxChunk   = chunkstore.ChunkSize
	fsxMaxSize = 6 * fsxChunk // the model's bound on the file's length
	// fsxCompareEvery is how often (in ops) the whole file is compared.
	fsxCompareEvery = 2000
	fsxLongOps      = 100_000
)

// fsxCIOps is the default count of each mode: about 40 s each on 2 cores.
var fsxCIOps = map[string]int{"plain": 30_000, "mmap": 20_000}

func init() { helpers["fsx"] = helperFsx }

func TestFsx(t *testing.T) {
	ops := 0 // the mode's default
	if os.Getenv("WSYNC_LONG") == "1" {
		ops = fsxLongOps
	}
	if s := os.Getenv("WSYNC_FSX_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("WSYNC_FSX_OPS: %v", err)
		}
		ops = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WSYNC_FSX_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WSYNC_FSX_SEED: %v", err)
		}
		seed = n
	}
	for _, mode := range []string{"plain", "mmap"} {
		t.Run(mode, func(t *testing.T) {
			ops := ops
			if ops == 0 {
				ops = fsxCIOps[mode]
			}
			t.Logf("seed %d, %d ops (replay: WSYNC_FSX_SEED=%d WSYNC_FSX_OPS=%d go test -run 'TestFsx/%s' ./fusefs/)",
				seed, ops, seed, ops, mode)
			runFsx(t, mode, seed, ops)
		})
	}
}

// runFsx runs one fsx sequence in a child and then checks the file as the
// mount and the store hold it after the child's last close.
func runFsx(t *testing.T, mode string, seed uint64, ops int) {
	m := fusetest.NewMount(t, fusetest.Options{})
	const name = "fsx.bin"
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := helperCmd(ctx, "fsx", m.Path(name), mode, strconv.FormatUint(seed, 10), strconv.Itoa(ops)).CombinedOutput()
	if err != nil {
		t.Fatalf("fsx %s seed %d: %v\n%s", mode, seed, err, out)
	}
	// The child's last line: "done SIZE SHA256 OPS_PER_SECOND".
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var size int64
	var sum string
	var rate float64
	if _, err := fmt.Sscanf(lines[len(lines)-1], "done %d %s %f", &size, &sum, &rate); err != nil {
		t.Fatalf("fsx output: %v\n%s", err, out)
	}
	t.Logf("%s: %d ops at %.0f ops/s, final size %d", mode, ops, rate, size)
	if len(lines) > 1 {
		t.Logf("%s", strings.Join(lines[:len(lines)-1], "\n"))
	}

	st := stat(t, m.Path(name))
	if st.Size != size {
		t.Errorf("mount: size %d after the run, the model's is %d", st.Size, size)
	}
	viaMount, err := os.ReadFile(m.Path(name))
	if err != nil {
		t.Fatal(err)
	}
	if got := sha(viaMount); got != sum {
		t.Errorf("mount: content %s (size %d), the model's is %s", got, len(viaMount), sum)
	}
	// The committed content, read through the store, not the mount.
	a, err := m.Store.Stat(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != size {
		t.Errorf("store: size %d, the model's is %d", a.Size, size)
	}
	man, err := m.Store.Manifest(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if man.Size() != a.Size {
		t.Errorf("store: manifest covers %d bytes, the node's size is %d", man.Size(), a.Size)
	}
	viaStore, err := m.Store.ReadFile(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha(viaStore); got != sum {
		t.Errorf("store: content %s (size %d), the model's is %s; first difference from the mount's at %d",
			got, len(viaStore), sum, firstDiff(viaStore, viaMount))
	}
}

// fsx is the child's state: the file, its model and the recent ops.
type fsx struct {
	path  string
	mmap  bool
	rng   *rand.Rand
	fd    int
	model []byte
	op    int
	// punch is the outcome of the first FALLOC_FL_PUNCH_HOLE: 0 unknown,
	// 1 supported, -1 refused with EOPNOTSUPP. It must not change.
	punch int
	// recent holds the last ops for the failure report.
	recent  []string
	counts  map[string]int
	kind    string
	spent   map[string]time.Duration
	pattern byte
}

// helperFsx runs args: PATH MODE SEED OPS.
func helperFsx(args []string) error {
	seed, err := strconv.ParseUint(args[2], 10, 64)
	if err != nil {
		return err
	}
	ops, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	x := &fsx{path: args[0], mmap: args[1] == "mmap", rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		counts: map[string]int{}, spent: map[string]time.Duration{}}
	fd, err := unix.Open(x.path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	x.fd = fd
	start := time.Now()
	for x.op = 1; x.op <= ops; x.op++ {
		t0 := time.Now()
		err := x.step()
		x.spent[x.kind] += time.Since(t0)
		if err != nil {
			return x.failure(seed, err)
		}
		if x.op%fsxCompareEvery == 0 {
			if err := x.compareAll(); err != nil {
				return x.failure(seed, err)
			}
		}
	}
	if err := x.compareAll(); err != nil {
		return x.failure(seed, err)
	}
	if err := unix.Close(x.fd); err != nil {
		return x.failure(seed, fmt.Errorf("final close: %w", err))
	}
	elapsed := time.Since(start)
	var kinds []string
	for k, n := range x.counts {
		kinds = append(kinds, fmt.Sprintf("%s=%d(%.1fs)", k, n, x.spent[k].Seconds()))
	}
	slices.Sort(kinds)
	fmt.Printf("ops: %s\n", strings.Join(kinds, " "))
	fmt.Printf("done %d %s %.1f\n", len(x.model), sha(x.model), float64(ops)/elapsed.Seconds())
	return nil
}

func (x *fsx) failure(seed uint64, err error) error {
	return fmt.Errorf("fsx seed %d failed at op %d: %w\nlast ops:\n%s", seed, x.op, err, strings.Join(x.recent, "\n"))
}

// note counts an op of kind and logs it.
func (x *fsx) note(kind, format string, args ...any) {
	x.kind = kind
	x.counts[kind]++
	x.logf(format, args...)
}

func (x *fsx) logf(format string, args ...any) {
	s := fmt.Sprintf("%6d ", x.op) + fmt.Sprintf(format, args...)
	if len(x.recent) == 40 {
		x.recent = append(x.recent[:0], x.recent[1:]...)
	}
	x.recent = append(x.recent, s)
}

// offset picks an offset: anywhere, next to a chunk boundary, or around EOF
// (including past it, which leaves a hole).
func (x *fsx) offset() int64 {
	size := int64(len(x.model))
	var off int64
	switch x.rng.IntN(3) {
	case 0:
		off = x.rng.Int64N(fsxMaxSize)
	case 1:
		off = x.rng.Int64N(fsxMaxSize/fsxChunk)*fsxChunk + x.rng.Int64N(8192) - 4096
	default:
		off = size + x.rng.Int64N(2*fsxChunk+8192) - 8192
	}
	return max(0, min(off, fsxMaxSize-1))
}

// length picks a length log-uniformly, mostly up to 64 KiB and one time in
// ten up to 3 chunks, that keeps off+length within the model's bound.
func (x *fsx) length(off int64) int64 {
	bits := 16
	if x.rng.IntN(10) == 0 {
		bits = 21
	}
	n := int64(1) << x.rng.IntN(bits)
	n += x.rng.Int64N(n)
	return max(1, min(n, 3*fsxChunk, fsxMaxSize-off))
}

// newSize picks a truncation target: 0, a chunk boundary, mid-chunk, near
// the current size, or anywhere.
func (x *fsx) newSize() int64 {
	size := int64(len(x.model))
	switch x.rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return x.rng.Int64N(fsxMaxSize/fsxChunk+1) * fsxChunk
	case 2:
		return x.rng.Int64N(fsxMaxSize/fsxChunk)*fsxChunk + fsxChunk/2
	case 3:
		return max(0, min(fsxMaxSize, size+x.rng.Int64N(16384)-8192))
	default:
		return x.rng.Int64N(fsxMaxSize + 1)
	}
}

// data is n bytes for op: mostly a pattern naming the op (never zero), now
// and then all zeros (which the store keeps as holes).
func (x *fsx) data(n int64) []byte {
	b := make([]byte, n)
	if x.rng.IntN(10) == 0 {
		return b
	}
	x.pattern = byte(x.op%250) + 1
	for i := range b {
		b[i] = x.pattern + byte(i%5)
	}
	return b
}

func (x *fsx) setSize(n int64) {
	if n <= int64(len(x.model)) {
		x.model = x.model[:n]
		return
	}
	x.model = append(x.model, make([]byte, n-int64(len(x.model)))...)
}

func (x *fsx) step() error {
	r := x.rng.IntN(100)
	if x.mmap {
		switch {
		case r < 12:
			return x.mapRead()
		case r < 24:
			return x.mapWrite()
		}
		r = x.rng.IntN(100) // the rest as in the plain mode
	}
	switch {
	case r < 32:
		return x.read()
	case r < 70:
		return x.write()
	case r < 78:
		return x.truncate()
	case r < 86:
		return x.fallocate()
	case r < 90:
		x.note("fsync", "fsync")
		if err := unix.Fsync(x.fd); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
		return nil
	case r < 94:
		return x.reopen()
	case r < 99:
		return x.readOther()
	default:
		return x.far()
	}
}

func (x *fsx) read() error {
	off := x.offset()
	n := x.length(off)
	x.note("read", "read %d+%d (size %d)", off, n, len(x.model))
	return x.check(x.fd, off, n)
}

// check preads n bytes at off from fd and compares them with the model.
func (x *fsx) check(fd int, off, n int64) error {
	buf := make([]byte, n)
	got := 0
	for got < len(buf) {
		k, err := unix.Pread(fd, buf[got:], off+int64(got))
		if err != nil {
			return fmt.Errorf("pread %d+%d: %w", off, n, err)
		}
		if k == 0 {
			break
		}
		got += k
	}
	var want []byte
	if off < int64(len(x.model)) {
		want = x.model[off:min(off+n, int64(len(x.model)))]
	}
	if got != len(want) {
		return fmt.Errorf("pread %d+%d: %d bytes, the model has %d (size %d)", off, n, got, len(want), len(x.model))
	}
	if i := firstDiff(buf[:got], want); i >= 0 {
		return fmt.Errorf("pread %d+%d: byte %d (file offset %d) is %#x, the model's is %#x",
			off, n, i, off+int64(i), buf[i], want[i])
	}
	return nil
}

func (x *fsx) checkSize() error {
	var st unix.Stat_t
	if err := unix.Fstat(x.fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Size != int64(len(x.model)) {
		return fmt.Errorf("fstat: size %d, the model's is %d", st.Size, len(x.model))
	}
	return nil
}

func (x *fsx) write() error {
	off := x.offset()
	n := x.length(off)
	b := x.data(n)
	x.note("write", "write %d+%d byte %#x (size %d)", off, n, b[0], len(x.model))
	for done := 0; done < len(b); {
		k, err := unix.Pwrite(x.fd, b[done:], off+int64(done))
		if err != nil {
			return fmt.Errorf("pwrite %d+%d: %w", off, n, err)
		}
		done += k
	}
	if end := off + n; end > int64(len(x.model)) {
		x.setSize(end)
	}
	copy(x.model[off:], b)
	return x.checkSize()
}

func (x *fsx) truncate() error {
	size := x.newSize()
	x.note("truncate", "truncate %d (size %d)", size, len(x.model))
	if err := unix.Ftruncate(x.fd, size); err != nil {
		return fmt.Errorf("ftruncate %d: %w", size, err)
	}
	x.setSize(size)
	return x.checkSize()
}

func (x *fsx) fallocate() error {
	off := x.offset()
	n := x.length(off)
	var mode uint32
	switch x.rng.IntN(3) {
	case 1:
		mode = unix.FALLOC_FL_KEEP_SIZE
	case 2:
		mode = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	}
	x.note(fmt.Sprintf("fallocate%d", mode), "fallocate mode %#x %d+%d (size %d)", mode, off, n, len(x.model))
	err := unix.Fallocate(x.fd, mode, off, n)
	if mode&unix.FALLOC_FL_PUNCH_HOLE != 0 {
		was := x.punch
		switch {
		case err == nil:
			x.punch = 1
			if off < int64(len(x.model)) {
				clear(x.model[off:min(off+n, int64(len(x.model)))])
			}
		case errors.Is(err, syscall.EOPNOTSUPP):
			x.punch = -1
		default:
			return fmt.Errorf("fallocate punch %d+%d: %w", off, n, err)
		}
		if was != 0 && was != x.punch {
			return fmt.Errorf("fallocate punch %d+%d: %v, an earlier punch gave the other answer", off, n, err)
		}
		return x.checkSize()
	}
	if err != nil {
		return fmt.Errorf("fallocate mode %#x %d+%d: %w", mode, off, n, err)
	}
	if mode == 0 && off+n > int64(len(x.model)) {
		x.setSize(off + n)
	}
	return x.checkSize()
}

func (x *fsx) reopen() error {
	x.note("reopen", "close+reopen (size %d)", len(x.model))
	if err := unix.Close(x.fd); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	fd, err := unix.Open(x.path, unix.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	x.fd = fd
	return x.checkSize()
}

// far makes the file sparse and huge for a moment: it truncates it to
// tens of GiB, writes a few bytes near the new end, reads them and a
// stretch of the hole back, and truncates back to the model's size, whose
// bytes the next reads and compares check.
func (x *fsx) far() error {
	size := int64(len(x.model))
	end := int64(16<<30) + x.rng.Int64N(48<<30)
	b := x.data(1 + x.length(0)%4096)
	at := end - int64(len(b)) - x.rng.Int64N(fsxChunk)
	x.note("far", "far: truncate %d, write %d+%d, truncate back (size %d)", end, at, len(b), size)
	if err := unix.Ftruncate(x.fd, end); err != nil {
		return fmt.Errorf("ftruncate %d: %w", end, err)
	}
	if _, err := unix.Pwrite(x.fd, b, at); err != nil {
		return fmt.Errorf("pwrite %d+%d: %w", at, len(b), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(x.fd, &st); err != nil || st.Size != end {
		return fmt.Errorf("fstat after far write: size %d (%v), want %d", st.Size, err, end)
	}
	got := make([]byte, len(b)+8192)
	k, err := unix.Pread(x.fd, got, at-8192)
	if err != nil || k != len(got) {
		return fmt.Errorf("pread around the far write: %d bytes, %v", k, err)
	}
	if i := slices.IndexFunc(got[:8192], func(c byte) bool { return c != 0 }); i >= 0 {
		return fmt.Errorf("the hole before the far write has %#x at %d", got[i], at-8192+int64(i))
	}
	if !bytes.Equal(got[8192:], b) {
		return fmt.Errorf("the far write reads back differently at %d", at+int64(firstDiff(got[8192:], b)))
	}
	if k, err := unix.Pread(x.fd, got[:4096], size+x.rng.Int64N(end-size-4096)); err != nil || k != 4096 ||
		slices.IndexFunc(got[:4096], func(c byte) bool { return c != 0 }) >= 0 {
		return fmt.Errorf("a read in the far hole: %d bytes, %v, or not zeros", k, err)
	}
	if err := unix.Ftruncate(x.fd, size); err != nil {
		return fmt.Errorf("ftruncate back to %d: %w", size, err)
	}
	return x.checkSize()
}

// readOther reads through a second descriptor, opened for this read and
// closed after it (descriptors share the open state, and the close of a
// read-only descriptor commits the writer's pending bytes).
func (x *fsx) readOther() error {
	off := x.offset()
	n := x.length(off)
	x.note("read2", "read through a second descriptor %d+%d (size %d)", off, n, len(x.model))
	fd, err := unix.Open(x.path, unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open second descriptor: %w", err)
	}
	err = x.check(fd, off, n)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("close second descriptor: %w", cerr)
	}
	return err
}

// mapRange picks a range inside the file, or false when it is empty.
func (x *fsx) mapRange() (int64, int64, bool) {
	size := int64(len(x.model))
	if size == 0 {
		return 0, 0, false
	}
	off := min(x.offset(), size-1)
	return off, min(x.length(off), size-off), true
}

func (x *fsx) mapFile() ([]byte, error) {
	mem, err := unix.Mmap(x.fd, 0, len(x.model), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d: %w", len(x.model), err)
	}
	return mem, nil
}

func (x *fsx) mapRead() error {
	off, n, ok := x.mapRange()
	if !ok {
		return x.read()
	}
	x.note("mapread", "mapread %d+%d (size %d)", off, n, len(x.model))
	mem, err := x.mapFile()
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	if i := firstDiff(mem[off:off+n], x.model[off:off+n]); i >= 0 {
		return fmt.Errorf("mapread %d+%d: byte %d (file offset %d) is %#x, the model's is %#x",
			off, n, i, off+int64(i), mem[off+int64(i)], x.model[off+int64(i)])
	}
	return nil
}

func (x *fsx) mapWrite() error {
	off, n, ok := x.mapRange()
	if !ok {
		return x.write()
	}
	b := x.data(n)
	x.note("mapwrite", "mapwrite %d+%d byte %#x (size %d)", off, n, b[0], len(x.model))
	mem, err := x.mapFile()
	if err != nil {
		return err
	}
	copy(mem[off:], b)
	copy(x.model[off:], b)
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		unix.Munmap(mem)
		return fmt.Errorf("msync: %w", err)
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return x.checkSize()
}

// compareAll reads the whole file through the descriptor and compares it.
func (x *fsx) compareAll() error {
	x.note("compare", "compare the whole file (size %d)", len(x.model))
	if err := x.checkSize(); err != nil {
		return err
	}
	buf := make([]byte, len(x.model)+1)
	got := 0
	for got < len(buf) {
		k, err := unix.Pread(x.fd, buf[got:], int64(got))
		if err != nil {
			return fmt.Errorf("pread the whole file: %w", err)
		}
		if k == 0 {
			break
		}
		got += k
	}
	if got != len(x.model) {
		return fmt.Errorf("the whole file: %d bytes, the model has %d", got, len(x.model))
	}
	if !bytes.Equal(buf[:got], x.model) {
		i := firstDiff(buf[:got], x.model)
		return fmt.Errorf("the whole file: offset %d is %#x, the model's is %#x", i, buf[i], x.model[i])
	}
	return nil
}
