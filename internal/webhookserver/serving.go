package webhookserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/opendefensecloud/dependency-controller/internal/cabundle"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// newServer returns the HTTPS server of the admission handlers, serving the
// certificate in opts.CertDir on opts.BindAddress and opts.Port, and, with
// opts.ClientCAFile, the watcher of the client CA bundle that the server
// verifies callers with; the manager must run the watcher. It fails if the
// certificate or key is missing or the client CA bundle is invalid.
func newServer(ctx context.Context, opts Options) (ctrlwebhook.Server, *cabundle.Watcher, error) {
	for _, f := range []string{opts.CertName, opts.KeyName} {
		if _, err := os.Stat(filepath.Join(opts.CertDir, f)); err != nil {
			return nil, nil, fmt.Errorf("serving certificate: %w", err)
		}
	}
	// HTTP/2 is off: its stream multiplexing has been the vector of several
	// denial-of-service vulnerabilities (CVE-2023-44487).
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	var clientCA *cabundle.Watcher
	if opts.ClientCAFile != "" {
		var err error
		if clientCA, err = cabundle.New(opts.ClientCAFile, opts.ClientCACheckInterval); err != nil {
			return nil, nil, fmt.Errorf("invalid --client-ca-file: %w", err)
		}
		tlsOpts = append(tlsOpts, webhook.ClientAuth(clientCA.Bundle, opts.AllowedClientNames))
	} else {
		log.FromContext(ctx).Info("No --client-ca-file: any caller that reaches the webhook's port is served; isolate it (docs/operations.md#security)")
	}
	server := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host:     opts.BindAddress,
		Port:     opts.Port,
		CertDir:  opts.CertDir,
		CertName: opts.CertName,
		KeyName:  opts.KeyName,
		TLSOpts:  tlsOpts,
	})
	return server, clientCA, nil
}
