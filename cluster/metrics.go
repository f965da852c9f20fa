package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics of the servers' sharing, for the default registry (internal/metrics
// registers them when /metrics is served); replication and the bucket's chunks have their own
// (packages replica, sharedchunks).
var (
	metricGateDrainSeconds = metrics.Add(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wsync_cluster_gate_drain_seconds",
		Help:    "How long a ship uploaded owed chunks while holding the store's writer (writers wait meanwhile), before litestream's copy (wsync_replica_gate_seconds).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}))
	metricReverified = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_cluster_reverified_chunks_total",
		Help: "Chunks verified in the bucket again because the commit naming them had not shipped within half the collector's grace.",
	}))
)
