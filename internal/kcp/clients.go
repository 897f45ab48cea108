package kcp

import (
	"fmt"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
)

// Wildcard is the cluster name that addresses all logical clusters at once,
// as served by virtual workspaces for LIST and WATCH.
const Wildcard = "*"

// ClusterClients builds controller-runtime clients for the logical clusters
// behind one kcp base URL (the front-proxy, a shard, or a virtual workspace).
// All clients share one HTTP client, so requests reuse connections, and one
// REST mapper, so no client performs discovery. Building a client is cheap;
// callers need not cache them.
type ClusterClients struct {
	base       *rest.Config
	httpClient *http.Client
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper
}

// NewClusterClients returns clients for the server at base.Host, which must
// not contain a /clusters/ path. If httpClient is nil, one is built from
// base. mapper must know every type the clients are used for.
func NewClusterClients(base *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, mapper meta.RESTMapper) (*ClusterClients, error) {
	if _, cluster, err := SplitClusterURL(base.Host); err != nil {
		return nil, err
	} else if !cluster.Empty() {
		return nil, fmt.Errorf("base URL %q must not name a cluster", base.Host)
	}
	if httpClient == nil {
		var err error
		if httpClient, err = rest.HTTPClientFor(base); err != nil {
			return nil, fmt.Errorf("failed to create HTTP client for %s: %w", base.Host, err)
		}
	}
	return &ClusterClients{base: rest.CopyConfig(base), httpClient: httpClient, scheme: scheme, mapper: mapper}, nil
}

// Host returns the base URL of the server.
func (c *ClusterClients) Host() string {
	return c.base.Host
}

// Cluster returns a client for the logical cluster or workspace path, or for
// all clusters when cluster is Wildcard.
func (c *ClusterClients) Cluster(cluster logicalcluster.Path) (client.Client, error) {
	cfg := rest.CopyConfig(c.base)
	cfg.Host += cluster.RequestPath()
	cl, err := client.New(cfg, client.Options{HTTPClient: c.httpClient, Scheme: c.scheme, Mapper: c.mapper})
	if err != nil {
		return nil, fmt.Errorf("failed to create client for %s: %w", cfg.Host, err)
	}
	return cl, nil
}

// VirtualWorkspaceClients hands out ClusterClients for the URLs of an
// APIExport's virtual workspace (one per shard), creating each once. All
// share one HTTP client built from the given config, whose host is ignored.
type VirtualWorkspaceClients struct {
	cfg        *rest.Config
	httpClient *http.Client
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper

	lock  sync.Mutex
	byURL map[string]*ClusterClients
}

// NewVirtualWorkspaceClients returns clients with the credentials of cfg.
func NewVirtualWorkspaceClients(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) (*VirtualWorkspaceClients, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create HTTP client for the virtual workspace: %w", err)
	}
	return &VirtualWorkspaceClients{cfg: rest.CopyConfig(cfg), httpClient: httpClient, scheme: scheme, mapper: mapper, byURL: map[string]*ClusterClients{}}, nil
}

// For returns the clients for the virtual workspace at url.
func (v *VirtualWorkspaceClients) For(url string) (*ClusterClients, error) {
	v.lock.Lock()
	defer v.lock.Unlock()
	if c, ok := v.byURL[url]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(v.cfg)
	cfg.Host = url
	c, err := NewClusterClients(cfg, v.httpClient, v.scheme, v.mapper)
	if err != nil {
		return nil, err
	}
	v.byURL[url] = c
	return c, nil
}
