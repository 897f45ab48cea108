// Package metrics is the Prometheus metrics of the webhook's reference
// index (package index): the number of indexed dependents, the phase, size
// and currency of every source, read at each scrape, and the counters of
// live reads, retries and failed samples that the index records.
package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
)

// Metrics are the index's metrics, one prometheus.Collector. A nil
// *Metrics records nothing.
type Metrics struct {
	indexed prometheus.GaugeFunc
	retries *prometheus.CounterVec
	reads   *prometheus.CounterVec
	samples *prometheus.CounterVec
	sources sourceCollector
}

// New creates the metrics. indexed reports the number of dependents in the
// index, statuses the state and size of every source (index.Index.Sources);
// both are called at every scrape.
func New(indexed func() int, statuses func() []sources.Status) *Metrics {
	return &Metrics{
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
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_index_currency_samples_failed_total",
			Help: "Samples of a shard's current resourceVersion (a LIST of at most one object, taken every few seconds per source and shard for the index's currency) that failed, by source.",
		}, []string{"export", "resource", "version"}),
		sources: newSourceCollector(statuses),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// collectors are the metrics one by one.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.indexed, m.retries, m.reads, m.samples, m.sources}
}

// Retried counts a request retried within its caller's deadline (see
// route.Router.Retry), by cause.
func (m *Metrics) Retried(cause string) {
	if m != nil {
		m.retries.WithLabelValues(cause).Inc()
	}
}

// Read counts a live read of a scope, by how it was answered
// (index.ReadListed, index.ReadSelected, index.ReadCaughtUp).
func (m *Metrics) Read(how string) {
	if m != nil {
		m.reads.WithLabelValues(how).Inc()
	}
}

// SampleFailed counts a sample of a shard's resourceVersion for src that
// failed.
func (m *Metrics) SampleFailed(src sources.Source) {
	if m != nil {
		export, resource, version := sourceLabels(src)
		m.samples.WithLabelValues(export, resource, version).Inc()
	}
}

// sourceLabels are the values of the labels that name a source: the
// APIExport as <logical cluster>/<name>, the resource as
// <resource>.<group>, and the version the rules name.
func sourceLabels(src sources.Source) (export, resource, version string) {
	return src.Export.String(), src.Resource.GroupResource().String(), src.Resource.Version
}

// sourceCollector reports, at every scrape, the phase of every source of the
// index (a state set: one series per phase, 1 for the current one), the
// number of its indexed dependents and of its watched targets and, for an
// indexed source read on some
// shard, the age of its currency. A source the index no longer watches is
// no longer reported.
type sourceCollector struct {
	sources    func() []sources.Status
	now        func() time.Time
	phase      *prometheus.Desc
	dependents *prometheus.Desc
	targets    *prometheus.Desc
	currency   *prometheus.Desc
}

func newSourceCollector(statuses func() []sources.Status) sourceCollector {
	return sourceCollector{
		sources: statuses,
		now:     time.Now,
		phase: prometheus.NewDesc("dependency_webhook_source_phase",
			"Phase of each source (a dependent or protected type, read through its APIExport) in the webhook's index: 1 for the current phase, 0 for the others. Synced: watched on every shard; Syncing: being listed (misses are read live); ExportNotFound, AccessDenied, ResourceNotExported, VersionNotServed: a problem the rules naming the source report in their status.",
			[]string{"export", "resource", "version", "phase"}, nil),
		dependents: prometheus.NewDesc("dependency_webhook_source_indexed_dependents",
			"Number of dependent objects of each source in the webhook's index; 0 for a type that is only protected.",
			[]string{"export", "resource", "version"}, nil),
		targets: prometheus.NewDesc("dependency_webhook_source_watched_targets",
			"Number of objects of each protected type that the webhook watches for the audit of dangling references (their cluster, namespace and name only), those labelled cleared left out; 0 for a type that is a dependent type (its index serves the audit) and on replicas that do not run the audit.",
			[]string{"export", "resource", "version"}, nil),
		currency: prometheus.NewDesc("dependency_webhook_index_currency_age_seconds",
			"Age of the currency of each indexed source on its least current shard: how long ago the latest moment was before which everything kcp stored of the source is in the webhook's index (a few seconds when all is well; +Inf while it is not known: not synced, a broken watch, no sample yet).",
			[]string{"export", "resource", "version"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.phase
	ch <- c.dependents
	ch <- c.targets
	ch <- c.currency
}

// Collect implements prometheus.Collector.
func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.sources == nil {
		return
	}
	now := c.now()
	for _, s := range c.sources() {
		export, resource, version := sourceLabels(s.Source)
		for _, p := range sources.Phases {
			v := 0.0
			if s.State.Phase == p {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.phase, prometheus.GaugeValue, v, export, resource, version, string(p))
		}
		ch <- prometheus.MustNewConstMetric(c.dependents, prometheus.GaugeValue, float64(s.Indexed), export, resource, version)
		ch <- prometheus.MustNewConstMetric(c.targets, prometheus.GaugeValue, float64(s.Targets), export, resource, version)
		if s.CurrencyShards > 0 {
			age := math.Inf(1)
			if !s.Currency.IsZero() {
				age = now.Sub(s.Currency).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(c.currency, prometheus.GaugeValue, age, export, resource, version)
		}
	}
}
