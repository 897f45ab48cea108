package vw

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/kcp-dev/multicluster-provider/apiexport"
	"github.com/kcp-dev/multicluster-provider/pkg/handlers"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
)

// Manager is the multicluster manager of a binary, over the virtual
// workspace of the APIExport that serves DependencyRules.
type Manager struct {
	mcmanager.Manager
	// Provider engages the workspaces that bind the export, each with a
	// cache over its shard's wildcard informers; it knows which are engaged.
	Provider *apiexport.Provider
	// Export is the export's virtual workspace on every shard, for complete
	// uncached listings.
	Export *VirtualWorkspace
}

// NewManager returns the multicluster manager of a binary: its clusters are
// the workspaces that bind the APIExport exportName, engaged by
// multicluster-provider's apiexport provider through the export's virtual
// workspace on every shard. cfg must point at the workspace of the export
// (its host ends with /clusters/<workspace>); NewManager fails with an error
// that says so otherwise. handlers are told when a workspace starts and stops
// binding the export.
func NewManager(ctx context.Context, cfg *rest.Config, exportName string, opts manager.Options, h ...handlers.Handler) (*Manager, error) {
	base, workspace, err := kcp.WorkspaceConfig(cfg)
	if err != nil {
		return nil, err
	}
	log.FromContext(ctx).Info("Using the APIExport's workspace", "workspace", workspace, "server", base, "apiExport", exportName)
	export, err := NewVirtualWorkspace(cfg, exportName)
	if err != nil {
		return nil, err
	}
	s := scheme.New()
	provider, err := apiexport.New(cfg, exportName, apiexport.Options{Scheme: s, Handlers: h})
	if err != nil {
		return nil, fmt.Errorf("failed to create the APIExport provider: %w", err)
	}
	opts.Scheme = s
	mgr, err := mcmanager.New(cfg, provider, opts)
	if err != nil {
		return nil, fmt.Errorf("failed to create manager: %w", err)
	}
	return &Manager{Manager: mgr, Provider: provider, Export: export}, nil
}
