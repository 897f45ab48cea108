package kcp

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
)

// VirtualWorkspaceURLs returns the URLs of the APIExport's virtual workspace,
// one per shard that hosts workspaces binding the export, sorted. It reads
// the APIExportEndpointSlice of the same name, which kcp creates next to the
// APIExport, with c (a client for the APIExport's workspace). A slice without
// endpoints (no workspace binds the export yet) yields no URLs and no error.
func VirtualWorkspaceURLs(ctx context.Context, c client.Reader, exportName string) ([]string, error) {
	slice := &apisv1alpha1.APIExportEndpointSlice{}
	if err := c.Get(ctx, client.ObjectKey{Name: exportName}, slice); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("APIExportEndpointSlice %q not found in the workspace of the kubeconfig; is the kubeconfig pointing at the workspace of the APIExport %q, and is the APIExport installed? %w", exportName, exportName, err)
		}
		return nil, fmt.Errorf("failed to get APIExportEndpointSlice %q: %w", exportName, err)
	}
	urls := make([]string, 0, len(slice.Status.APIExportEndpoints))
	for _, e := range slice.Status.APIExportEndpoints {
		urls = append(urls, e.URL)
	}
	slices.Sort(urls)
	return slices.Compact(urls), nil
}
