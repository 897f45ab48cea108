package registry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics returns the registry's Prometheus metric, a prometheus.Collector
// that the webhook binary registers where it serves metrics: the number of
// registered rules, read at every scrape. Each call returns a new
// collector.
func (r *Registry) Metrics() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dependency_webhook_rules",
		Help: "Number of DependencyRules in the webhook's registry.",
	}, func() float64 { return float64(r.Len()) })
}
