package execrun

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

// Metrics go to the default registry (internal/metrics), summed over every Runner of the
// process (there is one in computerd); Stats gives one Runner's figures.
var (
	metricStarted = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_exec_started_total",
		Help: "Execs started.",
	}))
	metricFinished = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_exec_finished_total",
		Help: "Execs that ended and whose process group is gone.",
	}))
	metricKilled = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_exec_killed_total",
		Help: "Execs that ended after a kill or shutdown signalled them.",
	}))
	metricTimedOut = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_exec_timed_out_total",
		Help: "Execs terminated by their timeout.",
	}))
	metricBusy = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_exec_busy_total",
		Help: "Exec starts refused by the concurrency limit.",
	}))
	metricOutputSkipped = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_exec_output_skipped_bytes_total",
		Help: "Output bytes a live stream skipped because its reader fell behind the bounded log.",
	}))
	metricRunning = metrics.Add(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wsync_exec_running",
		Help: "Execs running now.",
	}))
)
