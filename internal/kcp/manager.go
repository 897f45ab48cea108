package kcp

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/kcp-dev/multicluster-provider/apiexport"
	"github.com/kcp-dev/multicluster-provider/pkg/handlers"

	"github.com/opendefensecloud/dependency-controller/internal/scheme"
)

// NewManager returns the multicluster manager of a binary: its clusters are
// the workspaces that bind the APIExport exportName, engaged by
// multicluster-provider's apiexport provider through the export's virtual
// workspace on every shard, each with a cache over that shard's wildcard
// informers. cfg must point at the workspace of the export (its host ends
// with /clusters/<workspace>); NewManager fails with an error that says so
// otherwise. handlers are told when a workspace starts and stops binding the
// export. The provider is returned too: it knows which clusters are engaged.
func NewManager(ctx context.Context, cfg *rest.Config, exportName string, opts manager.Options, h ...handlers.Handler) (mcmanager.Manager, *apiexport.Provider, error) {
	base, workspace, err := WorkspaceConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	log.FromContext(ctx).Info("Using the APIExport's workspace", "workspace", workspace, "server", base, "apiExport", exportName)
	s := scheme.New()
	provider, err := apiexport.New(cfg, exportName, apiexport.Options{Scheme: s, Handlers: h})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create the APIExport provider: %w", err)
	}
	opts.Scheme = s
	mgr, err := mcmanager.New(cfg, provider, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create manager: %w", err)
	}
	return mgr, provider, nil
}
