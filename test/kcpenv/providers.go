package kcpenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
)

// Resource describes a resource type of a test provider: any spec is
// accepted (x-kubernetes-preserve-unknown-fields), and with Status any
// status, written through a status subresource.
type Resource struct {
	Kind          string
	Plural        string
	ClusterScoped bool
	Status        bool
	// OpenAPI, if set, is the schema of the resource (JSON); by default
	// spec, and with Status the status, keep unknown fields.
	OpenAPI string
}

// InstallProviderAPI creates an APIResourceSchema per resource (version v1)
// and an APIExport named like the group in the workspace of c, and waits
// until the export is ready to be bound. The export claims core events and
// subjectaccessreviews, as the samples' do, so that the webhook can record
// Events on its objects in the workspaces that bind it, and ask whether
// the user who sets skip-protection may delete the object (BindAPIExport
// accepts the claims).
func InstallProviderAPI(ctx context.Context, c client.Client, group string, resources ...Resource) error {
	export := &apisv1alpha2.APIExport{ObjectMeta: metav1.ObjectMeta{Name: group}, Spec: apisv1alpha2.APIExportSpec{
		PermissionClaims: []apisv1alpha2.PermissionClaim{
			{GroupResource: apisv1alpha2.GroupResource{Resource: "events"}, Verbs: []string{"create", "patch"}},
			{GroupResource: apisv1alpha2.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, Verbs: []string{"create"}},
		},
	}}
	for _, r := range resources {
		scope := apiextensionsv1.NamespaceScoped
		if r.ClusterScoped {
			scope = apiextensionsv1.ClusterScoped
		}
		openAPI := `{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}`
		var subresources apiextensionsv1.CustomResourceSubresources
		if r.Status {
			openAPI = `{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true},"status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}`
			subresources.Status = &apiextensionsv1.CustomResourceSubresourceStatus{}
		}
		if r.OpenAPI != "" {
			openAPI = r.OpenAPI
		}
		schema := &apisv1alpha1.APIResourceSchema{
			ObjectMeta: metav1.ObjectMeta{Name: "v1." + r.Plural + "." + group},
			Spec: apisv1alpha1.APIResourceSchemaSpec{
				Group: group,
				Names: apiextensionsv1.CustomResourceDefinitionNames{
					Kind: r.Kind, ListKind: r.Kind + "List", Plural: r.Plural, Singular: strings.ToLower(r.Kind),
				},
				Scope: scope,
				Versions: []apisv1alpha1.APIResourceVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema:       runtime.RawExtension{Raw: []byte(openAPI)},
					Subresources: subresources,
				}},
			},
		}
		if err := c.Create(ctx, schema); err != nil {
			return fmt.Errorf("failed to create APIResourceSchema %s: %w", schema.Name, err)
		}
		export.Spec.Resources = append(export.Spec.Resources, apisv1alpha2.ResourceSchema{
			Group: group, Name: r.Plural, Schema: schema.Name,
			Storage: apisv1alpha2.ResourceSchemaStorage{CRD: &apisv1alpha2.ResourceSchemaStorageCRD{}},
		})
	}
	if err := c.Create(ctx, export); err != nil {
		return fmt.Errorf("failed to create APIExport %s: %w", group, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(export), export); err != nil {
			return false, err
		}
		return export.Status.IdentityHash != "", nil
	})
}
