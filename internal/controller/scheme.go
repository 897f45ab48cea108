package controller

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Scheme returns the types the controller reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apisv1alpha1.AddToScheme(s))
	utilruntime.Must(apisv1alpha2.AddToScheme(s))
	utilruntime.Must(tenancyv1alpha1.AddToScheme(s))
	utilruntime.Must(depv1alpha1.AddToScheme(s))
	return s
}

// RESTMapper returns a mapper for the kinds the controller's virtual
// workspace and front-proxy clients use, so they never run discovery.
func RESTMapper() meta.RESTMapper {
	return kcp.NewStaticRESTMapper(
		[]schema.GroupVersionKind{
			depv1alpha1.GroupVersion.WithKind("DependencyRule"),
			admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"),
			apisv1alpha2.SchemeGroupVersion.WithKind("APIBinding"),
			apisv1alpha1.SchemeGroupVersion.WithKind("APIExportEndpointSlice"),
			tenancyv1alpha1.SchemeGroupVersion.WithKind("Workspace"),
		},
		nil,
	)
}
