package webhookconfig

import (
	"reflect"
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

func TestTargets(t *testing.T) {
	tests := []struct {
		name  string
		rules []depv1alpha1.DependencyRule
		want  []Target
	}{
		{name: "no rules", want: []Target{}},
		{
			name: "one rule, one dependency",
			rules: []depv1alpha1.DependencyRule{
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpcRef.name"}),
			},
			want: []Target{{Path: logicalcluster.NewPath("root:net"), Resources: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}}},
		},
		{
			name: "two rules on one provider merge into one target without duplicates",
			rules: []depv1alpha1.DependencyRule{
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpcRef.name"}, dep{"root:net", "net.io", "v1", "vpcs", ".spec.nics[*].vpc"}),
				rule("c2", "db", dep{"root:net", "net.io", "v1", "subnets", ".spec.subnet"}, dep{"root:org:team:storage", "storage.io", "v1beta1", "volumes", ".spec.volume"}),
			},
			want: []Target{
				{Path: logicalcluster.NewPath("root:net"), Resources: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")}},
				{Path: logicalcluster.NewPath("root:org:team:storage"), Resources: []schema.GroupVersionResource{gvr("storage.io", "v1beta1", "volumes")}},
			},
		},
		{
			name: "same rule name in two workspaces are two rules",
			rules: []depv1alpha1.DependencyRule{
				rule("c2", "vm", dep{"root:net", "net.io", "v2", "vpcs", ".a"}),
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".a"}),
			},
			want: []Target{{Path: logicalcluster.NewPath("root:net"), Resources: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs")}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Targets(tt.rules); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Targets() =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	opts := Options{URL: "https://webhook.example:9443/validate", CABundle: []byte("PEM"), TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	target := Target{
		Path: logicalcluster.NewPath("root:org:net"),
		Resources: []schema.GroupVersionResource{
			gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs"), gvr("other.io", "v1", "vpcs"),
		},
	}
	got := Build(target, "c-net", opts)

	if got.Name != Name || got.Labels[ManagedByLabel] != ManagedByValue || got.Annotations[WorkspacePathAnnotation] != "root:org:net" {
		t.Errorf("unexpected metadata: %+v", got.ObjectMeta)
	}
	if len(got.Webhooks) != 1 {
		t.Fatalf("expected one webhook, got %d", len(got.Webhooks))
	}
	wh := got.Webhooks[0]
	want := admissionregistrationv1.ValidatingWebhook{
		Name:                    WebhookName,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://webhook.example:9443/validate/c-net"), CABundle: []byte("PEM")},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](5),
		AdmissionReviewVersions: []string{"v1"},
		NamespaceSelector:       &metav1.LabelSelector{},
		ObjectSelector:          &metav1.LabelSelector{},
		Rules: []admissionregistrationv1.RuleWithOperations{
			deleteRule("net.io", "subnets", "v1"),
			deleteRule("net.io", "vpcs", "v1", "v2"),
			deleteRule("other.io", "vpcs", "v1"),
		},
	}
	if !reflect.DeepEqual(wh, want) {
		t.Errorf("Build() webhook =\n  %+v\nwant\n  %+v", wh, want)
	}

	// The CA bundle is copied, not shared with the options.
	opts.CABundle[0] = 'X'
	if string(got.Webhooks[0].ClientConfig.CABundle) != "PEM" {
		t.Errorf("CA bundle shares memory with the options")
	}
}

func deleteRule(group, resource string, versions ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: versions, Resources: []string{resource},
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}
}

func TestNeedsUpdateAndMerge(t *testing.T) {
	opts := Options{URL: "https://a/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	target := Target{Path: logicalcluster.NewPath("root:net"), Resources: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}}
	desired := Build(target, "c-net", opts)

	existing := desired.DeepCopy()
	existing.ResourceVersion = "42"
	existing.Labels["team"] = "network"
	existing.Annotations["note"] = "kept"
	if NeedsUpdate(existing, desired) {
		t.Errorf("an unchanged configuration with extra labels needs no update")
	}

	tests := []struct {
		name   string
		change func(*Options, *Target)
	}{
		{"URL changed", func(o *Options, _ *Target) { o.URL = "https://b/validate" }},
		{"CA bundle rotated", func(o *Options, _ *Target) { o.CABundle = []byte("new CA") }},
		{"timeout changed", func(o *Options, _ *Target) { o.TimeoutSeconds = 3 }},
		{"failure policy changed", func(o *Options, _ *Target) { o.FailurePolicy = admissionregistrationv1.Ignore }},
		{"resource added", func(_ *Options, t *Target) { t.Resources = append(t.Resources, gvr("net.io", "v1", "subnets")) }},
		{"resource removed", func(_ *Options, t *Target) { t.Resources = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, tg := opts, target
			tg.Resources = append([]schema.GroupVersionResource(nil), target.Resources...)
			tt.change(&o, &tg)
			changed := Build(tg, "c-net", o)
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
