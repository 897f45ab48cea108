package index

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counted returns the values of the only label of the counter name among
// the index's metrics, each as often as it was counted, sorted.
func counted(t testing.TB, ix *Index, name string) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(ix.Metrics()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for range int(m.GetCounter().GetValue()) {
				out = append(out, m.GetLabel()[0].GetValue())
			}
		}
	}
	slices.Sort(out)
	return out
}

// retried returns the causes of the retries the index counted.
func retried(t testing.TB, ix *Index) []string {
	t.Helper()
	return counted(t, ix, "dependency_webhook_read_retries_total")
}

// readsOf returns how the live reads the index counted were answered.
func readsOf(t testing.TB, ix *Index) []string {
	t.Helper()
	return counted(t, ix, "dependency_webhook_live_reads_total")
}
