package replay

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Replayer's Prometheus metrics, a prometheus.Collector
// that the webhook binary registers where it serves metrics. A nil
// *Metrics records nothing.
type Metrics struct {
	replays  *prometheus.CounterVec
	removals *prometheus.CounterVec
}

// NewMetrics creates the metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_deletions_replayed_total",
			Help: "Attempts to replay a deferred deletion, by result: deleted, refused (still referenced, or changed meanwhile; tried again), cancelled (the label was removed) or error (tried again).",
		}, []string{"result"}),
		removals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_records_removed_total",
			Help: "Records of deferred deletions removed from objects without replaying them, by reason: expired (older than --deferred-deletion-ttl), uncovered (no rule with the Replay deletion policy protects the resource any more), or the verification problem: malformed (not a signed record, e.g. written by an earlier release), unknown-key (signed with a key the webhook no longer holds), bad-signature (not written by the webhook, or changed since), wrong-object (written for another object or an earlier one of the same name).",
		}, []string{"reason"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.replays.Describe(ch)
	m.removals.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.replays.Collect(ch)
	m.removals.Collect(ch)
}

// replayed counts an attempt to replay a deferred deletion, by result.
func (m *Metrics) replayed(result string) {
	if m != nil {
		m.replays.WithLabelValues(result).Inc()
	}
}

// removed counts a record removed without replaying it, by reason: a
// records.Problem, or RemovedUncovered.
func (m *Metrics) removed(reason string) {
	if m != nil {
		m.removals.WithLabelValues(reason).Inc()
	}
}
