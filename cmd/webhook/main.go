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
	"path/filepath"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/opendefensecloud/dependency-controller/internal/cabundle"
	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
)

func main() {
	opts := newOptions()
	command.Main("webhook", opts, func(ctx context.Context, cfg *rest.Config) error {
		return run(ctx, cfg, opts)
	})
}

func run(ctx context.Context, cfg *rest.Config, opts *options) error {
	for _, f := range []string{opts.CertName, opts.KeyName} {
		if _, err := os.Stat(filepath.Join(opts.CertDir, f)); err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
	}
	// HTTP/2 is off: its stream multiplexing has been the vector of several
	// denial-of-service vulnerabilities (CVE-2023-44487).
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	var clientCA *cabundle.Watcher
	if opts.ClientCAFile != "" {
		var err error
		if clientCA, err = cabundle.New(opts.ClientCAFile, opts.ClientCACheckInterval); err != nil {
			return fmt.Errorf("invalid --client-ca-file: %w", err)
		}
		tlsOpts = append(tlsOpts, webhook.ClientAuth(clientCA.Bundle, opts.AllowedClientNames))
	} else {
		ctrl.Log.Info("No --client-ca-file: any caller that reaches the webhook's port is served; isolate it (docs/operations.md#security)")
	}
	mgrOpts := opts.ManagerOptions()
	mgrOpts.WebhookServer = ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host:     opts.BindAddress,
		Port:     opts.Port,
		CertDir:  opts.CertDir,
		CertName: opts.CertName,
		KeyName:  opts.KeyName,
		TLSOpts:  tlsOpts,
	})
	wh, err := webhookserver.New(ctx, cfg, webhookserver.Options{
		APIExportName:     opts.APIExportName,
		FrontProxyURL:     opts.FrontProxyURL,
		Path:              opts.Path,
		RequestTimeout:    opts.RequestTimeout,
		MaxBlockers:       opts.MaxBlockers,
		ResyncPeriod:      opts.ResyncPeriod,
		IndexPollInterval: opts.IndexPollInterval,
	}, mgrOpts)
	if err != nil {
		return err
	}
	if clientCA != nil {
		if err := wh.Manager.GetLocalManager().Add(clientCA); err != nil {
			return err
		}
	}
	ctrl.Log.WithName("setup").Info("Starting webhook", "port", opts.Port, "path", opts.Path)
	if err := wh.Manager.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}
