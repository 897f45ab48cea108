package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of an admission decision, the values of the outcome label.
const (
	OutcomeAllowed  = "allowed"
	OutcomeDenied   = "denied"
	OutcomeBypassed = "bypassed"
	OutcomeError    = "error"
)

// Metrics are the webhook's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	scanned   prometheus.Histogram
	rules     prometheus.GaugeFunc
}

// NewMetrics creates the metrics and registers them with reg. rules reports
// the number of registered DependencyRules.
func NewMetrics(reg prometheus.Registerer, rules func() int) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_decisions_total",
			Help: "Admission decisions on DELETE requests, by outcome: allowed, denied (still referenced), bypassed (skip-protection annotation) or error (request malformed, webhook not initialized, or dependents could not be listed).",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dependency_webhook_decision_duration_seconds",
			Help:    "Time to decide on a DELETE request, including listing dependents, by outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"outcome"}),
		scanned: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dependency_webhook_dependents_scanned",
			Help:    "Number of dependent objects examined per DELETE request.",
			Buckets: []float64{0, 1, 10, 100, 1000, 10000, 100000},
		}),
		rules: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dependency_webhook_rules",
			Help: "Number of DependencyRules in the webhook's registry.",
		}, func() float64 { return float64(rules()) }),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.scanned, m.rules} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(outcome string, d time.Duration, scanned int) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(outcome).Inc()
	m.latency.WithLabelValues(outcome).Observe(d.Seconds())
	m.scanned.Observe(float64(scanned))
}
