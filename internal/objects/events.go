package objects

import (
	"context"
	"fmt"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// CreateEvent creates the core Event body (JSON) in namespace of cluster,
// through the virtual workspace of src on the shard that serves cluster
// (or, where that is not known, the first shard of src): the provider's
// APIExport must claim events, and the workspace must have accepted the
// claim.
func (c *Client) CreateEvent(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string, body []byte) error {
	shard, ok, err := c.router.Serving(src, cluster)
	if err != nil {
		return err
	}
	if !ok {
		shards, err := c.router.Shards(src, cluster)
		if err != nil {
			return err
		}
		if len(shards) == 0 {
			return fmt.Errorf("%s: %w", src, index.ErrNotInspected)
		}
		shard = shards[0]
	}
	return c.router.Retry(ctx, func() error { return shard.Create(ctx, eventsPath(cluster, namespace), nil, body) })
}

// eventsPath is the path of the core Events of namespace in cluster.
func eventsPath(cluster logicalcluster.Name, namespace string) []string {
	return []string{cluster.Path().RequestPath(), "api", "v1", "namespaces", namespace, "events"}
}
