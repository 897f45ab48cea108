package sources

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// checkPaths reads the schema of the resource gvr as the APIExport export
// serves it, in the export's workspace through c (a front-proxy client of
// that workspace): the
// APIExport names the APIResourceSchema of each resource, which holds the
// OpenAPI schema of each version. It returns the paths that can never hold a
// name (or a namespace, group or kind next to it) in that schema. (kcp v0.31's virtual workspaces serve OpenAPI v3 with
// only one resource per group version, so the schema is read where the
// provider keeps it; the provider's grant to the webhook covers reading its
// APIExport and APIResourceSchemas.) An error means the schema could not be
// read; the caller then reports nothing.
func checkPaths(ctx context.Context, c client.Reader, exportName string, gvr schema.GroupVersionResource, paths []fieldpath.Reference) ([]PathProblem, error) {
	apiExport := &apisv1alpha2.APIExport{}
	if err := c.Get(ctx, client.ObjectKey{Name: exportName}, apiExport); err != nil {
		return nil, fmt.Errorf("failed to read the APIExport %q: %w", exportName, err)
	}
	schemaName := ""
	for _, res := range apiExport.Spec.Resources {
		if res.Group == gvr.Group && res.Name == gvr.Resource {
			schemaName = res.Schema
		}
	}
	if schemaName == "" {
		return nil, fmt.Errorf("the APIExport %q names no APIResourceSchema for %s", exportName, gvr.GroupResource())
	}
	ars := &apisv1alpha1.APIResourceSchema{}
	if err := c.Get(ctx, client.ObjectKey{Name: schemaName}, ars); err != nil {
		return nil, fmt.Errorf("failed to read the APIResourceSchema %q: %w", schemaName, err)
	}
	for i := range ars.Spec.Versions {
		v := &ars.Spec.Versions[i]
		if v.Name != gvr.Version {
			continue
		}
		root, err := v.GetSchema()
		if err != nil {
			return nil, fmt.Errorf("failed to read the schema of %s in the APIResourceSchema %q: %w", gvr.Version, schemaName, err)
		}
		if root == nil {
			return nil, fmt.Errorf("the APIResourceSchema %q has no schema for %s", schemaName, gvr.Version)
		}
		var problems []PathProblem
		for _, ref := range paths {
			for _, p := range ref.Paths() {
				if problem := walkSchema(root, p.Steps(), ""); problem != "" {
					problems = append(problems, PathProblem{Path: p, Problem: problem})
				}
			}
		}
		return problems, nil
	}
	return nil, fmt.Errorf("the APIResourceSchema %q has no version %s", schemaName, gvr.Version)
}

// implicitRootFields are the fields every object has, which the schema of
// a resource does not list.
var implicitRootFields = map[string]bool{"apiVersion": true, "kind": true, "metadata": true}

// walkSchema follows steps (field names, "" for [*]) through s and returns
// why they can never reach a name, or "" if they can (or the schema does not
// say: unknown fields are preserved, or it has no type). at is the path so
// far, for the message; it is empty at the root.
func walkSchema(s *apiextensionsv1.JSONSchemaProps, steps []string, at string) string {
	if s == nil || s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields {
		return ""
	}
	if len(steps) == 0 {
		if !s.XIntOrString && (s.Type == "object" || s.Type == "array") {
			return fmt.Sprintf("%s is an %s, not a name", at, s.Type)
		}
		return ""
	}
	step, rest := steps[0], steps[1:]
	if step == "" {
		if s.Type != "" && s.Type != "array" {
			return fmt.Sprintf("%s is not a list", at)
		}
		if s.Items == nil {
			return ""
		}
		return walkSchema(s.Items.Schema, rest, at+"[*]")
	}
	if at == "" && implicitRootFields[step] && s.Properties[step].Type == "" {
		return "" // metadata and the type of an object, which the API server defines
	}
	if p, ok := s.Properties[step]; ok {
		return walkSchema(&p, rest, at+"."+step)
	}
	if ap := s.AdditionalProperties; ap != nil && (ap.Allows || ap.Schema != nil) {
		return walkSchema(ap.Schema, rest, at+"."+step)
	}
	if s.Type == "" && len(s.Properties) == 0 {
		return ""
	}
	if at == "" {
		return fmt.Sprintf("there is no field %q", step)
	}
	return fmt.Sprintf("%s has no field %q", at, step)
}
