package conditions

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

var (
	vpcs    = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
	subnets = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "subnets"}
)

func key(s string) kcp.ObjectKey {
	cluster, name, _ := strings.Cut(s, "/")
	return kcp.ObjectKey{Cluster: logicalcluster.Name(cluster), Name: name}
}

// targetSource is the protected resource gvr as the provider in cluster
// serves it.
func targetSource(cluster string, gvr schema.GroupVersionResource) index.Source {
	return index.Source{Export: kcp.ObjectKey{Cluster: logicalcluster.Name(cluster), Name: gvr.Group}, Resource: gvr}
}

func TestIndexedCondition(t *testing.T) {
	tests := []struct {
		state       index.State
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{index.State{Phase: index.PhaseSynced, Message: "Indexing"}, metav1.ConditionTrue, depv1alpha1.ReasonIndexed, "Indexing"},
		{index.State{Phase: index.PhaseSyncing, Message: "Listing"}, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "Listing"},
		{index.State{Phase: index.PhaseAccessDenied, Message: "grant it"}, metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, "grant it; until then the rule has no effect"},
		{index.State{Phase: index.PhaseVersionNotServed, Message: "served in v2"}, metav1.ConditionFalse, depv1alpha1.ReasonVersionNotServed, "served in v2; deletes that the rule protects are refused"},
	}
	for _, tt := range tests {
		t.Run(string(tt.state.Phase), func(t *testing.T) {
			c := Indexed(tt.state, nil, 7)
			if c.Type != depv1alpha1.ConditionDependentsIndexed || c.Status != tt.wantStatus || c.Reason != tt.wantReason ||
				!strings.HasPrefix(c.Message, tt.wantMessage) || c.ObservedGeneration != 7 {
				t.Errorf("Indexed() = %+v", c)
			}
		})
	}
}

// A field path of the rule that the dependent's schema cannot hold makes the
// condition False, naming it; a problem of another rule's path does not.
func TestIndexedConditionNamesFieldPathsNotInSchema(t *testing.T) {
	good, bad, others := fieldpathtest.MustParse(".spec.vpcRef.name"), fieldpathtest.MustParse(".spec.vpcReff.name"), fieldpathtest.MustParse(".spec.other")
	state := index.State{Phase: index.PhaseSynced, Kind: "VirtualMachine", Message: "Indexing", PathProblems: []index.PathProblem{
		{Path: bad.Name(), Problem: `.spec has no field "vpcReff"`}, {Path: others.Name(), Problem: `.spec has no field "other"`},
	}}
	c := Indexed(state, []fieldpath.Reference{good, bad}, 1)
	if c.Status != metav1.ConditionFalse || c.Reason != depv1alpha1.ReasonFieldPathNotInSchema ||
		!strings.Contains(c.Message, `.spec.vpcReff.name: .spec has no field "vpcReff"`) || strings.Contains(c.Message, "other") {
		t.Errorf("Indexed() = %+v", c)
	}
	if c := Indexed(state, []fieldpath.Reference{good}, 1); c.Status != metav1.ConditionTrue {
		t.Errorf("a rule whose paths are fine: %+v", c)
	}
}

func TestGuardedCondition(t *testing.T) {
	vpcSource, subnetSource := targetSource("c-net", vpcs), targetSource("c-net", subnets)
	guard := func(targets ...index.Source) registry.Guard {
		g := registry.Guard{Rule: key("c1/r")}
		for _, t := range targets {
			g.References = append(g.References, registry.GuardReference{Path: fieldpathtest.MustParse(".spec.x"), Target: t})
		}
		return g
	}
	states := func(m map[index.Source]index.State) func(index.Source) index.State {
		return func(s index.Source) index.State { return m[s] }
	}
	tests := []struct {
		name       string
		guard      registry.Guard
		states     map[index.Source]index.State
		wantStatus metav1.ConditionStatus
		wantReason string
		wantParts  []string
	}{
		{
			name:       "every target readable",
			guard:      guard(vpcSource, subnetSource, vpcSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseSynced}, subnetSource: {Phase: index.PhaseSynced}},
			wantStatus: metav1.ConditionTrue, wantReason: depv1alpha1.ReasonGuarded,
			wantParts: []string{"vpcs.network.io of the APIExport c-net/network.io", "subnets.network.io"},
		},
		{
			name:       "a provider that has not granted access: new references go unchecked",
			guard:      guard(vpcSource, subnetSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseSynced}, subnetSource: {Phase: index.PhaseAccessDenied, Message: "grant it"}},
			wantStatus: metav1.ConditionFalse, wantReason: depv1alpha1.ReasonAccessDenied,
			wantParts: []string{"subnets.network.io of the APIExport c-net/network.io: grant it", "new references to them are not checked"},
		},
		{
			name:       "an export that does not serve the target: nothing of it is protected",
			guard:      guard(vpcSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseResourceNotExported, Message: `the APIExport "network.io" does not export vpcs.network.io`}},
			wantStatus: metav1.ConditionFalse, wantReason: depv1alpha1.ReasonResourceNotExported,
			wantParts: []string{"does not export vpcs.network.io", "not protected by this rule"},
		},
		{
			name:       "still checking",
			guard:      guard(vpcSource),
			states:     map[index.Source]index.State{vpcSource: {Phase: index.PhaseSyncing}},
			wantStatus: metav1.ConditionUnknown, wantReason: depv1alpha1.ReasonSyncing,
		},
		{
			name:       "no protected workspace binds the export yet",
			guard:      guard(index.Source{}),
			wantStatus: metav1.ConditionUnknown, wantReason: depv1alpha1.ReasonTargetsUnresolved,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Guarded(tt.guard, states(tt.states), 3)
			if c.Type != depv1alpha1.ConditionReferencesGuarded || c.Status != tt.wantStatus || c.Reason != tt.wantReason || c.ObservedGeneration != 3 {
				t.Errorf("Guarded() = %+v, want %s/%s", c, tt.wantStatus, tt.wantReason)
			}
			for _, p := range tt.wantParts {
				if !strings.Contains(c.Message, p) {
					t.Errorf("message %q does not contain %q", c.Message, p)
				}
			}
		})
	}
}

// The reasons that name the phase of a source are the names of the phases,
// as the API documents them; the webhook writes them as string(phase).
func TestPhaseReasonsAreTheAPIsReasons(t *testing.T) {
	for phase, reason := range map[index.Phase]string{
		index.PhaseSyncing:             depv1alpha1.ReasonSyncing,
		index.PhaseExportNotFound:      depv1alpha1.ReasonExportNotFound,
		index.PhaseAccessDenied:        depv1alpha1.ReasonAccessDenied,
		index.PhaseResourceNotExported: depv1alpha1.ReasonResourceNotExported,
		index.PhaseVersionNotServed:    depv1alpha1.ReasonVersionNotServed,
	} {
		if string(phase) != reason {
			t.Errorf("phase %q has the reason %q in the API", phase, reason)
		}
		if c := Indexed(index.State{Phase: phase, Message: "m"}, nil, 1); c.Reason != reason {
			t.Errorf("Indexed() in phase %s: reason %q, want %q", phase, c.Reason, reason)
		}
	}
}

func TestOwnConditions(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cond := func(typ string, status metav1.ConditionStatus, reason, message string, generation int64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
	}
	current := []metav1.Condition{
		{Type: depv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonProtecting, Message: "controller's", LastTransitionTime: earlier, ObservedGeneration: 2},
		{Type: depv1alpha1.ConditionDependentsIndexed, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonIndexed, Message: "m", LastTransitionTime: earlier, ObservedGeneration: 2},
	}
	tests := []struct {
		name        string
		want        []metav1.Condition
		wantChanged bool
		// wantKept are the types whose last transition time must stay.
		wantKept []string
	}{
		{
			name:     "unchanged",
			want:     []metav1.Condition{cond(depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, depv1alpha1.ReasonIndexed, "m", 2)},
			wantKept: []string{depv1alpha1.ConditionDependentsIndexed},
		},
		{
			name:        "a new message keeps the transition time",
			want:        []metav1.Condition{cond(depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, depv1alpha1.ReasonIndexed, "new", 2)},
			wantChanged: true,
			wantKept:    []string{depv1alpha1.ConditionDependentsIndexed},
		},
		{
			name:        "a new generation",
			want:        []metav1.Condition{cond(depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, depv1alpha1.ReasonIndexed, "m", 3)},
			wantChanged: true,
			wantKept:    []string{depv1alpha1.ConditionDependentsIndexed},
		},
		{
			name:        "a new status is a transition",
			want:        []metav1.Condition{cond(depv1alpha1.ConditionDependentsIndexed, metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, "m", 2)},
			wantChanged: true,
		},
		{
			name: "a missing condition",
			want: []metav1.Condition{
				cond(depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, depv1alpha1.ReasonIndexed, "m", 2),
				cond(depv1alpha1.ConditionReferencesGuarded, metav1.ConditionTrue, depv1alpha1.ReasonGuarded, "g", 2),
			},
			wantChanged: true,
			wantKept:    []string{depv1alpha1.ConditionDependentsIndexed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(current)
			got, changed := ownConditions(current, tt.want)
			if changed != tt.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tt.wantChanged)
			}
			if !reflect.DeepEqual(current, before) {
				t.Errorf("ownConditions() modified the current conditions")
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ownConditions() = %+v, want only the conditions asked for", got)
			}
			for i, c := range got {
				w := tt.want[i]
				if c.Type != w.Type || c.Status != w.Status || c.Reason != w.Reason || c.Message != w.Message || c.ObservedGeneration != w.ObservedGeneration {
					t.Errorf("condition %d = %+v, want %+v", i, c, w)
				}
				if kept := slices.Contains(tt.wantKept, c.Type); kept != c.LastTransitionTime.Equal(&earlier) || c.LastTransitionTime.IsZero() {
					t.Errorf("condition %s: last transition time %s, kept = %v", c.Type, c.LastTransitionTime, kept)
				}
			}
		})
	}
}

func TestWithLargest(t *testing.T) {
	indexed := metav1.Condition{Type: depv1alpha1.ConditionDependentsIndexed, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonIndexed, Message: "Indexing virtualmachines"}
	big := kcp.Meta{Cluster: "c1", Namespace: "default", Name: "vm-big"}
	tests := []struct {
		name    string
		c       metav1.Condition
		largest Largest
		want    string
	}{
		{name: "far from the limit: the message as it was", c: indexed, largest: Largest{Dependent: big, References: 799, Max: 1000}, want: "Indexing virtualmachines"},
		{name: "no dependent holds a reference", c: indexed, largest: Largest{Max: 1000}, want: "Indexing virtualmachines"},
		{name: "at four fifths of the limit: named, with the number and the limit", c: indexed, largest: Largest{Dependent: big, References: 800, Max: 1000},
			want: "Indexing virtualmachines; VirtualMachine default/vm-big in logical cluster c1 references 800 objects, close to the limit of 1000 per object: a write that adds references past it is refused"},
		{name: "at the limit", c: indexed, largest: Largest{Dependent: big, References: 1000, Max: 1000}, want: "references 1000 objects, close to the limit of 1000 per object"},
		{name: "past the limit (a dependent from before it)", c: indexed, largest: Largest{Dependent: big, References: 3000, Max: 1000},
			want: "references 3000 objects, more than the limit of 1000 per object: writes that add references to it are refused until it references at most 1000"},
		{name: "a cluster-scoped dependent is named without a namespace", c: indexed, largest: Largest{Dependent: kcp.Meta{Cluster: "c1", Name: "vm-big"}, References: 900, Max: 1000},
			want: "VirtualMachine vm-big in logical cluster c1 references 900 objects"},
		{name: "a condition that is not True says what is wrong, not this",
			c:       metav1.Condition{Type: depv1alpha1.ConditionDependentsIndexed, Status: metav1.ConditionFalse, Reason: "AccessDenied", Message: "no access"},
			largest: Largest{Dependent: big, References: 3000, Max: 1000}, want: "no access"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WithLargest(tt.c, "VirtualMachine", tt.largest)
			if !strings.Contains(got.Message, tt.want) || tt.want == tt.c.Message && got.Message != tt.want {
				t.Errorf("message %q, want it to contain %q", got.Message, tt.want)
			}
			if got.Status != tt.c.Status || got.Reason != tt.c.Reason {
				t.Errorf("status %s (%s), want it unchanged: %s (%s)", got.Status, got.Reason, tt.c.Status, tt.c.Reason)
			}
		})
	}
}
