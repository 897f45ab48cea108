package objects

import (
	"context"
	"fmt"

	"github.com/buger/jsonparser"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// apiBindings are kcp's APIBindings, which the virtual workspace of every
// APIExport serves, read-only: those that bind the export.
var apiBindings = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apibindings"}

// refused is the outcome of a settled read or write that every shard's
// virtual workspace refused (403) for cluster since the bindings settled:
// kcp refuses alike a workspace that does not bind the export and a
// webhook without the provider's grant, and only the bindings tell the two
// apart. It reads the export's bindings in every workspace, on every
// shard: a wildcard LIST, which kcp authorizes on the grant alone (see the
// kcp contract). If cluster binds the export, or the LIST is refused too,
// the refusal is the grant's, and it returns a Forbidden error; otherwise
// the workspace holds no object of the export, and it returns a NotFound
// error for name.
func (c *Client) refused(ctx context.Context, src index.Source, cluster logicalcluster.Name, name string) error {
	binds, err := c.binds(ctx, src, cluster)
	switch {
	case err != nil:
		return err
	case binds:
		return apierrors.NewForbidden(src.Resource.GroupResource(), name,
			fmt.Errorf("every shard's virtual workspace of %s refuses logical cluster %s, which binds the export: the provider has not granted the webhook what it asks for on the export's content", src, cluster))
	}
	// No shard serves the workspace for this export: it does not bind it,
	// so the object does not exist.
	return apierrors.NewNotFound(src.Resource.GroupResource(), name)
}

// binds reports whether cluster binds the export of src, as the export's
// bindings listed on every shard say. A refusal of the LIST is a Forbidden
// error: the webhook may not read the export's content.
func (c *Client) binds(ctx context.Context, src index.Source, cluster logicalcluster.Name) (bool, error) {
	shards, err := c.router.Shards(src, cluster)
	if err != nil {
		return false, err
	}
	path := vw.ResourcePath(logicalcluster.Wildcard, apiBindings, "")
	for _, shard := range shards {
		found := false
		if _, err := shard.List(ctx, path, nil, func(item []byte) error {
			found = found || bindingOf(item, src.Export.Name, cluster)
			return nil
		}); err != nil {
			return false, fmt.Errorf("failed to list the bindings of %s: %w", src, err)
		}
		if found {
			return true, nil
		}
	}
	return false, nil
}

// bindingOf reports whether the APIBinding item, as JSON, binds the export
// named export in cluster.
func bindingOf(item []byte, export string, cluster logicalcluster.Name) bool {
	in, err := jsonparser.GetString(item, "metadata", "annotations", logicalcluster.AnnotationKey)
	if err != nil || in != cluster.String() {
		return false
	}
	name, err := jsonparser.GetString(item, "spec", "reference", "export", "name")
	return err == nil && name == export
}
