// Package scheme holds the API types the controller and the webhook read and
// write, and a REST mapper for them that needs no discovery.
package scheme

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// New returns a scheme with the Kubernetes built-in types, the kcp types the
// project uses and the project's own API.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apisv1alpha1.AddToScheme(s))
	utilruntime.Must(apisv1alpha2.AddToScheme(s))
	utilruntime.Must(depv1alpha1.AddToScheme(s))
	return s
}

// RESTMapper returns a mapper for exactly the kinds the project's clients
// use. It never performs discovery, which kcp would answer per workspace
// and per virtual workspace.
func RESTMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		depv1alpha1.GroupVersion.WithKind("DependencyRule"),
		admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"),
		apisv1alpha2.SchemeGroupVersion.WithKind("APIBinding"),
		apisv1alpha2.SchemeGroupVersion.WithKind("APIExport"),
		apisv1alpha1.SchemeGroupVersion.WithKind("APIExportEndpointSlice"),
		apisv1alpha1.SchemeGroupVersion.WithKind("APIResourceSchema"),
	} {
		m.Add(gvk, meta.RESTScopeRoot)
	}
	return m
}
