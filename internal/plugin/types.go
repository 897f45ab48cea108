package plugin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// apiType is a type the workspace serves, which may hold references.
type apiType struct {
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
}

// nativeGroups are the API groups that kcp (v0.31) serves natively in
// every workspace, as `kubectl api-versions` of a new workspace shows
// them.
var nativeGroups = map[string]bool{
	"":                             true,
	"admissionregistration.k8s.io": true,
	"apiextensions.k8s.io":         true,
	"apis.kcp.io":                  true,
	"authentication.k8s.io":        true,
	"authorization.k8s.io":         true,
	"cache.kcp.io":                 true,
	"certificates.k8s.io":          true,
	"coordination.k8s.io":          true,
	"core.kcp.io":                  true,
	"events.k8s.io":                true,
	"rbac.authorization.k8s.io":    true,
	"tenancy.kcp.io":               true,
	"topology.kcp.io":              true,
}

// apiBindings is kcp's APIBinding resource.
var apiBindings = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apibindings"}

// discoverTypes returns the types the workspace serves (in their
// preferred version) that can be listed, sorted, and an error naming the
// groups whose discovery failed (the rest is returned).
func discoverTypes(d discovery.DiscoveryInterface) ([]apiType, error) {
	lists, err := d.ServerPreferredResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("failed to discover the workspace's types: %w", err)
	}
	return typesOf(lists), err
}

// typesOf returns the types of discovered resource lists that can be
// listed, sorted.
func typesOf(lists []*metav1.APIResourceList) []apiType {
	var types []apiType
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			types = append(types, apiType{GVR: gv.WithResource(r.Name), Kind: r.Kind, Namespaced: r.Namespaced})
		}
	}
	slices.SortFunc(types, func(a, b apiType) int {
		return cmp.Or(cmp.Compare(a.GVR.Group, b.GVR.Group), cmp.Compare(a.GVR.Resource, b.GVR.Resource))
	})
	return slices.CompactFunc(types, func(a, b apiType) bool { return a.GVR.GroupResource() == b.GVR.GroupResource() })
}

// dependentTypes returns those of types whose objects may be dependents.
// A dependent reaches the webhook (which labels it) through its provider's
// APIExport virtual workspace, which serves a workspace's objects of a
// resource only where the workspace binds it: so the resources the
// workspace's APIBindings bind (status.boundResources) are all that can
// hold references, whatever their group (kcp binds even a resource it
// serves natively, such as configmaps). Types outside kcp's native groups
// (a workspace's own CRDs) are read too; a native type that no APIBinding
// binds is not. If the APIBindings cannot be read (the user may not list
// them, or the server is not kcp), every type is.
func dependentTypes(ctx context.Context, r Reader, types []apiType) []apiType {
	if !slices.ContainsFunc(types, func(t apiType) bool { return t.GVR.GroupResource() == apiBindings.GroupResource() }) {
		return types
	}
	bound, err := boundResources(ctx, r)
	if err != nil {
		return types
	}
	return slices.DeleteFunc(slices.Clone(types), func(t apiType) bool {
		return nativeGroups[t.GVR.Group] && !bound[t.GVR.GroupResource()]
	})
}

// boundResources reads the resources the workspace's APIBindings bind.
func boundResources(ctx context.Context, r Reader) (map[schema.GroupResource]bool, error) {
	bound := map[schema.GroupResource]bool{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := r.List(ctx, apiBindings, "", opts)
		if err != nil {
			if apierrors.IsNotFound(err) {
				// Only v1alpha1 is served: read it.
				v1 := apiBindings
				v1.Version = "v1alpha1"
				list, err = r.List(ctx, v1, "", opts)
			}
			if err != nil {
				return nil, fmt.Errorf("failed to list the APIBindings: %w", err)
			}
		}
		for _, b := range list.Items {
			resources, _, _ := unstructured.NestedSlice(b.Object, "status", "boundResources")
			for _, br := range resources {
				m, ok := br.(map[string]any)
				if !ok {
					continue
				}
				group, _, _ := unstructured.NestedString(m, "group")
				resource, _, _ := unstructured.NestedString(m, "resource")
				bound[schema.GroupResource{Group: group, Resource: resource}] = true
			}
		}
		if list.GetContinue() == "" {
			return bound, nil
		}
		opts.Continue = list.GetContinue()
	}
}
