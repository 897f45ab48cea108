// Command webhook serves the validating admission webhook that denies the
// deletion of objects that other objects in the same kcp workspace still
// reference, as declared by DependencyRules.
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/opendefensecloud/dependency-controller/internal/cabundle"
	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
)

func main() {
	command.Main("webhook", newOptions())
}

// Build implements command.Options: the webhook as webhookserver assembles
// it, serving HTTPS with the certificate in --cert-dir.
func (o *options) Build(ctx context.Context, cfg *rest.Config) (manager.Runnable, error) {
	for _, f := range []string{o.CertName, o.KeyName} {
		if _, err := os.Stat(filepath.Join(o.CertDir, f)); err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
	}
	// HTTP/2 is off: its stream multiplexing has been the vector of several
	// denial-of-service vulnerabilities (CVE-2023-44487).
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	var clientCA *cabundle.Watcher
	if o.ClientCAFile != "" {
		var err error
		if clientCA, err = cabundle.New(o.ClientCAFile, o.ClientCACheckInterval); err != nil {
			return nil, fmt.Errorf("invalid --client-ca-file: %w", err)
		}
		tlsOpts = append(tlsOpts, webhook.ClientAuth(clientCA.Bundle, o.AllowedClientNames))
	} else {
		ctrl.Log.Info("No --client-ca-file: any caller that reaches the webhook's port is served; isolate it (docs/operations.md#security)")
	}
	mgrOpts := o.ManagerOptions()
	mgrOpts.WebhookServer = ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host:     o.BindAddress,
		Port:     o.Port,
		CertDir:  o.CertDir,
		CertName: o.CertName,
		KeyName:  o.KeyName,
		TLSOpts:  tlsOpts,
	})
	wh, err := webhookserver.New(ctx, cfg, webhookserver.Options{
		APIExportName:       o.APIExportName,
		FrontProxyURL:       o.FrontProxyURL,
		Path:                o.Path,
		RequestTimeout:      o.RequestTimeout,
		MaxBlockers:         o.MaxBlockers,
		ResyncPeriod:        o.ResyncPeriod,
		IndexPollInterval:   o.IndexPollInterval,
		ReplayInterval:      o.ReplayInterval,
		RecordKeysDir:       o.RecordKeysDir,
		DeferredDeletionTTL: o.DeferredDeletionTTL,
		RelabelInterval:     o.RelabelInterval,
		ShardName:           o.ShardName,
		ShardURLs:           o.ShardURLs,
	}, mgrOpts)
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
	if clientCA != nil {
		if err := wh.Manager.GetLocalManager().Add(clientCA); err != nil {
			return nil, err
		}
	}
	ctrl.Log.WithName("setup").Info("Serving", "port", o.Port, "path", o.Path)
	return wh.Manager, nil
}
