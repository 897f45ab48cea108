package objects

import (
	"context"
	"fmt"
	"time"

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

// bindingsTTL is how long a LIST of an export's bindings on a shard
// answers binds: a workspace that binds no export of a protected type, and
// whose dependents reference it, would otherwise have every such write read
// all the export's bindings. A grant withdrawn within it may be taken for a
// workspace that binds no export, as at any time before the LIST.
const bindingsTTL = 5 * time.Second

// boundClusters are the workspaces that bind an export on a shard.
type boundClusters struct {
	clusters map[logicalcluster.Name]bool
	read     time.Time
}

// binds reports whether cluster binds the export of src, as the export's
// bindings listed on every shard say (each LIST answers for bindingsTTL).
// A refusal of the LIST is a Forbidden error: the webhook may not read the
// export's content.
func (c *Client) binds(ctx context.Context, src index.Source, cluster logicalcluster.Name) (bool, error) {
	shards, err := c.router.Shards(src, cluster)
	if err != nil {
		return false, err
	}
	for _, shard := range shards {
		bound, err := c.boundOn(ctx, shard, src)
		if err != nil {
			return false, fmt.Errorf("failed to list the bindings of %s: %w", src, err)
		}
		if bound[cluster] {
			return true, nil
		}
	}
	return false, nil
}

// bindingsRead bounds one LIST of an export's bindings, which answers
// every request that waits for it.
const bindingsRead = 10 * time.Second

// boundOn returns the workspaces that bind the export of src on shard: as
// last read, within bindingsTTL, or from a LIST that concurrent callers
// share.
func (c *Client) boundOn(ctx context.Context, shard *vw.Client, src index.Source) (map[logicalcluster.Name]bool, error) {
	key := shard.URL() + "|" + src.Export.String()
	c.lock.Lock()
	b, ok := c.bindings[key]
	c.lock.Unlock()
	if ok && c.now().Sub(b.read) < bindingsTTL {
		return b.clusters, nil
	}
	v, err, _ := c.bindingReads.Do(key, func() (any, error) {
		// Not the caller's context: the LIST answers the others too.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bindingsRead)
		defer cancel()
		read := c.now()
		clusters := map[logicalcluster.Name]bool{}
		if _, err := shard.List(ctx, vw.ResourcePath(logicalcluster.Wildcard, apiBindings, ""), nil, func(item []byte) error {
			if cluster, ok := bindingOf(item, src.Export.Name); ok {
				clusters[cluster] = true
			}
			return nil
		}); err != nil {
			return nil, err
		}
		c.lock.Lock()
		c.bindings[key] = boundClusters{clusters: clusters, read: read}
		c.lock.Unlock()
		return clusters, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(map[logicalcluster.Name]bool), nil
}

// bindingOf returns the workspace of the APIBinding item, as JSON, if it
// binds the export named export.
func bindingOf(item []byte, export string) (logicalcluster.Name, bool) {
	name, err := jsonparser.GetString(item, "spec", "reference", "export", "name")
	if err != nil || name != export {
		return "", false
	}
	cluster, err := jsonparser.GetString(item, "metadata", "annotations", logicalcluster.AnnotationKey)
	return logicalcluster.Name(cluster), err == nil && cluster != ""
}
