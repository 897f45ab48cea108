package vw

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"
)

// Served tells, by discovery through the virtual workspace at url (all its
// logical clusters at once), how it serves the resource of gvr: resource is
// its APIResource in gvr's version, nil if it is not served in that version,
// and versions are the versions in which it is served, none if the group
// or the resource is not served at all. An error is the API error of
// discovery: Forbidden when the caller may not read the virtual workspace.
func (c *ClusterClients) Served(url string, gvr schema.GroupVersionResource) (resource *metav1.APIResource, versions []string, err error) {
	cfg := rest.CopyConfig(c.cfg)
	cfg.Host = url + logicalcluster.Wildcard.RequestPath()
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, c.HTTPClient())
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create discovery client for %s: %w", url, err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		return nil, nil, err
	}
	for _, g := range groups.Groups {
		if g.Name != gvr.Group {
			continue
		}
		for _, v := range g.Versions {
			resources, err := dc.ServerResourcesForGroupVersion(v.GroupVersion)
			if err != nil {
				return nil, nil, err
			}
			for i := range resources.APIResources {
				if res := &resources.APIResources[i]; res.Name == gvr.Resource {
					versions = append(versions, v.Version)
					if v.Version == gvr.Version {
						resource = res
					}
				}
			}
		}
	}
	return resource, versions, nil
}
