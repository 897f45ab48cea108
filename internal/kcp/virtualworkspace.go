package kcp

import (
	"context"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"
	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// VirtualWorkspace reaches the virtual workspace of one APIExport on every
// shard that serves it. kcp lists one URL per shard in the
// APIExportEndpointSlice named like the export; VirtualWorkspace reads it on
// every call to Shards, so shards that are added or removed are followed, and
// keeps one ClusterClient per URL. All of them share one HTTP client (one
// connection pool) and one REST mapper, so no request performs discovery.
type VirtualWorkspace struct {
	exportName string
	local      client.Reader
	cfg        *rest.Config
	options    client.Options

	lock   sync.Mutex
	shards map[string]clusterclient.ClusterClient
}

// NewVirtualWorkspace returns the virtual workspace of the APIExport
// exportName in the workspace that cfg points at. mapper must know every type
// that is read or written through it.
func NewVirtualWorkspace(cfg *rest.Config, exportName string, scheme *runtime.Scheme, mapper meta.RESTMapper) (*VirtualWorkspace, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create HTTP client for %s: %w", cfg.Host, err)
	}
	options := client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient}
	local, err := client.New(cfg, options)
	if err != nil {
		return nil, fmt.Errorf("failed to create client for %s: %w", cfg.Host, err)
	}
	return &VirtualWorkspace{
		exportName: exportName,
		local:      local,
		cfg:        rest.CopyConfig(cfg),
		options:    options,
		shards:     map[string]clusterclient.ClusterClient{},
	}, nil
}

// ExportName returns the name of the APIExport.
func (v *VirtualWorkspace) ExportName() string {
	return v.exportName
}

// URLs returns the URLs of the virtual workspace, one per shard that hosts
// workspaces binding the export, sorted. An endpoint slice without endpoints
// (no workspace binds the export yet) yields no URLs and no error.
func (v *VirtualWorkspace) URLs(ctx context.Context) ([]string, error) {
	slice := &apisv1alpha1.APIExportEndpointSlice{}
	if err := v.local.Get(ctx, client.ObjectKey{Name: v.exportName}, slice); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("APIExportEndpointSlice %q not found in the workspace of the kubeconfig; is the kubeconfig pointing at the workspace of the APIExport %q, and is the APIExport installed? %w", v.exportName, v.exportName, err)
		}
		return nil, fmt.Errorf("failed to get APIExportEndpointSlice %q: %w", v.exportName, err)
	}
	urls := make([]string, 0, len(slice.Status.APIExportEndpoints))
	for _, e := range slice.Status.APIExportEndpoints {
		urls = append(urls, e.URL)
	}
	slices.Sort(urls)
	return slices.Compact(urls), nil
}

// Shard is the virtual workspace of the APIExport on one shard. Its
// ClusterClient addresses the logical clusters of the workspaces on that
// shard that bind the export.
type Shard struct {
	// URL is the base URL of the virtual workspace on the shard.
	URL string
	clusterclient.ClusterClient
}

// Wildcard returns a client for all logical clusters of the shard at once;
// the virtual workspace serves only LIST and WATCH there.
func (s Shard) Wildcard() client.Client {
	return s.Cluster(logicalcluster.Wildcard)
}

// Shards returns the virtual workspace on every shard that currently serves
// the export.
func (v *VirtualWorkspace) Shards(ctx context.Context) ([]Shard, error) {
	urls, err := v.URLs(ctx)
	if err != nil {
		return nil, err
	}
	v.lock.Lock()
	defer v.lock.Unlock()
	shards := make([]Shard, 0, len(urls))
	for _, url := range urls {
		c, ok := v.shards[url]
		if !ok {
			cfg := rest.CopyConfig(v.cfg)
			cfg.Host = url
			if c, err = clusterclient.New(cfg, v.options); err != nil {
				return nil, fmt.Errorf("failed to create client for %s: %w", url, err)
			}
			v.shards[url] = c
		}
		shards = append(shards, Shard{URL: url, ClusterClient: c})
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

// ListRules lists, on every shard that serves the export, the APIBindings to
// it and then all DependencyRules. It fails if any shard fails: callers must
// never act on a view of some shards as if it were complete.
func (v *VirtualWorkspace) ListRules(ctx context.Context) ([]ShardRules, error) {
	shards, err := v.Shards(ctx)
	if err != nil {
		return nil, err
	}
	result := make([]ShardRules, 0, len(shards))
	for _, s := range shards {
		bindings := &apisv1alpha2.APIBindingList{}
		if err := s.Wildcard().List(ctx, bindings); err != nil {
			return nil, fmt.Errorf("failed to list APIBindings through %s: %w", s.URL, err)
		}
		rules := &depv1alpha1.DependencyRuleList{}
		if err := s.Wildcard().List(ctx, rules); err != nil {
			return nil, fmt.Errorf("failed to list DependencyRules through %s: %w", s.URL, err)
		}
		result = append(result, ShardRules{Shard: s, Bindings: bindings.Items, Rules: rules})
	}
	return result, nil
}
