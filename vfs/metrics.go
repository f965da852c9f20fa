package vfs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics of live chunk collection, for the default registry (internal/metrics
// registers them when /metrics is served, by both binaries).
var (
	metricGCRuns = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_chunkstore_gc_runs_total",
		Help: "Live chunk collection passes, by trigger (interval, threshold, call) and result (ok, error).",
	}, []string{"trigger", "result"}))
	metricGCChunks = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_chunkstore_gc_chunks_freed_total",
		Help: "Unreferenced chunk rows deleted by live collection.",
	}))
	metricGCBytes = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_chunkstore_gc_bytes_freed_total",
		Help: "Chunk bytes freed by live collection (rows, chunk files, pack records).",
	}))
	metricGCPacks = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_chunkstore_gc_packs_deleted_total",
		Help: "Pack files deleted by live collection (emptied or compacted).",
	}))
	metricGCPause = metrics.Add(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wsync_chunkstore_gc_pause_seconds",
		Help:    "How long one collection step held the store's writer.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
	}))
	metricGCSeconds = metrics.Add(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wsync_chunkstore_gc_duration_seconds",
		Help:    "Duration of whole live collection passes, writers running between their steps.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
	}))
)

// metricWriteErrors counts failures on the write path of open files, by
// where they happened and their errno: "store" (a background chunk store;
// the bytes stay dirty), "commit" (a writer's flush, fsync or close),
// "flushall" (the flush before a feed; the error stays with the file) and
// "served" (the record of a rev handed out to a peer, NoteServed).
var metricWriteErrors = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "wsync_vfs_write_errors_total",
	Help: "Write-path failures of open files, by where (store, commit, flushall; served: the record of a rev handed out to a peer) and errno name.",
}, []string{"where", "errno"}))

// metricQuotaRefusals counts operations the store's quota refused
// (quota.go), by the limit they hit.
var metricQuotaRefusals = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "wsync_vfs_quota_refusals_total",
	Help: "Writes, creates, path API writes and pulled batches the workspace's quota refused, by limit (bytes, entries, file size).",
}, []string{"limit"}))

func countWriteError(where string, err error) {
	metricWriteErrors.WithLabelValues(where, ErrnoName(err)).Inc()
}

func observeGC(trigger string, rep GCReport, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	metricGCRuns.WithLabelValues(trigger, result).Inc()
	metricGCChunks.Add(float64(rep.Rows))
	metricGCBytes.Add(float64(rep.Bytes))
	metricGCPacks.Add(float64(rep.Packs))
	metricGCSeconds.Observe(d.Seconds())
}

// metricConflicts counts conflicts recorded by sync applies (counted after
// the apply commits).
var metricConflicts = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "wsync_vfs_conflicts_total",
	Help: "Conflicts detected by sync applies (both sides changed a path differently), by policy and kind.",
}, []string{"policy", "kind"}))

// Group commit of local mutations (group.go).
var (
	metricGroupMutations = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_vfs_group_mutations_total",
		Help: "Local mutations made in a group commit (answered before their group committed).",
	}))
	metricGroupCommit = metrics.Add(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wsync_vfs_group_commit_seconds",
		Help:    "Time of one group commit of local mutations (the writer lock is held meanwhile).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 12),
	}))
	metricGroupFailures = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_vfs_group_failures_total",
		Help: "Group commits that failed, losing mutations already answered (logged; returned by the next fsync).",
	}))
)

// Metrics of the trash (trash.go).
var (
	metricTrashEvicted = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_vfs_trash_evicted_total",
		Help: "Trash entries evicted, oldest first, to keep the trash within its bounds.",
	}))
	metricTrashExpired = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_vfs_trash_expired_total",
		Help: "Trash entries deleted at the end of their retention.",
	}))
	metricTrashRestored = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_vfs_trash_restored_total",
		Help: "Nodes brought back from the trash.",
	}))
)

// metricBehindLost counts mutations answered from memory that were lost
// (behind.go): a queued mutation failed, taking those after it.
var metricBehindLost = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
	Name: "wsync_vfs_behind_lost_total",
	Help: "Mount mutations answered before they ran that were lost because one of them failed (a full disk).",
}))

// metricBehindAnswered counts mount mutations answered from memory and
// queued (behind.go).
var metricBehindAnswered = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
	Name: "wsync_vfs_behind_answered_total",
	Help: "Mount mutations answered from the write-behind's memo and run afterwards.",
}))

// metricBehindFolded counts file commits folded into the file's queued
// create (behind.go).
var metricBehindFolded = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
	Name: "wsync_vfs_behind_folded_total",
	Help: "Mount file commits folded into the file's create, still queued, so that the two write one row.",
}))

// metricBehindFull counts the times a mutation found the write-behind's
// queue full and ran it on the request's path.
var metricBehindFull = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
	Name: "wsync_vfs_behind_full_total",
	Help: "Times a mount mutation found the write-behind's queue full and ran it before being answered.",
}))
