package objects

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/url"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// listPage bounds the objects of one page of a listing, so that neither
// kcp nor the webhook holds a shard's whole list in one response; a list
// whose next page has expired starts again at most listRestarts times.
const (
	listPage     = 500
	listRestarts = 3
)

// List lists the objects of src in every workspace that binds its
// APIExport, on every shard, through the shards' virtual workspaces, and
// calls visit with the metadata of each; only objects matching
// labelSelector if it is not empty. The list of each shard is read in
// pages of at most listPage objects, which all read the state of the first
// (a consistent LIST), each streamed; only the metadata of its objects is
// kept until the last page (so that a retried list visits each object
// once). It is retried from the first page within the deadline of ctx
// while a page fails for a reason that clears by itself. A shard that
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
	path := vw.ResourcePath(logicalcluster.Wildcard, src.Resource, "")
	for _, shard := range shards {
		items, err := c.listShard(ctx, shard, src, path, labelSelector, keep)
		if err != nil {
			return fmt.Errorf("failed to list %s through %s: %w", src, shard.URL(), err)
		}
		if err := c.visitListed(src, shard, items, visit); err != nil {
			return err
		}
	}
	return nil
}

// ListObjectsIn lists as ListObjects does, only the objects of src in the
// workspace cluster, through the shard that serves it. It lists nothing
// in a workspace that no shard serves (one that no longer binds the
// export).
func (c *Client) ListObjectsIn(ctx context.Context, src index.Source, cluster logicalcluster.Name, labelSelector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error {
	path := vw.ResourcePath(cluster.Path(), src.Resource, "")
	var (
		items []item
		from  *vw.Client
	)
	err := c.router.OnShardOf(src, cluster, func(shard *vw.Client, _ index.State) error {
		listed, err := c.listShard(ctx, shard, src, path, labelSelector, keep)
		if err == nil {
			items, from = listed, shard
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to list %s in %s: %w", src, cluster, err)
	}
	if from == nil {
		return nil
	}
	return c.visitListed(src, from, items, visit)
}

// item is an object listed: its metadata, and its JSON if it was kept.
type item struct {
	meta kcp.Meta
	raw  []byte
}

// listShard lists the objects at path on shard in pages (see List), and
// returns them once the last page is read; it keeps the JSON of those for
// which keep (if set) returns true.
func (c *Client) listShard(ctx context.Context, shard *vw.Client, src index.Source, path []string, labelSelector string, keep func(kcp.Meta, []byte) bool) ([]item, error) {
	first := url.Values{"limit": {strconv.Itoa(listPage)}}
	if labelSelector != "" {
		first.Set("labelSelector", labelSelector)
	}
	// A retry lists the shard again from the start: the objects of an
	// attempt are visited only once it has completed.
	var items []item
	err := c.router.Retry(ctx, func() error {
		items = items[:0]
		params, restarts := maps.Clone(first), 0
		for {
			meta, err := shard.ListPage(ctx, path, params, func(raw []byte) error {
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
			if apierrors.IsResourceExpired(err) && params.Has("continue") && restarts < listRestarts {
				// kcp compacted the version of the first page away: the
				// list starts again at the current one.
				items, params, restarts = items[:0], maps.Clone(first), restarts+1
				continue
			}
			if err != nil || meta.Continue == "" {
				return err
			}
			params.Set("continue", meta.Continue)
		}
	})
	return items, err
}

// visitListed calls visit with the objects that shard listed, and tells the
// router that the shard serves their workspaces.
func (c *Client) visitListed(src index.Source, shard *vw.Client, items []item, visit func(kcp.Meta, []byte) error) error {
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
	return nil
}
