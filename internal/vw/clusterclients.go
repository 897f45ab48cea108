package vw

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
)

// ClusterClients hands out controller-runtime clients for the logical
// clusters of kcp servers: the front-proxy, or the virtual workspace of an
// APIExport on one shard. All of them share one HTTP client (one connection
// pool), one scheme and one REST mapper, so no request performs discovery,
// which kcp would answer per workspace. Clients are created on first use
// and kept.
type ClusterClients struct {
	cfg     *rest.Config
	options client.Options

	lock    sync.Mutex
	clients map[string]client.Client
}

// NewClusterClients returns ClusterClients with the credentials of cfg;
// mapper must know every kind that is read or written through them.
func NewClusterClients(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) (*ClusterClients, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create HTTP client for %s: %w", cfg.Host, err)
	}
	return &ClusterClients{
		cfg:     rest.CopyConfig(cfg),
		options: client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient},
		clients: map[string]client.Client{},
	}, nil
}

// HTTPClient returns the HTTP client all clients share.
func (c *ClusterClients) HTTPClient() *http.Client {
	return c.options.HTTPClient
}

// Cluster returns a client for the logical cluster (or workspace path, or
// logicalcluster.Wildcard) of the server at base, a URL without a /clusters/
// path.
func (c *ClusterClients) Cluster(base string, cluster logicalcluster.Path) (client.Client, error) {
	host := strings.TrimSuffix(base, "/") + cluster.RequestPath()
	c.lock.Lock()
	defer c.lock.Unlock()
	if cl, ok := c.clients[host]; ok {
		return cl, nil
	}
	cfg := rest.CopyConfig(c.cfg)
	cfg.Host = host
	cl, err := client.New(cfg, c.options)
	if err != nil {
		return nil, fmt.Errorf("failed to create client for %s: %w", host, err)
	}
	c.clients[host] = cl
	return cl, nil
}
