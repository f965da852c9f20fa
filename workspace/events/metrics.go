package events

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	metricPublished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_events_published_total",
		Help: "Events published into workspaces' event logs, by type.",
	}, []string{"type"})
	metricGaps = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_events_gaps_total",
		Help: "Gap events told to subscribers, by reason (behind: the events they wanted were dropped; restart: their id was of another log).",
	}, []string{"reason"})
)
