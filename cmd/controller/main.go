// Command controller watches DependencyRules through the APIExport's virtual
// workspace and installs the deletion-protection webhook in every provider
// workspace whose resources are protected.
package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/controllerserver"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
)

func main() {
	command.Main("controller", options{controllerserver.NewOptions()})
}

// options are the controller's command line options: the settings of
// controllerserver, with the binary's Build.
type options struct {
	*controllerserver.Options
}

// Build implements command.Options: the controller as controllerserver
// assembles it, its metrics registered where the manager serves metrics.
func (o options) Build(ctx context.Context, cfg *rest.Config) (manager.Runnable, error) {
	c, err := controllerserver.New(ctx, cfg, *o.Options, o.ManagerOptions())
	if err != nil {
		return nil, err
	}
	// The manager serves controller-runtime's registry.
	if err := ctrlmetrics.Registry.Register(c.Metrics); err != nil {
		return nil, fmt.Errorf("failed to register the controller's metrics: %w", err)
	}
	if err := ctrlmetrics.Registry.Register(kcpversion.ControllerMetric(c.KCP)); err != nil {
		return nil, fmt.Errorf("failed to register the kcp version metric: %w", err)
	}
	return c.Manager, nil
}
