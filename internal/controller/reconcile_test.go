package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	depac "github.com/opendefensecloud/dependency-controller/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

var testWebhook = webhookconfig.Options{URL: "https://webhook:9443/validate", TimeoutSeconds: 5, FailurePolicy: admissionregistrationv1.Fail}

func inCluster[T client.Object](obj T, cluster logicalcluster.Name) T {
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[logicalcluster.AnnotationKey] = cluster.String()
	obj.SetAnnotations(annotations)
	return obj
}

// testRule is a rule in the compute workspace whose VirtualMachines
// reference resource.group of the workspace at path.
func testRule(name string, refs ...string) *depv1alpha1.DependencyRule {
	r := inCluster(&depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}}, "c-compute")
	r.Spec.Dependent = depv1alpha1.DependentResource{APIExportName: "compute.io", Group: "compute.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"}
	for _, ref := range refs {
		path, gr, _ := strings.Cut(ref, "/")
		target := schema.ParseGroupResource(gr)
		r.Spec.Dependencies = append(r.Spec.Dependencies, depv1alpha1.Dependency{
			APIExportRef: depv1alpha1.APIExportReference{Path: path, Name: target.Group},
			Group:        target.Group, Version: "v1", Resource: target.Resource,
			FieldRef: depv1alpha1.FieldReference{Path: ".spec." + target.Resource},
		})
	}
	return r
}

// testConfig is the configuration the controller would install for path,
// protecting the given resources (group/resource).
func testConfig(cluster logicalcluster.Name, path string, resources ...string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	ws := &webhookconfig.Workspace{Path: logicalcluster.NewPath(path)}
	for _, gr := range resources {
		g := schema.ParseGroupResource(gr)
		ws.Protected = append(ws.Protected, g.WithVersion("v1"))
	}
	cfg := webhookconfig.Validating(ws, cluster, testWebhook)
	if cfg == nil {
		// An empty configuration, as an earlier release left behind.
		cfg = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
			Name: webhookconfig.Name, Labels: map[string]string{webhookconfig.ManagedByLabel: webhookconfig.ManagedByValue},
		}}
	}
	return inCluster(cfg, cluster)
}

// testWorkspaces are the workspaces of the tests that bind the export, by
// path.
var testWorkspaces = map[string]logicalcluster.Name{
	"root:compute": "c-compute", "root:net": "c-net", "root:storage": "c-storage", "root:old": "c-old", "root:late": "c-late",
}

// fixture is a set of workspaces, each with a fake client that serves as
// its cache, its client and its live reader, and a fake manager that has
// engaged some of them.
type fixture struct {
	clients  map[logicalcluster.Name]client.WithWatch
	recorder *events.FakeRecorder
	// webhook are the webhook client settings.
	webhook webhookconfig.Options
	// engaged are the clusters the manager has engaged; all by default.
	engaged []logicalcluster.Name
	// hidden hides objects from the caches, as if they had not reached
	// them yet.
	hidden func(client.Object) bool
	// listErr makes the complete listing fail; listings counts them.
	listErr  error
	listings int
}

// newFixture creates the workspaces of testWorkspaces, each with its
// APIBinding to the export, and places objects into the fake client of
// their cluster.
func newFixture(t *testing.T, funcs *interceptor.Funcs, objects ...client.Object) *fixture {
	t.Helper()
	f := &fixture{clients: map[logicalcluster.Name]client.WithWatch{}, recorder: events.NewFakeRecorder(100), webhook: testWebhook}
	byCluster := map[logicalcluster.Name][]client.Object{}
	for path, cluster := range testWorkspaces {
		binding := inCluster(&apisv1alpha2.APIBinding{ObjectMeta: metav1.ObjectMeta{
			Name: "dependencies", Annotations: map[string]string{core.LogicalClusterPathAnnotationKey: path},
		}}, cluster)
		byCluster[cluster] = append(byCluster[cluster], binding)
	}
	for _, o := range objects {
		cluster := logicalcluster.From(o)
		byCluster[cluster] = append(byCluster[cluster], o)
	}
	for cluster, objs := range byCluster {
		b := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
			WithStatusSubresource(&depv1alpha1.DependencyRule{}).WithReturnManagedFields()
		if funcs != nil {
			b = b.WithInterceptorFuncs(*funcs)
		}
		f.clients[cluster] = b.Build()
		f.engaged = append(f.engaged, cluster)
	}
	slices.Sort(f.engaged)
	return f
}

// Engaged implements Clusters.
func (f *fixture) Engaged() []logicalcluster.Name {
	return f.engaged
}

// Get implements Clusters.
func (f *fixture) Get(_ context.Context, cluster logicalcluster.Name) (*Cluster, error) {
	c, ok := f.clients[cluster]
	if !ok || !slices.Contains(f.engaged, cluster) {
		return nil, fmt.Errorf("cluster %s: %w", cluster, multicluster.ErrClusterNotFound)
	}
	return &Cluster{Cache: hidingReader{c, f.hidden}, Client: c, Live: c, Recorder: f.recorder}, nil
}

// ListComplete implements CompleteLister: all rules and bindings of every
// workspace, engaged or not.
func (f *fixture) ListComplete(ctx context.Context) (*Listing, error) {
	f.listings++
	if f.listErr != nil {
		return nil, f.listErr
	}
	listing := &Listing{Workspaces: map[string]logicalcluster.Name{}}
	for _, cluster := range slices.Sorted(maps.Keys(f.clients)) {
		bindings := &apisv1alpha2.APIBindingList{}
		rules := &depv1alpha1.DependencyRuleList{}
		if err := f.clients[cluster].List(ctx, bindings); err != nil {
			return nil, err
		}
		if err := f.clients[cluster].List(ctx, rules); err != nil {
			return nil, err
		}
		for _, b := range bindings.Items {
			listing.Workspaces[b.Annotations[core.LogicalClusterPathAnnotationKey]] = cluster
		}
		listing.Rules = append(listing.Rules, rules.Items...)
	}
	sortRules(listing.Rules)
	return listing, nil
}

// hidingReader is a cache that has not seen the objects that hidden
// hides; the tests hide only objects that the controller gets by name.
type hidingReader struct {
	client.Reader
	hidden func(client.Object) bool
}

func (h hidingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := h.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if h.hidden != nil && h.hidden(obj) {
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	return nil
}

// reconciler returns a reconciler that has caught up with the manager
// already, unless startup is set.
func (f *fixture) reconciler(startup bool) *Reconciler {
	r := NewReconciler(f, f, Options{APIExportName: "dependencies.opendefense.cloud", Webhook: func() webhookconfig.Options { return f.webhook }})
	r.caughtUp = !startup
	return r
}

func (f *fixture) reconcile(t *testing.T) error {
	t.Helper()
	_, err := f.reconciler(false).Reconcile(context.Background(), mcreconcile.Request{})
	return err
}

// protected returns what the configuration in cluster guards: the
// resources it protects from deletion, then "+" and the dependents whose new
// references it checks, if any; or "none" if there is no configuration.
func (f *fixture) protected(t *testing.T, cluster logicalcluster.Name) string {
	t.Helper()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := f.clients[cluster].Get(context.Background(), client.ObjectKey{Name: webhookconfig.Name}, cfg)
	if apierrors.IsNotFound(err) {
		return "none"
	}
	if err != nil {
		t.Fatal(err)
	}
	var deletion, references []string
	for _, wh := range cfg.Webhooks {
		for _, r := range wh.Rules {
			gr := r.Resources[0] + "." + r.APIGroups[0]
			switch wh.Name {
			case webhookconfig.WebhookName:
				deletion = append(deletion, gr)
			case webhookconfig.ReferencesWebhookName:
				references = append(references, gr)
			case webhookconfig.RecordsWebhookName:
				// The guard of records goes with the DELETE webhook.
			default:
				t.Fatalf("unexpected webhook %q", wh.Name)
			}
		}
	}
	out := strings.Join(deletion, ",")
	if len(references) > 0 {
		out += "+" + strings.Join(references, ",")
	}
	return out
}

// condition returns the status and message of a condition of the rule "r".
func (f *fixture) condition(t *testing.T, condType string) string {
	t.Helper()
	rule := &depv1alpha1.DependencyRule{}
	if err := f.clients["c-compute"].Get(context.Background(), client.ObjectKey{Name: "r"}, rule); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(rule.Status.Conditions, condType)
	if c == nil {
		return "missing"
	}
	return string(c.Status) + " " + c.Message
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestReconcileActions(t *testing.T) {
	tests := []struct {
		name    string
		objects []client.Object
		funcs   *interceptor.Funcs
		// want is the protected resources per cluster afterwards.
		want map[logicalcluster.Name]string
		// wantReady is the Ready condition of rule "r" (status and a part of
		// the message).
		wantReady string
		wantErr   string
	}{
		{
			name:      "creates the configuration in every protected workspace",
			objects:   []client.Object{testRule("r", "root:net/vpcs.net.io", "root:net/subnets.net.io", "root:storage/volumes.storage.io")},
			want:      map[logicalcluster.Name]string{"c-net": "subnets.net.io,vpcs.net.io", "c-storage": "volumes.storage.io", "c-compute": "+virtualmachines.compute.io"},
			wantReady: "True Deletion protection is active in root:net, root:storage",
		},
		{
			name: "merges what two rules protect in one workspace into one configuration",
			objects: []client.Object{
				testRule("r", "root:net/vpcs.net.io"),
				testRule("r2", "root:net/subnets.net.io", "root:storage/volumes.storage.io"),
			},
			want:      map[logicalcluster.Name]string{"c-net": "subnets.net.io,vpcs.net.io", "c-storage": "volumes.storage.io"},
			wantReady: "True Deletion protection is active in root:net",
		},
		{
			name:      "protection and the check of new references share the configuration of a workspace",
			objects:   []client.Object{testRule("r", "root:compute/images.compute.io")},
			want:      map[logicalcluster.Name]string{"c-compute": "images.compute.io+virtualmachines.compute.io"},
			wantReady: "True",
		},
		{
			name: "prunes the check of new references with the last rule of the workspace",
			objects: []client.Object{
				testConfig("c-net", "root:net", "vpcs.net.io"),
				inCluster(webhookconfig.Validating(&webhookconfig.Workspace{Dependents: []schema.GroupVersionResource{{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}}}, "c-compute", testWebhook), "c-compute"),
			},
			want: map[logicalcluster.Name]string{"c-net": "none", "c-compute": "none"},
		},
		{
			name: "updates a configuration that protects something else",
			objects: []client.Object{
				testRule("r", "root:net/vpcs.net.io"),
				testConfig("c-net", "root:net", "routers.net.io"),
			},
			want:      map[logicalcluster.Name]string{"c-net": "vpcs.net.io"},
			wantReady: "True",
		},
		{
			name: "prunes a configuration that no rule needs any more",
			objects: []client.Object{
				testRule("r", "root:net/vpcs.net.io"),
				testConfig("c-net", "root:net", "vpcs.net.io"),
				testConfig("c-old", "root:old", "things.old.io"),
			},
			want: map[logicalcluster.Name]string{"c-net": "vpcs.net.io", "c-old": "none"},
		},
		{
			name: "keeps a configuration whose workspace path does not resolve now",
			objects: []client.Object{
				testRule("r", "root:gone/things.old.io"),
				testConfig("c-old", "root:gone", "things.old.io"),
			},
			want:      map[logicalcluster.Name]string{"c-old": "things.old.io"},
			wantReady: "False Failed to resolve root:gone: no workspace at root:gone binds the APIExport dependencies.opendefense.cloud",
			wantErr:   "root:gone: no workspace at root:gone binds",
		},
		{
			name:    "a write that kcp forbids is reported with the permission claim to accept",
			objects: []client.Object{testRule("r", "root:net/vpcs.net.io")},
			funcs: &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
					return apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, webhookconfig.Name, errors.New("no claim"))
				}
				return c.Create(ctx, obj, opts...)
			}},
			want:      map[logicalcluster.Name]string{"c-net": "none"},
			wantReady: "False Failed to install the webhook in root:net",
			wantErr:   "accepted the permission claim on validatingwebhookconfigurations",
		},
		{
			name: "a configuration of the same name that the controller does not manage is reported, not overwritten",
			objects: []client.Object{
				testRule("r", "root:net/vpcs.net.io"),
				inCluster(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: webhookconfig.Name}}, "c-net"),
			},
			want:      map[logicalcluster.Name]string{"c-net": ""},
			wantReady: "False",
			wantErr:   "exists that is not managed by the dependency-controller",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.funcs, tt.objects...)
			err := f.reconcile(t)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Reconcile() error = %v, want %q", err, tt.wantErr)
			}
			for cluster, want := range tt.want {
				if got := f.protected(t, cluster); got != want {
					t.Errorf("protected in %s = %q, want %q", cluster, got, want)
				}
			}
			if tt.wantReady != "" {
				if got := f.condition(t, depv1alpha1.ConditionReady); !strings.HasPrefix(got, tt.wantReady) {
					t.Errorf("Ready = %q, want %q", got, tt.wantReady)
				}
			}
		})
	}
}

// countWrites returns interceptor functions that count the writes of
// webhook configurations by verb, and of subresources by name, into writes.
func countWrites(writes map[string]int) *interceptor.Funcs {
	isConfig := func(o any) bool {
		switch o.(type) {
		case *admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration:
			return true
		}
		return false
	}
	return &interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if isConfig(obj) {
				writes["create"]++
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if isConfig(obj) {
				writes["update"]++
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if isConfig(obj) {
				writes["patch"]++
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if isConfig(obj) {
				writes["apply"]++
			}
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			writes[sub]++
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	}
}

// A configuration of the name that the controller does not manage, which
// has not reached the cache yet, is not taken over: the create fails, and
// the live read finds it.
func TestReconcileDoesNotTakeOverAConfigurationTheCacheLacks(t *testing.T) {
	foreign := inCluster(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: webhookconfig.Name, Labels: map[string]string{"owner": "someone"},
	}}, "c-net")
	writes := map[string]int{}
	f := newFixture(t, countWrites(writes), testRule("r", "root:net/vpcs.net.io"), foreign)
	f.hidden = func(o client.Object) bool { return o.GetLabels()["owner"] == "someone" }
	before := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := f.clients["c-net"].Get(context.Background(), client.ObjectKey{Name: webhookconfig.Name}, before); err != nil {
		t.Fatal(err)
	}

	if err := f.reconcile(t); err == nil || !strings.Contains(err.Error(), "exists that is not managed by the dependency-controller") {
		t.Errorf("Reconcile() error = %v", err)
	}
	after := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := f.clients["c-net"].Get(context.Background(), client.ObjectKey{Name: webhookconfig.Name}, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || !maps.Equal(after.Labels, before.Labels) || len(after.Webhooks) != 0 {
		t.Errorf("the foreign configuration was changed: %+v", after)
	}
	// The validating configurations of both workspaces and the guard of the
	// ledger (a mutating configuration) in the protected one.
	if want := map[string]int{"create": 3, "status": 1}; !maps.Equal(writes, want) {
		t.Errorf("writes %v, want %v: creates in both workspaces, nothing else", writes, want)
	}
}

// An up-to-date configuration and status are not written again.
func TestReconcileLeavesWhatIsUpToDate(t *testing.T) {
	writes := map[string]int{}
	f := newFixture(t, countWrites(writes), testRule("r", "root:net/vpcs.net.io"), testRule("r2", "root:storage/volumes.storage.io"))
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	// Five configurations, each created in one write: a validating one in
	// each of the three workspaces, and the guard of the ledger (a mutating
	// one) in each of the two protected ones.
	if want := map[string]int{"create": 5, "status": 2}; !maps.Equal(writes, want) {
		t.Errorf("first reconcile wrote %v, want %v", writes, want)
	}
	clear(writes)
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if len(writes) != 0 {
		t.Errorf("second reconcile wrote %v, want nothing", writes)
	}
	if f.listings != 0 {
		t.Errorf("%d complete listings, want none: nothing was taken away", f.listings)
	}

	// A changed setting is written once, in one patch per configuration.
	f.webhook.URL = "https://elsewhere/validate"
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"patch": 5}; !maps.Equal(writes, want) {
		t.Errorf("reconcile after a new URL wrote %v, want %v", writes, want)
	}
}

// The controller applies only its own part of the status, under its own
// field manager, for the rule with the UID it computed the status for.
func TestReconcileAppliesItsPartOfTheStatus(t *testing.T) {
	var got *depac.DependencyRuleApplyConfiguration
	var gotOpts client.SubResourceApplyOptions
	f := newFixture(t, &interceptor.Funcs{SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
		got = obj.(*depac.DependencyRuleApplyConfiguration)
		gotOpts.ApplyOpts(opts)
		return nil
	}}, withCondition(testRule("r", "root:net/vpcs.net.io"), depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, depv1alpha1.ReasonIndexed, "the webhook's"))
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatal("no status applied")
	}
	rule := &depv1alpha1.DependencyRule{}
	if err := f.clients["c-compute"].Get(context.Background(), client.ObjectKey{Name: "r"}, rule); err != nil {
		t.Fatal(err)
	}
	if *got.Name != "r" || got.UID == nil || *got.UID != rule.UID {
		t.Errorf("applied to %v (UID %v), want r with UID %s", got.Name, got.UID, rule.UID)
	}
	var types []string
	for _, c := range got.Status.Conditions {
		types = append(types, *c.Type)
	}
	if want := controllerConditions; !slices.Equal(types, want) {
		t.Errorf("applied conditions %v, want %v", types, want)
	}
	if *got.Status.ObservedGeneration != 1 || *got.Status.DependencyCount != 1 {
		t.Errorf("applied observedGeneration %d, dependencyCount %d", *got.Status.ObservedGeneration, *got.Status.DependencyCount)
	}
	if gotOpts.FieldManager != FieldOwner || gotOpts.Force == nil || !*gotOpts.Force {
		t.Errorf("applied as %q, force %v", gotOpts.FieldManager, gotOpts.Force)
	}
}

// Nothing is taken away on the strength of the caches alone: a
// configuration that the cached view no longer needs, or needs less of, is
// kept while the complete listing still has a rule that needs it, and
// nothing is written without the complete listing.
func TestReconcileProvesWhatTheCachesLack(t *testing.T) {
	late := testRule("late", "root:net/vpcs.net.io", "root:net/subnets.net.io", "root:compute/images.compute.io")
	late = inCluster(late, "c-late")
	tests := []struct {
		name    string
		objects []client.Object
		listErr error
		// notEngaged are the clusters the manager has not engaged.
		notEngaged []logicalcluster.Name
		// want is the protected resources per cluster afterwards.
		want         map[logicalcluster.Name]string
		wantListings int
		wantErr      string
	}{
		{
			name: "a configuration whose rule is in a workspace not engaged yet is not pruned",
			objects: []client.Object{
				late,
				testConfig("c-net", "root:net", "subnets.net.io", "vpcs.net.io"),
				testConfig("c-compute", "root:compute", "images.compute.io"),
			},
			notEngaged:   []logicalcluster.Name{"c-late"},
			want:         map[logicalcluster.Name]string{"c-net": "subnets.net.io,vpcs.net.io", "c-compute": "images.compute.io"},
			wantListings: 1,
			wantErr:      "logical cluster c-late is not engaged yet",
		},
		{
			name: "a configuration is not reduced to what the rules in the cache need",
			objects: []client.Object{
				late,
				testRule("r", "root:net/vpcs.net.io"),
				testConfig("c-net", "root:net", "subnets.net.io", "vpcs.net.io"),
			},
			notEngaged:   []logicalcluster.Name{"c-late"},
			want:         map[logicalcluster.Name]string{"c-net": "subnets.net.io,vpcs.net.io"},
			wantListings: 1,
			wantErr:      "logical cluster c-late is not engaged yet",
		},
		{
			name: "nothing is pruned or written when the complete listing fails",
			objects: []client.Object{
				late,
				testRule("r", "root:storage/volumes.storage.io"),
				testConfig("c-net", "root:net", "subnets.net.io", "vpcs.net.io"),
			},
			notEngaged:   []logicalcluster.Name{"c-late"},
			listErr:      errors.New("failed to list DependencyRules through https://shard-1: connection refused"),
			want:         map[logicalcluster.Name]string{"c-net": "subnets.net.io,vpcs.net.io", "c-storage": "none"},
			wantListings: 1,
			wantErr:      "shard-1",
		},
		{
			name: "a configuration that the complete listing does not need either is pruned",
			objects: []client.Object{
				testRule("r", "root:net/vpcs.net.io"),
				testConfig("c-net", "root:net", "vpcs.net.io"),
				testConfig("c-old", "root:old", "things.old.io"),
			},
			notEngaged:   []logicalcluster.Name{"c-late"},
			want:         map[logicalcluster.Name]string{"c-net": "vpcs.net.io", "c-old": "none"},
			wantListings: 1,
		},
		{
			name:         "what only adds protection needs no listing",
			objects:      []client.Object{testRule("r", "root:net/vpcs.net.io"), testConfig("c-storage", "root:storage")},
			want:         map[logicalcluster.Name]string{"c-net": "vpcs.net.io", "c-compute": "+virtualmachines.compute.io"},
			wantListings: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, tt.objects...)
			f.listErr = tt.listErr
			f.engaged = slices.DeleteFunc(f.engaged, func(c logicalcluster.Name) bool { return slices.Contains(tt.notEngaged, c) })
			err := f.reconcile(t)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Reconcile() error = %v, want %q", err, tt.wantErr)
			}
			for cluster, want := range tt.want {
				if got := f.protected(t, cluster); got != want {
					t.Errorf("protected in %s = %q, want %q", cluster, got, want)
				}
			}
			if f.listings != tt.wantListings {
				t.Errorf("%d complete listings, want %d", f.listings, tt.wantListings)
			}
		})
	}
}

// A path or a cycle partner that only the caches lack is not reported as
// missing.
func TestReconcileProvesAbsencesBeforeReportingThem(t *testing.T) {
	// r's dependency on images of root:compute and the late rule's on
	// VirtualMachines make a cycle; the late rule is not in the caches.
	cyclic := withCondition(testRule("r", "root:late/images.late.io", "root:compute/images.compute.io"),
		depv1alpha1.ConditionDependencyCycle, metav1.ConditionTrue, depv1alpha1.ReasonCycleDetected, "a cycle")
	partner := inCluster(testRule("late", "root:compute/virtualmachines.compute.io"), "c-late")
	partner.Spec.Dependent = depv1alpha1.DependentResource{APIExportName: "compute.io", Group: "compute.io", Version: "v1", Kind: "Image", Resource: "images"}
	f := newFixture(t, nil, cyclic, partner)
	f.engaged = slices.DeleteFunc(f.engaged, func(c logicalcluster.Name) bool { return c == "c-late" })

	err := f.reconcile(t)
	if err == nil || !strings.Contains(err.Error(), "logical cluster c-late is not engaged yet") {
		t.Errorf("Reconcile() error = %v", err)
	}
	if f.listings != 1 {
		t.Errorf("%d complete listings, want 1", f.listings)
	}
	if got := f.condition(t, depv1alpha1.ConditionTargetsResolved); !strings.HasPrefix(got, "True") {
		t.Errorf("TargetsResolved = %q: a path whose workspace binds the export, though not engaged yet, is resolved", got)
	}
	if got := f.condition(t, depv1alpha1.ConditionDependencyCycle); !strings.HasPrefix(got, "True") {
		t.Errorf("DependencyCycle = %q: the cycle with a rule outside the caches is still reported", got)
	}
}

// At startup the first reconcile waits until the manager has engaged every
// workspace of the complete listing, and then decides from that listing.
func TestReconcileWaitsForTheManagerAtStartup(t *testing.T) {
	late := inCluster(testRule("late", "root:net/subnets.net.io"), "c-late")
	f := newFixture(t, nil, testRule("r", "root:net/vpcs.net.io"), late, testConfig("c-net", "root:net", "subnets.net.io", "vpcs.net.io"))
	all := f.engaged
	f.engaged = slices.DeleteFunc(slices.Clone(all), func(c logicalcluster.Name) bool { return c == "c-late" })
	r := f.reconciler(true)

	res, err := r.Reconcile(context.Background(), mcreconcile.Request{})
	if err != nil || res.RequeueAfter == 0 {
		t.Errorf("Reconcile() = %+v, %v; want to be called again soon", res, err)
	}
	if got := f.protected(t, "c-net"); got != "subnets.net.io,vpcs.net.io" {
		t.Errorf("protected in c-net = %q while the manager catches up", got)
	}
	if got := f.condition(t, depv1alpha1.ConditionReady); got != "missing" {
		t.Errorf("status written while the manager catches up: Ready = %q", got)
	}

	f.engaged = all
	if _, err := r.Reconcile(context.Background(), mcreconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	if got := f.protected(t, "c-net"); got != "subnets.net.io,vpcs.net.io" {
		t.Errorf("protected in c-net = %q", got)
	}
	if got := f.condition(t, depv1alpha1.ConditionReady); !strings.HasPrefix(got, "True") {
		t.Errorf("Ready = %q", got)
	}

	// A workspace that is never engaged holds up the first reconcile only
	// for a while.
	f = newFixture(t, nil, testRule("r", "root:net/vpcs.net.io"), late)
	f.engaged = slices.DeleteFunc(f.engaged, func(c logicalcluster.Name) bool { return c == "c-late" })
	r = f.reconciler(true)
	r.waitingSince = time.Now().Add(-engageTimeout)
	if _, err := r.Reconcile(context.Background(), mcreconcile.Request{}); err == nil || !strings.Contains(err.Error(), "c-late is not engaged yet") {
		t.Errorf("Reconcile() error = %v", err)
	}
	if got := f.protected(t, "c-net"); got != "subnets.net.io,vpcs.net.io" {
		t.Errorf("protected in c-net = %q", got)
	}
}

// Events are recorded once the status that they describe is written, and
// not when writing it failed.
func TestReconcileRecordsEventsAfterTheStatus(t *testing.T) {
	failApply := true
	funcs := &interceptor.Funcs{SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
		if failApply {
			return apierrors.NewServiceUnavailable("storage is (re)initializing")
		}
		return c.SubResource(sub).Apply(ctx, obj, opts...)
	}}
	f := newFixture(t, funcs, testRule("r", "root:net/vpcs.net.io", "root:missing/things.missing.io"))

	if err := f.reconcile(t); err == nil || !strings.Contains(err.Error(), "failed to update the status") {
		t.Fatalf("Reconcile() error = %v", err)
	}
	if got := f.events(); len(got) != 0 {
		t.Errorf("events recorded although the status was not written: %v", got)
	}

	failApply = false
	if err := f.reconcile(t); err == nil {
		t.Fatal("Reconcile() succeeded with an unresolvable path")
	}
	got := f.events()
	if !slices.ContainsFunc(got, func(e string) bool {
		return strings.HasPrefix(e, fmt.Sprintf("Warning %s ", EventReasonResolutionFailed)) && strings.Contains(e, "root:missing")
	}) {
		t.Errorf("events = %v, want a %s warning naming root:missing", got, EventReasonResolutionFailed)
	}
}

// The live reader reads typed objects past the cache.
func TestLiveReader(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(testConfig("c-net", "root:net", "vpcs.net.io")).Build()
	live := liveReader{c}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := live.Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg); err != nil {
		t.Fatal(err)
	}
	if !webhookconfig.IsManaged(cfg) || len(cfg.Webhooks) != 2 {
		t.Errorf("Get() = %+v, want the DELETE webhook and the guard of records", cfg)
	}
	if err := live.Get(ctx, client.ObjectKey{Name: "other"}, cfg); !apierrors.IsNotFound(err) {
		t.Errorf("Get() of a missing object: %v", err)
	}
	list := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := live.List(ctx, list); err != nil || len(list.Items) != 1 || list.Items[0].Name != webhookconfig.Name {
		t.Errorf("List() = %+v, %v", list.Items, err)
	}
}

// labelling returns r with the DependentsLabelled condition that the
// webhook writes once it labels the rule's dependents.
func labelling(r *depv1alpha1.DependencyRule, reason string) *depv1alpha1.DependencyRule {
	r.UID = types.UID("uid-" + r.Name)
	return withCondition(r, depv1alpha1.ConditionDependentsLabelled, metav1.ConditionUnknown, reason, "labelling")
}

// mutating returns the labelling webhooks in cluster, by name, with the
// scheme their URL names; nil if there is no MutatingWebhookConfiguration.
func (f *fixture) mutating(t *testing.T, cluster logicalcluster.Name) map[string]string {
	t.Helper()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err := f.clients[cluster].Get(context.Background(), client.ObjectKey{Name: webhookconfig.Name}, cfg)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, wh := range cfg.Webhooks {
		out[wh.Name] = (*wh.ClientConfig.URL)[strings.LastIndex(*wh.ClientConfig.URL, "/")+1:]
	}
	return out
}

// The labelling webhook of a dependent type is installed once the webhook
// labels its dependents (it wrote DependentsLabelled on every rule of the
// type), with the scheme of those rules in its URL; it is removed, after a
// complete listing, when no rule needs it.
func TestReconcileLabellingWebhook(t *testing.T) {
	const name = "virtualmachines.compute.io." + webhookconfig.LabelsWebhookSuffix
	schemeOf := func(rules ...*depv1alpha1.DependencyRule) string {
		var covered []reflabels.Rule
		for _, r := range rules {
			covered = append(covered, reflabels.RuleOf(r))
		}
		s, reason := reflabels.SchemeOf(covered)
		if reason != "" {
			t.Fatal(reason)
		}
		return s.Fingerprint
	}

	// Not yet: the webhook has not told on the rule.
	f := newFixture(t, nil, testRule("r", "root:net/vpcs.net.io"))
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if got := f.mutating(t, "c-compute"); got != nil {
		t.Errorf("labelling webhooks %v before the webhook labels", got)
	}

	// Once it has on every rule of the type.
	r, r2 := labelling(testRule("r", "root:net/vpcs.net.io"), depv1alpha1.ReasonLabelling), labelling(testRule("r2", "root:net/subnets.net.io"), depv1alpha1.ReasonLabelled)
	f = newFixture(t, nil, r, r2)
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if got, want := f.mutating(t, "c-compute"), map[string]string{name: schemeOf(r, r2)}; !maps.Equal(got, want) {
		t.Errorf("labelling webhooks %v, want %v", got, want)
	}
	if f.listings != 0 {
		t.Errorf("%d complete listings to install a labelling webhook, want 0", f.listings)
	}

	// One rule of the type that the webhook has not told on yet (or
	// cannot label) keeps the type unlabelled; removing the webhook needs
	// a complete listing.
	for _, reason := range []string{"", depv1alpha1.ReasonNotLabellable} {
		r3 := testRule("r3", "root:net/routers.net.io")
		if reason != "" {
			r3 = labelling(r3, reason)
		}
		existing := inCluster(webhookconfig.Mutating(&webhookconfig.Workspace{Labelled: []webhookconfig.Labelled{{
			Resource: schema.GroupResource{Group: "compute.io", Resource: "virtualmachines"}, Versions: []string{"v1"}, Scheme: schemeOf(r, r2), Fields: []string{"spec"},
		}}}, "c-compute", testWebhook), "c-compute")
		f = newFixture(t, nil, r, r2, r3, existing)
		if err := f.reconcile(t); err != nil {
			t.Fatal(err)
		}
		if got := f.mutating(t, "c-compute"); got != nil {
			t.Errorf("reason %q: labelling webhooks %v, want none", reason, got)
		}
		if f.listings != 1 {
			t.Errorf("reason %q: %d complete listings before removing a labelling webhook, want 1", reason, f.listings)
		}
	}
}

// A workspace whose binding has not accepted the claim on
// mutatingwebhookconfigurations (it bound a release before the labelling
// webhook) keeps its validating configuration, and the rule says which
// claim to accept.
func TestReconcileReportsTheMutatingClaim(t *testing.T) {
	funcs := &interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			return apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, webhookconfig.Name, errors.New("no claim"))
		}
		return c.Create(ctx, obj, opts...)
	}}
	f := newFixture(t, funcs, labelling(testRule("r", "root:net/vpcs.net.io"), depv1alpha1.ReasonLabelling))
	err := f.reconcile(t)
	if err == nil || !strings.Contains(err.Error(), "accepted the permission claim on mutatingwebhookconfigurations") {
		t.Errorf("Reconcile() error = %v", err)
	}
	if got := f.protected(t, "c-net"); got != "vpcs.net.io" {
		t.Errorf("protected in c-net = %q", got)
	}
	if got := f.condition(t, depv1alpha1.ConditionWebhooksInstalled); !strings.Contains(got, "mutatingwebhookconfigurations") {
		t.Errorf("WebhooksInstalled = %q, want it to name the claim", got)
	}
}

// The finalizer of releases that marked objects is removed from rules, so
// that a rule being deleted is not held forever; nothing else of the rule
// changes.
func TestReconcileDropsTheLegacyFinalizer(t *testing.T) {
	r := testRule("r", "root:net/vpcs.net.io")
	r.Finalizers = []string{"example.com/keep", depv1alpha1.FinalizerMarks}
	f := newFixture(t, nil, r)
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	got := &depv1alpha1.DependencyRule{}
	if err := f.clients["c-compute"].Get(context.Background(), client.ObjectKey{Name: "r"}, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{"example.com/keep"}) {
		t.Errorf("finalizers %v, want only the other one", got.Finalizers)
	}
}
