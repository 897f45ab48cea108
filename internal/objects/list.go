package objects

import (
	"context"
	"fmt"
	"net/url"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// List lists the objects of src in every workspace that binds its
// APIExport, on every shard, through the shards' virtual workspaces, and
// calls visit with the metadata of each; only objects matching
// labelSelector if it is not empty. The list of each shard is streamed and
// only the metadata of its objects is kept until it completes (so that a
// retried list visits each object once); it is retried within the deadline
// of ctx while it fails for a reason that clears by itself. A shard that
// fails otherwise fails the listing (visit may have been called for the
// objects of other shards by then).
func (c *Client) List(ctx context.Context, src index.Source, labelSelector string, visit func(kcp.Meta) error) error {
	shards, err := c.router.Shards(src, "")
	if err != nil {
		return err
	}
	var params url.Values
	if labelSelector != "" {
		params = url.Values{"labelSelector": {labelSelector}}
	}
	path := vw.ResourcePath(logicalcluster.Wildcard, src.Resource, "")
	for _, shard := range shards {
		// A retry lists the shard again from the start: the objects of an
		// attempt are visited only once it has completed.
		var metas []kcp.Meta
		err := c.router.Retry(ctx, func() error {
			metas = metas[:0]
			_, err := shard.List(ctx, path, params, func(item []byte) error {
				m, err := kcp.ReadMeta(item)
				if err != nil {
					return fmt.Errorf("failed to read an object of %s: %w", src, err)
				}
				metas = append(metas, m)
				return nil
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("failed to list %s through %s: %w", src, shard.URL(), err)
		}
		for _, m := range metas {
			if err := visit(m); err != nil {
				return err
			}
		}
	}
	return nil
}
