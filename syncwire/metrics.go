package syncwire

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics go to the default registry (internal/metrics): cmd/computerd and
// workspace-server expose it on /metrics.
var (
	metricChunks = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_chunks_total",
		Help: "Chunks moved by the drivers, by direction (sent, fetched).",
	}, []string{"direction"}))
	metricChunkBytes = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_chunk_bytes_total",
		Help: "Raw chunk bytes moved by the drivers, by direction (sent, fetched).",
	}, []string{"direction"}))
	metricDedupBytes = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_syncwire_dedup_saved_bytes_total",
		Help: "Chunk bytes referenced by synced entries that did not cross the wire because the receiver had them.",
	}))
	metricEntries = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_entries_total",
		Help: "Change entries moved by the drivers, by direction (pushed, pulled).",
	}, []string{"direction"}))
	metricResets = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_watermark_resets_total",
		Help: "Watermarks reset to re-baseline a peer, by cause (invariant, reconcile, ignore: the pull's ignore list changed, store: another store behind the peer's name, restored: the peer's store restored behind our fetch cursor, rewind: the peer applied more of our feed than we served, our store restored).",
	}, []string{"cause"}))
	metricSyncErrors = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_sync_errors_total",
		Help: "Failed push and pull operations, by operation and wire code.",
	}, []string{"op", "code"}))
)
