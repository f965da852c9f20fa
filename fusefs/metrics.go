package fusefs

import (
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// op names one kind of FUSE request, as counted by Metrics.
type op uint8

const (
	opLookup op = iota
	opGetattr
	opSetattr
	opOpendir
	opReaddir
	opCreate
	opOpen
	opRead
	opWrite
	opFlush
	opFsync
	opRelease
	opAllocate
	opMkdir
	opRmdir
	opUnlink
	opRename
	opSymlink
	opReadlink
	opLink
	opGetxattr
	opSetxattr
	opListxattr
	opRemovexattr
	opStatfs
	numOps
)

var opNames = [numOps]string{
	opLookup: "lookup", opGetattr: "getattr", opSetattr: "setattr", opOpendir: "opendir",
	opReaddir: "readdir", opCreate: "create", opOpen: "open", opRead: "read", opWrite: "write",
	opFlush: "flush", opFsync: "fsync", opRelease: "release", opAllocate: "allocate",
	opMkdir: "mkdir", opRmdir: "rmdir", opUnlink: "unlink", opRename: "rename",
	opSymlink: "symlink", opReadlink: "readlink", opLink: "link", opGetxattr: "getxattr",
	opSetxattr: "setxattr", opListxattr: "listxattr", opRemovexattr: "removexattr",
	opStatfs: "statfs",
}

func (o op) String() string { return opNames[o] }

// latencyBuckets are the histogram's upper bounds, in seconds: FUSE ops
// range from a cached lookup (~10us) to a flush that commits a large file.
var latencyBuckets = [...]float64{
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1,
}

type opStats struct {
	count   atomic.Uint64
	errors  atomic.Uint64
	sumNs   atomic.Uint64
	buckets [len(latencyBuckets)]atomic.Uint64 // non-cumulative
}

// Metrics counts what the mount does. It is exported for computerd's /stats
// (Snapshot) and /metrics (WritePrometheus). The names follow
// wsync_fuse_<what>_total.
//
// The module's go.sum does not carry prometheus/client_golang's
// dependencies yet, so the text exposition format is written here; a
// prometheus.Collector over Snapshot is a few lines once it does.
type Metrics struct {
	ops          [numOps]opStats
	readBytes    atomic.Uint64
	writtenBytes atomic.Uint64
	commits      atomic.Uint64 // handle flushes that committed
	invalOK      [2]atomic.Uint64 // by kind: entry, inode
	invalMissed  [2]atomic.Uint64
	// invalidationSweeps counts overflows of the invalidation queue.
	invalidationSweeps atomic.Uint64

	mu    sync.Mutex
	dirty func() int
	open  func() int
}

// NewMetrics returns zeroed metrics.
func NewMetrics() *Metrics { return &Metrics{} }

func (m *Metrics) setDirtySource(dirty func() int) {
	m.mu.Lock()
	m.dirty = dirty
	m.mu.Unlock()
}

func (m *Metrics) setOpenSource(open func() int) {
	m.mu.Lock()
	m.open = open
	m.mu.Unlock()
}

// track records one op; use as `defer s.metrics.track(opX, time.Now(), &errno)`.
func (m *Metrics) track(o op, start time.Time, errno *syscall.Errno) {
	d := time.Since(start)
	st := &m.ops[o]
	st.count.Add(1)
	if *errno != 0 {
		st.errors.Add(1)
	}
	st.sumNs.Add(uint64(d.Nanoseconds()))
	sec := d.Seconds()
	for i, b := range latencyBuckets {
		if sec <= b {
			st.buckets[i].Add(1)
			return
		}
	}
	// Above the last bound: only +Inf (count) holds it.
}

func (m *Metrics) countInvalidation(kind string, ok bool) {
	i := 0
	if kind == "inode" {
		i = 1
	}
	if ok {
		m.invalOK[i].Add(1)
	} else {
		m.invalMissed[i].Add(1)
	}
}

// OpStats is one op's figures in a Snapshot.
type OpStats struct {
	Count  uint64
	Errors uint64
	// Total is the summed latency.
	Total time.Duration
}

// Stats is a point-in-time copy of Metrics, for /stats.
type Stats struct {
	Ops                   map[string]OpStats
	ReadBytes             uint64
	WrittenBytes          uint64
	Commits               uint64
	OpenHandles           int
	DirtyHandles          int
	Invalidations         uint64 // delivered to the kernel
	InvalidationsUnknown  uint64 // named nodes or entries the kernel did not hold
	InvalidationSweeps    uint64
}

// Snapshot copies the current figures.
func (m *Metrics) Snapshot() Stats {
	s := Stats{
		Ops:                  make(map[string]OpStats, numOps),
		ReadBytes:            m.readBytes.Load(),
		WrittenBytes:         m.writtenBytes.Load(),
		Commits:              m.commits.Load(),
		Invalidations:        m.invalOK[0].Load() + m.invalOK[1].Load(),
		InvalidationsUnknown: m.invalMissed[0].Load() + m.invalMissed[1].Load(),
		InvalidationSweeps:   m.invalidationSweeps.Load(),
	}
	for o := range numOps {
		st := &m.ops[o]
		if c := st.count.Load(); c > 0 {
			s.Ops[o.String()] = OpStats{Count: c, Errors: st.errors.Load(), Total: time.Duration(st.sumNs.Load())}
		}
	}
	m.mu.Lock()
	dirty, open := m.dirty, m.open
	m.mu.Unlock()
	if dirty != nil {
		s.DirtyHandles = dirty()
	}
	if open != nil {
		s.OpenHandles = open()
	}
	return s
}

// WritePrometheus writes the metrics in Prometheus' text exposition format
// (version 0.0.4), to be appended to computerd's /metrics.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	p := &promWriter{w: w}
	snap := m.Snapshot()

	p.header("wsync_fuse_ops_total", "counter", "FUSE requests served, by op.")
	for o := range numOps {
		p.sample("wsync_fuse_ops_total", `op="`+o.String()+`"`, float64(m.ops[o].count.Load()))
	}
	p.header("wsync_fuse_op_errors_total", "counter", "FUSE requests answered with an errno, by op.")
	for o := range numOps {
		p.sample("wsync_fuse_op_errors_total", `op="`+o.String()+`"`, float64(m.ops[o].errors.Load()))
	}
	p.header("wsync_fuse_op_duration_seconds", "histogram", "FUSE request latency inside the file system, by op.")
	for o := range numOps {
		st := &m.ops[o]
		count := st.count.Load()
		if count == 0 {
			continue
		}
		var cum uint64
		for i, b := range latencyBuckets {
			cum += st.buckets[i].Load()
			p.sample("wsync_fuse_op_duration_seconds_bucket", fmt.Sprintf(`op="%s",le="%g"`, o, b), float64(cum))
		}
		p.sample("wsync_fuse_op_duration_seconds_bucket", fmt.Sprintf(`op="%s",le="+Inf"`, o), float64(count))
		p.sample("wsync_fuse_op_duration_seconds_sum", `op="`+o.String()+`"`, float64(st.sumNs.Load())/1e9)
		p.sample("wsync_fuse_op_duration_seconds_count", `op="`+o.String()+`"`, float64(count))
	}
	p.header("wsync_fuse_read_bytes_total", "counter", "Bytes read through the mount.")
	p.sample("wsync_fuse_read_bytes_total", "", float64(snap.ReadBytes))
	p.header("wsync_fuse_written_bytes_total", "counter", "Bytes written through the mount.")
	p.sample("wsync_fuse_written_bytes_total", "", float64(snap.WrittenBytes))
	p.header("wsync_fuse_commits_total", "counter", "Flushes, fsyncs and releases that committed a dirty handle.")
	p.sample("wsync_fuse_commits_total", "", float64(snap.Commits))
	p.header("wsync_fuse_open_handles", "gauge", "Files open through the mount (one per inode).")
	p.sample("wsync_fuse_open_handles", "", float64(snap.OpenHandles))
	p.header("wsync_fuse_dirty_handles", "gauge", "Open files with writes not yet committed.")
	p.sample("wsync_fuse_dirty_handles", "", float64(snap.DirtyHandles))
	p.header("wsync_fuse_invalidations_total", "counter", "Kernel cache invalidations sent after upstream applies, by kind and whether the kernel held the item.")
	for i, kind := range []string{"entry", "inode"} {
		p.sample("wsync_fuse_invalidations_total", `kind="`+kind+`",held="true"`, float64(m.invalOK[i].Load()))
		p.sample("wsync_fuse_invalidations_total", `kind="`+kind+`",held="false"`, float64(m.invalMissed[i].Load()))
	}
	p.header("wsync_fuse_invalidation_sweeps_total", "counter", "Invalidation queue overflows answered by a sweep of every cached entry.")
	p.sample("wsync_fuse_invalidation_sweeps_total", "", float64(snap.InvalidationSweeps))
	return p.err
}

type promWriter struct {
	w   io.Writer
	err error
}

func (p *promWriter) header(name, typ, help string) {
	p.printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (p *promWriter) sample(name, labels string, v float64) {
	if labels != "" {
		name += "{" + labels + "}"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		p.printf("%s %d\n", name, int64(v))
		return
	}
	p.printf("%s %g\n", name, v)
}

func (p *promWriter) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
