// Package webhooktest helps the tests of the admission handlers of package
// webhook and its subpackages: it reads what a handler recorded in the
// metrics (webhook.Metrics, or any prometheus.Collector).
package webhooktest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricValue returns the value of the counter name whose labels are
// labels (pairs of name and value, e.g. "outcome", "denied"; 0 if there is
// no such series) among the metrics that c collects, and how many series
// of name c holds.
func MetricValue(t testing.TB, c prometheus.Collector, name string, labels ...string) (value float64, series int) {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("labels %q are not pairs of name and value", labels)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("cannot register the metrics: %v", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("cannot gather the metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		series = len(f.GetMetric())
	metrics:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if len(got) != len(labels)/2 {
				continue
			}
			for i := 0; i < len(labels); i += 2 {
				if v, ok := got[labels[i]]; !ok || v != labels[i+1] {
					continue metrics
				}
			}
			value = m.GetCounter().GetValue()
		}
	}
	return value, series
}
