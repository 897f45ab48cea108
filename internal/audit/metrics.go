package audit

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// Metrics are the audit's metrics, a prometheus.Collector that the webhook
// binary registers with its others: the number of dangling references per
// dependent type, as of the last pass. Only the replica that runs the
// Auditor reports them. A nil *Metrics records nothing.
type Metrics struct {
	dangling *prometheus.Desc

	lock   sync.Mutex
	counts map[index.Source]int
}

// NewMetrics returns the audit's metrics, empty until a pass sets them.
func NewMetrics() *Metrics {
	return &Metrics{
		dangling: prometheus.NewDesc("dependency_webhook_dangling_references",
			"References that the dependents of each type (source) hold to objects that have not existed for the grace period (--dangling-grace-period) or longer, as of the audit's last pass; reported by the replica that runs the audit (the elected one).",
			[]string{"export", "resource", "version"}, nil),
		counts: map[index.Source]int{},
	}
}

// set records the dangling references of the dependents of every source
// of sources (0 for one without any); a source not among them is no
// longer reported.
func (m *Metrics) set(sources []index.Source, dangling []*finding) {
	if m == nil {
		return
	}
	counts := make(map[index.Source]int, len(sources))
	for _, src := range sources {
		counts[src] = 0
	}
	for _, f := range dangling {
		if _, ok := counts[f.key.dependent]; ok {
			counts[f.key.dependent]++
		}
	}
	m.lock.Lock()
	m.counts = counts
	m.lock.Unlock()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.dangling
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.lock.Lock()
	defer m.lock.Unlock()
	for src, n := range m.counts {
		ch <- prometheus.MustNewConstMetric(m.dangling, prometheus.GaugeValue, float64(n),
			src.Export.String(), src.Resource.GroupResource().String(), src.Resource.Version)
	}
}
