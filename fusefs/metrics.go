package fusefs

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	procmetrics "github.com/wsync/wsync/internal/metrics"
)

// op names one kind of FUSE request, as counted by the metrics.
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
	opCopyFileRange
	opMknod
	numOps
)

var opNames = [numOps]string{
	opLookup: "lookup", opGetattr: "getattr", opSetattr: "setattr", opOpendir: "opendir",
	opReaddir: "readdir", opCreate: "create", opOpen: "open", opRead: "read", opWrite: "write",
	opFlush: "flush", opFsync: "fsync", opRelease: "release", opAllocate: "allocate",
	opMkdir: "mkdir", opRmdir: "rmdir", opUnlink: "unlink", opRename: "rename",
	opSymlink: "symlink", opReadlink: "readlink", opLink: "link", opGetxattr: "getxattr",
	opSetxattr: "setxattr", opListxattr: "listxattr", opRemovexattr: "removexattr",
	opStatfs: "statfs", opCopyFileRange: "copy_file_range", opMknod: "mknod",
}

func (o op) String() string { return opNames[o] }

// Prometheus metrics go to the default registry (internal/metrics), summed over every mount
// of the process (computerd has one); Server.Stats gives one mount's figures.
var (
	promOps = procmetrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_fuse_ops_total",
		Help: "FUSE requests served, by op.",
	}, []string{"op"}))
	promOpErrors = procmetrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_fuse_op_errors_total",
		Help: "FUSE requests answered with an errno, by op.",
	}, []string{"op"}))
	promOpSeconds = procmetrics.Add(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "wsync_fuse_op_duration_seconds",
		Help: "Time a FUSE request spends in the file system, by op.",
		// From a lookup (~10us) to a flush committing a large file.
		Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
			1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1},
	}, []string{"op"}))
	promReadBytes = procmetrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_fuse_read_bytes_total",
		Help: "Bytes read through the mount.",
	}))
	promSplicedBytes = procmetrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_fuse_read_spliced_bytes_total",
		Help: "Bytes read through the mount answered from chunk files, which the kernel splices into the reply (part of wsync_fuse_read_bytes_total).",
	}))
	promWrittenBytes = procmetrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_fuse_written_bytes_total",
		Help: "Bytes written through the mount.",
	}))
	promCommits = procmetrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_fuse_commits_total",
		Help: "Flushes, fsyncs and releases that committed a dirty file.",
	}))
	promInvalidations = procmetrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_fuse_invalidations_total",
		Help: "Kernel cache invalidations sent after upstream applies, by kind (entry, inode) and whether the kernel held the item.",
	}, []string{"kind", "held"}))
	promSweeps = procmetrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_fuse_invalidation_sweeps_total",
		Help: "Invalidation queue overflows answered by invalidating every cached entry.",
	}))
	_ = procmetrics.Add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wsync_fuse_open_handles",
		Help: "File handles open through the mounts.",
	}, func() float64 { return float64(sumServers((*Server).OpenHandles)) }))
	_ = procmetrics.Add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wsync_fuse_dirty_handles",
		Help: "Open files with writes not yet committed.",
	}, func() float64 { return float64(sumServers((*Server).DirtyHandles)) }))
)

// Per-op children, resolved once so a request does no label lookup.
var (
	opCounters  [numOps]prometheus.Counter
	opErrors    [numOps]prometheus.Counter
	opDurations [numOps]prometheus.Observer
	invalCount  [2][2]prometheus.Counter // [kind entry|inode][held false|true]
)

func init() {
	for o := range numOps {
		opCounters[o] = promOps.WithLabelValues(o.String())
		opErrors[o] = promOpErrors.WithLabelValues(o.String())
		opDurations[o] = promOpSeconds.WithLabelValues(o.String())
	}
	for k, kind := range []string{"entry", "inode"} {
		for h, held := range []string{"false", "true"} {
			invalCount[k][h] = promInvalidations.WithLabelValues(kind, held)
		}
	}
}

// live is the set of mounted Servers, for the handle gauges.
var live sync.Map // *Server -> struct{}

func sumServers(f func(*Server) int) int {
	n := 0
	live.Range(func(k, _ any) bool {
		n += f(k.(*Server))
		return true
	})
	return n
}

// metrics is one mount's figures; every update also feeds the process-wide
// Prometheus metrics.
type metrics struct {
	ops          [numOps]atomic.Uint64
	errors       [numOps]atomic.Uint64
	nanos        [numOps]atomic.Uint64
	readBytes    atomic.Uint64
	splicedBytes atomic.Uint64
	writtenBytes atomic.Uint64
	commits      atomic.Uint64
	invalHeld    atomic.Uint64
	invalMissed  atomic.Uint64
	sweeps       atomic.Uint64
}

// track records one op; use as `defer s.metrics.track(opX, time.Now(), &errno)`.
func (m *metrics) track(o op, start time.Time, errno *syscall.Errno) {
	d := time.Since(start)
	m.ops[o].Add(1)
	m.nanos[o].Add(uint64(d))
	opCounters[o].Inc()
	opDurations[o].Observe(d.Seconds())
	if *errno != 0 {
		m.errors[o].Add(1)
		opErrors[o].Inc()
	}
}

func (m *metrics) read(n int) {
	m.readBytes.Add(uint64(n))
	promReadBytes.Add(float64(n))
}

// spliced counts a read answered from a chunk file (read counts it too).
func (m *metrics) spliced(n int) {
	m.read(n)
	m.splicedBytes.Add(uint64(n))
	promSplicedBytes.Add(float64(n))
}

func (m *metrics) wrote(n int) {
	m.writtenBytes.Add(uint64(n))
	promWrittenBytes.Add(float64(n))
}

func (m *metrics) committed() {
	m.commits.Add(1)
	promCommits.Inc()
}

func (m *metrics) sweep() {
	m.sweeps.Add(1)
	promSweeps.Inc()
}

// invalidation counts one notification: inode or entry, and whether the
// kernel held what it named.
func (m *metrics) invalidation(inode, held bool) {
	k, h := 0, 0
	if inode {
		k = 1
	}
	if held {
		h = 1
		m.invalHeld.Add(1)
	} else {
		m.invalMissed.Add(1)
	}
	invalCount[k][h].Inc()
}

// OpStats is one op's figures in Stats.
type OpStats struct {
	Count  uint64        `json:"count"`
	Errors uint64        `json:"errors"`
	Total  time.Duration `json:"total_ns"` // summed latency
}

// Stats is a point-in-time copy of one mount's figures, for /stats.
type Stats struct {
	Ops                  map[string]OpStats `json:"ops"`
	ReadBytes            uint64             `json:"read_bytes"`
	SplicedBytes         uint64             `json:"spliced_bytes"` // of ReadBytes, spliced from chunk files
	WrittenBytes         uint64             `json:"written_bytes"`
	Commits              uint64             `json:"commits"`
	OpenHandles          int                `json:"open_handles"`
	DirtyHandles         int                `json:"dirty_handles"`
	Invalidations        uint64             `json:"invalidations"`         // delivered to the kernel
	InvalidationsUnknown uint64             `json:"invalidations_unknown"` // named items the kernel did not hold
	InvalidationSweeps   uint64             `json:"invalidation_sweeps"`
}

// Stats copies the mount's current figures.
func (s *Server) Stats() Stats {
	m := s.metrics
	st := Stats{
		Ops:                  make(map[string]OpStats, numOps),
		ReadBytes:            m.readBytes.Load(),
		SplicedBytes:         m.splicedBytes.Load(),
		WrittenBytes:         m.writtenBytes.Load(),
		Commits:              m.commits.Load(),
		OpenHandles:          s.OpenHandles(),
		DirtyHandles:         s.DirtyHandles(),
		Invalidations:        m.invalHeld.Load(),
		InvalidationsUnknown: m.invalMissed.Load(),
		InvalidationSweeps:   m.sweeps.Load(),
	}
	for o := range numOps {
		if c := m.ops[o].Load(); c > 0 {
			st.Ops[o.String()] = OpStats{Count: c, Errors: m.errors[o].Load(), Total: time.Duration(m.nanos[o].Load())}
		}
	}
	return st
}
