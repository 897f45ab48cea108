// Command webhook serves the validating admission webhook that denies the
// deletion of objects that other objects in the same kcp workspace still
// reference, as declared by DependencyRules.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

func main() {
	opts := newOptions()
	command.Main("webhook", opts, func(ctx context.Context, cfg *rest.Config) error {
		return run(ctx, cfg, opts)
	})
}

func run(ctx context.Context, cfg *rest.Config, opts *options) error {
	for _, f := range []string{opts.CertName, opts.KeyName} {
		if _, err := os.Stat(opts.CertDir + "/" + f); err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
	}

	mgr, _, err := webhook.NewManager(ctx, cfg, webhook.Options{
		APIExportName:  opts.APIExportName,
		FrontProxyURL:  opts.FrontProxyURL,
		Path:           opts.Path,
		RequestTimeout: opts.RequestTimeout,
		MaxBlockers:    opts.MaxBlockers,
		ResyncPeriod:   opts.ResyncPeriod,
	}, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress: opts.HealthProbeBindAddress,
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host:     opts.BindAddress,
			Port:     opts.Port,
			CertDir:  opts.CertDir,
			CertName: opts.CertName,
			KeyName:  opts.KeyName,
			// HTTP/2 is off: its stream multiplexing has been the vector of
			// several denial-of-service vulnerabilities (CVE-2023-44487).
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		}),
	})
	if err != nil {
		return err
	}

	ctrl.Log.WithName("setup").Info("Starting webhook", "port", opts.Port, "path", opts.Path)
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}
