package workspace

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// Session is a workspace as the kubeconfig flags name it: its RESTMapper,
// discovery and a Reader, and the namespace.
type Session struct {
	// Mapper is the RESTMapper of discovery.
	Mapper meta.RESTMapper
	// Types returns the types the workspace serves that can be listed
	// (see DiscoverTypes).
	Types func() ([]Type, error)
	// Reader reads from and asks the workspace.
	Reader Reader
	// Namespace is the one of -n or of the kubeconfig's context.
	Namespace string
	// ExplicitNamespace tells whether -n set Namespace.
	ExplicitNamespace bool
	// Warnings collects the warnings the server sends.
	Warnings *Warnings
}

// Open builds the clients of the kubeconfig flags.
func Open(flags *genericclioptions.ConfigFlags) (*Session, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig: %w", err)
	}
	ns, explicit, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("failed to read the namespace of the kubeconfig: %w", err)
	}
	mapper, err := flags.ToRESTMapper()
	if err != nil {
		return nil, fmt.Errorf("failed to set up discovery: %w", err)
	}
	disco, err := flags.ToDiscoveryClient()
	if err != nil {
		return nil, fmt.Errorf("failed to set up discovery: %w", err)
	}
	w := &Warnings{}
	cfg = rest.CopyConfig(cfg)
	// As kubectl: the reads of refs run concurrently, one per type.
	cfg.QPS, cfg.Burst = 50, 300
	cfg.WarningHandlerWithContext = w
	r, err := NewReader(cfg)
	if err != nil {
		return nil, err
	}
	types := func() ([]Type, error) { return DiscoverTypes(disco) }
	return &Session{Mapper: mapper, Types: types, Reader: r, Namespace: ns, ExplicitNamespace: explicit, Warnings: w}, nil
}
