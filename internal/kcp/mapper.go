package kcp

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NewStaticRESTMapper returns a REST mapper that knows exactly the given
// kinds, with their resources derived the standard way (lower-case plural),
// and never performs discovery. The clients of this project only use kinds
// known at compile time, so discovery requests, which kcp answers per
// workspace, are not needed.
func NewStaticRESTMapper(clusterScoped, namespaced []schema.GroupVersionKind) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range clusterScoped {
		m.Add(gvk, meta.RESTScopeRoot)
	}
	for _, gvk := range namespaced {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	return m
}
