package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counterValue is the value of the counter named name that g gathers, and
// whether g has it.
func counterValue(t *testing.T, g prometheus.Gatherer, name string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue(), true
		}
	}
	return 0, false
}

func TestGathererExposesAdded(t *testing.T) {
	c := Add(prometheus.NewCounter(prometheus.CounterOpts{Name: "wsync_metricstest_exposed_total", Help: "test"}))
	c.Add(3) // before registration: counted all the same
	if _, ok := counterValue(t, prometheus.DefaultGatherer, "wsync_metricstest_exposed_total"); ok {
		t.Fatal("registered before Gatherer was called")
	}
	v, ok := counterValue(t, Gatherer(), "wsync_metricstest_exposed_total")
	if !ok || v != 3 {
		t.Fatalf("gathered %v, %v; want 3, true", v, ok)
	}
	// Twice: nothing is registered again.
	v, ok = counterValue(t, Gatherer(), "wsync_metricstest_exposed_total")
	if !ok || v != 3 {
		t.Fatalf("second call gathered %v, %v; want 3, true", v, ok)
	}
}

func TestGathererRegistersLaterAdds(t *testing.T) {
	Gatherer()
	c := Add(prometheus.NewCounter(prometheus.CounterOpts{Name: "wsync_metricstest_later_total", Help: "test"}))
	c.Inc()
	if _, ok := counterValue(t, prometheus.DefaultGatherer, "wsync_metricstest_later_total"); ok {
		t.Fatal("registered before the next Gatherer call")
	}
	if v, ok := counterValue(t, Gatherer(), "wsync_metricstest_later_total"); !ok || v != 1 {
		t.Fatalf("gathered %v, %v; want 1, true", v, ok)
	}
}

func TestGathererPanicsOnDuplicate(t *testing.T) {
	opts := prometheus.CounterOpts{Name: "wsync_metricstest_dup_total", Help: "test"}
	Add(prometheus.NewCounter(opts))
	Gatherer()
	Add(prometheus.NewCounter(opts))
	defer func() {
		r := recover()
		err, _ := r.(error)
		if err == nil || !strings.Contains(err.Error(), "wsync_metricstest_dup_total") {
			t.Fatalf("recovered %v; want an error naming the duplicate", r)
		}
		Gatherer() // the duplicate is not retried
	}()
	Gatherer()
}
