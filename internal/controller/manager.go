package controller

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/apiexport"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
)

// NewManager returns a multicluster manager that runs the controller. cfg
// must point at the workspace of the APIExport (its host ends with
// /clusters/<workspace>); workspace paths are resolved through the same
// server, and DependencyRules and webhook configurations are reached through
// the APIExport's virtual workspace. NewManager fails early, with an error
// that says what to fix, if cfg does not point at a workspace or the
// APIExport has no APIExportEndpointSlice there. Events on triggers cause a
// reconcile.
func NewManager(ctx context.Context, cfg *rest.Config, opts Options, mgrOpts manager.Options, triggers <-chan event.GenericEvent) (mcmanager.Manager, error) {
	base, workspace, err := kcp.WorkspaceConfig(cfg)
	if err != nil {
		return nil, err
	}
	log.FromContext(ctx).Info("Using the APIExport's workspace", "workspace", workspace, "server", base, "apiExport", opts.APIExportName)

	s := scheme.New()
	direct, err := client.New(cfg, client.Options{Scheme: s, Mapper: scheme.RESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("failed to create client for %s: %w", workspace, err)
	}
	if _, err := kcp.VirtualWorkspaceURLs(ctx, direct, opts.APIExportName); err != nil {
		return nil, err
	}

	provider, err := apiexport.New(cfg, opts.APIExportName, apiexport.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("failed to create the APIExport provider: %w", err)
	}
	mgrOpts.Scheme = s
	mgr, err := mcmanager.New(cfg, provider, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("failed to create manager: %w", err)
	}

	frontProxy := rest.CopyConfig(cfg)
	frontProxy.Host = base
	clients, err := kcp.NewClusterClients(frontProxy, nil, s, scheme.RESTMapper())
	if err != nil {
		return nil, err
	}
	recorder := func(ctx context.Context, cluster logicalcluster.Name) (events.EventRecorder, error) {
		cl, err := mgr.GetCluster(ctx, ClusterName(cluster))
		if err != nil {
			return nil, err
		}
		return cl.GetEventRecorder(ControllerName), nil
	}
	r, err := NewReconciler(direct, cfg, kcp.NewWorkspaceResolver(kcp.ClientWorkspaceGetter(clients)), recorder, opts)
	if err != nil {
		return nil, err
	}
	if err := SetupWithManager(mgr, r, triggers); err != nil {
		return nil, fmt.Errorf("failed to set up the controller: %w", err)
	}
	return mgr, nil
}
