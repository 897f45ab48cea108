package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// Listing is the rules and the workspaces that a reconcile decides from.
type Listing struct {
	// Rules are all DependencyRules, sorted by key.
	Rules []depv1alpha1.DependencyRule
	// Workspaces maps the path of every workspace that binds the APIExport
	// to its logical cluster. kcp records the path of a workspace in the
	// kcp.io/path annotation of every APIBinding in it, and does not let
	// anyone set another value.
	Workspaces map[string]logicalcluster.Name
}

// State is everything a reconcile decides from.
type State struct {
	Listing
	// Complete is set when Listing comes from a complete listing across all
	// shards (CompleteLister) rather than from the manager's caches.
	Complete bool
	// Configs are the ValidatingWebhookConfigurations named
	// webhookconfig.Name in the engaged workspaces, managed by the
	// controller or not, by logical cluster, from the manager's caches.
	Configs map[logicalcluster.Name]*admissionregistrationv1.ValidatingWebhookConfiguration
	// Mutating are the MutatingWebhookConfigurations named
	// webhookconfig.Name, likewise.
	Mutating map[logicalcluster.Name]*admissionregistrationv1.MutatingWebhookConfiguration
}

// Cluster is what the controller uses of a workspace that the manager has
// engaged.
type Cluster struct {
	// Cache reads from the manager's cache of the workspace.
	Cache client.Reader
	// Client writes into the workspace, through the virtual workspace of
	// its shard.
	Client client.Client
	// Live reads from kcp, bypassing the cache, where the absence of an
	// object must be proven.
	Live client.Reader
	// Recorder records events on objects in the workspace.
	Recorder events.EventRecorder
}

// Clusters are the workspaces that bind the APIExport, as far as the
// manager has engaged them.
type Clusters interface {
	// Engaged returns the logical clusters that the manager has engaged.
	Engaged() []logicalcluster.Name
	// Get returns an engaged cluster, or an error that wraps
	// multicluster.ErrClusterNotFound if it is not engaged.
	Get(ctx context.Context, cluster logicalcluster.Name) (*Cluster, error)
}

// CompleteLister lists the rules and the workspaces that bind the APIExport
// on every shard, uncached: the proof that something the caches lack does
// not exist.
type CompleteLister interface {
	// ListComplete returns the complete listing, or fails: a listing of some
	// shards is never returned as if it were complete.
	ListComplete(ctx context.Context) (*Listing, error)
}

// ClusterNamer enumerates the clusters that a multicluster provider has
// engaged; the Clusters of kcp's apiexport provider do.
type ClusterNamer interface {
	ClusterNames() []multicluster.ClusterName
}

// managerClusters are the clusters of a multicluster manager.
type managerClusters struct {
	mgr   mcmanager.Manager
	names ClusterNamer
}

// NewClusters returns the workspaces that mgr has engaged, which names
// enumerates.
func NewClusters(mgr mcmanager.Manager, names ClusterNamer) Clusters {
	return managerClusters{mgr: mgr, names: names}
}

// Engaged implements Clusters.
func (m managerClusters) Engaged() []logicalcluster.Name {
	names := m.names.ClusterNames()
	out := make([]logicalcluster.Name, 0, len(names))
	for _, n := range names {
		out = append(out, logicalcluster.Name(n))
	}
	return out
}

// Get implements Clusters.
func (m managerClusters) Get(ctx context.Context, name logicalcluster.Name) (*Cluster, error) {
	cl, err := m.mgr.GetCluster(ctx, multicluster.ClusterName(name))
	if err != nil {
		return nil, err
	}
	c := cl.GetClient()
	return &Cluster{Cache: cl.GetCache(), Client: c, Live: liveReader{c}, Recorder: cl.GetEventRecorder(ControllerName)}, nil
}

// liveReader reads typed objects through a client of the manager, bypassing
// its cache: the client reads unstructured objects from kcp, not from the
// cache (controller-runtime caches unstructured objects only when told to),
// and liveReader converts them. (The cluster's API reader is its cache.)
type liveReader struct {
	c client.Client
}

// Get implements client.Reader.
func (l liveReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, l.c.Scheme())
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := l.c.Get(ctx, key, u, opts...); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), obj)
}

// List implements client.Reader.
func (l liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := apiutil.GVKForObject(list, l.c.Scheme())
	if err != nil {
		return err
	}
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(gvk)
	if err := l.c.List(ctx, u, opts...); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), list)
}

// observe reads the state from the manager's caches of every engaged
// workspace: what the caches hold exists or existed a moment ago, but
// rules, bindings and configurations of a workspace that is not engaged yet
// (at startup, or just after it bound the export) are missing. See
// Reconciler for what that means.
func observe(ctx context.Context, clusters Clusters) (*State, error) {
	state := &State{
		Listing:  Listing{Workspaces: map[string]logicalcluster.Name{}},
		Configs:  map[logicalcluster.Name]*admissionregistrationv1.ValidatingWebhookConfiguration{},
		Mutating: map[logicalcluster.Name]*admissionregistrationv1.MutatingWebhookConfiguration{},
	}
	for _, name := range clusters.Engaged() {
		cl, err := clusters.Get(ctx, name)
		if errors.Is(err, multicluster.ErrClusterNotFound) {
			continue // disengaged meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("failed to get logical cluster %s: %w", name, err)
		}
		bindings := &apisv1alpha2.APIBindingList{}
		if err := cl.Cache.List(ctx, bindings); err != nil {
			return nil, fmt.Errorf("failed to list APIBindings in logical cluster %s: %w", name, err)
		}
		maps.Copy(state.Workspaces, kcp.Workspaces(bindings.Items))
		rules := &depv1alpha1.DependencyRuleList{}
		if err := cl.Cache.List(ctx, rules); err != nil {
			return nil, fmt.Errorf("failed to list DependencyRules in logical cluster %s: %w", name, err)
		}
		state.Rules = append(state.Rules, rules.Items...)
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		switch err := cl.Cache.Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg); {
		case err == nil:
			state.Configs[name] = cfg
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("failed to get ValidatingWebhookConfiguration %s in logical cluster %s: %w", webhookconfig.Name, name, err)
		}
		mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
		switch err := cl.Cache.Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, mutating); {
		case err == nil:
			state.Mutating[name] = mutating
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("failed to get MutatingWebhookConfiguration %s in logical cluster %s: %w", webhookconfig.Name, name, err)
		}
	}
	sortRules(state.Rules)
	return state, nil
}

func sortRules(rules []depv1alpha1.DependencyRule) {
	slices.SortFunc(rules, func(a, b depv1alpha1.DependencyRule) int {
		return kcp.KeyOf(&a).Compare(kcp.KeyOf(&b))
	})
}

// vwLister lists through the APIExport's virtual workspace on every shard.
type vwLister struct {
	vw *vw.VirtualWorkspace
}

// NewCompleteLister returns a CompleteLister that lists, through the
// virtual workspace of every shard, all APIBindings to the export and all
// DependencyRules.
func NewCompleteLister(rules *vw.VirtualWorkspace) CompleteLister {
	return vwLister{vw: rules}
}

// ListComplete implements CompleteLister.
func (l vwLister) ListComplete(ctx context.Context) (*Listing, error) {
	shards, err := l.vw.ListRules(ctx)
	if err != nil {
		return nil, err
	}
	listing := &Listing{Workspaces: map[string]logicalcluster.Name{}}
	for _, s := range shards {
		maps.Copy(listing.Workspaces, kcp.Workspaces(s.Bindings))
		listing.Rules = append(listing.Rules, s.Rules.Items...)
	}
	sortRules(listing.Rules)
	return listing, nil
}
