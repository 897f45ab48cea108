package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
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
	return inCluster(webhookconfig.Build(ws, cluster, testWebhook), cluster)
}

// fixture is a State whose clients are fake clients, one per workspace.
type fixture struct {
	state    *State
	clients  map[logicalcluster.Name]client.WithWatch
	recorder *events.FakeRecorder
}

// newFixture builds the state: workspaces maps paths to clusters (all of
// which bind the export); objects are placed into the fake client of their
// cluster.
func newFixture(t *testing.T, workspaces map[string]logicalcluster.Name, funcs *interceptor.Funcs, objects ...client.Object) *fixture {
	t.Helper()
	f := &fixture{
		state: &State{
			Workspaces: workspaces,
			Configs:    map[logicalcluster.Name]*admissionregistrationv1.ValidatingWebhookConfiguration{},
			Clients:    map[logicalcluster.Name]client.Client{},
		},
		clients:  map[logicalcluster.Name]client.WithWatch{},
		recorder: events.NewFakeRecorder(100),
	}
	byCluster := map[logicalcluster.Name][]client.Object{}
	for _, cluster := range workspaces {
		byCluster[cluster] = nil
	}
	for _, o := range objects {
		cluster := logicalcluster.From(o)
		byCluster[cluster] = append(byCluster[cluster], o)
		switch o := o.(type) {
		case *depv1alpha1.DependencyRule:
			f.state.Rules = append(f.state.Rules, *o)
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			f.state.Configs[cluster] = o
		}
	}
	for cluster, objs := range byCluster {
		b := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(&depv1alpha1.DependencyRule{})
		if funcs != nil {
			b = b.WithInterceptorFuncs(*funcs)
		}
		c := b.Build()
		f.clients[cluster] = c
		f.state.Clients[cluster] = c
	}
	// The fake clients set resourceVersions; the state holds what they hold.
	for cluster, cfg := range f.state.Configs {
		if err := f.clients[cluster].Get(context.Background(), client.ObjectKeyFromObject(cfg), cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i := range f.state.Rules {
		r := &f.state.Rules[i]
		if err := f.clients[logicalcluster.From(r)].Get(context.Background(), client.ObjectKeyFromObject(r), r); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) reconciler() *Reconciler {
	return NewReconciler(staticObserver{state: f.state}, func(context.Context, logicalcluster.Name) (events.EventRecorder, error) {
		return f.recorder, nil
	}, Options{APIExportName: "dependencies.opendefense.cloud", Webhook: func() webhookconfig.Options { return testWebhook }})
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

func (f *fixture) condition(t *testing.T, name, condType string) string {
	t.Helper()
	rule := &depv1alpha1.DependencyRule{}
	if err := f.clients["c-compute"].Get(context.Background(), client.ObjectKey{Name: name}, rule); err != nil {
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

type staticObserver struct {
	state *State
	err   error
}

func (o staticObserver) Observe(context.Context) (*State, error) { return o.state, o.err }

func TestReconcileActions(t *testing.T) {
	workspaces := map[string]logicalcluster.Name{"root:compute": "c-compute", "root:net": "c-net", "root:storage": "c-storage", "root:old": "c-old"}
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
				inCluster(webhookconfig.Build(&webhookconfig.Workspace{Dependents: []schema.GroupVersionResource{{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}}}, "c-compute", testWebhook), "c-compute"),
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
			want:      map[logicalcluster.Name]string{"c-net": "unmanaged"},
			wantReady: "False",
			wantErr:   "exists that is not managed by the dependency-controller",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, workspaces, tt.funcs, tt.objects...)
			// An unmanaged configuration is not observed as managed.
			for cluster, cfg := range f.state.Configs {
				if cfg.Labels[webhookconfig.ManagedByLabel] != webhookconfig.ManagedByValue {
					delete(f.state.Configs, cluster)
				}
			}
			err := f.reconciler().reconcile(context.Background(), f.state)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("reconcile() error = %v, want %q", err, tt.wantErr)
			}
			for cluster, want := range tt.want {
				got := f.protected(t, cluster)
				if want == "unmanaged" {
					want = ""
				}
				if got != want {
					t.Errorf("protected in %s = %q, want %q", cluster, got, want)
				}
			}
			if tt.wantReady != "" {
				if got := f.condition(t, "r", depv1alpha1.ConditionReady); !strings.HasPrefix(got, tt.wantReady) {
					t.Errorf("Ready = %q, want %q", got, tt.wantReady)
				}
			}
		})
	}
}

// An up-to-date configuration is not written again.
func TestReconcileLeavesUpToDateConfigurations(t *testing.T) {
	writes := 0
	count := func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if _, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
			writes++
		}
		return c.Update(ctx, obj, opts...)
	}
	f := newFixture(t, map[string]logicalcluster.Name{"root:compute": "c-compute", "root:net": "c-net"}, &interceptor.Funcs{Update: count},
		testRule("r", "root:net/vpcs.net.io"), testConfig("c-net", "root:net", "vpcs.net.io"))
	if err := f.reconciler().reconcile(context.Background(), f.state); err != nil {
		t.Fatal(err)
	}
	if writes != 0 {
		t.Errorf("%d updates of an up-to-date configuration", writes)
	}
}

// Without a complete view of every shard nothing is written or pruned.
func TestReconcileWithoutCompleteViewChangesNothing(t *testing.T) {
	f := newFixture(t, map[string]logicalcluster.Name{"root:compute": "c-compute", "root:old": "c-old"}, nil,
		testConfig("c-old", "root:old", "things.old.io"))
	r := f.reconciler()
	r.observer = staticObserver{err: errors.New("failed to list DependencyRules through https://shard-1: connection refused")}
	if _, err := r.Reconcile(context.Background(), mcreconcile.Request{}); err == nil || !strings.Contains(err.Error(), "shard-1") {
		t.Errorf("Reconcile() error = %v", err)
	}
	if got := f.protected(t, "c-old"); got != "things.old.io" {
		t.Errorf("a partial view pruned a configuration: %q", got)
	}
}

// Events are recorded once the status that they describe is written, and
// not when writing it failed.
func TestReconcileRecordsEventsAfterTheStatus(t *testing.T) {
	failPatch := true
	funcs := &interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if failPatch {
			return apierrors.NewServiceUnavailable("storage is (re)initializing")
		}
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}}
	f := newFixture(t, map[string]logicalcluster.Name{"root:compute": "c-compute", "root:net": "c-net"}, funcs,
		testRule("r", "root:net/vpcs.net.io", "root:missing/things.missing.io"))

	if err := f.reconciler().reconcile(context.Background(), f.state); err == nil || !strings.Contains(err.Error(), "failed to update the status") {
		t.Fatalf("reconcile() error = %v", err)
	}
	if got := f.events(); len(got) != 0 {
		t.Errorf("events recorded although the status was not written: %v", got)
	}

	failPatch = false
	if err := f.reconciler().reconcile(context.Background(), f.state); err == nil {
		t.Fatal("reconcile() succeeded with an unresolvable path")
	}
	got := f.events()
	if !slices.ContainsFunc(got, func(e string) bool {
		return strings.HasPrefix(e, fmt.Sprintf("Warning %s ", EventReasonResolutionFailed)) && strings.Contains(e, "root:missing")
	}) {
		t.Errorf("events = %v, want a %s warning naming root:missing", got, EventReasonResolutionFailed)
	}
}

// A rule whose status the webhook wrote meanwhile is reconciled again soon,
// without an error.
func TestReconcileRetriesStatusConflictsQuietly(t *testing.T) {
	funcs := &interceptor.Funcs{SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
		return apierrors.NewConflict(schema.GroupResource{Group: depv1alpha1.GroupVersion.Group, Resource: "dependencyrules"}, "r", errors.New("the object has been modified"))
	}}
	f := newFixture(t, map[string]logicalcluster.Name{"root:compute": "c-compute", "root:net": "c-net"}, funcs, testRule("r", "root:net/vpcs.net.io"))
	res, err := f.reconciler().Reconcile(context.Background(), mcreconcile.Request{})
	if err != nil || res.RequeueAfter != time.Second {
		t.Errorf("Reconcile() = %+v, %v; want a requeue after a second and no error", res, err)
	}
}
