package vw

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
)

// Endpoints reads the APIExportEndpointSlice named name through c (a client
// of the workspace of the APIExport) and returns the URLs of the export's
// virtual workspace, one per shard that hosts workspaces binding the export,
// sorted. A slice without endpoints (no workspace binds the export yet)
// yields no URLs and no error. Errors are the API errors of the read, so
// that callers can tell NotFound and Forbidden apart.
func Endpoints(ctx context.Context, c client.Reader, name string) ([]string, error) {
	slice := &apisv1alpha1.APIExportEndpointSlice{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, slice); err != nil {
		return nil, err
	}
	urls := make([]string, 0, len(slice.Status.APIExportEndpoints))
	for _, e := range slice.Status.APIExportEndpoints {
		urls = append(urls, e.URL)
	}
	slices.Sort(urls)
	return slices.Compact(urls), nil
}

// VirtualWorkspace is the virtual workspace of one APIExport on every shard
// that serves it. It reads the APIExportEndpointSlice named like the export
// on every call to Shards, so shards that are added or removed are followed.
type VirtualWorkspace struct {
	exportName string
	local      client.Client
	clients    *ClusterClients
}

// NewVirtualWorkspace returns the virtual workspace of the APIExport
// exportName in the workspace that cfg points at (its host ends with
// /clusters/<workspace>), read with the credentials of cfg.
func NewVirtualWorkspace(cfg *rest.Config, exportName string) (*VirtualWorkspace, error) {
	base, ws, err := kcp.WorkspaceConfig(cfg)
	if err != nil {
		return nil, err
	}
	clients, err := NewClusterClients(cfg, scheme.New(), scheme.RESTMapper())
	if err != nil {
		return nil, err
	}
	local, err := clients.Cluster(base, ws)
	if err != nil {
		return nil, err
	}
	return &VirtualWorkspace{exportName: exportName, local: local, clients: clients}, nil
}

// URLs returns the URLs of the virtual workspace, one per shard, sorted.
func (v *VirtualWorkspace) URLs(ctx context.Context) ([]string, error) {
	urls, err := Endpoints(ctx, v.local, v.exportName)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("APIExportEndpointSlice %q not found in the workspace of the kubeconfig; is the kubeconfig pointing at the workspace of the APIExport %q, and is the APIExport installed? %w", v.exportName, v.exportName, err)
	case err != nil:
		return nil, fmt.Errorf("failed to get APIExportEndpointSlice %q: %w", v.exportName, err)
	}
	return urls, nil
}

// Shard is the virtual workspace of the APIExport on one shard.
type Shard struct {
	// URL is the base URL of the virtual workspace on the shard.
	URL     string
	clients *ClusterClients
}

// Cluster returns a client for a logical cluster of the shard that binds
// the export (or logicalcluster.Wildcard: all of them at once, for LIST
// and WATCH).
func (s Shard) Cluster(cluster logicalcluster.Path) (client.Client, error) {
	return s.clients.Cluster(s.URL, cluster)
}

// Shards returns the virtual workspace on every shard that currently serves
// the export.
func (v *VirtualWorkspace) Shards(ctx context.Context) ([]Shard, error) {
	urls, err := v.URLs(ctx)
	if err != nil {
		return nil, err
	}
	shards := make([]Shard, 0, len(urls))
	for _, url := range urls {
		shards = append(shards, Shard{URL: url, clients: v.clients})
	}
	return shards, nil
}

// ShardRules is a complete listing of the DependencyRules of one shard.
type ShardRules struct {
	Shard
	// Bindings are the APIBindings to the export on the shard. They were
	// listed before Rules, so every workspace whose rules Rules could miss
	// is among them.
	Bindings []apisv1alpha2.APIBinding
	// Rules are all DependencyRules on the shard, with the resourceVersion
	// of the listing.
	Rules *depv1alpha1.DependencyRuleList
}

// ListRules lists, uncached, on every shard that serves the export, the
// APIBindings to it and then all DependencyRules. It fails if any shard
// fails: callers must never act on a view of some shards as if it were
// complete.
func (v *VirtualWorkspace) ListRules(ctx context.Context) ([]ShardRules, error) {
	shards, err := v.Shards(ctx)
	if err != nil {
		return nil, err
	}
	result := make([]ShardRules, 0, len(shards))
	for _, s := range shards {
		c, err := s.Cluster(logicalcluster.Wildcard)
		if err != nil {
			return nil, err
		}
		bindings := &apisv1alpha2.APIBindingList{}
		if err := c.List(ctx, bindings); err != nil {
			return nil, fmt.Errorf("failed to list APIBindings through %s: %w", s.URL, err)
		}
		rules := &depv1alpha1.DependencyRuleList{}
		if err := c.List(ctx, rules); err != nil {
			return nil, fmt.Errorf("failed to list DependencyRules through %s: %w", s.URL, err)
		}
		result = append(result, ShardRules{Shard: s, Bindings: bindings.Items, Rules: rules})
	}
	return result, nil
}
