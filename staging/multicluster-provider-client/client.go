package client

import (
	"fmt"
	"net/http"
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
	httpClient *http.Client
	options    ctrlclient.Options

	lock    sync.RWMutex
	clients map[logicalcluster.Path]ctrlclient.Client
}

var _ ClusterClient = &clusterClient{}

// New returns a ClusterClient for the kcp server that cfg points to. A
// /clusters/<path> suffix on cfg.Host is ignored. Unless options.HTTPClient is
// set, all workspace clients share one HTTP client built from cfg. A RESTMapper
// in options is ignored, since every workspace has its own set of APIs.
func New(cfg *rest.Config, options ctrlclient.Options) (ClusterClient, error) {
	if cfg == nil {
		return nil, fmt.Errorf("rest config must not be nil")
	}
	base := rest.CopyConfig(cfg)
	base.Host = stripClusterPath(base.Host)

	httpClient := options.HTTPClient
	if httpClient == nil {
		var err error
		if httpClient, err = rest.HTTPClientFor(base); err != nil {
			return nil, fmt.Errorf("failed to create HTTP client: %w", err)
		}
	}
	options.HTTPClient = httpClient
	options.Mapper = nil

	return &clusterClient{
		baseConfig: base,
		httpClient: httpClient,
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
