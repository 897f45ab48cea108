package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Metrics are the controller's own metrics, a prometheus.Collector that the
// binary registers where it serves metrics. A nil *Metrics records nothing.
//
// dependency_controller_rule_ready{logical_cluster,rule} is 1 for every rule
// whose Ready condition the last reconcile computed True, and 0 for every
// other rule; a rule that is gone is no longer reported. Only the leader
// reconciles, so only the leader reports rules.
type Metrics struct {
	ready *prometheus.Desc

	lock  sync.Mutex
	rules map[kcp.ObjectKey]bool
}

// NewMetrics creates the metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		ready: prometheus.NewDesc("dependency_controller_rule_ready",
			"Whether each DependencyRule is Ready (1) or not (0), as the controller's last reconcile computed its Ready condition; by the rule's logical cluster and name. The rule's conditions say why it is not.",
			[]string{"logical_cluster", "rule"}, nil),
	}
}

// rulesReady replaces what is reported with the readiness of every rule of
// a reconcile.
func (m *Metrics) rulesReady(ready map[kcp.ObjectKey]bool) {
	if m == nil {
		return
	}
	m.lock.Lock()
	defer m.lock.Unlock()
	m.rules = ready
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.ready
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.lock.Lock()
	defer m.lock.Unlock()
	for key, ready := range m.rules {
		v := 0.0
		if ready {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.ready, prometheus.GaugeValue, v, key.Cluster.String(), key.Name)
	}
}
