package registry

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
)

func TestIndexedCondition(t *testing.T) {
	tests := []struct {
		state       index.State
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{index.State{Phase: index.PhaseSynced, Message: "Indexing"}, metav1.ConditionTrue, "Indexed", "Indexing"},
		{index.State{Phase: index.PhaseSyncing, Message: "Listing"}, metav1.ConditionUnknown, "Syncing", "Listing"},
		{index.State{Phase: index.PhaseAccessDenied, Message: "grant it"}, metav1.ConditionFalse, "AccessDenied", "grant it; until then the rule has no effect"},
		{index.State{Phase: index.PhaseVersionNotServed, Message: "served in v2"}, metav1.ConditionFalse, "VersionNotServed", "served in v2; deletes that the rule protects are refused"},
	}
	for _, tt := range tests {
		t.Run(string(tt.state.Phase), func(t *testing.T) {
			c := IndexedCondition(tt.state, nil, 7)
			if c.Type != depv1alpha1.ConditionDependentsIndexed || c.Status != tt.wantStatus || c.Reason != tt.wantReason ||
				!strings.HasPrefix(c.Message, tt.wantMessage) || c.ObservedGeneration != 7 {
				t.Errorf("IndexedCondition() = %+v", c)
			}
		})
	}
}

// A field path of the rule that the dependent's schema cannot hold makes the
// condition False, naming it; a problem of another rule's path does not.
func TestIndexedConditionNamesFieldPathsNotInSchema(t *testing.T) {
	good, bad, others := fieldpathtest.MustParse(".spec.vpcRef.name"), fieldpathtest.MustParse(".spec.vpcReff.name"), fieldpathtest.MustParse(".spec.other")
	state := index.State{Phase: index.PhaseSynced, Kind: "VirtualMachine", Message: "Indexing", PathProblems: []index.PathProblem{
		{Path: bad, Problem: `.spec has no field "vpcReff"`}, {Path: others, Problem: `.spec has no field "other"`},
	}}
	c := IndexedCondition(state, []fieldpath.Path{good, bad}, 1)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonFieldPathNotInSchema ||
		!strings.Contains(c.Message, `.spec.vpcReff.name: .spec has no field "vpcReff"`) || strings.Contains(c.Message, "other") {
		t.Errorf("IndexedCondition() = %+v", c)
	}
	if c := IndexedCondition(state, []fieldpath.Path{good}, 1); c.Status != metav1.ConditionTrue {
		t.Errorf("a rule whose paths are fine: %+v", c)
	}
}

func TestGuardedCondition(t *testing.T) {
	vpcSource, subnetSource := targetSource("c-net", vpcs), targetSource("c-net", subnets)
	guard := func(targets ...index.Source) Guard {
		g := Guard{Rule: key("c1/r")}
		for _, t := range targets {
			g.References = append(g.References, GuardReference{Path: fieldpathtest.MustParse(".spec.x"), Target: t})
		}
		return g
	}
	states := func(m map[index.Source]index.State) func(index.Source) index.State {
		return func(s index.Source) index.State { return m[s] }
	}
	tests := []struct {
		name       string
		guard      Guard
		states     map[index.Source]index.State
		wantStatus metav1.ConditionStatus
		wantReason string
		wantParts  []string
	}{
		{
			name:       "every target readable",
			guard:      guard(vpcSource, subnetSource, vpcSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseSynced}, subnetSource: {Phase: index.PhaseSynced}},
			wantStatus: metav1.ConditionTrue, wantReason: "Guarded",
			wantParts: []string{"vpcs.network.io of the APIExport c-net/network.io", "subnets.network.io"},
		},
		{
			name:       "a provider that has not granted access: new references go unchecked",
			guard:      guard(vpcSource, subnetSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseSynced}, subnetSource: {Phase: index.PhaseAccessDenied, Message: "grant it"}},
			wantStatus: metav1.ConditionFalse, wantReason: "AccessDenied",
			wantParts: []string{"subnets.network.io of the APIExport c-net/network.io: grant it", "new references to them are not checked"},
		},
		{
			name:       "an export that does not serve the target: nothing of it is protected",
			guard:      guard(vpcSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseResourceNotExported, Message: `the APIExport "network.io" does not export vpcs.network.io`}},
			wantStatus: metav1.ConditionFalse, wantReason: "ResourceNotExported",
			wantParts: []string{"does not export vpcs.network.io", "not protected by this rule"},
		},
		{
			name:       "still checking",
			guard:      guard(vpcSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseSyncing}},
			wantStatus: metav1.ConditionUnknown, wantReason: "Syncing",
		},
		{
			name:       "no protected workspace binds the export yet",
			guard:      guard(index.Source{}),
			wantStatus: metav1.ConditionUnknown, wantReason: "TargetsUnresolved",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := GuardedCondition(tt.guard, states(tt.states), 3)
			if c.Type != depv1alpha1.ConditionReferencesGuarded || c.Status != tt.wantStatus || c.Reason != tt.wantReason || c.ObservedGeneration != 3 {
				t.Errorf("GuardedCondition() = %+v, want %s/%s", c, tt.wantStatus, tt.wantReason)
			}
			for _, p := range tt.wantParts {
				if !strings.Contains(c.Message, p) {
					t.Errorf("message %q does not contain %q", c.Message, p)
				}
			}
		})
	}
}
