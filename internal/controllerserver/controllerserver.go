// Package controllerserver assembles the controller binary: a multicluster
// manager over the dependencies APIExport, the reconciler that installs the
// webhook configurations in provider workspaces and reports on every rule,
// the watcher that rolls a rotated CA bundle of the webhook out, and health
// checks. cmd/controller binds Options to its flags and runs what New
// returns; the tests run the same.
package controllerserver

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/opendefensecloud/dependency-controller/internal/cabundle"
	"github.com/opendefensecloud/dependency-controller/internal/controller"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// Controller is the assembled controller.
type Controller struct {
	// Manager runs everything; start it.
	Manager mcmanager.Manager
	// Metrics are the controller's own metrics; the binary registers them
	// where the manager serves metrics.
	Metrics *controller.Metrics
	// KCP is the version of kcp read at start.
	KCP kcpversion.Info
}

// New assembles the controller with the credentials of cfg, which must point
// at the workspace of the APIExport; it fails, saying what to fix, if cfg
// does not or that workspace has no APIExportEndpointSlice for the export.
// mgrOpts configure the manager (cmd/controller passes
// opts.ManagerOptions()); its leader election ID defaults to
// controller.ControllerName.
func New(ctx context.Context, cfg *rest.Config, opts Options, mgrOpts manager.Options) (*Controller, error) {
	webhook := func() webhookconfig.Options {
		return webhookconfig.Options{URL: opts.WebhookURL, TimeoutSeconds: opts.WebhookTimeoutSeconds, FailurePolicy: opts.FailurePolicy, WebhookUser: opts.WebhookUser}
	}
	var triggers <-chan event.GenericEvent
	var caWatcher *cabundle.Watcher
	if opts.WebhookCABundleFile != "" {
		var err error
		if caWatcher, err = cabundle.New(opts.WebhookCABundleFile, opts.CABundleCheckInterval); err != nil {
			return nil, fmt.Errorf("invalid CA bundle of the webhook: %w", err)
		}
		triggers = caWatcher.Changes()
		withoutCA := webhook
		webhook = func() webhookconfig.Options {
			o := withoutCA()
			o.CABundle = caWatcher.Bundle()
			return o
		}
	}

	if mgrOpts.LeaderElectionID == "" {
		mgrOpts.LeaderElectionID = controller.ControllerName
	}
	mgr, err := vw.NewManager(ctx, cfg, opts.APIExportName, mgrOpts)
	if err != nil {
		return nil, err
	}
	// Fail early, saying what to fix, if the kubeconfig does not point at
	// the workspace of the APIExport.
	if _, err := mgr.Export.URLs(ctx); err != nil {
		return nil, err
	}
	metrics := controller.NewMetrics()
	kcpVersion := kcpversion.Check(ctx, cfg)
	if err := controller.SetupWithManager(mgr, mgr.Provider.Clusters, mgr.Export, controller.Options{
		APIExportName: opts.APIExportName,
		Webhook:       webhook,
		ResyncPeriod:  opts.ResyncPeriod,
		Metrics:       metrics,
		KCP:           kcpVersion,
	}, triggers); err != nil {
		return nil, err
	}
	if caWatcher != nil {
		if err := mgr.GetLocalManager().Add(caWatcher); err != nil {
			return nil, fmt.Errorf("failed to add the CA bundle watcher: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("failed to add the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("failed to add the readiness check: %w", err)
	}
	log.FromContext(ctx).Info("Controller assembled", "apiExport", opts.APIExportName, "webhookURL", opts.WebhookURL, "caBundle", opts.WebhookCABundleFile)
	return &Controller{Manager: mgr, Metrics: metrics, KCP: kcpVersion}, nil
}
