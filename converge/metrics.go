package converge

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics go to the default registry when /metrics is served (by both
// binaries; internal/metrics).
var (
	metricVerify = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_converge_verify_total",
		Help: "Root comparisons, by verdict (converged, diverged, error).",
	}, []string{"verdict"}))
	metricDiverged = metrics.Add(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wsync_converge_diverged",
		Help: "1 when the last verify found the roots unequal, 0 when equal.",
	}))
	metricNodes = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_converge_nodes_requested_total",
		Help: "Directory pages requested from the peer by verify and repair walks.",
	}))
	metricRepaired = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_converge_repaired_paths_total",
		Help: "Differing paths repaired, by the side that won (local, peer).",
	}, []string{"winner"}))
	metricSnapshotRecords = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_converge_snapshot_records_total",
		Help: "Snapshot records sent (sender) or staged (receiver).",
	}, []string{"role"}))
	metricSnapshots = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_converge_snapshots_total",
		Help: "Snapshots on the receiver, by result (installed, refused, abandoned: a staging removed unused).",
	}, []string{"result"}))
)

func observeVerify(rep Report, err error) {
	metricNodes.Add(float64(rep.Nodes))
	switch {
	case err != nil:
		metricVerify.WithLabelValues("error").Inc()
	case rep.Converged:
		metricVerify.WithLabelValues("converged").Inc()
		metricDiverged.Set(0)
	default:
		metricVerify.WithLabelValues("diverged").Inc()
		metricDiverged.Set(1)
	}
}
