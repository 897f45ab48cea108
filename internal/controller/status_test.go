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

func TestComputeStatus(t *testing.T) {
	ok := func(cluster string) targetResult { return targetResult{cluster: logicalcluster.Name("c-" + cluster)} }
	tests := []struct {
		name    string
		rule    *depv1alpha1.DependencyRule
		results map[string]targetResult
		cycles  []depgraph.Cycle
		want    map[string]wantCondition
	}{
		{
			name:    "all installed",
			rule:    ruleWithPaths(3, "root:net", "root:org:storage", "root:net"),
			results: map[string]targetResult{"root:net": ok("net"), "root:org:storage": ok("storage")},
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved:   {metav1.ConditionTrue, ReasonResolved, []string{"root:net (c-net)", "root:org:storage (c-storage)"}},
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionTrue, ReasonInstalled, []string{"root:net, root:org:storage"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionTrue, ReasonProtecting, []string{"root:net, root:org:storage"}},
				depv1alpha1.ConditionDependencyCycle:   {metav1.ConditionFalse, ReasonNoCycle, nil},
			},
		},
		{
			name: "one path unresolved",
			rule: ruleWithPaths(1, "root:net", "root:gone"),
			results: map[string]targetResult{
				"root:net":  ok("net"),
				"root:gone": {resolveErr: errors.New(`workspace "gone" does not exist in root`)},
			},
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved:   {metav1.ConditionFalse, ReasonResolutionFailed, []string{`root:gone: workspace "gone" does not exist in root`}},
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionFalse, ReasonTargetsUnresolved, []string{"installed in root:net", "could not be resolved"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, ReasonResolutionFailed, []string{"root:gone"}},
			},
		},
		{
			name:    "nothing resolved",
			rule:    ruleWithPaths(1, "root:gone"),
			results: map[string]targetResult{"root:gone": {resolveErr: errors.New("nope")}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionFalse, ReasonTargetsUnresolved, []string{"no protected workspace could be resolved"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, ReasonResolutionFailed, nil},
			},
		},
		{
			name: "install failed in one workspace",
			rule: ruleWithPaths(1, "root:net", "root:unbound"),
			results: map[string]targetResult{
				"root:net":     ok("net"),
				"root:unbound": {cluster: "c-unbound", installErr: errors.New("does not bind the APIExport")},
			},
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved:   {metav1.ConditionTrue, ReasonResolved, nil},
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionFalse, ReasonInstallFailed, []string{"root:unbound: does not bind the APIExport", "installed in root:net"}},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, ReasonInstallFailed, []string{"root:unbound"}},
			},
		},
		{
			name:    "path missing from the results is not reported as success",
			rule:    ruleWithPaths(1, "root:net"),
			results: map[string]targetResult{},
			want: map[string]wantCondition{
				depv1alpha1.ConditionTargetsResolved: {metav1.ConditionFalse, ReasonResolutionFailed, []string{"not resolved yet"}},
				depv1alpha1.ConditionReady:           {metav1.ConditionFalse, ReasonResolutionFailed, nil},
			},
		},
		{
			name: "the webhook's report that it cannot read the dependents makes the rule not Ready",
			rule: func() *depv1alpha1.DependencyRule {
				r := ruleWithPaths(1, "root:net")
				r.Status.Conditions = []metav1.Condition{{Type: depv1alpha1.ConditionDependentsIndexed, Status: metav1.ConditionFalse, Reason: "AccessDenied", Message: "grant the webhook's user get"}}
				return r
			}(),
			results: map[string]targetResult{"root:net": ok("net")},
			want: map[string]wantCondition{
				depv1alpha1.ConditionWebhooksInstalled: {metav1.ConditionTrue, ReasonInstalled, nil},
				depv1alpha1.ConditionReady:             {metav1.ConditionFalse, "AccessDenied", []string{"grant the webhook's user get"}},
			},
		},
		{
			name: "the webhook still listing the dependents keeps the rule Ready",
			rule: func() *depv1alpha1.DependencyRule {
				r := ruleWithPaths(1, "root:net")
				r.Status.Conditions = []metav1.Condition{{Type: depv1alpha1.ConditionDependentsIndexed, Status: metav1.ConditionUnknown, Reason: "Syncing", Message: "Listing"}}
				return r
			}(),
			results: map[string]targetResult{"root:net": ok("net")},
			want: map[string]wantCondition{
				depv1alpha1.ConditionReady: {metav1.ConditionTrue, ReasonProtecting, nil},
			},
		},
		{
			name:    "cycle warns without affecting Ready",
			rule:    ruleWithPaths(1, "root:net"),
			results: map[string]targetResult{"root:net": ok("net")},
			cycles:  []depgraph.Cycle{{{Group: "c.io", Resource: "vms"}, {Group: "n.io", Resource: "vpcs"}}},
			want: map[string]wantCondition{
				depv1alpha1.ConditionDependencyCycle: {metav1.ConditionTrue, ReasonCycleDetected, []string{"vms.c.io → vpcs.n.io → vms.c.io", depv1alpha1.AnnotationSkipProtection}},
				depv1alpha1.ConditionReady:           {metav1.ConditionTrue, ReasonProtecting, nil},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := computeStatus(tt.rule, tt.results, tt.cycles)
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
	results := map[string]targetResult{"root:net": {cluster: "c-net"}}
	first := computeStatus(rule, results, nil)
	old := metav1.NewTime(metav1.Now().Add(-3600e9))
	for i := range first.Conditions {
		first.Conditions[i].LastTransitionTime = old
	}
	rule.Status = first
	second := computeStatus(rule, results, nil)
	if c := meta.FindStatusCondition(second.Conditions, depv1alpha1.ConditionReady); !c.LastTransitionTime.Equal(&old) {
		t.Errorf("an unchanged condition got a new transition time")
	}
}
