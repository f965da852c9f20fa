package metrics

import (
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	mu      sync.Mutex
	pending []prometheus.Collector // added, not yet registered
)

// Add queues c for registration into prometheus.DefaultRegisterer at the
// next Gatherer call and returns it, for package-level var initializers.
func Add[T prometheus.Collector](c T) T {
	mu.Lock()
	pending = append(pending, c)
	mu.Unlock()
	return c
}

// Gatherer registers every collector added since the last call into
// prometheus.DefaultRegisterer and returns prometheus.DefaultGatherer. A
// collector that cannot register (a duplicate name, an inconsistent
// description) panics, like prometheus.MustRegister, naming what it
// describes.
func Gatherer() prometheus.Gatherer {
	mu.Lock()
	defer mu.Unlock()
	for len(pending) > 0 {
		c := pending[0]
		pending[0] = nil
		pending = pending[1:]
		if err := prometheus.DefaultRegisterer.Register(c); err != nil {
			panic(fmt.Errorf("metrics: register %s: %w", describe(c), err))
		}
	}
	pending = nil
	return prometheus.DefaultGatherer
}

// describe lists the descriptions c gives.
func describe(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var descs []string
	for d := range ch {
		descs = append(descs, d.String())
	}
	return strings.Join(descs, ", ")
}
