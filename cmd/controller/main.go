// Command controller watches DependencyRules through the APIExport's virtual
// workspace and installs the webhook configuration in every provider
// workspace whose resources are protected (DELETE) or whose rules name
// dependents (CREATE and UPDATE, refusing new references to objects being
// deleted). internal/controllerserver assembles it.
package main

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/controllerserver"
)

func main() {
	opts := newOptions()
	command.Main("controller", opts, func(ctx context.Context, cfg *rest.Config) error {
		return run(ctx, cfg, opts)
	})
}

func run(ctx context.Context, cfg *rest.Config, opts *options) error {
	c, err := controllerserver.New(ctx, cfg, opts.controllerOptions(), opts.managerOptions())
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Starting manager")
	if err := c.Manager.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}
