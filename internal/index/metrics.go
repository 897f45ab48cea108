package index

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics returns the index's Prometheus metrics, a prometheus.Collector
// that the webhook binary registers where it serves metrics: the number of
// indexed dependents, the phase and size of every source (read at each
// scrape), the live reads of scopes by how they were answered, and the
// retries of reads and routed requests by cause.
func (ix *Index) Metrics() prometheus.Collector {
	return ix.metrics
}

// metrics are the index's metrics. A nil *metrics records nothing.
type metrics struct {
	indexed prometheus.GaugeFunc
	retries *prometheus.CounterVec
	reads   *prometheus.CounterVec
	sources sourceCollector
}

// newMetrics creates the metrics. indexed reports the number of dependents
// in the index, sources the state and size of every source (Index.Sources);
// both are called at every scrape.
func newMetrics(indexed func() int, sources func() []SourceStatus) *metrics {
	return &metrics{
		indexed: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dependency_webhook_indexed_dependents",
			Help: "Number of dependent objects in the webhook's index.",
		}, func() float64 { return float64(indexed()) }),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_read_retries_total",
			Help: "Live reads of dependents or referenced objects retried within a request, by cause: too-many-requests, unavailable (e.g. storage is (re)initializing), timeout, etcd-leader-changed, gateway, retry-after, connection, not-inspected, refused.",
		}, []string{"cause"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_live_reads_total",
			Help: "Live reads of the dependents of a scope for DELETE decisions that the index could not take at once (shared by the decisions waiting for the same scope), by how they were answered: list (a consistent LIST of the scope), label (a consistent LIST of the dependents with a label: those labelled as referencing the object, or not labelled under the current rules; two per decision) or index (the index, once it had caught up with the scope's current resourceVersion).",
		}, []string{"how"}),
		sources: newSourceCollector(sources),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// collectors are the metrics one by one.
func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.indexed, m.retries, m.reads, m.sources}
}

// retried counts a request retried within its caller's deadline (see
// Retry), by cause.
func (m *metrics) retried(cause string) {
	if m != nil {
		m.retries.WithLabelValues(cause).Inc()
	}
}

// read counts a live read of a scope, by how it was answered (ReadListed,
// ReadSelected, ReadCaughtUp).
func (m *metrics) read(how string) {
	if m != nil {
		m.reads.WithLabelValues(how).Inc()
	}
}

// sourceCollector reports, at every scrape, the phase of every source of the
// index (a state set: one series per phase, 1 for the current one) and the
// number of its indexed dependents. A source the index no longer watches is
// no longer reported.
type sourceCollector struct {
	sources    func() []SourceStatus
	phase      *prometheus.Desc
	dependents *prometheus.Desc
}

func newSourceCollector(sources func() []SourceStatus) sourceCollector {
	return sourceCollector{
		sources: sources,
		phase: prometheus.NewDesc("dependency_webhook_source_phase",
			"Phase of each source (a dependent or protected type, read through its APIExport) in the webhook's index: 1 for the current phase, 0 for the others. Synced: watched on every shard; Syncing: being listed (misses are read live); ExportNotFound, AccessDenied, ResourceNotExported, VersionNotServed: a problem the rules naming the source report in their status.",
			[]string{"export", "resource", "version", "phase"}, nil),
		dependents: prometheus.NewDesc("dependency_webhook_source_indexed_dependents",
			"Number of dependent objects of each source in the webhook's index; 0 for a type that is only protected.",
			[]string{"export", "resource", "version"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.phase
	ch <- c.dependents
}

// Collect implements prometheus.Collector.
func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.sources == nil {
		return
	}
	for _, s := range c.sources() {
		// The APIExport as <logical cluster>/<name>, the resource as
		// <resource>.<group>, and the version the rules name.
		export, resource, version := s.Source.Export.String(), s.Source.Resource.GroupResource().String(), s.Source.Resource.Version
		for _, p := range Phases {
			v := 0.0
			if s.State.Phase == p {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.phase, prometheus.GaugeValue, v, export, resource, version, string(p))
		}
		ch <- prometheus.MustNewConstMetric(c.dependents, prometheus.GaugeValue, float64(s.Indexed), export, resource, version)
	}
}
