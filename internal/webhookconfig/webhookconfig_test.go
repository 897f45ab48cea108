package webhookconfig

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

type dep struct{ path, group, version, resource, field string }

func rule(cluster, name string, deps ...dep) depv1alpha1.DependencyRule {
	r := depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
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

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

var vms = gvr("compute.io", "v1", "virtualmachines")

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
				"c1":    {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}},
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
				"c1":        {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}},
				"c2":        {Path: path("root:c2"), Dependents: []schema.GroupVersionResource{vms}},
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
				"c1":    {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}},
				"c2":    {Path: path("root:c2"), Dependents: []schema.GroupVersionResource{vms}},
			},
		},
		{
			name:  "a workspace that protects its own dependents gets both",
			rules: []depv1alpha1.DependencyRule{rule("c1", "vm", dep{"root:c1", "compute.io", "v1", "images", ".spec.image"})},
			want: map[logicalcluster.Name]*Workspace{
				"c1": {Path: path("root:c1"), Protected: []schema.GroupVersionResource{gvr("compute.io", "v1", "images")}, Dependents: []schema.GroupVersionResource{vms}},
			},
		},
		{
			name:  "a path that no workspace binding the export has is reported, the rest applies",
			rules: []depv1alpha1.DependencyRule{rule("c3", "vm", dep{"root:gone", "net.io", "v1", "vpcs", ".a"}, dep{"root:net", "net.io", "v1", "subnets", ".b"})},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets")}},
				"c3":    {Dependents: []schema.GroupVersionResource{vms}},
			},
			wantUnresolved: []logicalcluster.Path{path("root:gone")},
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

func render(m map[logicalcluster.Name]*Workspace) string {
	out := ""
	for _, c := range slices.Sorted(maps.Keys(m)) {
		out += fmt.Sprintf("%s: %+v; ", c, *m[c])
	}
	return out
}

func TestBuild(t *testing.T) {
	opts := Options{URL: "https://webhook.example:9443/validate", CABundle: []byte("PEM"), TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	ws := &Workspace{
		Path: logicalcluster.NewPath("root:org:net"),
		Protected: []schema.GroupVersionResource{
			gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs"), gvr("other.io", "v1", "vpcs"),
		},
		Dependents: []schema.GroupVersionResource{gvr("net.io", "v1", "routers"), gvr("net.io", "v2", "routers")},
	}
	got := Build(ws, "c-net", opts)

	if got.Name != Name || got.Labels[ManagedByLabel] != ManagedByValue || got.Annotations[WorkspacePathAnnotation] != "root:org:net" {
		t.Errorf("unexpected metadata: %+v", got.ObjectMeta)
	}
	webhook := func(name string, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://webhook.example:9443/validate/c-net"), CABundle: []byte("PEM")},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			Rules:                   rules,
		}
	}
	want := []admissionregistrationv1.ValidatingWebhook{
		webhook(WebhookName,
			opRule([]admissionregistrationv1.OperationType{admissionregistrationv1.Delete}, "net.io", "subnets", "v1"),
			deleteRule("net.io", "vpcs", "v1", "v2"),
			deleteRule("other.io", "vpcs", "v1")),
		webhook(ReferencesWebhookName,
			opRule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, "net.io", "routers", "v1", "v2")),
	}
	if !reflect.DeepEqual(got.Webhooks, want) {
		t.Errorf("Build() webhooks =\n  %+v\nwant\n  %+v", got.Webhooks, want)
	}

	// The CA bundle is copied, not shared with the options.
	opts.CABundle[0] = 'X'
	if string(got.Webhooks[0].ClientConfig.CABundle) != "PEM" {
		t.Errorf("CA bundle shares memory with the options")
	}

	// A workspace with only dependents gets only the check of new
	// references, and one whose path is unknown no path annotation.
	only := Build(&Workspace{Dependents: []schema.GroupVersionResource{vms}}, "c1", opts)
	if len(only.Webhooks) != 1 || only.Webhooks[0].Name != ReferencesWebhookName || only.Annotations != nil {
		t.Errorf("Build() of dependents only = %+v", only)
	}
}

func opRule(ops []admissionregistrationv1.OperationType, group, resource string, versions ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: versions, Resources: []string{resource},
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}
}

func deleteRule(group, resource string, versions ...string) admissionregistrationv1.RuleWithOperations {
	return opRule([]admissionregistrationv1.OperationType{admissionregistrationv1.Delete}, group, resource, versions...)
}

func TestNeedsUpdateAndMerge(t *testing.T) {
	opts := Options{URL: "https://a/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	target := Workspace{Path: logicalcluster.NewPath("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}}
	desired := Build(&target, "c-net", opts)

	existing := desired.DeepCopy()
	existing.ResourceVersion = "42"
	existing.Labels["team"] = "network"
	existing.Annotations["note"] = "kept"
	if NeedsUpdate(existing, desired) {
		t.Errorf("an unchanged configuration with extra labels needs no update")
	}

	tests := []struct {
		name   string
		change func(*Options, *Workspace)
	}{
		{"URL changed", func(o *Options, _ *Workspace) { o.URL = "https://b/validate" }},
		{"CA bundle rotated", func(o *Options, _ *Workspace) { o.CABundle = []byte("new CA") }},
		{"timeout changed", func(o *Options, _ *Workspace) { o.TimeoutSeconds = 3 }},
		{"failure policy changed", func(o *Options, _ *Workspace) { o.FailurePolicy = admissionregistrationv1.Ignore }},
		{"resource added", func(_ *Options, w *Workspace) { w.Protected = append(w.Protected, gvr("net.io", "v1", "subnets")) }},
		{"resource removed", func(_ *Options, w *Workspace) { w.Protected = nil }},
		{"dependent added", func(_ *Options, w *Workspace) { w.Dependents = append(w.Dependents, vms) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, tg := opts, target
			tg.Protected = append([]schema.GroupVersionResource(nil), target.Protected...)
			tt.change(&o, &tg)
			changed := Build(&tg, "c-net", o)
			if !NeedsUpdate(existing, changed) {
				t.Fatalf("NeedsUpdate() = false")
			}
			merged := Merge(existing, changed)
			if NeedsUpdate(merged, changed) {
				t.Errorf("merged configuration still needs an update")
			}
			if merged.ResourceVersion != "42" || merged.Labels["team"] != "network" || merged.Annotations["note"] != "kept" {
				t.Errorf("Merge() dropped fields it does not own: %+v", merged.ObjectMeta)
			}
		})
	}

	t.Run("label removed by someone else", func(t *testing.T) {
		tampered := existing.DeepCopy()
		delete(tampered.Annotations, WorkspacePathAnnotation)
		if !NeedsUpdate(tampered, desired) {
			t.Errorf("NeedsUpdate() = false for a missing annotation")
		}
	})
}
