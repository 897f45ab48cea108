package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

var testSource = sources.Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "compute.io"}, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}}

// The metrics are one collector that a registry takes whole, and record
// what the index reports.
func TestMetricsCollector(t *testing.T) {
	m := New(func() int { return 42 }, nil)
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	m.Retried("unavailable")
	m.SampleFailed(testSource)
	m.SampleFailed(testSource)

	tests := []struct {
		collector prometheus.Collector
		want      float64
	}{
		{m.retries.WithLabelValues("unavailable"), 1},
		{m.indexed, 42},
		{m.samples.WithLabelValues("provider/compute.io", "virtualmachines.compute.io", "v1"), 2},
	}
	for _, tt := range tests {
		if got := testutil.ToFloat64(tt.collector); got != tt.want {
			t.Errorf("%v = %v, want %v", tt.collector, got, tt.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3 {
		t.Errorf("gathered %d series (%v), want 3: one each", n, err)
	}
	var none *Metrics
	none.Retried("timeout") // records nothing, and does not panic
	none.Read("list")
	none.SampleFailed(testSource)
}

// The state of every source of the index is reported at each scrape: its
// phase as a state set, the number of its indexed dependents and of its
// watched targets; a source
// the index drops is no longer reported.
func TestSourceMetrics(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	vms := sources.Status{
		Source:   sources.Source{Export: kcp.ObjectKey{Cluster: "2x7c", Name: "compute.io"}, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}},
		State:    sources.State{Phase: sources.PhaseSynced},
		Indexed:  1200,
		Currency: now.Add(-3500 * time.Millisecond), CurrencyShards: 2,
	}
	vpcs := sources.Status{
		Source:  sources.Source{Export: kcp.ObjectKey{Cluster: "9q1z", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}},
		State:   sources.State{Phase: sources.PhaseAccessDenied},
		Targets: 310,
	}
	disks := sources.Status{
		Source:         sources.Source{Export: kcp.ObjectKey{Cluster: "2x7c", Name: "compute.io"}, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "disks"}},
		State:          sources.State{Phase: sources.PhaseSyncing},
		CurrencyShards: 1,
	}
	statuses := []sources.Status{vms, vpcs, disks}
	m := New(func() int { return 1200 }, func() []sources.Status { return statuses })
	m.sources.now = func() time.Time { return now }
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP dependency_webhook_source_indexed_dependents Number of dependent objects of each source in the webhook's index; 0 for a type that is only protected.
# TYPE dependency_webhook_source_indexed_dependents gauge
dependency_webhook_source_indexed_dependents{export="2x7c/compute.io",resource="disks.compute.io",version="v1"} 0
dependency_webhook_source_indexed_dependents{export="2x7c/compute.io",resource="virtualmachines.compute.io",version="v1"} 1200
dependency_webhook_source_indexed_dependents{export="9q1z/network.io",resource="vpcs.network.io",version="v1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "dependency_webhook_source_indexed_dependents"); err != nil {
		t.Error(err)
	}
	// The objects of protected types watched for the audit.
	const wantTargets = `
# HELP dependency_webhook_source_watched_targets Number of objects of each protected type that the webhook watches for the audit of dangling references (their cluster, namespace and name only), those labelled cleared left out; 0 for a type that is a dependent type (its index serves the audit) and on replicas that do not run the audit.
# TYPE dependency_webhook_source_watched_targets gauge
dependency_webhook_source_watched_targets{export="2x7c/compute.io",resource="disks.compute.io",version="v1"} 0
dependency_webhook_source_watched_targets{export="2x7c/compute.io",resource="virtualmachines.compute.io",version="v1"} 0
dependency_webhook_source_watched_targets{export="9q1z/network.io",resource="vpcs.network.io",version="v1"} 310
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantTargets), "dependency_webhook_source_watched_targets"); err != nil {
		t.Error(err)
	}
	// The age of the currency of the indexed sources: +Inf where it is not
	// known, nothing for a source without effect.
	const wantAge = `
# HELP dependency_webhook_index_currency_age_seconds Age of the currency of each indexed source on its least current shard: how long ago the latest moment was before which everything kcp stored of the source is in the webhook's index (a few seconds when all is well; +Inf while it is not known: not synced, a broken watch, no sample yet).
# TYPE dependency_webhook_index_currency_age_seconds gauge
dependency_webhook_index_currency_age_seconds{export="2x7c/compute.io",resource="disks.compute.io",version="v1"} +Inf
dependency_webhook_index_currency_age_seconds{export="2x7c/compute.io",resource="virtualmachines.compute.io",version="v1"} 3.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantAge), "dependency_webhook_index_currency_age_seconds"); err != nil {
		t.Error(err)
	}
	statuses = statuses[:2]
	phases := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			if f.GetName() != "dependency_webhook_source_phase" {
				continue
			}
			for _, s := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range s.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				got[l["resource"]+" "+l["phase"]] = s.GetGauge().GetValue()
			}
		}
		return got
	}
	got := phases()
	if len(got) != 2*len(sources.Phases) {
		t.Errorf("%d phase series, want one per phase and source (%d): %v", len(got), 2*len(sources.Phases), got)
	}
	for key, v := range map[string]float64{
		"virtualmachines.compute.io Synced": 1, "virtualmachines.compute.io Syncing": 0, "virtualmachines.compute.io AccessDenied": 0,
		"vpcs.network.io AccessDenied": 1, "vpcs.network.io Synced": 0,
	} {
		if got[key] != v {
			t.Errorf("dependency_webhook_source_phase %s = %v, want %v", key, got[key], v)
		}
	}
	var ones float64
	for _, v := range got {
		ones += v
	}
	if ones != 2 {
		t.Errorf("%v phases are 1, want one per source", ones)
	}

	statuses = statuses[:1]
	if got := phases(); len(got) != len(sources.Phases) || got["virtualmachines.compute.io Synced"] != 1 {
		t.Errorf("after the index dropped a source: %v", got)
	}
}
