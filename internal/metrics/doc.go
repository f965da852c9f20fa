// Package metrics holds the process's Prometheus collectors until
// something serves them.
//
// Every package declares its collectors as package-level variables,
// built with prometheus.NewX and wrapped in Add:
//
//	var metricFoo = metrics.Add(prometheus.NewCounter(prometheus.CounterOpts{...}))
//
// Add only queues the collector. Registering it into the default registry
// (Describe over a channel, the collision checks) is what made package
// init slow when promauto did it for every collector of every linked
// package, and a client verb of workspace-server serves no metrics: it
// paid for that at each start (issue 12). Gatherer registers the queued
// collectors, once, when /metrics is set up (workspace/api, computer), and
// tests that read the figures call it too.
//
// The collectors work unregistered: an update before the first Gatherer
// call counts, and the first scrape shows it.
package metrics
