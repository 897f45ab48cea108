package webhookconfig

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/marks"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
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
			name:  "a workspace that protects its own dependents gets both",
			rules: []depv1alpha1.DependencyRule{rule("c1", "vm", dep{"root:c1", "compute.io", "v1", "images", ".spec.image"})},
			want: map[logicalcluster.Name]*Workspace{
				"c1": {Path: path("root:c1"), Protected: []schema.GroupVersionResource{gvr("compute.io", "v1", "images")}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}},
			},
		},
		{
			name: "references in several top-level fields are each watched for changes",
			rules: []depv1alpha1.DependencyRule{
				rule("c1", "vm", dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpcRef.name"}, dep{"root:net", "net.io", "v1", "subnets", "status.subnets[*]"}),
				rule("c1", "vm2", dep{"root:net", "net.io", "v1", "vpcs", ".spec.other"}),
			},
			want: map[logicalcluster.Name]*Workspace{
				"c-net": {Path: path("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "subnets"), gvr("net.io", "v1", "vpcs")}},
				"c1":    {Path: path("root:c1"), Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec", "status"}},
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
		Dependents:      []schema.GroupVersionResource{gvr("net.io", "v1", "routers"), gvr("net.io", "v2", "routers")},
		ReferenceFields: []string{"spec", "status"},
	}
	got := Build(ws, "c-net", opts)

	if got.Kind != "ValidatingWebhookConfiguration" || got.APIVersion != "admissionregistration.k8s.io/v1" {
		t.Errorf("unexpected type: %+v", got.TypeMeta)
	}
	if got.Name != Name || got.Labels[ManagedByLabel] != ManagedByValue || got.Annotations[WorkspacePathAnnotation] != "root:org:net" {
		t.Errorf("unexpected metadata: %+v", got.ObjectMeta)
	}
	webhook := func(name string, sideEffects admissionregistrationv1.SideEffectClass, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://webhook.example:9443/validate/c-net"), CABundle: []byte("PEM")},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(sideEffects),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			Rules:                   rules,
		}
	}
	references := webhook(ReferencesWebhookName, admissionregistrationv1.SideEffectClassNone,
		opRule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, "net.io", "routers", "v1", "v2"))
	// kcp calls the check of new references for an UPDATE only if a
	// top-level field in which references lie changed.
	references.MatchConditions = []admissionregistrationv1.MatchCondition{{
		Name:       ReferencesConditionName,
		Expression: `request.operation != 'UPDATE' || ["spec", "status"].exists(f, (f in object) != (f in oldObject) || f in object && object[f] != oldObject[f])`,
	}}
	want := []admissionregistrationv1.ValidatingWebhook{
		// A DELETE under a Replay rule is recorded, except in a dry run.
		webhook(WebhookName, admissionregistrationv1.SideEffectClassNoneOnDryRun,
			opRule([]admissionregistrationv1.OperationType{admissionregistrationv1.Delete}, "net.io", "subnets", "v1"),
			deleteRule("net.io", "vpcs", "v1", "v2"),
			deleteRule("other.io", "vpcs", "v1")),
		references,
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
	// Without the fields of the references, every UPDATE is checked.
	if conditions := only.Webhooks[0].MatchConditions; len(conditions) != 0 {
		t.Errorf("match conditions without reference fields: %+v", conditions)
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

// fieldManager is the field manager under which the tests apply.
const fieldManager = "dependency-controller"

// applied applies the configuration of ws to a fake client, as the
// controller does, and returns the client and the object as the server
// returns it, with its managed fields.
func applied(t *testing.T, ws *Workspace, opts Options) (client.Client, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithReturnManagedFields().Build()
	if err := c.Apply(context.Background(), Configuration(ws, "c-net", opts), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	return c, get(t, c)
}

func get(t *testing.T, c client.Client) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: Name}, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestUpToDate(t *testing.T) {
	opts := Options{URL: "https://a/validate", CABundle: []byte("CA"), TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	target := Workspace{Path: logicalcluster.NewPath("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}}
	_, existing := applied(t, &target, opts)
	if !UpToDate(existing, Configuration(&target, "c-net", opts), fieldManager) {
		t.Fatalf("the configuration just applied is not up to date")
	}
	if UpToDate(existing, Configuration(&target, "c-net", opts), "someone-else") {
		t.Errorf("up to date for a field manager that owns nothing")
	}

	tests := []struct {
		name   string
		change func(*Options, *Workspace)
	}{
		{"URL changed", func(o *Options, _ *Workspace) { o.URL = "https://b/validate" }},
		{"CA bundle rotated", func(o *Options, _ *Workspace) { o.CABundle = []byte("new CA") }},
		{"CA bundle dropped", func(o *Options, _ *Workspace) { o.CABundle = nil }},
		{"timeout changed", func(o *Options, _ *Workspace) { o.TimeoutSeconds = 3 }},
		{"failure policy changed", func(o *Options, _ *Workspace) { o.FailurePolicy = admissionregistrationv1.Ignore }},
		{"resource added", func(_ *Options, w *Workspace) { w.Protected = append(w.Protected, gvr("net.io", "v1", "subnets")) }},
		{"version added", func(_ *Options, w *Workspace) { w.Protected = append(w.Protected, gvr("net.io", "v2", "vpcs")) }},
		{"resource removed", func(_ *Options, w *Workspace) { w.Protected = nil }},
		{"dependent added", func(_ *Options, w *Workspace) { w.Dependents = append(w.Dependents, vms) }},
		{"workspace path changed", func(_ *Options, w *Workspace) { w.Path = logicalcluster.NewPath("root:org:net") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, ws := opts, target
			ws.Protected = slices.Clone(target.Protected)
			tt.change(&o, &ws)
			if UpToDate(existing, Configuration(&ws, "c-net", o), fieldManager) {
				t.Errorf("UpToDate() = true")
			}
		})
	}
}

// What others change is kept by the controller's next apply, unless it is
// a field the controller owns: then the apply takes it back.
func TestApplyKeepsWhatOthersSet(t *testing.T) {
	ctx := context.Background()
	opts := Options{URL: "https://a/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	ws := &Workspace{Path: logicalcluster.NewPath("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}}
	c, cfg := applied(t, ws, opts)

	edit := func(manager string, mutate func(*admissionregistrationv1.ValidatingWebhookConfiguration)) {
		t.Helper()
		mutate(cfg)
		if err := c.Update(ctx, cfg, client.FieldOwner(manager)); err != nil {
			t.Fatal(err)
		}
		cfg = get(t, c)
	}
	edit("kubectl-label", func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) { cfg.Labels["team"] = "network" })
	if !UpToDate(cfg, Configuration(ws, "c-net", opts), fieldManager) {
		t.Errorf("a label that someone else added makes the configuration out of date")
	}
	edit("kubectl-edit", func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) {
		cfg.Webhooks[0].Rules[0].Resources = []string{"snapshots"}
	})
	if UpToDate(cfg, Configuration(ws, "c-net", opts), fieldManager) {
		t.Fatalf("a configuration whose rules someone else changed is up to date")
	}

	if err := c.Apply(ctx, Configuration(ws, "c-net", opts), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	cfg = get(t, c)
	if got := cfg.Webhooks[0].Rules[0].Resources; !slices.Equal(got, []string{"vpcs"}) {
		t.Errorf("resources after the apply = %v, want the controller's", got)
	}
	if cfg.Labels["team"] != "network" || cfg.Labels[ManagedByLabel] != ManagedByValue {
		t.Errorf("labels after the apply = %v, want someone else's label kept", cfg.Labels)
	}
	if !UpToDate(cfg, Configuration(ws, "c-net", opts), fieldManager) {
		t.Errorf("not up to date right after the apply")
	}
}

// kcp's virtual workspace creates an applied object with a create, which
// the shard records as an update by the field manager. Until that is folded
// into the applied fields, the configuration is not up to date, and an
// apply could not remove a webhook that only the update owns.
func TestUpgradeManagedFields(t *testing.T) {
	ctx := context.Background()
	opts := Options{URL: "https://a/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	both := &Workspace{Path: logicalcluster.NewPath("root:net"), Protected: []schema.GroupVersionResource{gvr("net.io", "v1", "vpcs")}, Dependents: []schema.GroupVersionResource{vms}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithReturnManagedFields().Build()
	if err := c.Create(ctx, Build(both, "c-net", opts), client.FieldOwner(fieldManager)); err != nil {
		t.Fatal(err)
	}
	cfg := get(t, c)
	if UpToDate(cfg, Configuration(both, "c-net", opts), fieldManager) {
		t.Errorf("up to date while the field manager owns its fields through an update")
	}

	patch, err := UpgradeManagedFieldsPatch(cfg, fieldManager)
	if err != nil || patch == nil {
		t.Fatalf("UpgradeManagedFieldsPatch() = %s, %v", patch, err)
	}
	if err := c.Patch(ctx, cfg, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		t.Fatal(err)
	}
	cfg = get(t, c)
	for _, mf := range cfg.ManagedFields {
		if mf.Operation != metav1.ManagedFieldsOperationApply {
			t.Errorf("managed fields entry %s/%s left after the upgrade", mf.Manager, mf.Operation)
		}
	}
	if patch, err := UpgradeManagedFieldsPatch(cfg, fieldManager); err != nil || patch != nil {
		t.Errorf("UpgradeManagedFieldsPatch() of an upgraded object = %s, %v; want nothing to do", patch, err)
	}

	// Now an apply removes what the workspace needs no more.
	protectedOnly := &Workspace{Path: both.Path, Protected: both.Protected}
	if UpToDate(cfg, Configuration(protectedOnly, "c-net", opts), fieldManager) {
		t.Errorf("up to date although it has a webhook that the desired configuration lacks")
	}
	if err := c.Apply(ctx, Configuration(protectedOnly, "c-net", opts), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	cfg = get(t, c)
	if len(cfg.Webhooks) != 1 || cfg.Webhooks[0].Name != WebhookName {
		t.Errorf("webhooks after the apply: %+v", cfg.Webhooks)
	}
	if !UpToDate(cfg, Configuration(protectedOnly, "c-net", opts), fieldManager) {
		t.Errorf("not up to date after the apply")
	}
}

func TestReduces(t *testing.T) {
	vpcs, vpcsV2, subnets := gvr("net.io", "v1", "vpcs"), gvr("net.io", "v2", "vpcs"), gvr("net.io", "v1", "subnets")
	opts := Options{URL: "https://a/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	existing := Build(&Workspace{Protected: []schema.GroupVersionResource{vpcs, vpcsV2}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec"}}, "c-net", opts)
	spec := []string{"spec"}
	tests := []struct {
		name string
		ws   *Workspace
		want bool
	}{
		{"the same", &Workspace{Protected: []schema.GroupVersionResource{vpcs, vpcsV2}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: spec}, false},
		{"every UPDATE checked", &Workspace{Protected: []schema.GroupVersionResource{vpcs, vpcsV2}, Dependents: []schema.GroupVersionResource{vms}}, false},
		{"UPDATEs of other fields checked", &Workspace{Protected: []schema.GroupVersionResource{vpcs, vpcsV2}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"spec", "status"}}, true},
		{"UPDATEs of fewer fields checked", &Workspace{Protected: []schema.GroupVersionResource{vpcs, vpcsV2}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: []string{"status"}}, true},
		{"more", &Workspace{Protected: []schema.GroupVersionResource{subnets, vpcs, vpcsV2}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: spec}, false},
		{"deleted", nil, true},
		{"a version less", &Workspace{Protected: []schema.GroupVersionResource{vpcs}, Dependents: []schema.GroupVersionResource{vms}, ReferenceFields: spec}, true},
		{"no check of new references", &Workspace{Protected: []schema.GroupVersionResource{vpcs, vpcsV2}}, true},
		{"a resource moved to the other webhook", &Workspace{Protected: []schema.GroupVersionResource{vpcs, vpcsV2, vms}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Reduces(existing, tt.ws); got != tt.want {
				t.Errorf("Reduces() = %v, want %v", got, tt.want)
			}
		})
	}
	if Reduces(&admissionregistrationv1.ValidatingWebhookConfiguration{}, nil) {
		t.Errorf("deleting a configuration without webhooks takes protection away")
	}
}

func TestDesiredCleared(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:c1": "c1", "root:net": "c-net"}
	vpcsDep := dep{"root:net", "net.io", "v1", "vpcs", ".spec.vpc"}
	subnetsDep := dep{"root:net", "net.io", "v1", "subnets", ".spec.subnet"}
	// guarded sets ReferencesGuarded on a rule, observed at generation
	// observed; the rule is at generation 2.
	guarded := func(r depv1alpha1.DependencyRule, status metav1.ConditionStatus, observed int64) depv1alpha1.DependencyRule {
		r.UID, r.Generation = types.UID("uid-"+r.Name), 2
		r.Status.Conditions = []metav1.Condition{
			{Type: depv1alpha1.ConditionReferencesGuarded, Status: status, ObservedGeneration: observed, Reason: "R"},
			{Type: depv1alpha1.ConditionWebhooksInstalled, Status: metav1.ConditionTrue, ObservedGeneration: 2, Reason: "R"},
		}
		return r
	}
	notInstalled := guarded(rule("c1", "a", vpcsDep), metav1.ConditionTrue, 2)
	notInstalled.Status.Conditions[1].Status = metav1.ConditionFalse
	installedBefore := guarded(rule("c1", "a", vpcsDep), metav1.ConditionTrue, 2)
	installedBefore.Status.Conditions[1].ObservedGeneration = 1
	fp := func(resource string, rules ...depv1alpha1.DependencyRule) string {
		var covered []marks.Rule
		for i := range rules {
			covered = append(covered, marks.RuleOf(&rules[i]))
		}
		return marks.Fingerprint("c-net", schema.GroupResource{Group: "net.io", Resource: resource}, covered)
	}
	a := guarded(rule("c1", "a", vpcsDep, subnetsDep), metav1.ConditionTrue, 2)
	b := guarded(rule("c1", "b", vpcsDep), metav1.ConditionTrue, 2)
	deleting := b
	deleting.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name  string
		rules []depv1alpha1.DependencyRule
		want  []string
	}{
		{name: "every rule guarded for its generation: each resource qualifies", rules: []depv1alpha1.DependencyRule{a}, want: []string{fp("vpcs", a), fp("subnets", a)}},
		{name: "two rules protect vpcs: one fingerprint over both", rules: []depv1alpha1.DependencyRule{a, b}, want: []string{fp("vpcs", a, b), fp("subnets", a)}},
		{name: "guarded for an older generation", rules: []depv1alpha1.DependencyRule{guarded(rule("c1", "a", vpcsDep), metav1.ConditionTrue, 1)}},
		{name: "not guarded", rules: []depv1alpha1.DependencyRule{guarded(rule("c1", "a", vpcsDep), metav1.ConditionFalse, 2)}},
		{name: "guarded unknown", rules: []depv1alpha1.DependencyRule{guarded(rule("c1", "a", vpcsDep), metav1.ConditionUnknown, 2)}},
		{name: "no condition yet", rules: []depv1alpha1.DependencyRule{rule("c1", "a", vpcsDep)}},
		{
			name:  "one of two rules not guarded: vpcs do not qualify, subnets (only the guarded rule) do",
			rules: []depv1alpha1.DependencyRule{a, guarded(rule("c1", "b", vpcsDep), metav1.ConditionFalse, 2)},
			want:  []string{fp("subnets", a)},
		},
		{name: "a rule being deleted", rules: []depv1alpha1.DependencyRule{a, deleting}, want: []string{fp("subnets", a)}},
		{name: "the check of new references not installed", rules: []depv1alpha1.DependencyRule{notInstalled}},
		{name: "the check of new references installed for an older generation", rules: []depv1alpha1.DependencyRule{installedBefore}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := Desired(tt.rules, workspaces)
			want := slices.Sorted(slices.Values(tt.want))
			var cleared []string
			if ws := got["c-net"]; ws != nil {
				cleared = ws.Cleared
			}
			if !slices.Equal(cleared, want) {
				t.Errorf("Cleared = %v, want %v", cleared, want)
			}
			if ws := got["c1"]; ws != nil && len(ws.Cleared) > 0 {
				t.Errorf("the rules' own workspace got clearances: %v", ws.Cleared)
			}
		})
	}
}

func TestConfigurationObjectSelector(t *testing.T) {
	opts := Options{URL: "https://webhook.example/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	vpcs := gvr("net.io", "v1", "vpcs")
	tests := []struct {
		name    string
		cleared []string
		want    *metav1.LabelSelector
	}{
		{name: "no clearance: the empty selector (NotIn without values is invalid)", want: &metav1.LabelSelector{}},
		{
			name:    "clearances: objects carrying one of them are skipped",
			cleared: []string{"00aa", "11bb"},
			want: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: depv1alpha1.LabelUnreferenced, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"00aa", "11bb"}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := &Workspace{Protected: []schema.GroupVersionResource{vpcs}, Dependents: []schema.GroupVersionResource{vms}, Cleared: tt.cleared}
			ignore := opts
			ignore.FailurePolicy = admissionregistrationv1.Ignore
			if got := Build(ws, "c-net", ignore).Webhooks[0].ObjectSelector; !reflect.DeepEqual(got, &metav1.LabelSelector{}) {
				t.Errorf("with failure policy Ignore, the DELETE webhook's objectSelector = %+v, want the empty one", got)
			}
			cfg := Build(ws, "c-net", opts)
			if len(cfg.Webhooks) != 2 {
				t.Fatalf("want 2 webhooks, got %d", len(cfg.Webhooks))
			}
			if got := cfg.Webhooks[0].ObjectSelector; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DELETE webhook's objectSelector = %+v, want %+v", got, tt.want)
			}
			if got := cfg.Webhooks[1].ObjectSelector; !reflect.DeepEqual(got, &metav1.LabelSelector{}) {
				t.Errorf("the check of new references got objectSelector %+v, want the empty one", got)
			}
			if got := Skipped(cfg); !slices.Equal(got, tt.cleared) {
				t.Errorf("Skipped = %v, want %v", got, tt.cleared)
			}
		})
	}
}

func TestDropSelectorPatch(t *testing.T) {
	opts := Options{URL: "https://webhook.example/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}
	vpcs := gvr("net.io", "v1", "vpcs")
	skipping := Build(&Workspace{Dependents: []schema.GroupVersionResource{vms}, Protected: []schema.GroupVersionResource{vpcs}, Cleared: []string{"00aa"}}, "c", opts)
	// The DELETE webhook second, to check the index in the patch.
	skipping.Webhooks[0], skipping.Webhooks[1] = skipping.Webhooks[1], skipping.Webhooks[0]
	plain := Build(&Workspace{Protected: []schema.GroupVersionResource{vpcs}}, "c", opts)
	ignore := opts
	ignore.FailurePolicy = admissionregistrationv1.Ignore
	tests := []struct {
		name     string
		existing *admissionregistrationv1.ValidatingWebhookConfiguration
		cleared  []string
		opts     Options
		want     string
	}{
		{name: "clearances stay: the apply sets them", existing: skipping, cleared: []string{"11bb"}, opts: opts},
		{name: "no clearance any more", existing: skipping, opts: opts,
			want: `[{"op":"test","path":"/webhooks/1/name","value":"deletion.dependencies.opendefense.cloud"},{"op":"remove","path":"/webhooks/1/objectSelector/matchExpressions"}]`},
		{name: "clearances under failure policy Ignore", existing: skipping, cleared: []string{"00aa"}, opts: ignore,
			want: `[{"op":"test","path":"/webhooks/1/name","value":"deletion.dependencies.opendefense.cloud"},{"op":"remove","path":"/webhooks/1/objectSelector/matchExpressions"}]`},
		{name: "nothing skipped: nothing to patch", existing: plain, opts: opts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DropSelectorPatch(tt.existing, &Workspace{Protected: []schema.GroupVersionResource{vpcs}, Cleared: tt.cleared}, tt.opts)
			if string(got) != tt.want {
				t.Errorf("DropSelectorPatch = %s, want %s", got, tt.want)
			}
		})
	}
}
