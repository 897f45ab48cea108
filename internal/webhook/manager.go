package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/multicluster-provider/apiexport"
	"github.com/kcp-dev/multicluster-provider/pkg/handlers"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/dependents"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
)

// Options configure the webhook.
type Options struct {
	// APIExportName is the APIExport serving DependencyRules, in the
	// workspace of the kubeconfig.
	APIExportName string
	// FrontProxyURL is where dependents are listed, as
	// <url>/clusters/<logical cluster>/...; empty means the kubeconfig's
	// server without its /clusters/ path.
	FrontProxyURL string
	// Path is the HTTP path of the validating endpoint.
	Path string
	// RequestTimeout bounds the listing of dependents per request.
	RequestTimeout time.Duration
	// MaxBlockers is how many blockers a denial names.
	MaxBlockers int
	// ResyncPeriod is how often all rules are listed again.
	ResyncPeriod time.Duration
	// MetricsRegistry receives the webhook's metrics; nil means
	// controller-runtime's registry, which the manager serves.
	MetricsRegistry prometheus.Registerer
}

// NewManager returns a multicluster manager that keeps the rule registry
// and serves the deletion validator at opts.Path on the manager's webhook
// server (configure TLS in mgrOpts.WebhookServer). cfg must point at the
// APIExport's workspace. The returned gate opens once all existing rules are
// registered; until then /readyz fails with the reason and every DELETE of a
// protected object is denied with a message to retry.
func NewManager(ctx context.Context, cfg *rest.Config, opts Options, mgrOpts manager.Options) (mcmanager.Manager, *InitGate, error) {
	base, workspace, err := kcp.WorkspaceConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	frontProxy := opts.FrontProxyURL
	if frontProxy == "" {
		frontProxy = base
	}
	log.FromContext(ctx).Info("Using the APIExport's workspace", "workspace", workspace, "apiExport", opts.APIExportName, "frontProxy", frontProxy)

	s := scheme.New()
	direct, err := client.New(cfg, client.Options{Scheme: s, Mapper: scheme.RESTMapper()})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create client for %s: %w", workspace, err)
	}
	if _, err := kcp.VirtualWorkspaceURLs(ctx, direct, opts.APIExportName); err != nil {
		// Not fatal: the webhook serves (denying deletes with a retry
		// message) and keeps trying, so that it recovers once RBAC is
		// applied or kcp is reachable, instead of crash-looping.
		log.FromContext(ctx).Error(err, "Cannot read the APIExportEndpointSlice yet; deletes of protected objects are denied until the rules are loaded")
	}

	reg := registry.New()
	gate := NewInitGate()
	provider, err := apiexport.New(cfg, opts.APIExportName, apiexport.Options{
		Scheme:   s,
		Handlers: handlers.Handlers{bindingHandler{registry: reg}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create the APIExport provider: %w", err)
	}
	mgrOpts.Scheme = s
	mgr, err := mcmanager.New(cfg, provider, mgrOpts)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create manager: %w", err)
	}

	if err := mcbuilder.ControllerManagedBy(mgr).
		Named("dependency-rule-registry").
		For(&depv1alpha1.DependencyRule{}).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			// Every replica serves requests and keeps its own registry.
			NeedLeaderElection: ptr.To(false),
			SkipNameValidation: mgr.GetControllerOptions().SkipNameValidation,
		}).
		Complete(NewRuleCacheManager(mgr, reg)); err != nil {
		return nil, nil, fmt.Errorf("failed to set up the rule registry controller: %w", err)
	}
	vw, err := kcp.NewVirtualWorkspaceClients(cfg, s, scheme.RESTMapper())
	if err != nil {
		return nil, nil, err
	}
	if err := mgr.GetLocalManager().Add(NewPopulator(direct, opts.APIExportName, vw, reg, gate, opts.ResyncPeriod)); err != nil {
		return nil, nil, err
	}

	listerConfig := rest.CopyConfig(cfg)
	listerConfig.Host = frontProxy
	httpClient, err := rest.HTTPClientFor(listerConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create HTTP client for %s: %w", frontProxy, err)
	}
	metricsRegistry := opts.MetricsRegistry
	if metricsRegistry == nil {
		metricsRegistry = ctrlmetrics.Registry
	}
	metrics, err := NewMetrics(metricsRegistry, reg.Len)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to register metrics: %w", err)
	}
	validator := NewDeletionValidator(reg, gate, dependents.NewHTTPLister(frontProxy, httpClient),
		WithTimeout(opts.RequestTimeout), WithMaxBlockers(opts.MaxBlockers), WithMetrics(metrics))
	mgr.GetWebhookServer().Register(opts.Path, NewAdmissionHandler(validator))

	if err := mgr.AddReadyzCheck("rule-registry", gate.ReadyzCheck); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddReadyzCheck("webhook-server", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddHealthzCheck("webhook-server", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, nil, err
	}
	return mgr, gate, nil
}
