package replica

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics of replication, for the default registry (internal/metrics
// registers them when /metrics is served).
// The lag of each workspace is the server's to report (Replicator.Lag,
// Status); litestream adds its own litestream_* series per database.
var (
	metricShips = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_replica_ships_total",
		Help: "Ships of a workspace database to the object store, by result (ok, error, fenced).",
	}, []string{"result"}))
	metricShipSeconds = metrics.Add(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wsync_replica_ship_seconds",
		Help:    "Duration of successful ships: the gate (WAL to LTX under the store's writer) and the upload.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}))
	metricGateSeconds = metrics.Add(prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "wsync_replica_gate_seconds",
		Help:    "How long one ship held the gate (the store's writer): litestream's DB.Sync copying the WAL into LTX files.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
	}))
)
