package audit

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// Outcomes of a read of an object missing from its set of targets (see
// Auditor.confirm), the values of the label result of
// dependency_webhook_audit_reads_total.
const (
	readExists  = "exists"
	readMissing = "missing"
	readFailed  = "failed"
)

// Metrics are the audit's metrics, a prometheus.Collector that the webhook
// binary registers with its others: the number of dangling references per
// dependent type, as of the last pass, and the reads of objects missing
// from their set of targets. Only the replica that runs the Auditor
// reports them. A nil *Metrics records nothing.
type Metrics struct {
	dangling *prometheus.Desc
	reads    *prometheus.CounterVec

	lock   sync.Mutex
	counts map[index.Source]int
}

// NewMetrics returns the audit's metrics, empty until a pass sets them.
func NewMetrics() *Metrics {
	return &Metrics{
		dangling: prometheus.NewDesc("dependency_webhook_dangling_references",
			"References that the dependents of each type (source) hold to objects that have not existed for the grace period (--dangling-grace-period) or longer, as of the audit's last pass; reported by the replica that runs the audit (the elected one).",
			[]string{"export", "resource", "version"}, nil),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_audit_reads_total",
			Help: "Objects that a reference names and the audit's watch of their type left out (labelled cleared, or gone) that the audit read before it counted the reference as dangling, by result: exists, missing, failed.",
		}, []string{"result"}),
		counts: map[index.Source]int{},
	}
}

// read counts a read of an object missing from its set of targets.
func (m *Metrics) read(result string) {
	if m != nil {
		m.reads.WithLabelValues(result).Inc()
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
	m.reads.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.reads.Collect(ch)
	m.lock.Lock()
	defer m.lock.Unlock()
	for src, n := range m.counts {
		ch <- prometheus.MustNewConstMetric(m.dangling, prometheus.GaugeValue, float64(n),
			src.Export.String(), src.Resource.GroupResource().String(), src.Resource.Version)
	}
}
