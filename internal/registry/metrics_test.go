package registry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The number of registered rules is read at every scrape.
func TestMetrics(t *testing.T) {
	r := New()
	m := r.Metrics()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m); got != 0 {
		t.Errorf("dependency_webhook_rules = %v, want 0", got)
	}
	for _, k := range []string{"c1/vm", "c1/db", "c2/vm"} {
		r.Apply(rule(k, k, 1, vms, "vpcs.network.io@.spec.vpc"))
	}
	if got := testutil.ToFloat64(m); got != 3 {
		t.Errorf("dependency_webhook_rules = %v, want 3", got)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Errorf("gathered %d series (%v), want 1", n, err)
	}
}
