package execrun

// Metric is one Prometheus series of the runner.
//
// The exposition itself belongs to the daemon's registry: client_golang's
// dependencies are not in go.sum yet, so this package names its series and
// leaves registering them (a Collector whose Collect reads Stats().Metrics())
// to cmd/computerd.
type Metric struct {
	Name    string
	Help    string
	Counter bool // a counter; otherwise a gauge
	Value   float64
}

// Metrics lists the series for s, counters named wsync_exec_<what>_total.
func (s Stats) Metrics() []Metric {
	return []Metric{
		{"wsync_exec_started_total", "Execs started.", true, float64(s.Started)},
		{"wsync_exec_finished_total", "Execs that ended and were reaped.", true, float64(s.Finished)},
		{"wsync_exec_killed_total", "Execs that ended after a kill or shutdown signalled them.", true, float64(s.Killed)},
		{"wsync_exec_timed_out_total", "Execs terminated by their timeout.", true, float64(s.TimedOut)},
		{"wsync_exec_busy_total", "Exec starts refused by the concurrency limit.", true, float64(s.Busy)},
		{"wsync_exec_running", "Execs running now.", false, float64(s.Running)},
		{"wsync_exec_retained", "Finished execs kept for re-attach.", false, float64(s.Retained)},
	}
}
