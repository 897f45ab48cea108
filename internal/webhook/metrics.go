package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of the admission handlers, a
// prometheus.Collector that the binary registers where it serves metrics:
// the decisions on DELETEs (with their latency, the dependents they read
// live, the deletions they deferred and the cycles they broke in kcp's
// teardown), on CREATEs and UPDATEs of dependents, on writes of records,
// and the writes the labelling webhook saw. The index, the registry and the
// replay of deferred deletions measure themselves. A nil *Metrics records
// nothing.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	scanned   prometheus.Histogram
	refChecks *prometheus.CounterVec
	deferrals *prometheus.CounterVec
	writes    *prometheus.CounterVec
	labels    *prometheus.CounterVec
	cycles    prometheus.Counter
	recorded  *prometheus.CounterVec
	conflicts prometheus.Counter
}

// NewMetrics creates the metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_decisions_total",
			Help: "Admission decisions on DELETE requests, by outcome: allowed, denied (still referenced), bypassed (skip-protection annotation), in-flight (refused while a reference to the object may be in flight) or error (request malformed, rules not loaded, or dependents could not be read); and by how they were reached: index (from the index alone), horizon (allowed from the index, which was current past the object's horizon: no read), revision (a deferred deletion allowed from the index, which had stored every dependent up to the object's own resourceVersion: no read), live (dependents read live) or teardown (an item of kcp's own deletion of a namespace, workspace or binding, decided from the index once it had caught up with the teardown, or where a cycle of references within it was broken), empty when no dependent was looked at.",
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
		refChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_reference_checks_total",
			Help: "Admission decisions on CREATE and UPDATE requests of dependents, by outcome: allowed, denied (a new reference to an object that is being deleted, or a write past the limit of references per object) or error (request malformed, rules not loaded, or the referenced object could not be read).",
		}, []string{"outcome"}),
		deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_deletions_deferred_total",
			Help: "Denied DELETEs under rules with the Replay deletion policy, by result: recorded (the object will be deleted once nothing references it), already (it was recorded before), dry-run (nothing recorded) or failed (could not be recorded).",
		}, []string{"result"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_record_writes_total",
			Help: "CREATEs and UPDATEs of protected objects that the guards of what the webhook writes on them judged, by outcome: allowed (the webhook's own record of a deferred deletion) or denied (anyone else's); ledger-kept (anyone else set, changed or removed the ledger of admitted references; the stored one was kept) or ledger-written (the webhook's own); skip-protection-effective (skip-protection set by a user who may delete the object, recorded), skip-protection-no-effect (set by anyone else, or kcp could not be asked) or skip-protection-record-kept (the record of who set it was set, changed or removed; the stored one was kept).",
		}, []string{"outcome"}),
		labels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_labels_total",
			Help: "Writes of dependents that the labelling webhook saw, by result: changed (the reference labels were set anew), unchanged, unvouched (labelled without the scheme label: the configuration was made for other rules than the webhook's) or error.",
		}, []string{"result"}),
		cycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dependency_webhook_teardown_cycles_broken_total",
			Help: "Cycles of references that kcp's teardown deletes whole, although their objects reference each other, because teardowns under way delete every object that references one of them (counted once per cycle proved).",
		}),
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_references_recorded_total",
			Help: "References that writes of dependents added, as the labelling webhook recorded them on the objects they name, by result: recorded, missing (no such object), refused (the object is being deleted, or its deletion is deferred), withdrawn (a reference recorded on an object was removed from it again because the webhook refused the write that added it: a DELETE of the object need not wait for it), untracked (the webhook may not patch the object; admitted unrecorded) or failed (the write was refused, to be retried).",
		}, []string{"result"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dependency_webhook_ledger_conflicts_total",
			Help: "Writes of the ledger of admitted references on a protected object that lost a race with another write of the object, and were tried again (no client sees these).",
		}),
	}
	return m
}

// collectors are the metrics one by one.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.latency, m.scanned, m.refChecks, m.deferrals, m.writes, m.labels, m.cycles, m.recorded, m.conflicts}
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

// ResultProbe is the result of an admission handler that answered one of
// the webhook's own probes (see Prober): no client's write, so the counters
// of checks, labels and guarded writes leave it out.
const ResultProbe = "probe"

// ReferenceChecked counts a decision on a CREATE or UPDATE, but not an
// answered probe (ResultProbe).
func (m *Metrics) ReferenceChecked(outcome string) {
	if m != nil && outcome != ResultProbe {
		m.refChecks.WithLabelValues(outcome).Inc()
	}
}

// RecordWrite counts a write of a record that the guard judged, but not an
// answered probe (ResultProbe).
func (m *Metrics) RecordWrite(outcome string) {
	if m != nil && outcome != ResultProbe {
		m.writes.WithLabelValues(outcome).Inc()
	}
}

// Labelled counts a write of a dependent that the labelling webhook saw,
// but not an answered probe (ResultProbe).
func (m *Metrics) Labelled(result string) {
	if m != nil && result != ResultProbe {
		m.labels.WithLabelValues(result).Inc()
	}
}

// ReferenceRecorded counts a reference the labelling webhook recorded on
// the object it names, by result.
func (m *Metrics) ReferenceRecorded(result string) {
	if m != nil {
		m.recorded.WithLabelValues(result).Inc()
	}
}

// LedgerConflict counts a write of a ledger that lost a race with another
// write of its object.
func (m *Metrics) LedgerConflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

// CycleBroken counts a cycle of references broken in kcp's teardown.
func (m *Metrics) CycleBroken() {
	if m != nil {
		m.cycles.Inc()
	}
}

// Deferred counts a deferral, by result (see the Deferred outcomes of
// package deletion).
func (m *Metrics) Deferred(result string) {
	if m != nil {
		m.deferrals.WithLabelValues(result).Inc()
	}
}

// DeletionDecided counts a decision on a DELETE, by outcome and how it was
// reached (index, live or teardown; empty when no dependent was looked at),
// with the time it took.
func (m *Metrics) DeletionDecided(outcome, via string, took time.Duration) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(outcome, via).Inc()
	m.latency.WithLabelValues(outcome).Observe(took.Seconds())
}

// DependentsScanned records how many dependents a decision on a DELETE
// read live.
func (m *Metrics) DependentsScanned(n int) {
	if m != nil {
		m.scanned.Observe(float64(n))
	}
}
