package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// Every reconcile reports whether each rule is Ready, as it computed the
// condition; a deleted rule is no longer reported, and a nil *Metrics
// records nothing.
func TestRuleReadyMetric(t *testing.T) {
	f := newFixture(t, nil,
		testRule("r", "root:net/vpcs.net.io"),
		testRule("unresolved", "root:nowhere/disks.storage.io"))
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	r := NewReconciler(f, f, Options{APIExportName: "dependencies.opendefense.cloud", Webhook: func() webhookconfig.Options { return f.webhook }, Metrics: m})
	r.caughtUp = true
	reconcile := func() {
		t.Helper()
		// The unresolved path makes the reconcile fail; the metric is
		// reported anyway.
		if _, err := r.Reconcile(context.Background(), mcreconcile.Request{}); err != nil && !strings.Contains(err.Error(), "root:nowhere") {
			t.Fatal(err)
		}
	}

	reconcile()
	const help = `
# HELP dependency_controller_rule_ready Whether each DependencyRule is Ready (1) or not (0), as the controller's last reconcile computed its Ready condition; by the rule's logical cluster and name. The rule's conditions say why it is not.
# TYPE dependency_controller_rule_ready gauge
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(help+`dependency_controller_rule_ready{logical_cluster="c-compute",rule="r"} 1
dependency_controller_rule_ready{logical_cluster="c-compute",rule="unresolved"} 0
`)); err != nil {
		t.Error(err)
	}
	if got := f.condition(t, depv1alpha1.ConditionReady); !strings.HasPrefix(got, "True") {
		t.Errorf("the rule r is %s; the metric must agree with its condition", got)
	}

	if err := f.clients["c-compute"].Delete(context.Background(), testRule("unresolved")); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(help+`dependency_controller_rule_ready{logical_cluster="c-compute",rule="r"} 1
`)); err != nil {
		t.Errorf("after the rule was deleted: %v", err)
	}

	var none *Metrics
	none.rulesReady(nil) // records nothing, and does not panic
}
