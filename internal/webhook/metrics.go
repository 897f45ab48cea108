package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// Metrics are the webhook's Prometheus metrics, a prometheus.Collector that
// the binary registers where it serves metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	scanned   prometheus.Histogram
	rules     prometheus.GaugeFunc
	indexed   prometheus.GaugeFunc
	retries   *prometheus.CounterVec
	reads     *prometheus.CounterVec
	refChecks *prometheus.CounterVec
	deferrals *prometheus.CounterVec
	replays   *prometheus.CounterVec
	records   *prometheus.CounterVec
	writes    *prometheus.CounterVec
	labels    *prometheus.CounterVec
	cycles    prometheus.Counter
	sources   sourceCollector
}

// Outcomes of deferring a deletion, the values of the result label of
// dependency_webhook_deletions_deferred_total.
const (
	// DeferredRecorded: the request was recorded on the object.
	DeferredRecorded = "recorded"
	// DeferredAlready: the object's deletion was deferred before.
	DeferredAlready = "already"
	// DeferredDryRun: a dry run; nothing was recorded.
	DeferredDryRun = "dry-run"
	// DeferredFailed: the request could not be recorded (no consent to
	// patch, or kcp failed); the DELETE is denied as under Deny.
	DeferredFailed = "failed"
)

// NewMetrics creates the metrics. rules reports the number of registered
// DependencyRules, indexed the number of dependents in the index, sources
// the state and size of every source of the index (*index.Index.Sources);
// each is called at every scrape.
func NewMetrics(rules, indexed func() int, sources func() []index.SourceStatus) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_decisions_total",
			Help: "Admission decisions on DELETE requests, by outcome: allowed, denied (still referenced), bypassed (skip-protection annotation) or error (request malformed, rules not loaded, or dependents could not be read); and by how they were reached: index (from the index alone), live (dependents read live) or teardown (an item of kcp's own deletion of a namespace, workspace or binding, decided from the index once it had caught up with the teardown, or where a cycle of references within it was broken), empty when no dependent was looked at.",
		}, []string{"outcome", "via"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dependency_webhook_decision_duration_seconds",
			Help:    "Time to decide on a DELETE request, including listing dependents, by outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"outcome"}),
		scanned: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dependency_webhook_dependents_scanned",
			Help:    "Number of dependent objects read live per DELETE request that the index could not decide.",
			Buckets: []float64{0, 1, 10, 100, 1000, 10000, 100000},
		}),
		rules: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dependency_webhook_rules",
			Help: "Number of DependencyRules in the webhook's registry.",
		}, func() float64 { return float64(rules()) }),
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
		refChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_reference_checks_total",
			Help: "Admission decisions on CREATE and UPDATE requests of dependents, by outcome: allowed, denied (a new reference to an object that is being deleted) or error (request malformed, rules not loaded, or the referenced object could not be read).",
		}, []string{"outcome"}),
		deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_deletions_deferred_total",
			Help: "Denied DELETEs under rules with the Replay deletion policy, by result: recorded (the object will be deleted once nothing references it), already (it was recorded before), dry-run (nothing recorded) or failed (could not be recorded).",
		}, []string{"result"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_deletions_replayed_total",
			Help: "Attempts to replay a deferred deletion, by result: deleted, refused (still referenced, or changed meanwhile; tried again), cancelled (the label was removed) or error (tried again).",
		}, []string{"result"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_records_removed_total",
			Help: "Records of deferred deletions removed from objects without replaying them, by reason: expired (older than --deferred-deletion-ttl), uncovered (no rule with the Replay deletion policy protects the resource any more), or the verification problem: malformed (not a signed record, e.g. written by an earlier release), unknown-key (signed with a key the webhook no longer holds), bad-signature (not written by the webhook, or changed since), wrong-object (written for another object or an earlier one of the same name).",
		}, []string{"reason"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_record_writes_total",
			Help: "CREATEs and UPDATEs of protected objects that set or changed the deletion-requested label or the deletion-request annotation, by outcome: allowed (the webhook's own) or denied (anyone else).",
		}, []string{"outcome"}),
		labels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_labels_total",
			Help: "Writes of dependents that the labelling webhook saw, by result: changed (the reference labels were set anew), unchanged, unvouched (labelled without the scheme label: the configuration was made for other rules than the webhook's) or error.",
		}, []string{"result"}),
		cycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dependency_webhook_teardown_cycles_broken_total",
			Help: "Items of kcp's teardown allowed although dependents referenced them, because the object and its dependents referenced each other in a cycle within the teardown (broken at the object that sorts first).",
		}),
		sources: newSourceCollector(sources),
	}
	return m
}

// collectors are the metrics one by one.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.latency, m.scanned, m.rules, m.indexed, m.retries, m.reads, m.refChecks, m.deferrals, m.replays, m.records, m.writes, m.labels, m.cycles, m.sources}
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

// referenceChecked counts a decision on a CREATE or UPDATE.
func (m *Metrics) referenceChecked(outcome string) {
	if m != nil {
		m.refChecks.WithLabelValues(outcome).Inc()
	}
}

// RecordRemoved counts a record of a deferred deletion removed without
// replaying it, by reason; pass it as the replayer's OnRemoved.
func (m *Metrics) RecordRemoved(reason string) {
	if m != nil {
		m.records.WithLabelValues(reason).Inc()
	}
}

// recordWrite counts a write of a record that the guard judged.
func (m *Metrics) recordWrite(outcome string) {
	if m != nil {
		m.writes.WithLabelValues(outcome).Inc()
	}
}

// labelled counts a write of a dependent that the labelling webhook saw.
func (m *Metrics) labelled(result string) {
	if m != nil {
		m.labels.WithLabelValues(result).Inc()
	}
}

// cycleBroken counts a cycle of references broken in kcp's teardown.
func (m *Metrics) cycleBroken() {
	if m != nil {
		m.cycles.Inc()
	}
}

// Retried counts a read retried within a request; pass it as the index's
// OnRetry.
func (m *Metrics) Retried(cause string) {
	if m != nil {
		m.retries.WithLabelValues(cause).Inc()
	}
}

// Read counts a live read of a scope, by how it was answered; pass it as
// the index's OnRead.
func (m *Metrics) Read(how string) {
	if m != nil {
		m.reads.WithLabelValues(how).Inc()
	}
}

// deferred counts a deferral.
func (m *Metrics) deferred(result string) {
	if m != nil {
		m.deferrals.WithLabelValues(result).Inc()
	}
}

// Replayed counts an attempt to replay a deferred deletion; pass it as the
// replayer's OnResult.
func (m *Metrics) Replayed(result string) {
	if m != nil {
		m.replays.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) observe(d decision, took time.Duration) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(d.outcome, d.via).Inc()
	m.latency.WithLabelValues(d.outcome).Observe(took.Seconds())
	if d.via == viaLive {
		m.scanned.Observe(float64(d.scanned))
	}
}

// sourceCollector reports, at every scrape, the phase of every source of the
// index (a state set: one series per phase, 1 for the current one) and the
// number of its indexed dependents. A source the index no longer watches is
// no longer reported.
type sourceCollector struct {
	sources    func() []index.SourceStatus
	phase      *prometheus.Desc
	dependents *prometheus.Desc
}

func newSourceCollector(sources func() []index.SourceStatus) sourceCollector {
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
		for _, p := range index.Phases {
			v := 0.0
			if s.State.Phase == p {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.phase, prometheus.GaugeValue, v, export, resource, version, string(p))
		}
		ch <- prometheus.MustNewConstMetric(c.dependents, prometheus.GaugeValue, float64(s.Indexed), export, resource, version)
	}
}
