package events

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

var (
	metricPublished = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_events_published_total",
		Help: "Events published into workspaces' event logs, by type.",
	}, []string{"type"}))
	metricGaps = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_events_gaps_total",
		Help: "Gap events told to subscribers, by reason (behind: the events they wanted were dropped; restart: their id was of another log).",
	}, []string{"reason"}))
)
