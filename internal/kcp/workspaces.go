package kcp

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/sdk/apis/core"
)

// WorkspacePath returns the path of the workspace an object lives in, as kcp
// records it in the kcp.io/path annotation of APIBindings (and does not let
// anyone set to another value), or "" if the object carries none.
func WorkspacePath(obj client.Object) string {
	return obj.GetAnnotations()[core.LogicalClusterPathAnnotationKey]
}

// Workspaces maps the path of the workspace of every binding that records
// one to its logical cluster: the workspaces that bind an APIExport, from
// the APIBindings to it.
func Workspaces[B any, PB interface {
	*B
	client.Object
}](bindings []B) map[string]logicalcluster.Name {
	workspaces := make(map[string]logicalcluster.Name, len(bindings))
	for i := range bindings {
		b := PB(&bindings[i])
		if path := WorkspacePath(b); path != "" {
			workspaces[path] = logicalcluster.From(b)
		}
	}
	return workspaces
}
