package objects

import (
	"bytes"
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
	return c.ListObjects(ctx, src, labelSelector, nil, func(m kcp.Meta, _ []byte) error { return visit(m) })
}

// ListObjects lists as List does, and keeps the JSON of the objects for
// which keep (if set) returns true until their shard's list completes:
// visit gets it for those, nil for the others. The router learns which
// shard serves each workspace listed.
func (c *Client) ListObjects(ctx context.Context, src index.Source, labelSelector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error {
	shards, err := c.router.Shards(src, "")
	if err != nil {
		return err
	}
	var params url.Values
	if labelSelector != "" {
		params = url.Values{"labelSelector": {labelSelector}}
	}
	type item struct {
		meta kcp.Meta
		raw  []byte
	}
	path := vw.ResourcePath(logicalcluster.Wildcard, src.Resource, "")
	for _, shard := range shards {
		// A retry lists the shard again from the start: the objects of an
		// attempt are visited only once it has completed.
		var items []item
		err := c.router.Retry(ctx, func() error {
			items = items[:0]
			_, err := shard.List(ctx, path, params, func(raw []byte) error {
				m, err := kcp.ReadMeta(raw)
				if err != nil {
					return fmt.Errorf("failed to read an object of %s: %w", src, err)
				}
				it := item{meta: m}
				if keep != nil && keep(m, raw) {
					it.raw = bytes.Clone(raw)
				}
				items = append(items, it)
				return nil
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("failed to list %s through %s: %w", src, shard.URL(), err)
		}
		var last logicalcluster.Name
		for _, it := range items {
			// The shard serves every workspace it listed objects of, which
			// decisions that need the shard of a workspace learn from here.
			if it.meta.Cluster != last && !it.meta.Cluster.Empty() {
				last = it.meta.Cluster
				c.router.ReadThrough(src, last, shard.URL())
			}
			if err := visit(it.meta, it.raw); err != nil {
				return err
			}
		}
	}
	return nil
}
