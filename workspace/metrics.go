package workspace

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

var (
	metricSyncs = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_workspace_syncs_total",
		Help: "Sync calls by operation (push, pull, tick, verify) and result (ok, error, canceled).",
	}, []string{"op", "result"}))
	metricSyncSeconds = metrics.Add(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wsync_workspace_sync_duration_seconds",
		Help:    "Duration of push and pull calls.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"op"}))
	metricEntries = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_workspace_sync_entries_total",
		Help: "Change entries applied by the receiver, by operation.",
	}, []string{"op"}))
	metricBytes = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_workspace_sync_bytes_total",
		Help: "Chunk bytes moved over the wire, by operation.",
	}, []string{"op"}))
	metricExecs = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_workspace_execs_total",
		Help: "Exec brackets by result (ok, push_failed, error).",
	}, []string{"result"}))
	metricExecSeconds = metrics.Add(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wsync_workspace_exec_duration_seconds",
		Help:    "Duration of whole exec brackets: push, command, pull.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}))
	metricPullsSkipped = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_workspace_exec_pulls_skipped_total",
		Help: "Exec brackets that made no pull: the container's head after the command was already fetched.",
	}))
	metricMassDeletes = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_workspace_mass_delete_pauses_total",
		Help: "Pulls paused before their first deletion because they would delete too much of the workspace.",
	}))
	metricPending = metrics.Add(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wsync_workspace_pending_pulls",
		Help: "Runtimes that owe a pull: failed, deferred after a command, or with slices to go.",
	}))
	metricBackgroundPulls = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_workspace_background_pulls_total",
		Help: "Runs of slices the background puller made, by result (done: the feed drained, error: a slice failed).",
	}, []string{"result"}))
	metricExecBusy = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_workspace_exec_busy_total",
		Help: "Commands refused because the workspace ran as many as it allows (--max-execs).",
	}))
	metricDetached = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_workspace_detached_execs_total",
		Help: "Detached execs by event: started, then settled as complete, pending or deferred (the pull after them), or lost.",
	}, []string{"event"}))
	metricDiverged = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_workspace_verify_diverged_total",
		Help: "Verify calls whose verdict was diverged.",
	}))
)
