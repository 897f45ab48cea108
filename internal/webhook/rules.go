package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// InitGate is closed once the registry holds every rule that existed at
// startup. Until then the webhook is not ready and denies every DELETE.
type InitGate struct {
	once    sync.Once
	done    chan struct{}
	lastErr atomic.Pointer[error]
}

// NewInitGate returns a closed-for-business gate.
func NewInitGate() *InitGate {
	return &InitGate{done: make(chan struct{})}
}

// Open marks the registry as complete.
func (g *InitGate) Open() {
	g.once.Do(func() { close(g.done) })
}

// Initialized implements Gate.
func (g *InitGate) Initialized() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// ReadyzCheck is a healthz.Checker that fails until the gate is open,
// saying why.
func (g *InitGate) ReadyzCheck(_ *http.Request) error {
	if g.Initialized() {
		return nil
	}
	if err := g.lastErr.Load(); err != nil {
		return fmt.Errorf("the rule registry is not initialized yet: %w", *err)
	}
	return fmt.Errorf("the rule registry is not initialized yet")
}

// setError records why initialization has not succeeded yet.
func (g *InitGate) setError(err error) {
	g.lastErr.Store(&err)
}

// RuleCacheManager keeps the registry in step with DependencyRules: it is a
// multicluster reconciler for rules in every workspace that binds the
// APIExport.
type RuleCacheManager struct {
	mgr      mcmanager.Manager
	registry *registry.Registry
}

// NewRuleCacheManager returns a reconciler that feeds reg from the rules the
// manager's clusters hold.
func NewRuleCacheManager(mgr mcmanager.Manager, reg *registry.Registry) *RuleCacheManager {
	return &RuleCacheManager{mgr: mgr, registry: reg}
}

// Reconcile registers the current state of one rule, or unregisters it if it
// is gone.
func (m *RuleCacheManager) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	cl, err := m.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, err
	}
	key := registry.Key(logicalcluster.Name(req.ClusterName), req.Name)
	rule := &depv1alpha1.DependencyRule{}
	if err := cl.GetClient().Get(ctx, req.NamespacedName, rule); err != nil {
		if apierrors.IsNotFound(err) {
			if m.registry.Delete(key, m.registry.LastSeen(key)) {
				log.FromContext(ctx).Info("Unregistered rule", "rule", key)
			}
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("failed to get DependencyRule %s: %w", key, err)
	}
	r := registry.FromDependencyRule(rule)
	if len(r.Invalid) > 0 {
		log.FromContext(ctx).Error(nil, "Ignoring invalid field paths of rule", "rule", key, "paths", r.Invalid)
	}
	if m.registry.Apply(r, registry.ParseResourceVersion(rule.ResourceVersion)) {
		log.FromContext(ctx).Info("Registered rule", "rule", key, "dependent", r.Dependent, "references", len(r.References))
	}
	return reconcile.Result{}, nil
}

// bindingHandler forgets the rules of a workspace that stops binding the
// APIExport: no further events arrive for it.
type bindingHandler struct {
	registry *registry.Registry
}

func (h bindingHandler) OnAdd(client.Object)            {}
func (h bindingHandler) OnUpdate(_, _ client.Object)    {}
func (h bindingHandler) OnDelete(binding client.Object) { h.deleteCluster(binding) }

func (h bindingHandler) deleteCluster(binding client.Object) {
	h.registry.DeleteCluster(logicalcluster.From(binding), registry.ParseResourceVersion(binding.GetResourceVersion()))
}

// Populator lists all rules from the APIExport's virtual workspace on every
// shard and syncs the registry with them: once at startup, after which it
// opens the gate, and then every resync period, which repairs anything the
// event stream missed. It is a manager.Runnable.
type Populator struct {
	local      client.Reader
	exportName string
	vw         *kcp.VirtualWorkspaceClients
	registry   *registry.Registry
	gate       *InitGate
	resync     time.Duration
}

// NewPopulator returns a Populator. local reads the APIExport's workspace;
// vw reaches its virtual workspace.
func NewPopulator(local client.Reader, exportName string, vw *kcp.VirtualWorkspaceClients, reg *registry.Registry, gate *InitGate, resync time.Duration) *Populator {
	return &Populator{local: local, exportName: exportName, vw: vw, registry: reg, gate: gate, resync: resync}
}

// Start implements manager.Runnable.
func (p *Populator) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("populate-registry")
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 30 * time.Second}
	for !p.gate.Initialized() {
		if err := p.SyncAll(ctx); err != nil {
			p.gate.setError(err)
			logger.Error(err, "Failed to list DependencyRules; the webhook denies deletes until it can", "retryIn", backoff.Duration)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff.Step()):
			}
			continue
		}
		p.gate.Open()
		logger.Info("Rule registry initialized", "rules", p.registry.Len())
	}

	ticker := time.NewTicker(p.resync)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := p.SyncAll(ctx); err != nil {
				logger.Error(err, "Failed to resync DependencyRules")
			}
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves admission requests and needs its own registry.
func (p *Populator) NeedLeaderElection() bool {
	return false
}

// SyncAll lists the rules on every shard and syncs the registry with them.
func (p *Populator) SyncAll(ctx context.Context) error {
	urls, err := kcp.VirtualWorkspaceURLs(ctx, p.local, p.exportName)
	if err != nil {
		return err
	}
	for _, url := range urls {
		if err := p.syncShard(ctx, url); err != nil {
			return err
		}
	}
	return nil
}

func (p *Populator) syncShard(ctx context.Context, url string) error {
	clients, err := p.vw.For(url)
	if err != nil {
		return err
	}
	all, err := clients.Cluster(logicalcluster.NewPath(kcp.Wildcard))
	if err != nil {
		return err
	}

	// Bindings first: a workspace that binds after this list is out of scope
	// for deletions below, so nothing it registers meanwhile is lost.
	bindings := &apisv1alpha2.APIBindingList{}
	if err := all.List(ctx, bindings); err != nil {
		return fmt.Errorf("failed to list APIBindings through %s: %w", url, err)
	}
	bound := map[string]bool{}
	for i := range bindings.Items {
		bound[logicalcluster.From(&bindings.Items[i]).String()] = true
	}

	list := &depv1alpha1.DependencyRuleList{}
	if err := all.List(ctx, list); err != nil {
		return fmt.Errorf("failed to list DependencyRules through %s: %w", url, err)
	}
	rules := make([]*registry.Rule, 0, len(list.Items))
	rvs := make([]uint64, 0, len(list.Items))
	for i := range list.Items {
		r := registry.FromDependencyRule(&list.Items[i])
		if len(r.Invalid) > 0 {
			log.FromContext(ctx).Error(nil, "Ignoring invalid field paths of rule", "rule", r.Key, "paths", r.Invalid)
		}
		rules = append(rules, r)
		rvs = append(rvs, registry.ParseResourceVersion(list.Items[i].ResourceVersion))
	}
	p.registry.Sync(rules, rvs, registry.ParseResourceVersion(list.ResourceVersion), func(key string) bool {
		cluster, _, _ := strings.Cut(key, "/")
		return bound[cluster]
	})
	return nil
}
