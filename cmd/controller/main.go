// Command controller watches DependencyRules through the APIExport's virtual
// workspace and installs the deletion-protection webhook in every provider
// workspace whose resources are protected.
package main

import (
	"context"
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opendefensecloud/dependency-controller/internal/cabundle"
	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/controller"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

func main() {
	opts := newOptions()
	command.Main("controller", opts, func(ctx context.Context, cfg *rest.Config) error {
		return run(ctx, cfg, opts)
	})
}

func run(ctx context.Context, cfg *rest.Config, opts *options) error {
	webhook := webhookOptions(opts)
	var triggers <-chan event.GenericEvent
	var caWatcher *cabundle.Watcher
	if opts.WebhookCABundleFile != "" {
		var err error
		if caWatcher, err = cabundle.New(opts.WebhookCABundleFile, opts.CABundleCheckInterval); err != nil {
			return fmt.Errorf("invalid --webhook-ca-bundle: %w", err)
		}
		triggers = caWatcher.Changes()
		flagOptions := webhook
		webhook = func() webhookconfig.Options {
			o := flagOptions()
			o.CABundle = caWatcher.Bundle()
			return o
		}
	}

	mgr, _, err := kcp.NewManager(ctx, cfg, opts.APIExportName, manager.Options{
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress:  opts.HealthProbeBindAddress,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        controller.ControllerName,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
	})
	if err != nil {
		return err
	}
	rules, err := vw.NewVirtualWorkspace(cfg, opts.APIExportName)
	if err != nil {
		return err
	}
	// Fail early, saying what to fix, if the kubeconfig does not point at
	// the workspace of the APIExport.
	if _, err := rules.URLs(ctx); err != nil {
		return err
	}
	if err := controller.SetupWithManager(mgr, rules, controller.Options{
		APIExportName: opts.APIExportName,
		Webhook:       webhook,
		ResyncPeriod:  opts.ResyncPeriod,
	}, triggers); err != nil {
		return err
	}
	if caWatcher != nil {
		if err := mgr.GetLocalManager().Add(caWatcher); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}

	ctrl.Log.WithName("setup").Info("Starting manager")
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}

// webhookOptions returns the webhook settings from the flags.
func webhookOptions(opts *options) func() webhookconfig.Options {
	return func() webhookconfig.Options {
		return webhookconfig.Options{
			URL:            opts.WebhookURL,
			TimeoutSeconds: opts.WebhookTimeoutSeconds,
			FailurePolicy:  admissionregistrationv1.FailurePolicyType(opts.FailurePolicy),
		}
	}
}
