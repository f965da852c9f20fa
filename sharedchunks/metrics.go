package sharedchunks

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics of the bucket's chunks, for the default registry (internal/metrics
// registers them when /metrics is served).
var (
	metricRequests = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_sharedchunks_requests_total",
		Help: "Chunk requests to the object store, by operation (has, put, get, get_trash) and result (ok, missing, error).",
	}, []string{"op", "result"}))
	metricBytes = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_sharedchunks_bytes_total",
		Help: "Chunk bytes moved to and from the object store, by direction (put, get).",
	}, []string{"dir"}))
	metricCollected = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_sharedchunks_collected_total",
		Help: "Chunks the collector handled, by what it did (trashed, restored, purged).",
	}, []string{"action"}))
	metricCollections = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_sharedchunks_collections_total",
		Help: "Collections run, by result (ok, error).",
	}, []string{"result"}))
)

// count records one request's result.
func count(op string, err error, missing bool) {
	switch {
	case err != nil:
		metricRequests.WithLabelValues(op, "error").Inc()
	case missing:
		metricRequests.WithLabelValues(op, "missing").Inc()
	default:
		metricRequests.WithLabelValues(op, "ok").Inc()
	}
}
