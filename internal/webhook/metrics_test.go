package webhook

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The metrics are one collector that a registry takes whole, and record
// what the validators report.
func TestMetricsCollector(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	m.DeletionDecided(DecisionAllowed, "teardown", time.Millisecond)
	m.DeletionDecided(DecisionDenied, "live", time.Millisecond)
	m.DependentsScanned(7)
	m.ReferenceChecked(DecisionDenied)
	m.ReferenceRecorded("recorded")

	tests := []struct {
		collector prometheus.Collector
		want      float64
	}{
		{m.decisions.WithLabelValues(DecisionAllowed, "teardown"), 1},
		{m.decisions.WithLabelValues(DecisionDenied, "live"), 1},
		{m.refChecks.WithLabelValues(DecisionDenied), 1},
		{m.recorded.WithLabelValues("recorded"), 1},
	}
	for _, tt := range tests {
		if got := testutil.ToFloat64(tt.collector); got != tt.want {
			t.Errorf("%v = %v, want %v", tt.collector, got, tt.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 9 {
		t.Errorf("gathered %d series (%v), want 9: two decisions with their latencies, one histogram of scans, the counters of broken cycles and of ledger conflicts, the reference check, the recorded reference", n, err)
	}
	var none *Metrics
	// A nil *Metrics records nothing, and does not panic.
	none.DeletionDecided(DecisionAllowed, "", time.Millisecond)
	none.DependentsScanned(1)
	none.ReferenceChecked(DecisionAllowed)
	none.RecordWrite(DecisionAllowed)
	none.Labelled("changed")
	none.CycleBroken()
	none.Deferred("recorded")
	none.ReferenceRecorded("recorded")
	none.LedgerConflict()
}

// The counters of checks, labels and guarded writes leave out the answers
// to the webhook's own probes, and count every other result.
func TestMetricsLeaveOutProbes(t *testing.T) {
	m := NewMetrics()
	for _, count := range []func(string){m.ReferenceChecked, m.RecordWrite, m.Labelled} {
		count(ResultProbe)
	}
	for name, c := range map[string]*prometheus.CounterVec{"checks": m.refChecks, "writes": m.writes, "labels": m.labels} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d series after a probe, want none", name, n)
		}
	}
	m.ReferenceChecked(DecisionAllowed)
	m.RecordWrite("ledger-kept")
	m.Labelled("changed")
	for name, c := range map[string]prometheus.Counter{
		"checks": m.refChecks.WithLabelValues(DecisionAllowed), "writes": m.writes.WithLabelValues("ledger-kept"), "labels": m.labels.WithLabelValues("changed"),
	} {
		if got := testutil.ToFloat64(c); got != 1 {
			t.Errorf("%s = %v, want 1", name, got)
		}
	}
}
