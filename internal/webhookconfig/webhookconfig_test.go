package webhookconfig

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

type dep struct{ path, group, version, resource, field string }

// rule returns a rule in the workspace of logical cluster cluster whose
// dependent is compute.io/v1 virtualmachines (APIExport compute.io); its
// UID is derived from cluster and name.
func rule(cluster, name string, deps ...dep) depv1alpha1.DependencyRule {
	r := depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		UID:         types.UID("uid-" + cluster + "-" + name),
		Generation:  3,
		Annotations: map[string]string{logicalcluster.AnnotationKey: cluster},
	}}
	r.Spec.Dependent = depv1alpha1.DependentResource{APIExportName: "compute.io", Group: "compute.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"}
	for _, d := range deps {
		r.Spec.Dependencies = append(r.Spec.Dependencies, depv1alpha1.Dependency{
			APIExportRef: depv1alpha1.APIExportReference{Path: d.path, Name: d.group},
			Group:        d.group, Version: d.version, Resource: d.resource,
			FieldRef: depv1alpha1.FieldReference{Path: d.field},
		})
	}
	return r
}

// withDependent returns r naming another dependent.
func withDependent(r depv1alpha1.DependencyRule, export, group, version, resource string) depv1alpha1.DependencyRule {
	r.Spec.Dependent = depv1alpha1.DependentResource{APIExportName: export, Group: group, Version: version, Kind: "Thing", Resource: resource}
	return r
}

// withLabelled returns r with the DependentsLabelled condition, observed
// at generation observed (r is at generation 3).
func withLabelled(r depv1alpha1.DependencyRule, status metav1.ConditionStatus, reason string, observed int64) depv1alpha1.DependencyRule {
	r.Status.Conditions = append(slices.Clone(r.Status.Conditions), metav1.Condition{
		Type: depv1alpha1.ConditionDependentsLabelled, Status: status, Reason: reason, ObservedGeneration: observed,
	})
	return r
}

// labelledRule returns r with DependentsLabelled=True (Labelled) for its
// generation.
func labelledRule(r depv1alpha1.DependencyRule) depv1alpha1.DependencyRule {
	return withLabelled(r, metav1.ConditionTrue, depv1alpha1.ReasonLabelled, 3)
}

// schemeOf returns the fingerprint of the scheme of rules, the way the
// webhook computes it; it fails the test if they have none.
func schemeOf(t *testing.T, rules ...depv1alpha1.DependencyRule) string {
	t.Helper()
	return fullSchemeOf(t, rules...).Fingerprint
}

// fullSchemeOf returns the scheme of rules, the way the webhook computes
// it; it fails the test if they have none.
func fullSchemeOf(t *testing.T, rules ...depv1alpha1.DependencyRule) reflabels.Scheme {
	t.Helper()
	covered := make([]reflabels.Rule, 0, len(rules))
	for i := range rules {
		covered = append(covered, reflabels.RuleOf(&rules[i]))
	}
	s, reason := reflabels.SchemeOf(covered)
	if reason != "" {
		t.Fatalf("the rules have no scheme: %s", reason)
	}
	if s.Fingerprint == "" || s.Salt == "" {
		t.Fatalf("empty fingerprint or salt")
	}
	return s
}

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

func gr(group, resource string) schema.GroupResource {
	return schema.GroupResource{Group: group, Resource: resource}
}

var vms = gvr("compute.io", "v1", "virtualmachines")

func render(m map[logicalcluster.Name]*Workspace) string {
	out := ""
	for _, c := range slices.Sorted(maps.Keys(m)) {
		out += fmt.Sprintf("%s: %+v; ", c, *m[c])
	}
	return out
}

func TestDesired(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:c1": "c1", "root:c2": "c2", "root:net": "c-net", "root:org:team:storage": "c-storage"}
	path := logicalcluster.NewPath
	tests := []struct {
		name           string
		rules          []depv1alpha1.DependencyRule
		want           map[logicalcluster.Name]*Workspace
		wantUnresolved []logicalcluster.Path
	}{
		{name: "no rules", want: map[logicalcluster.Name]*Workspace{}},
		{
			name:  "one rule, one dependency: protection in the provider's workspace, the check of new references in the rule's",
			rules: []depv1alpha1.DependencyRule{rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpcRef.name"})},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}},
				"c1":    {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			},
		},
		{
			name: "two rules on one provider merge into one workspace without duplicates",
			rules: []depv1alpha1.DependencyRule{
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpcRef.name"}, dep{"root:net", "net.io", "v1", "vpcs", ".spec.nics[*].vpc"}),
				rule("c2", "db", dep{"root:net", "net.io", "v1", "subnets", ".spec.subnet"}, dep{"root:org:team:storage", "storage.io", "v1beta1", "volumes", ".spec.volume"}),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c-net":     {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")}},
				"c-storage": {Path: path("root:org:team:storage"), Protected: []schema.GroupVersionResource{gvr("storage.io", "v1beta1", "volumes")}},
				"c1":        {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
				"c2":        {Path: path("root:c2"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			},
		},
		{
			name: "same rule name in two workspaces are two rules; versions are listed",
			rules: []depv1alpha1.DependencyRule{
				rule("c2", "vm", dep{"root:net", "net.io", "v2", "vpcs", ".a"}),
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".a"}),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs")}},
				"c1":    {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"a"}},
				"c2":    {Path: path("root:c2"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"a"}},
			},
		},
		{
			name: "dependents in several versions and types are listed sorted",
			rules: []depv1alpha1.DependencyRule{
				withDependent(rule("c1", "vm2", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}), "compute.io", "compute.io", "v2", "virtualmachines"),
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}),
				withDependent(rule("c1", "disk", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}), "compute.io", "compute.io", "v1", "disks"),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}},
				"c1": {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{
					gvr("compute.io", "v1", "disks"), vms, gvr("compute.io", "v2", "virtualmachines"),
				}, ReferenceFields: []string{"spec"}},
			},
		},
		{
			name:  "a workspace that protects its own dependents gets both",
			rules: []depv1alpha1.DependencyRule{rule("c1", "vm", dep{"root:c1", "compute.io", "v1", "images", ".spec.image"})},
			want: map[logicalcluster.Name]*Workspace{
				"c1": {Path: path("root:c1"), Protected: []schema.GroupVersionResource{gvr("compute.io", "v1", "images")}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			},
		},
		{
			name: "references in several top-level fields are each watched for changes; one in the status checks status writes too",
			rules: []depv1alpha1.DependencyRule{
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpcRef.name"}, dep{"root:net", "net.io", "v1", "subnets", "status.subnets[*]"}),
				rule("c1", "vm2", dep{"root:net", "net.io", "v1", "vpcs", ".spec.other"}),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")}},
				"c1": {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec", "status"},
					StatusReferences: []schema.GroupResource{gr("compute.io", "virtualmachines")}},
			},
		},
		{
			name: "status references: per dependent type, sorted, without duplicates, only in the rule's workspace",
			rules: []depv1alpha1.DependencyRule{
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".status.vpc"}, dep{"root:net", "net.io", "v1", "subnets", ".status.subnet"}),
				withDependent(rule("c1", "vm2", dep{"root:net", "net.io", "v1", "vpcs", ".status.vpc"}), "compute.io", "compute.io", "v2", "virtualmachines"),
				withDependent(rule("c1", "disk", dep{"root:net", "net.io", "v1", "vpcs", ".status.vpc"}), "compute.io", "compute.io", "v1", "disks"),
				withDependent(rule("c1", "nic", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}), "compute.io", "compute.io", "v1", "nics"),
				rule("c2", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")}},
				"c1": {Path: path("root:c1"),
					Dependents: []schema.GroupVersionResource{
						gvr("compute.io", "v1", "disks"), gvr("compute.io", "v1", "nics"), vms, gvr("compute.io", "v2", "virtualmachines"),
					},
					ReferenceFields:  []string{"spec", "status"},
					StatusReferences: []schema.GroupResource{gr("compute.io", "disks"), gr("compute.io", "virtualmachines")},
				},
				"c2": {Path: path("root:c2"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			},
		},
		{
			name:  "a path that does not parse has every UPDATE checked",
			rules: []depv1alpha1.DependencyRule{rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec..name"}, dep{"root:net", "net.io", "v1", "vpcs", ".spec.b"})},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}},
				"c1":    {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}},
			},
		},
		{
			name:  "a path that no workspace binding the export has is reported, the rest applies",
			rules: []depv1alpha1.DependencyRule{rule("c3", "vm", dep{"root:gone", "net.io", "v1", "vpcs", ".a"}, dep{"root:net", "net.io", "v1", "subnets", ".b"})},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets")}},
				"c3":    {Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"a", "b"}},
			},
			wantUnresolved: []logicalcluster.Path{path("root:gone")},
		},
		{
			name: "unresolved paths are reported once each, sorted",
			rules: []depv1alpha1.DependencyRule{
				rule("c1", "a", dep{"root:zz", "net.io", "v1", "vpcs", ".a"}, dep{"root:aa", "net.io", "v1", "vpcs", ".b"}),
				rule("c1", "b", dep{"root:zz", "net.io", "v1", "subnets", ".a"}),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c1": {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"a", "b"}},
			},
			wantUnresolved: []logicalcluster.Path{path("root:aa"), path("root:zz")},
		},
		{
			name: "rules without the DependentsLabelled condition label nothing",
			rules: []depv1alpha1.DependencyRule{
				withLabelled(rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}), metav1.ConditionFalse, depv1alpha1.ReasonNotLabellable, 3),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}},
				"c1":    {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, unresolved := Desired(tt.rules, workspaces)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Desired() =\n  %s\nwant\n  %s", render(got), render(tt.want))
			}
			if !reflect.DeepEqual(unresolved, tt.wantUnresolved) && (len(unresolved) > 0 || len(tt.wantUnresolved) > 0) {
				t.Errorf("unresolved = %v, want %v", unresolved, tt.wantUnresolved)
			}
		})
	}
}

// The full workspace of a labelled type: Labelled next to what the rule
// needs anyway.
func TestDesiredLabelledWorkspace(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:c1": "c1", "root:net": "c-net"}
	r := labelledRule(rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}))
	got, unresolved := Desired([]depv1alpha1.DependencyRule{r}, workspaces)
	want := map[logicalcluster.Name]*Workspace{
		"c-net": {Path: logicalcluster.NewPath("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}},
		"c1": {
			Path: logicalcluster.NewPath("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"},
			Labelled: []Labelled{{Resource: vms.GroupResource(), Versions: []string{"v1"}, Scheme: schemeOf(t, r), Fields: []string{"spec"}}},
		},
	}
	if !reflect.DeepEqual(got, want) || len(unresolved) != 0 {
		t.Errorf("Desired() =\n  %s, %v\nwant\n  %s", render(got), unresolved, render(want))
	}
}

func TestDesiredLabelled(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:c1": "c1", "root:c2": "c2", "root:net": "c-net"}
	vpc := dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpcRef.name"}
	subnet := dep{"root:net", "net.io", "v1", "subnets", ".network.subnet"}
	nicsVPC := dep{"root:net", "net.io", "v1", "vpcs", ".spec.nics[*].vpc"}

	a := labelledRule(rule("c1", "a", vpc))
	bDeps := []dep{subnet, nicsVPC}
	b := labelledRule(rule("c1", "b", bDeps...))
	bUnlabelled := rule("c1", "b", bDeps...)
	bNotLabellable := withLabelled(rule("c1", "b", bDeps...), metav1.ConditionFalse, depv1alpha1.ReasonNotLabellable, 3)
	bLabellingBefore := withLabelled(rule("c1", "b", bDeps...), metav1.ConditionUnknown, depv1alpha1.ReasonLabelling, 1)
	bFalseOther := withLabelled(rule("c1", "b", bDeps...), metav1.ConditionFalse, "ListFailed", 3)
	bTrueBefore := withLabelled(rule("c1", "b", bDeps...), metav1.ConditionTrue, depv1alpha1.ReasonLabelled, 1)
	aInC2 := labelledRule(rule("c2", "a", vpc))
	unlabelledInC2 := rule("c2", "a", vpc)
	aV2 := labelledRule(withDependent(rule("c1", "v2", vpc), "compute.io", "compute.io", "v2", "virtualmachines"))
	aOtherExport := labelledRule(withDependent(rule("c1", "e", vpc), "other.io", "compute.io", "v1", "virtualmachines"))
	status := labelledRule(rule("c1", "s", dep{"root:net", "net.io", "v1", "vpcs", ".status.vpc"}))
	statusNoDot := labelledRule(rule("c1", "s", vpc, dep{"root:net", "net.io", "v1", "subnets", "status.subnet"}))
	unparsable := labelledRule(rule("c1", "u", dep{"root:net", "net.io", "v1", "vpcs", ".spec..vpc"}, dep{"root:net", "net.io", "v1", "subnets", ".spec.subnet"}))
	disks := labelledRule(withDependent(rule("c1", "d", dep{"root:net", "net.io", "v1", "vpcs", ".disk.vpc"}), "compute.io", "compute.io", "v1", "disks"))
	zebras := labelledRule(withDependent(rule("c1", "z", vpc), "a.io", "a.io", "v1beta1", "zebras"))

	vmsGR := vms.GroupResource()
	tests := []struct {
		name  string
		rules []depv1alpha1.DependencyRule
		// want returns the labelled types by logical cluster.
		want func(t *testing.T) map[logicalcluster.Name][]Labelled
	}{
		{
			name:  "one rule with the condition",
			rules: []depv1alpha1.DependencyRule{a},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, a), Fields: []string{"spec"}}}}
			},
		},
		{
			name:  "two rules of one type: one entry over both, fields merged, sorted, without duplicates",
			rules: []depv1alpha1.DependencyRule{b, a},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, a, b), Fields: []string{"network", "spec"}}}}
			},
		},
		{
			name:  "the condition Unknown (Labelling) for an older generation counts",
			rules: []depv1alpha1.DependencyRule{a, bLabellingBefore},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, a, bLabellingBefore), Fields: []string{"network", "spec"}}}}
			},
		},
		{
			name:  "the condition True for an older generation counts",
			rules: []depv1alpha1.DependencyRule{bTrueBefore},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, bTrueBefore), Fields: []string{"network", "spec"}}}}
			},
		},
		{
			name:  "the condition False with a reason other than NotLabellable counts",
			rules: []depv1alpha1.DependencyRule{bFalseOther},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, bFalseOther), Fields: []string{"network", "spec"}}}}
			},
		},
		{name: "no condition: not labelled", rules: []depv1alpha1.DependencyRule{bUnlabelled}},
		{name: "NotLabellable: not labelled", rules: []depv1alpha1.DependencyRule{bNotLabellable}},
		{name: "one rule of the type without the condition keeps the whole type out", rules: []depv1alpha1.DependencyRule{a, bUnlabelled}},
		{name: "one rule of the type NotLabellable keeps the whole type out", rules: []depv1alpha1.DependencyRule{a, bNotLabellable}},
		{
			name:  "the same type in another workspace is another type",
			rules: []depv1alpha1.DependencyRule{a, unlabelledInC2},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, a), Fields: []string{"spec"}}}}
			},
		},
		{
			name:  "the same type labelled in two workspaces, each under its own rules",
			rules: []depv1alpha1.DependencyRule{a, aInC2},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				if schemeOf(t, a) == schemeOf(t, aInC2) {
					t.Fatalf("two rules with different UIDs share a scheme")
				}
				return map[logicalcluster.Name][]Labelled{
					"c1": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, a), Fields: []string{"spec"}}},
					"c2": {{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, aInC2), Fields: []string{"spec"}}},
				}
			},
		},
		{name: "rules naming the type in two versions: not labellable", rules: []depv1alpha1.DependencyRule{a, aV2}},
		{name: "rules naming the type in two APIExports: not labellable", rules: []depv1alpha1.DependencyRule{a, aOtherExport}},
		{name: "a reference in the status: not labellable", rules: []depv1alpha1.DependencyRule{status}},
		{name: "a reference in the status without a leading dot: not labellable", rules: []depv1alpha1.DependencyRule{statusNoDot}},
		{name: "a reference in the status keeps the other rules of the type out", rules: []depv1alpha1.DependencyRule{a, status}},
		{name: "a path that does not parse: not labelled", rules: []depv1alpha1.DependencyRule{unparsable}},
		{
			name:  "several types, each under its own rules, sorted by group and resource",
			rules: []depv1alpha1.DependencyRule{a, disks, zebras, b},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {
					{Resource: gr("a.io", "zebras"), Versions: []string{"v1beta1"}, Scheme: schemeOf(t, zebras), Fields: []string{"spec"}},
					{Resource: gr("compute.io", "disks"), Versions: []string{"v1"}, Scheme: schemeOf(t, disks), Fields: []string{"disk"}},
					{Resource: vmsGR, Versions: []string{"v1"}, Scheme: schemeOf(t, a, b), Fields: []string{"network", "spec"}},
				}}
			},
		},
		{
			name:  "a type that is not labelled does not keep another one out",
			rules: []depv1alpha1.DependencyRule{a, bUnlabelled, disks, status},
			want: func(t *testing.T) map[logicalcluster.Name][]Labelled {
				return map[logicalcluster.Name][]Labelled{"c1": {
					{Resource: gr("compute.io", "disks"), Versions: []string{"v1"}, Scheme: schemeOf(t, disks), Fields: []string{"disk"}},
				}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Desired(tt.rules, workspaces)
			labelled := map[logicalcluster.Name][]Labelled{}
			for cluster, ws := range got {
				if ws.Labelled != nil {
					labelled[cluster] = ws.Labelled
				}
			}
			want := map[logicalcluster.Name][]Labelled{}
			if tt.want != nil {
				want = tt.want(t)
			}
			if !reflect.DeepEqual(labelled, want) {
				t.Errorf("Labelled =\n  %+v\nwant\n  %+v", labelled, want)
			}
		})
	}
}

// The scheme of a labelled type is that of exactly its rules: a rule
// recreated (a new UID) or changed gets a new one.
func TestDesiredLabelledScheme(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:c1": "c1", "root:net": "c-net"}
	a := labelledRule(rule("c1", "a", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}))
	b := labelledRule(rule("c1", "b", dep{"root:net", "net.io", "v1", "subnets", ".spec.subnet"}))
	scheme := func(rules ...depv1alpha1.DependencyRule) string {
		t.Helper()
		got, _ := Desired(rules, workspaces)
		ws := got["c1"]
		if ws == nil || len(ws.Labelled) != 1 {
			t.Fatalf("Desired() = %s, want one labelled type in c1", render(got))
		}
		if want := schemeOf(t, rules...); ws.Labelled[0].Scheme != want {
			t.Errorf("Scheme = %q, want %q", ws.Labelled[0].Scheme, want)
		}
		return ws.Labelled[0].Scheme
	}
	base := scheme(a, b)

	// The scheme over both rules is NewScheme of their UIDs and references.
	var refs []reflabels.Reference
	for _, r := range []depv1alpha1.DependencyRule{a, b} {
		refs = append(refs, reflabels.RuleOf(&r).References...)
	}
	if want := reflabels.NewScheme([]types.UID{b.UID, a.UID}, refs).Fingerprint; base != want {
		t.Errorf("Scheme = %q, want NewScheme's %q", base, want)
	}
	if got := scheme(b, a); got != base {
		t.Errorf("Scheme depends on the order of the rules: %q, %q", got, base)
	}

	recreated := a
	recreated.UID = "uid-recreated"
	if got := scheme(recreated, b); got == base {
		t.Errorf("Scheme unchanged after a rule's UID changed")
	}
	changed := a
	changed.Spec.Dependencies = slices.Clone(a.Spec.Dependencies)
	changed.Spec.Dependencies[0].FieldRef.Path = ".spec.otherVPC"
	if got := scheme(changed, b); got == base {
		t.Errorf("Scheme unchanged after a rule's path changed")
	}
	if got := scheme(a); got == base {
		t.Errorf("Scheme unchanged after a rule was removed")
	}
	renamed := a
	renamed.Name = "renamed"
	if got := scheme(renamed, b); got != base {
		t.Errorf("Scheme changed with a rule's name only: %q, want %q", got, base)
	}
}

func TestLabelling(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason string, observed int64) depv1alpha1.DependencyRule {
		return withLabelled(rule("c1", "r", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}), status, reason, observed)
	}
	plain := rule("c1", "r", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"})
	otherCondition := plain
	otherCondition.Status.Conditions = []metav1.Condition{{Type: depv1alpha1.ConditionDependentsIndexed, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonIndexed}}
	tests := []struct {
		name  string
		rules []depv1alpha1.DependencyRule
		want  bool
	}{
		{name: "no rules", want: false},
		{name: "True, Labelled", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionTrue, depv1alpha1.ReasonLabelled, 3)}, want: true},
		{name: "Unknown, Labelling", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionUnknown, depv1alpha1.ReasonLabelling, 3)}, want: true},
		{name: "for an older generation", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionTrue, depv1alpha1.ReasonLabelled, 1)}, want: true},
		{name: "False with another reason", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionFalse, "Failed", 3)}, want: true},
		{name: "False, NotLabellable", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionFalse, depv1alpha1.ReasonNotLabellable, 3)}, want: false},
		{name: "NotLabellable with any status", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionTrue, depv1alpha1.ReasonNotLabellable, 3)}, want: false},
		{name: "no condition", rules: []depv1alpha1.DependencyRule{plain}, want: false},
		{name: "only other conditions", rules: []depv1alpha1.DependencyRule{otherCondition}, want: false},
		{name: "every rule", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionTrue, depv1alpha1.ReasonLabelled, 3), cond(metav1.ConditionUnknown, depv1alpha1.ReasonLabelling, 2)}, want: true},
		{name: "one of two without", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionTrue, depv1alpha1.ReasonLabelled, 3), plain}, want: false},
		{name: "one of two NotLabellable", rules: []depv1alpha1.DependencyRule{cond(metav1.ConditionFalse, depv1alpha1.ReasonNotLabellable, 3), cond(metav1.ConditionTrue, depv1alpha1.ReasonLabelled, 3)}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rules []*depv1alpha1.DependencyRule
			for i := range tt.rules {
				rules = append(rules, &tt.rules[i])
			}
			if got := Labelling(rules); got != tt.want {
				t.Errorf("Labelling() = %v, want %v", got, tt.want)
			}
		})
	}
}

// groupOfLength returns a valid API group of n characters.
func groupOfLength(n int) string {
	var b strings.Builder
	for n > 51 {
		b.WriteString(strings.Repeat("g", 50) + ".")
		n -= 51
	}
	b.WriteString(strings.Repeat("h", n))
	return b.String()
}

func TestLabelledWebhookName(t *testing.T) {
	suffixLen := len("." + LabelsWebhookSuffix)
	// A name of exactly 253 characters, and one of 254.
	fits := gr(groupOfLength(253-suffixLen-len("things.")), "things")
	tooLong := gr(groupOfLength(254-suffixLen-len("things.")), "things")
	tooLong2 := gr(groupOfLength(254-suffixLen-len("others.")), "others")
	if n := len(fits.Resource + "." + fits.Group + "." + LabelsWebhookSuffix); n != 253 {
		t.Fatalf("test setup: the name that fits has %d characters", n)
	}
	if n := len(tooLong.Resource + "." + tooLong.Group + "." + LabelsWebhookSuffix); n != 254 {
		t.Fatalf("test setup: the name that is too long has %d characters", n)
	}
	tests := []struct {
		name     string
		resource schema.GroupResource
		want     string // "" for the hashed name
	}{
		{name: "short", resource: vms.GroupResource(), want: "virtualmachines.compute.io.labels.dependencies.opendefense.cloud"},
		{name: "exactly 253 characters", resource: fits, want: fits.Resource + "." + fits.Group + ".labels.dependencies.opendefense.cloud"},
		{name: "254 characters: hashed", resource: tooLong},
		{name: "another type of 254 characters: hashed", resource: tooLong2},
	}
	hashed := map[string]schema.GroupResource{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Labelled{Resource: tt.resource, Versions: []string{"v1"}, Scheme: "s", Fields: []string{"spec"}}.WebhookName()
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("WebhookName() = %q is not a DNS subdomain: %v", got, errs)
			}
			if tt.want != "" {
				if got != tt.want {
					t.Errorf("WebhookName() = %q, want %q", got, tt.want)
				}
				return
			}
			if len(got) >= 253 || !strings.HasSuffix(got, "."+LabelsWebhookSuffix) {
				t.Errorf("hashed WebhookName() = %q (%d characters), want fewer than 253 ending with .%s", got, len(got), LabelsWebhookSuffix)
			}
			if strings.Count(got, ".") < 2 {
				t.Errorf("hashed WebhookName() = %q is not fully qualified", got)
			}
			if again := (Labelled{Resource: tt.resource}).WebhookName(); again != got {
				t.Errorf("WebhookName() is not deterministic: %q, %q", got, again)
			}
			if other, ok := hashed[got]; ok {
				t.Errorf("WebhookName() = %q for both %v and %v", got, other, tt.resource)
			}
			hashed[got] = tt.resource
		})
	}
}

func opRule(ops []admissionregistrationv1.OperationType, group string, resources []string, versions ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: versions, Resources: resources,
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}
}

var (
	deleteOps = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
	writeOps  = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
)

func deleteRule(group, resource string, versions ...string) admissionregistrationv1.RuleWithOperations {
	return opRule(deleteOps, group, []string{resource}, versions...)
}

func writeRule(group string, resources []string, versions ...string) admissionregistrationv1.RuleWithOperations {
	return opRule(writeOps, group, resources, versions...)
}

// validatingWebhook is a validating webhook as the controller installs
// it, with every field the API server would default set.
func validatingWebhook(name, url string, ca []byte, timeout int32, failure admissionregistrationv1.FailurePolicyType, sideEffects admissionregistrationv1.SideEffectClass,
	conditions []admissionregistrationv1.MatchCondition, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: ca},
		Rules:                   rules,
		FailurePolicy:           ptr.To(failure),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		NamespaceSelector:       &metav1.LabelSelector{},
		ObjectSelector:          &metav1.LabelSelector{},
		SideEffects:             ptr.To(sideEffects),
		TimeoutSeconds:          ptr.To(timeout),
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions:         conditions,
	}
}

func TestValidating(t *testing.T) {
	const base = "https://webhook.example:9443/validate"
	ws := &Workspace{
		Path: logicalcluster.NewPath("root:org:net"),
		Protected: []schema.GroupVersionResource{
			gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs"), gvr("other.io", "v1", "vpcs"),
		},
		Dependents:       []schema.GroupVersionResource{gvr("net.io", "v1", "gateways"), gvr("net.io", "v1", "routers"), gvr("net.io", "v2", "routers")},
		StatusReferences: []schema.GroupResource{gr("net.io", "routers")},
		ReferenceFields:  []string{"spec", "status"},
		// Labelled types do not show in the validating configuration.
		Labelled: []Labelled{{Resource: gr("net.io", "routers"), Versions: []string{"v1"}, Scheme: "abc", Fields: []string{"spec"}}},
	}
	deletion := func(url string, ca []byte, timeout int32, failure admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
		// A DELETE under a Replay rule is recorded, except in a dry run.
		return validatingWebhook(WebhookName, url, ca, timeout, failure, admissionregistrationv1.SideEffectClassNoneOnDryRun, nil,
			deleteRule("net.io", "subnets", "v1"),
			deleteRule("net.io", "vpcs", "v1", "v2"),
			deleteRule("other.io", "vpcs", "v1"))
	}
	references := func(url string, ca []byte, timeout int32, failure admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
		return validatingWebhook(ReferencesWebhookName, url, ca, timeout, failure, admissionregistrationv1.SideEffectClassNoneOnDryRun,
			[]admissionregistrationv1.MatchCondition{{Name: ReferencesConditionName, Expression: ReferencesCondition([]string{"spec", "status"})}},
			writeRule("net.io", []string{"gateways"}, "v1"),
			writeRule("net.io", []string{"routers", "routers/status"}, "v1", "v2"))
	}
	records := func(url string, ca []byte, timeout int32) admissionregistrationv1.ValidatingWebhook {
		return validatingWebhook(RecordsWebhookName, url, ca, timeout, admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone,
			[]admissionregistrationv1.MatchCondition{{Name: RecordsConditionName, Expression: RecordsCondition()}},
			writeRule("net.io", []string{"subnets"}, "v1"),
			writeRule("net.io", []string{"vpcs"}, "v1", "v2"),
			writeRule("other.io", []string{"vpcs"}, "v1"))
	}
	managed := map[string]string{ManagedByLabel: ManagedByValue}
	tests := []struct {
		name            string
		ws              *Workspace
		cluster         logicalcluster.Name
		opts            Options
		want            []admissionregistrationv1.ValidatingWebhook
		wantAnnotations map[string]string
	}{
		{
			name:    "protected resources and dependents, failure policy Fail",
			ws:      ws,
			cluster: "c-net",
			opts:    Options{URL: base, CABundle: []byte("PEM"), TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail},
			want: []admissionregistrationv1.ValidatingWebhook{
				deletion(base+"/c-net", []byte("PEM"), 5, admissionregistrationv1.Fail),
				references(base+"/c-net", []byte("PEM"), 5, admissionregistrationv1.Fail),
				records(base+"/c-net/records", []byte("PEM"), 5),
			},
			wantAnnotations: map[string]string{WorkspacePathAnnotation: "root:org:net"},
		},
		{
			name:    "failure policy Ignore: the guard of records still fails closed; a trailing slash of the URL is dropped",
			ws:      ws,
			cluster: "2abc",
			opts:    Options{URL: base + "/", TimeoutSeconds: 30, FailurePolicy: admissionregistrationv1.Ignore},
			want: []admissionregistrationv1.ValidatingWebhook{
				deletion(base+"/2abc", nil, 30, admissionregistrationv1.Ignore),
				references(base+"/2abc", nil, 30, admissionregistrationv1.Ignore),
				records(base+"/2abc/records", nil, 30),
			},
			wantAnnotations: map[string]string{WorkspacePathAnnotation: "root:org:net"},
		},
		{
			name:    "dependents only, path unknown, no reference fields: only the check of new references, for every UPDATE, and no annotation",
			ws:      &Workspace{Dependents: []schema.GroupVersionResource{vms}},
			cluster: "c1",
			opts:    Options{URL: base, TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail},
			want: []admissionregistrationv1.ValidatingWebhook{
				validatingWebhook(ReferencesWebhookName, base+"/c1", nil, 5, admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNoneOnDryRun, nil,
					writeRule("compute.io", []string{"virtualmachines"}, "v1")),
			},
		},
		{
			name:    "protected only: the DELETE webhook and the guard of records",
			ws:      &Workspace{Path: logicalcluster.NewPath("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}},
			cluster: "c-net",
			opts:    Options{URL: base, TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Ignore},
			want: []admissionregistrationv1.ValidatingWebhook{
				validatingWebhook(WebhookName, base+"/c-net", nil, 5, admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNoneOnDryRun, nil,
					deleteRule("net.io", "vpcs", "v1")),
				validatingWebhook(RecordsWebhookName, base+"/c-net/records", nil, 5, admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone,
					[]admissionregistrationv1.MatchCondition{{Name: RecordsConditionName, Expression: RecordsCondition()}},
					writeRule("net.io", []string{"vpcs"}, "v1")),
			},
			wantAnnotations: map[string]string{WorkspacePathAnnotation: "root:net"},
		},
		{
			name:    "the webhook's user named: kcp calls the guard of records for every other user only",
			ws:      &Workspace{Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}},
			cluster: "c-net",
			opts:    Options{URL: base, TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail, WebhookUser: "dependency-webhook"},
			want: []admissionregistrationv1.ValidatingWebhook{
				validatingWebhook(WebhookName, base+"/c-net", nil, 5, admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNoneOnDryRun, nil,
					deleteRule("net.io", "vpcs", "v1")),
				validatingWebhook(RecordsWebhookName, base+"/c-net/records", nil, 5, admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone,
					[]admissionregistrationv1.MatchCondition{
						{Name: RecordsConditionName, Expression: RecordsCondition()},
						{Name: NotWebhookUserConditionName, Expression: `request.userInfo.username != "dependency-webhook"`},
					},
					writeRule("net.io", []string{"vpcs"}, "v1")),
			},
		},
		{
			name:    "status references of a type that is not a dependent add nothing",
			ws:      &Workspace{Dependents: []schema.GroupVersionResource{vms}, StatusReferences: []schema.GroupResource{gr("compute.io", "disks")}, ReferenceFields: []string{"spec"}},
			cluster: "c1",
			opts:    Options{URL: base, TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail},
			want: []admissionregistrationv1.ValidatingWebhook{
				validatingWebhook(ReferencesWebhookName, base+"/c1", nil, 5, admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNoneOnDryRun,
					[]admissionregistrationv1.MatchCondition{{Name: ReferencesConditionName, Expression: ReferencesCondition([]string{"spec"})}},
					writeRule("compute.io", []string{"virtualmachines"}, "v1")),
			},
		},
		{name: "an empty workspace needs none", ws: &Workspace{Path: logicalcluster.NewPath("root:x")}, cluster: "c1", opts: Options{URL: base}},
		{
			name:    "a workspace with labelled types only needs no validating configuration",
			ws:      &Workspace{Labelled: []Labelled{{Resource: vms.GroupResource(), Versions: []string{"v1"}, Scheme: "s", Fields: []string{"spec"}}}},
			cluster: "c1", opts: Options{URL: base},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Validating(tt.ws, tt.cluster, tt.opts)
			if tt.want == nil {
				if got != nil {
					t.Errorf("Validating() = %+v, want nil", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("Validating() = nil")
			}
			if got.Name != Name || !reflect.DeepEqual(got.Labels, managed) || !reflect.DeepEqual(got.Annotations, tt.wantAnnotations) {
				t.Errorf("metadata = %+v, want name %s, labels %v, annotations %v", got.ObjectMeta, Name, managed, tt.wantAnnotations)
			}
			if !reflect.DeepEqual(got.Webhooks, tt.want) {
				t.Errorf("Validating() webhooks =\n  %+v\nwant\n  %+v", got.Webhooks, tt.want)
			}
		})
	}
}

// The CA bundle of every webhook is a copy of the options', so that
// neither changes the other.
func TestClientConfigCopiesCABundle(t *testing.T) {
	opts := Options{URL: "https://a/validate", CABundle: []byte("PEM"), TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	ws := &Workspace{
		Protected:  []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")},
		Dependents: []schema.GroupVersionResource{vms},
		Labelled:   []Labelled{{Resource: vms.GroupResource(), Versions: []string{"v1"}, Scheme: "s", Fields: []string{"spec"}}},
	}
	validating := Validating(ws, "c1", opts)
	mutating := Mutating(ws, "c1", opts)
	opts.CABundle[0] = 'X'
	bundles := [][]byte{}
	for _, wh := range validating.Webhooks {
		bundles = append(bundles, wh.ClientConfig.CABundle)
	}
	for _, wh := range mutating.Webhooks {
		bundles = append(bundles, wh.ClientConfig.CABundle)
	}
	if len(bundles) != 6 {
		t.Fatalf("want 6 webhooks, got %d", len(bundles))
	}
	for i, b := range bundles {
		if string(b) != "PEM" {
			t.Errorf("CA bundle %d = %q: it shares memory with the options", i, b)
		}
	}
	// Nor do the webhooks share it with each other.
	bundles[0][0] = 'Y'
	for i, b := range bundles[1:] {
		if string(b) != "PEM" {
			t.Errorf("CA bundle %d = %q: it shares memory with another webhook's", i+1, b)
		}
	}
}

func TestMutating(t *testing.T) {
	const base = "https://webhook.example:9443/validate"
	longGroup := groupOfLength(240)
	labelling := func(name, url string, ca []byte, timeout int32, fields []string, resource schema.GroupResource, versions ...string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{writeRule(resource.Group, []string{resource.Resource}, versions...)},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds:          ptr.To(timeout),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: LabelsConditionName, Expression: LabelsCondition(fields)}},
		}
	}
	guard := func(url string, timeout int32, user string, resources ...schema.GroupVersionResource) admissionregistrationv1.MutatingWebhook {
		conditions := []admissionregistrationv1.MatchCondition{{Name: AdmittedConditionName, Expression: AdmittedCondition()}}
		if user != "" {
			conditions = append(conditions, admissionregistrationv1.MatchCondition{Name: NotWebhookUserConditionName, Expression: NotWebhookLedgerCondition(user)})
		}
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range resources {
			rules = append(rules, writeRule(r.Group, []string{r.Resource}, r.Version))
		}
		return admissionregistrationv1.MutatingWebhook{
			Name:                    AdmittedWebhookName,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url)},
			Rules:                   rules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(timeout),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchConditions:         conditions,
		}
	}
	skipGuard := func(url string, timeout int32, resources ...schema.GroupVersionResource) admissionregistrationv1.MutatingWebhook {
		wh := guard(url, timeout, "", resources...)
		wh.Name = SkipProtectionWebhookName
		wh.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: SkipProtectionConditionName, Expression: SkipProtectionCondition()}}
		return wh
	}
	labelled := []Labelled{
		{Resource: gr("compute.io", "disks"), Versions: []string{"v1", "v2"}, Scheme: "00aa", Fields: []string{"network", "spec"}},
		{Resource: vms.GroupResource(), Versions: []string{"v1"}, Scheme: "11bb", Fields: []string{"spec"}},
	}
	long := Labelled{Resource: gr(longGroup, "things"), Versions: []string{"v1"}, Scheme: "22cc", Fields: []string{"spec"}}
	if name := long.WebhookName(); strings.Contains(name, longGroup) || len(name) >= 253 {
		t.Fatalf("test setup: the long type's webhook name %q is not the hashed one", name)
	}
	managed := map[string]string{ManagedByLabel: ManagedByValue}
	tests := []struct {
		name            string
		ws              *Workspace
		opts            Options
		want            []admissionregistrationv1.MutatingWebhook
		wantAnnotations map[string]string
	}{
		{
			name: "no labelled type and nothing protected: none",
			ws:   &Workspace{Path: logicalcluster.NewPath("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			opts: Options{URL: base, TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail},
		},
		{
			name: "protected resources: the guards of the ledger, sparing the webhook's own writes, and of skip-protection, failing closed",
			ws: &Workspace{Path: logicalcluster.NewPath("root:c1"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")},
				Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			opts: Options{URL: base, TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Ignore, WebhookUser: "dependency-webhook"},
			want: []admissionregistrationv1.MutatingWebhook{
				guard(base+"/c1/admitted", 5, "dependency-webhook", gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")),
				skipGuard(base+"/c1/skip-protection", 5, gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")),
			},
			wantAnnotations: map[string]string{WorkspacePathAnnotation: "root:c1"},
		},
		{name: "an empty workspace: none", ws: &Workspace{}, opts: Options{URL: base}},
		{
			name: "one webhook per labelled type, failing closed although the options say Ignore",
			ws:   &Workspace{Path: logicalcluster.NewPath("root:c1"), Dependents: []schema.GroupVersionResource{vms}, Labelled: labelled},
			opts: Options{URL: base, CABundle: []byte("PEM"), TimeoutSeconds: 7, FailurePolicy: admissionregistrationv1.Ignore},
			want: []admissionregistrationv1.MutatingWebhook{
				labelling("disks.compute.io.labels.dependencies.opendefense.cloud", base+"/c1/labels/00aa", []byte("PEM"), 7, []string{"network", "spec"}, gr("compute.io", "disks"), "v1", "v2"),
				labelling("virtualmachines.compute.io.labels.dependencies.opendefense.cloud", base+"/c1/labels/11bb", []byte("PEM"), 7, []string{"spec"}, vms.GroupResource(), "v1"),
			},
			wantAnnotations: map[string]string{WorkspacePathAnnotation: "root:c1"},
		},
		{
			name: "a type with a long group gets the hashed name; no annotation without the path",
			ws:   &Workspace{Labelled: []Labelled{long}},
			opts: Options{URL: base + "/", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail},
			want: []admissionregistrationv1.MutatingWebhook{
				labelling(long.WebhookName(), base+"/c1/labels/22cc", nil, 5, []string{"spec"}, gr(longGroup, "things"), "v1"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Mutating(tt.ws, "c1", tt.opts)
			if tt.want == nil {
				if got != nil {
					t.Errorf("Mutating() = %+v, want nil", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("Mutating() = nil")
			}
			if got.Name != Name || !reflect.DeepEqual(got.Labels, managed) || !reflect.DeepEqual(got.Annotations, tt.wantAnnotations) {
				t.Errorf("metadata = %+v, want name %s, labels %v, annotations %v", got.ObjectMeta, Name, managed, tt.wantAnnotations)
			}
			if !reflect.DeepEqual(got.Webhooks, tt.want) {
				t.Errorf("Mutating() webhooks =\n  %+v\nwant\n  %+v", got.Webhooks, tt.want)
			}
			for i, wh := range got.Webhooks[:len(tt.ws.Labelled)] {
				if wh.Name != tt.ws.Labelled[i].WebhookName() {
					t.Errorf("webhook %d is named %q, want Labelled.WebhookName() %q", i, wh.Name, tt.ws.Labelled[i].WebhookName())
				}
				if want := EndpointURL(tt.opts.URL, "c1", EndpointLabels, tt.ws.Labelled[i].Scheme); *wh.ClientConfig.URL != want {
					t.Errorf("webhook %d calls %q, want %q", i, *wh.ClientConfig.URL, want)
				}
				if errs := validation.IsDNS1123Subdomain(wh.Name); len(errs) > 0 {
					t.Errorf("webhook name %q: %v", wh.Name, errs)
				}
			}
		})
	}
}

// admitted is the ledger annotation of obj as a CEL optional.
func admitted(obj string) string {
	return obj + `.?metadata.?annotations[?"dependencies.opendefense.cloud/admitted-references"]`
}

// The match conditions are compared as text, so that any change of them is
// deliberate; TestConditionsOnEveryShape evaluates them.
func TestConditionText(t *testing.T) {
	const changed = `.exists(f, (f in object) != (f in oldObject) || f in object && object[f] != oldObject[f])`
	const managed = `(k.startsWith("ref.dependencies.opendefense.cloud/") || k == "dependencies.opendefense.cloud/references" || k == "dependencies.opendefense.cloud/admission")`
	const labels = `object.?metadata.?labels.optFlatMap(m, optional.ofNonZeroValue(m)).orValue({}).exists(k, ` + managed + ` && ` +
		`object.?metadata.?labels[?k] != oldObject.?metadata.?labels[?k]) || ` +
		`oldObject.?metadata.?labels.optFlatMap(m, optional.ofNonZeroValue(m)).orValue({}).exists(k, ` + managed + ` && ` +
		`oldObject.?metadata.?labels[?k] != object.?metadata.?labels[?k])`
	const requested, request = `[?"deletion.dependencies.opendefense.cloud/requested"]`, `[?"deletion.dependencies.opendefense.cloud/request"]`
	const skip, setBy = `[?"dependencies.opendefense.cloud/skip-protection"]`, `[?"dependencies.opendefense.cloud/skip-protection-set-by"]`
	tests := []struct {
		name string
		got  string
		want string
	}{
		{
			name: "references",
			got:  ReferencesCondition([]string{"spec", "status"}),
			want: `request.operation != 'UPDATE' || ["spec", "status"].exists(f, (f in object) != (f in oldObject) || f in object && object[f] != oldObject[f])`,
		},
		{
			name: "references, one field",
			got:  ReferencesCondition([]string{"spec"}),
			want: `request.operation != 'UPDATE' || ["spec"]` + changed,
		},
		{
			name: "references, a field that needs quoting",
			got:  ReferencesCondition([]string{`a"b\c`}),
			want: `request.operation != 'UPDATE' || ["a\"b\\c"]` + changed,
		},
		{
			name: "labels",
			got:  LabelsCondition([]string{"network", "spec"}),
			want: `request.operation != 'UPDATE' || ` + labels + ` || ["network", "spec"]` + changed,
		},
		{
			name: "labels, no field",
			got:  LabelsCondition(nil),
			want: `request.operation != 'UPDATE' || ` + labels + ` || []` + changed,
		},
		{
			name: "admitted references",
			got:  AdmittedCondition(),
			want: `request.operation == 'CREATE' ? ` + admitted("object") + `.hasValue() || object.?metadata.?labels[?"` + depv1alpha1.LabelCleared + `"].hasValue() : ` +
				admitted("object") + ` != ` + admitted("oldObject") + ` || object.?metadata.?labels[?"` + depv1alpha1.LabelCleared + `"] != oldObject.?metadata.?labels[?"` + depv1alpha1.LabelCleared + `"]`,
		},
		{
			name: "not the webhook's own ledger",
			got:  NotWebhookLedgerCondition("dependency-webhook"),
			want: `request.userInfo.username != "dependency-webhook" || !` + admitted("object") + `.orValue('').startsWith('v1 ') || ` +
				admitted("object") + ` == ` + admitted("oldObject"),
		},
		{
			name: "not the webhook's user",
			got:  NotUserCondition("dependency-webhook"),
			want: `request.userInfo.username != "dependency-webhook"`,
		},
		{
			name: "not a user whose name needs quoting",
			got:  NotUserCondition(`oidc:"a"\b`),
			want: `request.userInfo.username != "oidc:\"a\"\\b"`,
		},
		{
			name: "records",
			got:  RecordsCondition(),
			want: `(object.?metadata.?labels` + requested + `.hasValue() && ` +
				`(request.operation != 'UPDATE' || object.?metadata.?labels` + requested + ` != oldObject.?metadata.?labels` + requested + `)) || ` +
				`(object.?metadata.?annotations` + request + `.hasValue() && ` +
				`(request.operation != 'UPDATE' || object.?metadata.?annotations` + request + ` != oldObject.?metadata.?annotations` + request + `))`,
		},
		{
			name: "skip-protection",
			got:  SkipProtectionCondition(),
			want: `request.operation == 'CREATE' ? ` +
				`object.?metadata.?annotations` + skip + `.orValue('') == 'true' || object.?metadata.?annotations` + setBy + `.hasValue() : ` +
				`object.?metadata.?annotations` + skip + `.orValue('') == 'true' && !(oldObject.?metadata.?annotations` + skip + `.orValue('') == 'true') || ` +
				`object.?metadata.?annotations` + setBy + ` != oldObject.?metadata.?annotations` + setBy,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("condition =\n  %s\nwant\n  %s", tt.got, tt.want)
			}
		})
	}
	// The records condition names the label and annotation of the API,
	// the skip-protection condition its annotations.
	for _, key := range []string{depv1alpha1.LabelDeletionRequested, depv1alpha1.AnnotationDeletionRequest} {
		if !strings.Contains(RecordsCondition(), `"`+key+`"`) {
			t.Errorf("RecordsCondition() does not name %s", key)
		}
	}
	for _, key := range []string{depv1alpha1.AnnotationSkipProtection, depv1alpha1.AnnotationSkipProtectionSetBy} {
		if !strings.Contains(SkipProtectionCondition(), `"`+key+`"`) {
			t.Errorf("SkipProtectionCondition() does not name %s", key)
		}
	}
}

func TestUpToDate(t *testing.T) {
	opts := Options{URL: "https://a/validate", CABundle: []byte("CA"), TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	ws := &Workspace{
		Path:            logicalcluster.NewPath("root:net"),
		Protected:       []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs")},
		Dependents:      []schema.GroupVersionResource{vms},
		ReferenceFields: []string{"spec"},
		Labelled:        []Labelled{{Resource: vms.GroupResource(), Versions: []string{"v1"}, Scheme: "00aa", Fields: []string{"spec"}}},
	}
	validating := func(change func(*admissionregistrationv1.ValidatingWebhookConfiguration)) *admissionregistrationv1.ValidatingWebhookConfiguration {
		cfg := Validating(ws, "c-net", opts)
		if change != nil {
			change(cfg)
		}
		return cfg
	}
	mutating := func(change func(*admissionregistrationv1.MutatingWebhookConfiguration)) *admissionregistrationv1.MutatingWebhookConfiguration {
		cfg := Mutating(ws, "c-net", opts)
		if change != nil {
			change(cfg)
		}
		return cfg
	}
	type pair struct {
		existing, desired                 metav1.Object
		existingWebhooks, desiredWebhooks any
	}
	vpair := func(existing, desired *admissionregistrationv1.ValidatingWebhookConfiguration) pair {
		return pair{existing, desired, existing.Webhooks, desired.Webhooks}
	}
	mpair := func(existing, desired *admissionregistrationv1.MutatingWebhookConfiguration) pair {
		return pair{existing, desired, existing.Webhooks, desired.Webhooks}
	}
	tests := []struct {
		name string
		pair pair
		want bool
	}{
		{"identical validating", vpair(validating(nil), validating(nil)), true},
		{"identical mutating", mpair(mutating(nil), mutating(nil)), true},
		{"managed-by label missing", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) { delete(c.Labels, ManagedByLabel) }), validating(nil)), false},
		{"no labels at all", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) { c.Labels = nil }), validating(nil)), false},
		{"managed-by label different", mpair(mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Labels[ManagedByLabel] = "helm" }), mutating(nil)), false},
		{"path annotation missing", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) { c.Annotations = nil }), validating(nil)), false},
		{"path annotation different", mpair(mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Annotations[WorkspacePathAnnotation] = "root:old"
		}), mutating(nil)), false},
		{"foreign labels and annotations on existing", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Labels["team"] = "network"
			c.Annotations["note"] = "keep"
		}), validating(nil)), true},
		{"an annotation on existing that desired lacks (path unknown)", vpair(validating(nil), validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) { c.Annotations = nil })), true},
		{"URL different", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.URL = ptr.To("https://b/validate/c-net")
		}), validating(nil)), false},
		{"CA bundle different", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[2].ClientConfig.CABundle = []byte("old")
		}), validating(nil)), false},
		{"CA bundle missing", mpair(mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.CABundle = nil
		}), mutating(nil)), false},
		{"a rule different", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].APIVersions = []string{"v1"}
		}), validating(nil)), false},
		{"a match condition different", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[1].MatchConditions[0].Expression = "true"
		}), validating(nil)), false},
		{"a match condition missing", mpair(mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks[0].MatchConditions = nil }), mutating(nil)), false},
		{"reinvocation policy different", mpair(mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ReinvocationPolicy = ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
		}), mutating(nil)), false},
		{"a selector set by someone else", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}), validating(nil)), false},
		{"a webhook missing", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) { c.Webhooks = c.Webhooks[:2] }), validating(nil)), false},
		{"a webhook too many", vpair(validating(nil), validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) { c.Webhooks = c.Webhooks[:2] })), false},
		{"webhooks in another order", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0], c.Webhooks[1] = c.Webhooks[1], c.Webhooks[0]
		}), validating(nil)), false},
		{"nil and empty match conditions are equal", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{}
		}), validating(nil)), true},
		{"nil and empty CA bundles are equal", vpair(validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			for i := range c.Webhooks {
				c.Webhooks[i].ClientConfig.CABundle = []byte{}
			}
		}), Validating(ws, "c-net", Options{URL: opts.URL, TimeoutSeconds: opts.TimeoutSeconds, FailurePolicy: opts.FailurePolicy})), true},
		{"nil and empty webhook lists are equal", pair{
			&admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{},
			[]admissionregistrationv1.ValidatingWebhook(nil), []admissionregistrationv1.ValidatingWebhook{},
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UpToDate(tt.pair.existing, tt.pair.desired, tt.pair.existingWebhooks, tt.pair.desiredWebhooks); got != tt.want {
				t.Errorf("UpToDate() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReduces(t *testing.T) {
	vpcs, vpcsV2, subnets := gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs"), gvr("net.io", "v1", "subnets")
	disks := gvr("compute.io", "v1", "disks")
	opts := Options{URL: "https://a/validate", CABundle: []byte("CA"), TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	labelledDisks := Labelled{Resource: disks.GroupResource(), Versions: []string{"v1"}, Scheme: "00aa", Fields: []string{"spec"}}
	labelledVMs := Labelled{Resource: vms.GroupResource(), Versions: []string{"v1"}, Scheme: "11bb", Fields: []string{"spec"}}
	// base returns a fresh copy of the workspace the existing
	// configurations were made for.
	base := func() *Workspace {
		return &Workspace{
			Path:            logicalcluster.NewPath("root:c1"),
			Protected:       []schema.GroupVersionResource{subnets, vpcs, vpcsV2},
			Dependents:      []schema.GroupVersionResource{disks, vms},
			ReferenceFields: []string{"spec"},
			Labelled:        []Labelled{labelledDisks, labelledVMs},
		}
	}
	with := func(change func(*Workspace)) *Workspace {
		ws := base()
		change(ws)
		return ws
	}
	existingV, existingM := Validating(base(), "c1", opts), Mutating(base(), "c1", opts)
	// Existing configurations with the references checked for status
	// writes too.
	withStatus := with(func(w *Workspace) { w.StatusReferences = []schema.GroupResource{vms.GroupResource()} })
	statusV := Validating(withStatus, "c1", opts)
	// Existing configurations whose check of new references has no match
	// condition.
	everyUpdate := with(func(w *Workspace) { w.ReferenceFields = nil })
	everyUpdateV := Validating(everyUpdate, "c1", opts)
	// An existing configuration with only the guard of records.
	recordsOnly := Validating(base(), "c1", opts)
	recordsOnly.Webhooks = slices.DeleteFunc(recordsOnly.Webhooks, func(wh admissionregistrationv1.ValidatingWebhook) bool { return wh.Name != RecordsWebhookName })
	if len(recordsOnly.Webhooks) != 1 {
		t.Fatalf("test setup: %d records webhooks", len(recordsOnly.Webhooks))
	}
	recordsOnlyWith := func(expression string) *admissionregistrationv1.ValidatingWebhookConfiguration {
		cfg := recordsOnly.DeepCopy()
		cfg.Webhooks[0].MatchConditions[0].Expression = expression
		return cfg
	}
	otherOpts := func(change func(*Options)) *admissionregistrationv1.ValidatingWebhookConfiguration {
		o := opts
		change(&o)
		return Validating(base(), "c1", o)
	}
	otherOptsM := func(change func(*Options)) *admissionregistrationv1.MutatingWebhookConfiguration {
		o := opts
		change(&o)
		return Mutating(base(), "c1", o)
	}

	tests := []struct {
		name       string
		validating *admissionregistrationv1.ValidatingWebhookConfiguration
		mutating   *admissionregistrationv1.MutatingWebhookConfiguration
		ws         *Workspace
		want       bool
	}{
		{name: "no change", validating: existingV, mutating: existingM, ws: base(), want: false},
		{name: "no existing configuration", ws: base(), want: false},
		{name: "a protected resource removed", validating: existingV, mutating: existingM, ws: with(func(w *Workspace) { w.Protected = []schema.GroupVersionResource{vpcs, vpcsV2} }), want: true},
		{name: "a protected version removed", validating: existingV, mutating: existingM, ws: with(func(w *Workspace) { w.Protected = []schema.GroupVersionResource{subnets, vpcs} }), want: true},
		{name: "every protected resource removed", validating: existingV, mutating: existingM, ws: with(func(w *Workspace) { w.Protected = nil }), want: true},
		{name: "a dependent removed", validating: existingV, ws: with(func(w *Workspace) { w.Dependents = []schema.GroupVersionResource{vms} }), want: true},
		{name: "a resource moved to another webhook", validating: existingV, ws: with(func(w *Workspace) {
			w.Protected = []schema.GroupVersionResource{subnets, vpcs, vpcsV2, disks}
			w.Dependents = []schema.GroupVersionResource{vms}
		}), want: true},
		{name: "both configurations removed", validating: existingV, mutating: existingM, ws: nil, want: true},
		{name: "the validating configuration removed", validating: existingV, ws: nil, want: true},
		{name: "the mutating configuration removed", mutating: existingM, ws: nil, want: true},
		{name: "nothing existing removed", ws: nil, want: false},
		{name: "a configuration without webhooks removed", validating: &admissionregistrationv1.ValidatingWebhookConfiguration{}, mutating: &admissionregistrationv1.MutatingWebhookConfiguration{}, ws: nil, want: false},
		{name: "resources added", validating: existingV, mutating: existingM, ws: with(func(w *Workspace) {
			w.Protected = []schema.GroupVersionResource{gvr("a.io", "v1", "things"), subnets, vpcs, vpcsV2}
			w.Dependents = []schema.GroupVersionResource{disks, gvr("compute.io", "v1", "nics"), vms, gvr("compute.io", "v2", "virtualmachines")}
			w.Labelled = append(w.Labelled, Labelled{Resource: gr("compute.io", "nics"), Versions: []string{"v1"}, Scheme: "22cc", Fields: []string{"spec"}})
		}), want: false},
		{name: "URL changed", validating: otherOpts(func(o *Options) { o.URL = "https://b/validate" }), mutating: otherOptsM(func(o *Options) { o.URL = "https://b/validate" }), ws: base(), want: false},
		{name: "CA bundle changed", validating: otherOpts(func(o *Options) { o.CABundle = []byte("old") }), mutating: otherOptsM(func(o *Options) { o.CABundle = nil }), ws: base(), want: false},
		{name: "timeout changed", validating: otherOpts(func(o *Options) { o.TimeoutSeconds = 30 }), mutating: otherOptsM(func(o *Options) { o.TimeoutSeconds = 1 }), ws: base(), want: false},
		{name: "failure policy changed", validating: otherOpts(func(o *Options) { o.FailurePolicy = admissionregistrationv1.Ignore }), mutating: existingM, ws: base(), want: false},
		{name: "the references' match condition changed to another", validating: existingV, ws: with(func(w *Workspace) { w.ReferenceFields = []string{"spec", "status"} }), want: true},
		{name: "the references' match condition narrowed", validating: existingV, ws: with(func(w *Workspace) { w.ReferenceFields = []string{"metadata"} }), want: true},
		{name: "the references' match condition dropped: every UPDATE checked", validating: existingV, mutating: existingM, ws: everyUpdate, want: false},
		{name: "a match condition added to the references", validating: everyUpdateV, mutating: existingM, ws: base(), want: true},
		{name: "a labelled type removed", validating: existingV, mutating: existingM, ws: with(func(w *Workspace) { w.Labelled = []Labelled{labelledVMs} }), want: true},
		{name: "every labelled type removed", validating: existingV, mutating: existingM, ws: with(func(w *Workspace) { w.Labelled = nil }), want: true},
		{name: "a labelled type's scheme changed", validating: existingV, mutating: existingM, ws: with(func(w *Workspace) { w.Labelled[1].Scheme = "33dd" }), want: false},
		{name: "a labelled type's fields changed", mutating: existingM, ws: with(func(w *Workspace) { w.Labelled[1].Fields = []string{"network", "spec"} }), want: true},
		{name: "a labelled type's version changed", mutating: existingM, ws: with(func(w *Workspace) { w.Labelled[1].Versions = []string{"v2"} }), want: true},
		{name: "a labelled type's version added", mutating: existingM, ws: with(func(w *Workspace) { w.Labelled[1].Versions = []string{"v1", "v2"} }), want: false},
		{name: "status writes checked too", validating: existingV, mutating: existingM, ws: withStatus, want: false},
		{name: "status writes no longer checked", validating: statusV, mutating: existingM, ws: base(), want: true},
		{name: "the guard of records removed", validating: recordsOnly, ws: with(func(w *Workspace) { w.Protected = nil }), want: true},
		{name: "the guard of the ledger removed", mutating: existingM, ws: with(func(w *Workspace) { w.Protected = nil }), want: true},
		{name: "the guard of the ledger kept, sparing the webhook's own writes", mutating: otherOptsM(func(o *Options) { o.WebhookUser = "dependency-webhook" }), ws: base(), want: false},
		{name: "the guard of skip-protection added (an earlier release had none)", mutating: withoutWebhook(existingM, SkipProtectionWebhookName), ws: base(), want: false},
		{name: "the guard of skip-protection removed with the protected resources", mutating: existingM, ws: with(func(w *Workspace) { w.Protected = nil }), want: true},
		{name: "the guard of skip-protection's match condition changed", mutating: withCondition(existingM, SkipProtectionWebhookName, "true"), ws: base(), want: true},
		// An upgrade from a release whose conditions errored on null
		// labels: the text changed, so the controller proves the change
		// with a complete listing before it writes it.
		{name: "the labels' match condition of an earlier release replaced", mutating: withCondition(existingM, labelledVMs.WebhookName(), earlierLabelsCondition), ws: base(), want: true},
		{name: "the records' match condition of an earlier release replaced", validating: recordsOnlyWith(earlierRecordsCondition), ws: base(), want: true},
		{name: "a foreign webhook in the managed configuration", validating: func() *admissionregistrationv1.ValidatingWebhookConfiguration {
			cfg := Validating(base(), "c1", opts)
			extra := cfg.Webhooks[0].DeepCopy()
			extra.Name = "extra.example.io"
			cfg.Webhooks = append(cfg.Webhooks, *extra)
			return cfg
		}(), ws: base(), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Reduces(tt.validating, tt.mutating, tt.ws); got != tt.want {
				t.Errorf("Reduces() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIsManaged(t *testing.T) {
	tests := []struct {
		name string
		obj  metav1.Object
		want bool
	}{
		{"validating, as installed", Validating(&Workspace{Protected: []schema.GroupVersionResource{vms}}, "c1", Options{}), true},
		{"mutating, as installed", Mutating(&Workspace{Labelled: []Labelled{{Resource: vms.GroupResource(), Versions: []string{"v1"}}}}, "c1", Options{}), true},
		{"no labels", &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: Name}}, false},
		{"another manager", &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: map[string]string{ManagedByLabel: "helm"}}}, false},
		{"other labels only", &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: map[string]string{"team": ManagedByValue}}}, false},
		{"managed, other labels too", &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "x", ManagedByLabel: ManagedByValue}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsManaged(tt.obj); got != tt.want {
				t.Errorf("IsManaged() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestURLs(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"webhook", WebhookURL("https://w.example:9443/validate", "2abc"), "https://w.example:9443/validate/2abc"},
		{"webhook, trailing slash", WebhookURL("https://w.example:9443/validate/", "2abc"), "https://w.example:9443/validate/2abc"},
		{"webhook, host only", WebhookURL("https://w.example", "c1"), "https://w.example/c1"},
		{"endpoint without one is the webhook's", EndpointURL("https://w.example/validate", "c1"), "https://w.example/validate/c1"},
		{"records", EndpointURL("https://w.example/validate/", "c1", EndpointRecords), "https://w.example/validate/c1/records"},
		{"labels", EndpointURL("https://w.example/validate", "c1", EndpointLabels, "00aa11bb"), "https://w.example/validate/c1/labels/00aa11bb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("URL = %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name      string
		resources []schema.GroupVersionResource
		want      string
	}{
		{"none", nil, ""},
		{"one", []schema.GroupVersionResource{gvr("network.example.io", "v1", "vpcs")}, "vpcs.network.example.io/v1"},
		{"two", []schema.GroupVersionResource{gvr("network.example.io", "v1", "vpcs"), gvr("network.example.io", "v1beta1", "subnets")}, "vpcs.network.example.io/v1, subnets.network.example.io/v1beta1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Describe(tt.resources); got != tt.want {
				t.Errorf("Describe() = %q, want %q", got, tt.want)
			}
		})
	}
}

// withoutWebhook returns a copy of cfg without the webhook named name.
func withoutWebhook(cfg *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	out := cfg.DeepCopy()
	out.Webhooks = slices.DeleteFunc(out.Webhooks, func(wh admissionregistrationv1.MutatingWebhook) bool { return wh.Name == name })
	return out
}

// withCondition returns a copy of cfg whose webhook named name has the
// first match condition expression.
func withCondition(cfg *admissionregistrationv1.MutatingWebhookConfiguration, name, expression string) *admissionregistrationv1.MutatingWebhookConfiguration {
	out := cfg.DeepCopy()
	for i := range out.Webhooks {
		if out.Webhooks[i].Name == name {
			out.Webhooks[i].MatchConditions[0].Expression = expression
		}
	}
	return out
}

// tracked returns r with ReferencesTracked of status.
func tracked(r depv1alpha1.DependencyRule, status metav1.ConditionStatus) depv1alpha1.DependencyRule {
	r.Status.Conditions = append(slices.Clone(r.Status.Conditions), metav1.Condition{
		Type: depv1alpha1.ConditionReferencesTracked, Status: status, Reason: "Test", ObservedGeneration: 3,
	})
	return r
}

// A protected resource gets a clearance fingerprint, over the schemes of
// every dependent type that references it, only while every rule that
// protects it reports ReferencesTracked=True and every dependent type is
// labelled; the DELETE webhook's object selector then leaves out the
// objects labelled cleared under it, and only those.
func TestDesiredCleared(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:c1": "c1", "root:c2": "c2", "root:net": "c-net"}
	vpc := dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}
	subnet := dep{"root:net", "net.io", "v1", "subnets", ".spec.subnet"}
	a := tracked(labelledRule(rule("c1", "a", vpc, subnet)), metav1.ConditionTrue)
	disks := tracked(labelledRule(withDependent(rule("c1", "d", vpc), "compute.io", "compute.io", "v1", "disks")), metav1.ConditionTrue)
	inC2 := tracked(labelledRule(rule("c2", "a", vpc)), metav1.ConditionTrue)
	vpcs := gr("net.io", "vpcs")
	fp := func(target schema.GroupResource, schemes ...reflabels.Scheme) string {
		return reflabels.ClearanceFingerprint("c-net", target, schemes)
	}
	tests := []struct {
		name  string
		rules []depv1alpha1.DependencyRule
		want  func() []string
	}{
		{"one rule", []depv1alpha1.DependencyRule{a}, func() []string {
			return []string{fp(vpcs, fullSchemeOf(t, a)), fp(gr("net.io", "subnets"), fullSchemeOf(t, a))}
		}},
		{"two dependent types, two workspaces", []depv1alpha1.DependencyRule{a, disks, inC2}, func() []string {
			return []string{fp(vpcs, fullSchemeOf(t, a), fullSchemeOf(t, disks), fullSchemeOf(t, inC2)), fp(gr("net.io", "subnets"), fullSchemeOf(t, a))}
		}},
		{"a rule untracked", []depv1alpha1.DependencyRule{a, tracked(labelledRule(rule("c2", "a", vpc)), metav1.ConditionFalse)}, func() []string {
			return []string{fp(gr("net.io", "subnets"), fullSchemeOf(t, a))}
		}},
		{"a rule without the condition", []depv1alpha1.DependencyRule{a, labelledRule(rule("c2", "a", vpc))}, func() []string {
			return []string{fp(gr("net.io", "subnets"), fullSchemeOf(t, a))}
		}},
		{"a dependent type not labelled", []depv1alpha1.DependencyRule{a, tracked(rule("c2", "a", vpc), metav1.ConditionTrue)}, func() []string {
			return []string{fp(gr("net.io", "subnets"), fullSchemeOf(t, a))}
		}},
		{"nothing tracked", []depv1alpha1.DependencyRule{labelledRule(rule("c1", "a", vpc))}, func() []string { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Desired(tt.rules, workspaces)
			want := tt.want()
			slices.Sort(want)
			if !slices.Equal(got["c-net"].Cleared, want) {
				t.Fatalf("Cleared = %v, want %v", got["c-net"].Cleared, want)
			}
			deletion := Validating(got["c-net"], "c-net", Options{URL: "https://webhook"}).Webhooks[0]
			if len(deletion.MatchConditions) != 0 {
				t.Errorf("the DELETE webhook has match conditions %v, want none", deletion.MatchConditions)
			}
			selector, err := metav1.LabelSelectorAsSelector(deletion.ObjectSelector)
			if err != nil {
				t.Fatalf("the DELETE webhook's object selector: %v", err)
			}
			for _, f := range append(want, "0123456789abcdef", "") {
				set := labels.Set{"other": "x"}
				if f != "" {
					set[depv1alpha1.LabelCleared] = f
				}
				if called, skip := selector.Matches(set), slices.Contains(want, f); called == skip {
					t.Errorf("an object labelled cleared %q: the DELETE webhook called %v, want %v", f, called, !skip)
				}
			}
		})
	}
}

// Adding the clearance selector to the DELETE webhook takes calls away,
// so it needs the proof of a complete listing; taking it away does not.
func TestReducesClearance(t *testing.T) {
	ws := &Workspace{Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}}
	cleared := &Workspace{Protected: ws.Protected, Cleared: []string{"aa"}}
	if !Reduces(Validating(ws, "c", Options{}), nil, cleared) {
		t.Error("adding the clearance selector does not count as a reduction")
	}
	if Reduces(Validating(cleared, "c", Options{}), nil, ws) {
		t.Error("removing the clearance selector counts as a reduction")
	}
	if !Reduces(Validating(cleared, "c", Options{}), nil, &Workspace{Protected: ws.Protected, Cleared: []string{"bb"}}) {
		t.Error("changing the clearance fingerprint does not count as a reduction")
	}
}

// A labelled dependent type is Recorded only while every rule of the type
// reports ReferencesTracked=True (a webhook that records references found
// the labelling webhook in effect); the check of new references then has
// the match condition that spares it the writes the labelling webhook
// recorded, after the condition that spares it UPDATEs of other fields.
func TestDesiredRecorded(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:c1": "c1", "root:net": "c-net"}
	vpc := dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}
	a := tracked(labelledRule(rule("c1", "a", vpc)), metav1.ConditionTrue)
	disks := tracked(labelledRule(withDependent(rule("c1", "d", vpc), "compute.io", "compute.io", "v1", "disks")), metav1.ConditionTrue)
	vms := gr("compute.io", "virtualmachines")
	tests := []struct {
		name  string
		rules []depv1alpha1.DependencyRule
		want  []schema.GroupResource
	}{
		{"one rule", []depv1alpha1.DependencyRule{a}, []schema.GroupResource{vms}},
		{"two types, sorted", []depv1alpha1.DependencyRule{disks, a}, []schema.GroupResource{gr("compute.io", "disks"), vms}},
		{"a second rule of the type untracked", []depv1alpha1.DependencyRule{a, tracked(labelledRule(rule("c1", "b", vpc)), metav1.ConditionFalse)}, nil},
		{"a second rule of the type without the condition", []depv1alpha1.DependencyRule{a, labelledRule(rule("c1", "b", vpc))}, nil},
		{"tracked but not labelled", []depv1alpha1.DependencyRule{tracked(rule("c1", "a", vpc), metav1.ConditionTrue)}, nil},
		{"labelled, untracked", []depv1alpha1.DependencyRule{tracked(labelledRule(rule("c1", "a", vpc)), metav1.ConditionUnknown)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Desired(tt.rules, workspaces)
			if !slices.Equal(got["c1"].Recorded, tt.want) {
				t.Fatalf("Recorded = %v, want %v", got["c1"].Recorded, tt.want)
			}
			var check *admissionregistrationv1.ValidatingWebhook
			for _, wh := range Validating(got["c1"], "c1", Options{URL: "https://webhook"}).Webhooks {
				if wh.Name == ReferencesWebhookName {
					check = &wh
				}
			}
			if check == nil {
				t.Fatal("no check of new references")
			}
			want := []admissionregistrationv1.MatchCondition{{Name: ReferencesConditionName, Expression: ReferencesCondition([]string{"spec"})}}
			if len(tt.want) > 0 {
				want = append(want, admissionregistrationv1.MatchCondition{Name: NotRecordedConditionName, Expression: NotRecordedCondition(tt.want)})
			}
			if !slices.Equal(check.MatchConditions, want) {
				t.Errorf("match conditions = %v, want %v", check.MatchConditions, want)
			}
		})
	}
}

// Sparing the check of new references the recorded writes takes calls
// away, so it needs the proof of a complete listing; taking it away does
// not, nor does a webhook that has more conditions than the new
// configuration.
func TestReducesRecorded(t *testing.T) {
	vms := []schema.GroupVersionResource{gvr("compute.io", "v1", "virtualmachines")}
	ws := &Workspace{Dependents: vms, ReferenceFields: []string{"spec"}}
	recorded := &Workspace{Dependents: vms, ReferenceFields: []string{"spec"}, Recorded: []schema.GroupResource{gr("compute.io", "virtualmachines")}}
	if !Reduces(Validating(ws, "c", Options{}), nil, recorded) {
		t.Error("adding the condition does not count as a reduction")
	}
	if Reduces(Validating(recorded, "c", Options{}), nil, ws) {
		t.Error("removing the condition counts as a reduction")
	}
	if !Reduces(Validating(recorded, "c", Options{}), nil, &Workspace{Dependents: vms, ReferenceFields: []string{"spec"}, Recorded: []schema.GroupResource{gr("compute.io", "disks")}}) {
		t.Error("changing the condition's resources does not count as a reduction")
	}
	if Reduces(Validating(recorded, "c", Options{}), nil, recorded) {
		t.Error("an unchanged configuration counts as a reduction")
	}
}
