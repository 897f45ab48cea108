package controller

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/depgraph"
)

func ruleWithPaths(generation int64, paths ...string) *depv1alpha1.DependencyRule {
	r := &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "r", Generation: generation}}
	for _, p := range paths {
		r.Spec.Dependencies = append(r.Spec.Dependencies, depv1alpha1.Dependency{APIExportRef: depv1alpha1.APIExportReference{Path: p}})
	}
	return r
}

type wantCondition struct {
	status  metav1.ConditionStatus
	reason  string
	message []string
}

// withCondition returns r with a condition that the webhook wrote.
func withCondition(r *depv1alpha1.DependencyRule, typ string, status metav1.ConditionStatus, reason, message string) *depv1alpha1.DependencyRule {
	r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message})
	return r
}

func TestComputeStatus(t *testing.T) {
	net := map[string]logicalcluster.Name{"root:net": "c-net"}
	installedNet := map[logicalcluster.Name]error{"c-net": nil}
	tests := []struct {
		name       string
		rule       *depv1alpha1.DependencyRule
		workspaces map[string]logicalcluster.Name
		results    results
		cycles     []depgraph.Cycle
		want       map[string]wantCondition
	}{
		{
			name:       "all installed",
			rule:       ruleWithPaths(3, "root:net", "root:org:storage", "root:net"),
			workspaces: map[string]logicalcluster.Name{"root:net": "c-net", "root:org:storage": "c-storage"},
			results:    results{installed: map[logicalcluster.Name]error{"c-net": nil, "c-storage": nil}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved:   {metav1.ConditionTrue, depv1alpha1.ReasonResolved, []string{"root:net (c-net)", "root:org:storage (c-storage)"}},
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionTrue, depv1alpha1.ReasonInstalled, []string{"root:net, root:org:storage"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionTrue, depv1alpha1.ReasonProtecting, []string{"root:net, root:org:storage"}},
				depv1alpha1.ConditionDependencyCycle:   {metav1.ConditionFalse, depv1alpha1.ReasonNoCycle, nil},
			},
		},
		{
			name:       "one path unresolved",
			rule:       ruleWithPaths(1, "root:net", "root:gone"),
			workspaces: net,
			results:    results{installed: installedNet, unresolved: map[string]error{"root:gone": errors.New(`no workspace at root:gone binds the APIExport`)}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved:   {metav1.ConditionFalse, depv1alpha1.ReasonResolutionFailed, []string{`root:gone: no workspace at root:gone binds the APIExport`}},
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionFalse, depv1alpha1.ReasonTargetsUnresolved, []string{"installed in root:net", "could not be resolved"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, depv1alpha1.ReasonResolutionFailed, []string{"root:gone"}},
			},
		},
		{
			name:    "nothing resolved",
			rule:    ruleWithPaths(1, "root:gone"),
			results: results{unresolved: map[string]error{"root:gone": errors.New("nope")}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionFalse, depv1alpha1.ReasonTargetsUnresolved, []string{"no protected workspace could be resolved"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, depv1alpha1.ReasonResolutionFailed, nil},
			},
		},
		{
			name:       "install failed in one workspace",
			rule:       ruleWithPaths(1, "root:net", "root:unbound"),
			workspaces: map[string]logicalcluster.Name{"root:net": "c-net", "root:unbound": "c-unbound"},
			results:    results{installed: map[logicalcluster.Name]error{"c-net": nil, "c-unbound": errors.New("does not bind the APIExport")}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved:   {metav1.ConditionTrue, depv1alpha1.ReasonResolved, nil},
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionFalse, depv1alpha1.ReasonInstallFailed, []string{"root:unbound: does not bind the APIExport", "installed in root:net"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, depv1alpha1.ReasonInstallFailed, []string{"root:unbound"}},
			},
		},
		{
			name:       "install failed in the rule's own workspace, which serves the dependent",
			rule:       inCluster(ruleWithPaths(1, "root:net"), "c-compute"),
			workspaces: net,
			results:    results{installed: map[logicalcluster.Name]error{"c-net": nil, "c-compute": errors.New("forbidden")}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionFalse, depv1alpha1.ReasonInstallFailed, []string{"the rule's own workspace", "forbidden", "installed in root:net"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, depv1alpha1.ReasonInstallFailed, nil},
			},
		},
		{
			name:       "path missing from the results is not reported as success",
			rule:       ruleWithPaths(1, "root:net"),
			workspaces: net,
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved: {metav1.ConditionFalse, depv1alpha1.ReasonResolutionFailed, []string{"not resolved yet"}},
				depv1alpha1.ConditionReady:           {metav1.ConditionFalse, depv1alpha1.ReasonResolutionFailed, nil},
			},
		},
		{
			name:       "the webhook's report that it cannot read the dependents makes the rule not Ready",
			rule:       withCondition(ruleWithPaths(1, "root:net"), depv1alpha1.ConditionDependentsIndexed, metav1.ConditionFalse, "AccessDenied", "grant the webhook's user get"),
			workspaces: net,
			results:    results{installed: installedNet},
			want: map[string]wantCondition{
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionTrue, depv1alpha1.ReasonInstalled, nil},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, "AccessDenied", []string{"grant the webhook's user get"}},
			},
		},
		{
			name:       "the webhook still listing the dependents keeps the rule Ready",
			rule:       withCondition(ruleWithPaths(1, "root:net"), depv1alpha1.ConditionDependentsIndexed, metav1.ConditionUnknown, "Syncing", "Listing"),
			workspaces: net,
			results:    results{installed: installedNet},
			want: map[string]wantCondition{
				depv1alpha1.ConditionReady: {metav1.ConditionTrue, depv1alpha1.ReasonProtecting, nil},
			},
		},
		{
			name: "a protected APIExport that does not serve what the rule names makes the rule not Ready",
			rule: withCondition(ruleWithPaths(1, "root:net"), depv1alpha1.ConditionReferencesGuarded, metav1.ConditionFalse, "ResourceNotExported",
				`vpcs.net.io of the APIExport c-net/net.io: the APIExport "net.io" does not export vpcs.net.io`),
			workspaces: net,
			results:    results{installed: installedNet},
			want: map[string]wantCondition{
				depv1alpha1.ConditionReady: {metav1.ConditionFalse, "ResourceNotExported", []string{"does not export vpcs.net.io"}},
			},
		},
		{
			name:       "a protected provider that has not granted read access keeps the rule Ready: only new references go unchecked",
			rule:       withCondition(ruleWithPaths(1, "root:net"), depv1alpha1.ConditionReferencesGuarded, metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, "grant"),
			workspaces: net,
			results:    results{installed: installedNet},
			want: map[string]wantCondition{
				depv1alpha1.ConditionReady: {metav1.ConditionTrue, depv1alpha1.ReasonProtecting, nil},
			},
		},
		{
			name:       "cycle warns without affecting Ready",
			rule:       ruleWithPaths(1, "root:net"),
			workspaces: net,
			results:    results{installed: installedNet},
			cycles:     []depgraph.Cycle{{{Group: "c.io", Resource: "vms"}, {Group: "n.io", Resource: "vpcs"}}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionDependencyCycle: {metav1.ConditionTrue, depv1alpha1.ReasonCycleDetected, []string{"vms.c.io → vpcs.n.io → vms.c.io", depv1alpha1.AnnotationSkipProtection}},
				depv1alpha1.ConditionReady:           {metav1.ConditionTrue, depv1alpha1.ReasonProtecting, nil},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := computeStatus(tt.rule, tt.workspaces, tt.results, tt.cycles)
			if status.ObservedGeneration != tt.rule.Generation {
				t.Errorf("observedGeneration = %d, want %d", status.ObservedGeneration, tt.rule.Generation)
			}
			if int(status.DependencyCount) != len(tt.rule.Spec.Dependencies) {
				t.Errorf("dependencyCount = %d, want %d", status.DependencyCount, len(tt.rule.Spec.Dependencies))
			}
			for typ, want := range tt.want {
				c := meta.FindStatusCondition(status.Conditions, typ)
				if c == nil {
					t.Fatalf("condition %s missing", typ)
				}
				if c.Status != want.status || c.Reason != want.reason {
					t.Errorf("%s = %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, want.status, want.reason)
				}
				for _, part := range want.message {
					if !strings.Contains(c.Message, part) {
						t.Errorf("%s message %q does not contain %q", typ, c.Message, part)
					}
				}
				if c.ObservedGeneration != tt.rule.Generation {
					t.Errorf("%s observedGeneration = %d", typ, c.ObservedGeneration)
				}
			}
		})
	}
}

func TestComputeStatusKeepsTransitionTime(t *testing.T) {
	rule := ruleWithPaths(1, "root:net")
	workspaces := map[string]logicalcluster.Name{"root:net": "c-net"}
	res := results{installed: map[logicalcluster.Name]error{"c-net": nil}}
	first := computeStatus(rule, workspaces, res, nil)
	old := metav1.NewTime(metav1.Now().Add(-3600e9))
	for i := range first.Conditions {
		first.Conditions[i].LastTransitionTime = old
	}
	rule.Status = first
	second := computeStatus(rule, workspaces, res, nil)
	if c := meta.FindStatusCondition(second.Conditions, depv1alpha1.ConditionReady); !c.LastTransitionTime.Equal(&old) {
		t.Errorf("an unchanged condition got a new transition time")
	}
}
