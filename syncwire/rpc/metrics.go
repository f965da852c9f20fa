package rpc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics go to the default registry (internal/metrics): cmd/computerd and
// workspace-server expose it on /metrics. They keep the syncwire subsystem name they had
// before this package was split out of syncwire, so dashboards hold.
var (
	metricBytesIn = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_syncwire_bytes_received_total",
		Help: "Frame bytes read from sync sessions.",
	}))
	metricBytesOut = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_syncwire_bytes_sent_total",
		Help: "Frame bytes written to sync sessions.",
	}))
	metricCalls = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_calls_total",
		Help: "Calls opened, by direction (out: we called, in: the peer called).",
	}, []string{"direction"}))
	metricSessions = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_sessions_total",
		Help: "Sessions that completed the handshake, by role.",
	}, []string{"role"}))
	metricSessionsEnded = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_sessions_ended_total",
		Help: "Sessions that ended, by the wire code of the reason.",
	}, []string{"code"}))
	metricRejected = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_syncwire_rejected_total",
		Help: "Upgrade requests or handshakes refused, by reason.",
	}, []string{"reason"}))
	metricWatchdog = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_syncwire_watchdog_total",
		Help: "Sessions torn down because the peer stopped answering pings.",
	}))
	metricBusy = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_syncwire_busy_total",
		Help: "Peer calls refused with EBUSY (over MaxCalls or the handler bound).",
	}))
)

// The stream bytes peers' streams hold in this process's memory, received
// and not yet consumed (at most one window a stream): the figure the
// hostile-peer tests bound.
var _ = metrics.Add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
	Name: "wsync_syncwire_stream_buffered_bytes",
	Help: "Stream bytes received from peers and not yet consumed, across every session.",
}, func() float64 { return float64(bufferedAll.Load()) }))
