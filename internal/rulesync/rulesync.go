// Package rulesync keeps the webhook's rule registry (package registry) in
// step with the DependencyRules of every workspace that binds the
// dependencies APIExport, from two sources that may each deliver an older
// view than the registry holds (the registry decides which wins):
//
//   - the RuleReconciler, a multicluster reconciler that registers the
//     version of a rule in the manager's cache, or forgets a rule the cache
//     no longer has;
//   - the Loader, which lists every rule of every shard at startup and then
//     periodically, and marks the Readiness loaded once the first listing
//     of every shard has been applied.
//
// The BindingHandler, which the APIExport provider calls, tells the
// registry which workspace path each bound logical cluster has, and makes it
// forget the rules of a workspace that stops binding the export.
package rulesync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/pkg/handlers"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Permissions of the webhook in the dep-ctrl workspace: discovering the
// APIExport's virtual workspace URLs, reading DependencyRules and APIBindings
// through it, and patching the webhook's conditions of rules (package
// conditions; checked as apiexports/content with the verb of each request);
// "access" on "/" lets the webhook into the workspace at all.
//
// +kubebuilder:rbac:urls=/,verbs=access
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexportendpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=apis.kcp.io,resources=apiexports/content,verbs=get;list;watch;patch

// ReconcilerName names the rule reconciler in logs and metrics.
const ReconcilerName = "dependency-rule-registry"

// Readiness records whether the registry holds every rule that existed when
// the webhook started: it is not loaded until a complete listing of every
// shard has been applied. While it is not, the webhook reports not ready and
// denies every DELETE of a protected object, and every CREATE and UPDATE of
// a dependent.
type Readiness struct {
	once    sync.Once
	loaded  chan struct{}
	lastErr atomic.Pointer[error]
}

// NewReadiness returns a Readiness that is not loaded.
func NewReadiness() *Readiness {
	return &Readiness{loaded: make(chan struct{})}
}

// MarkLoaded records that the registry holds every rule.
func (r *Readiness) MarkLoaded() {
	r.once.Do(func() { close(r.loaded) })
}

// Loaded reports whether the registry holds every rule.
func (r *Readiness) Loaded() bool {
	select {
	case <-r.loaded:
		return true
	default:
		return false
	}
}

// ReadyzCheck is a healthz.Checker that fails, saying why, until the
// registry is loaded.
func (r *Readiness) ReadyzCheck(_ *http.Request) error {
	if r.Loaded() {
		return nil
	}
	if err := r.lastErr.Load(); err != nil {
		return fmt.Errorf("the rule registry is not loaded yet: %w", *err)
	}
	return errors.New("the rule registry is not loaded yet")
}

func (r *Readiness) setError(err error) {
	r.lastErr.Store(&err)
}

// RuleReconciler keeps the registry in step with the DependencyRules of every
// workspace that binds the APIExport: a multicluster reconciler that
// registers the version of a rule in the manager's cache, or forgets a rule
// the cache no longer has.
type RuleReconciler struct {
	mgr      mcmanager.Manager
	registry *registry.Registry
}

// Reconcile implements mcreconcile.Reconciler.
func (r *RuleReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	key := kcp.ObjectKey{Cluster: logicalcluster.Name(req.ClusterName), Name: req.Name}
	cl, err := r.mgr.GetCluster(ctx, req.ClusterName)
	if errors.Is(err, multicluster.ErrClusterNotFound) {
		// The workspace stopped binding the export; BindingHandler has
		// forgotten its rules.
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	rule := &depv1alpha1.DependencyRule{}
	if err := cl.GetClient().Get(ctx, req.NamespacedName, rule); err != nil {
		if apierrors.IsNotFound(err) {
			if r.registry.Forget(key) {
				log.FromContext(ctx).Info("Unregistered rule", "rule", key)
			}
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("failed to get DependencyRule %s: %w", key, err)
	}
	rr := registry.FromDependencyRule(rule)
	if len(rr.Invalid) > 0 {
		log.FromContext(ctx).Error(nil, "Ignoring invalid field paths of rule", "rule", key, "paths", rr.Invalid)
	}
	if r.registry.Apply(rr) {
		log.FromContext(ctx).Info("Registered rule", "rule", key, "dependent", rr.Dependent, "references", len(rr.References))
	}
	return reconcile.Result{}, nil
}

// BindingHandler records the path of every workspace that binds the
// APIExport, and forgets the rules of a workspace that stops binding it, for
// which no further events arrive. Pass it to the APIExport provider
// (vw.NewManager).
type BindingHandler struct {
	Registry *registry.Registry
}

var _ handlers.Handler = BindingHandler{}

// OnAdd implements handlers.Handler.
func (h BindingHandler) OnAdd(binding client.Object) {
	h.Registry.SetWorkspace(kcp.WorkspacePath(binding), logicalcluster.From(binding))
}

// OnUpdate implements handlers.Handler.
func (h BindingHandler) OnUpdate(_, binding client.Object) {
	h.OnAdd(binding)
}

// OnDelete implements handlers.Handler.
func (h BindingHandler) OnDelete(binding client.Object) {
	h.Registry.ForgetCluster(logicalcluster.From(binding))
}

// Loader lists all rules through the APIExport's virtual workspace on every
// shard and syncs the registry with each shard's listing: once at startup,
// after which it marks the registry loaded, and then every resync period,
// which repairs anything the event stream missed. It is a manager.Runnable
// that runs on every replica.
type Loader struct {
	vw        *vw.VirtualWorkspace
	registry  *registry.Registry
	readiness *Readiness
	resync    time.Duration
}

// Start implements manager.Runnable.
func (l *Loader) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("rule-loader")
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 30 * time.Second}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		if err := l.LoadAll(ctx); err != nil {
			l.readiness.setError(err)
			logger.Error(err, "Failed to list DependencyRules; the webhook denies deletes until it can")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil // stopped before the first load
	}
	l.readiness.MarkLoaded()
	logger.Info("Rule registry loaded", "rules", l.registry.Len())

	_ = wait.PollUntilContextCancel(ctx, l.resync, false, func(ctx context.Context) (bool, error) {
		if err := l.LoadAll(ctx); err != nil {
			logger.Error(err, "Failed to resync DependencyRules")
		}
		return false, nil
	})
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves admission requests and needs its own registry.
func (l *Loader) NeedLeaderElection() bool {
	return false
}

// LoadAll lists the rules of every shard and syncs the registry with them.
func (l *Loader) LoadAll(ctx context.Context) error {
	shards, err := l.vw.ListRules(ctx)
	if err != nil {
		return err
	}
	workspaces := map[string]logicalcluster.Name{}
	for _, s := range shards {
		bound := map[logicalcluster.Name]bool{}
		for i := range s.Bindings {
			bound[logicalcluster.From(&s.Bindings[i])] = true
		}
		maps.Copy(workspaces, kcp.Workspaces(s.Bindings))
		listing := registry.Listing{ResourceVersion: s.Rules.ResourceVersion, Covers: func(c logicalcluster.Name) bool { return bound[c] }}
		for i := range s.Rules.Items {
			r := registry.FromDependencyRule(&s.Rules.Items[i])
			if len(r.Invalid) > 0 {
				log.FromContext(ctx).Error(nil, "Ignoring invalid field paths of rule", "rule", r.Key, "paths", r.Invalid)
			}
			listing.Rules = append(listing.Rules, r)
		}
		l.registry.Sync(listing)
	}
	l.registry.SetWorkspaces(workspaces)
	return nil
}

// SetupWithManager feeds reg from the manager's workspaces: a RuleReconciler
// on DependencyRules and a Loader that loads every rule through rules at
// startup (then marks readiness loaded) and every resync period. Pass
// BindingHandler{reg} to the manager's provider as well.
func SetupWithManager(mgr mcmanager.Manager, rules *vw.VirtualWorkspace, reg *registry.Registry, readiness *Readiness, resync time.Duration) error {
	if err := mcbuilder.ControllerManagedBy(mgr).
		Named(ReconcilerName).
		For(&depv1alpha1.DependencyRule{}).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			// Every replica serves requests and keeps its own registry.
			NeedLeaderElection: ptr.To(false),
			SkipNameValidation: mgr.GetControllerOptions().SkipNameValidation,
		}).
		Complete(&RuleReconciler{mgr: mgr, registry: reg}); err != nil {
		return fmt.Errorf("failed to set up the rule reconciler: %w", err)
	}
	return mgr.GetLocalManager().Add(&Loader{vw: rules, registry: reg, readiness: readiness, resync: resync})
}
