package client

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
)

// ClusterClient hands out controller-runtime clients scoped to one kcp
// workspace each.
type ClusterClient interface {
	// Cluster returns a client for the workspace at the given path (for
	// example root:org:team) or logical cluster name. Clients are created on
	// first use and reused afterwards.
	Cluster(cluster logicalcluster.Path) ctrlclient.Client
}

type clusterClient struct {
	baseConfig *rest.Config
	options    ctrlclient.Options

	lock    sync.RWMutex
	clients map[logicalcluster.Path]ctrlclient.Client
}

var _ ClusterClient = &clusterClient{}

// New returns a ClusterClient for the kcp server that cfg points to (a shard,
// the front-proxy, or a virtual workspace). A /clusters/<path> suffix on
// cfg.Host is ignored. Unless options.HTTPClient is set, all workspace clients
// share one HTTP client built from cfg. Without options.Mapper, every
// workspace client discovers the APIs of its workspace, since every workspace
// has its own set; with one, all clients share it and never discover.
func New(cfg *rest.Config, options ctrlclient.Options) (ClusterClient, error) {
	if cfg == nil {
		return nil, fmt.Errorf("rest config must not be nil")
	}
	base := rest.CopyConfig(cfg)
	base.Host = stripClusterPath(base.Host)

	if options.HTTPClient == nil {
		httpClient, err := rest.HTTPClientFor(base)
		if err != nil {
			return nil, fmt.Errorf("failed to create HTTP client: %w", err)
		}
		options.HTTPClient = httpClient
	}

	return &clusterClient{
		baseConfig: base,
		options:    options,
		clients:    map[logicalcluster.Path]ctrlclient.Client{},
	}, nil
}

// Cluster implements ClusterClient. It panics if the client cannot be
// constructed, which only happens for an invalid base configuration that New
// already accepted.
func (c *clusterClient) Cluster(cluster logicalcluster.Path) ctrlclient.Client {
	c.lock.RLock()
	cl, ok := c.clients[cluster]
	c.lock.RUnlock()
	if ok {
		return cl
	}

	c.lock.Lock()
	defer c.lock.Unlock()
	if cl, ok := c.clients[cluster]; ok {
		return cl
	}

	cfg := rest.CopyConfig(c.baseConfig)
	cfg.Host += cluster.RequestPath()
	cl, err := ctrlclient.New(cfg, c.options)
	if err != nil {
		panic(fmt.Sprintf("failed to create client for cluster %q: %v", cluster, err))
	}
	c.clients[cluster] = cl
	return cl
}

// stripClusterPath removes a trailing /clusters/<name> segment from a kcp
// server URL, returning the base URL of the server or front-proxy.
func stripClusterPath(host string) string {
	if i := strings.Index(host, "/clusters/"); i >= 0 {
		return host[:i]
	}
	return strings.TrimSuffix(host, "/")
}
