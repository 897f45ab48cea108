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
