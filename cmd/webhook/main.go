// Command webhook serves the validating admission webhook that denies the
// deletion of objects that other objects in the same kcp workspace still
// reference, as declared by DependencyRules.
package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
)

func main() {
	command.Main("webhook", options{webhookserver.NewOptions()})
}

// options are the webhook's command line options: the settings of
// webhookserver, with the binary's Build.
type options struct {
	*webhookserver.Options
}

// Build implements command.Options: the webhook as webhookserver assembles
// it, serving HTTPS with the certificate in --cert-dir, its metrics
// registered where the manager serves metrics.
func (o options) Build(ctx context.Context, cfg *rest.Config) (manager.Runnable, error) {
	wh, err := webhookserver.New(ctx, cfg, *o.Options, o.ManagerOptions())
	if err != nil {
		return nil, err
	}
	// The manager serves controller-runtime's registry.
	if err := ctrlmetrics.Registry.Register(wh.Metrics); err != nil {
		return nil, fmt.Errorf("failed to register the webhook's metrics: %w", err)
	}
	if err := ctrlmetrics.Registry.Register(kcpversion.WebhookMetric(wh.KCP)); err != nil {
		return nil, fmt.Errorf("failed to register the kcp version metric: %w", err)
	}
	ctrl.Log.WithName("setup").Info("Serving", "port", o.Port, "path", o.Path)
	return wh.Manager, nil
}
