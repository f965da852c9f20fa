package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsync/wsync/internal/metrics"
)

var (
	metricRequests = metrics.Add(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wsync_api_requests_total",
		Help: "HTTP API requests by route pattern and status code.",
	}, []string{"route", "code"}))
	metricSeconds = metrics.Add(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wsync_api_request_duration_seconds",
		Help:    "HTTP API request durations by route pattern (an exec's includes its command).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"route"}))
	metricStreams = metrics.Add(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "wsync_api_event_streams",
		Help: "Event streams (GET .../events) open.",
	}))
	metricStreamsDropped = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{
		Name: "wsync_api_event_streams_dropped_total",
		Help: "Event streams ended because a write to the client failed or did not finish in time.",
	}))
)
