package index

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// The watch of a source learns which shards serve its APIExport, and on
// which shard a workspace lives (where its dependents were indexed, or a
// read went through). Reads of the index and requests for objects of the
// source (package objects) are routed with it: to the virtual workspace of
// the export on the shard that serves the workspace.

// Serving returns the client of the virtual workspace of src on the shard
// that serves cluster, and true, if the index knows that shard: the only
// one there is, the one where dependents of cluster were indexed, or the
// one a request last went through (see OnShardOf).
func (ix *Index) Serving(src Source, cluster logicalcluster.Name) (*vw.Client, bool, error) {
	w := ix.watch(src)
	if w == nil {
		return nil, false, fmt.Errorf("%s is not watched", src)
	}
	u, ok := w.Serving(cluster)
	if !ok {
		return nil, false, nil
	}
	c, err := ix.clients.For(u)
	if err != nil {
		return nil, false, err
	}
	return c, true, nil
}

// ServingURL returns the URL of the virtual workspace of src on the shard
// known to serve cluster, if the index knows it (see Serving).
func (ix *Index) ServingURL(src Source, cluster logicalcluster.Name) (string, bool) {
	w := ix.watch(src)
	if w == nil {
		return "", false
	}
	return w.Serving(cluster)
}

// Dependent returns the URL of the virtual workspace of src on the shard
// known to serve cluster, and one dependent of src that the index holds on
// that shard (of any workspace), if it knows the shard and holds one.
func (ix *Index) Dependent(src Source, cluster logicalcluster.Name) (string, kcp.Meta, bool) {
	w := ix.watch(src)
	if w == nil {
		return "", kcp.Meta{}, false
	}
	u, ok := w.Serving(cluster)
	if !ok {
		return "", kcp.Meta{}, false
	}
	m, ok := w.Store().Any(u)
	return u, m, ok
}

// DependentPerShard returns, for each shard on which the index holds
// dependents of src, the URL of the shard's virtual workspace of src and one
// of those dependents: objects to probe the shards' admission with.
func (ix *Index) DependentPerShard(src Source) map[string]kcp.Meta {
	w := ix.watch(src)
	if w == nil {
		return nil
	}
	urls, _ := w.Shards("")
	out := map[string]kcp.Meta{}
	for _, u := range urls {
		if m, ok := w.Store().Any(u); ok {
			out[u] = m
		}
	}
	return out
}

// Shards returns the clients of the virtual workspace of src on every shard
// the index reads, the shard known to serve cluster first (for a cluster
// the index knows; "" names none). While the APIExport of src has not been
// read it fails with an error wrapping ErrNotInspected.
func (ix *Index) Shards(src Source, cluster logicalcluster.Name) ([]*vw.Client, error) {
	w := ix.watch(src)
	if w == nil {
		return nil, fmt.Errorf("%s is not watched", src)
	}
	urls, inspected := w.Shards(cluster)
	if !inspected {
		return nil, fmt.Errorf("%s: %w", src, ErrNotInspected)
	}
	clients := make([]*vw.Client, 0, len(urls))
	for _, u := range urls {
		c, err := ix.clients.For(u)
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// OnShardOf calls do with the client of the virtual workspace of src on the
// shard that serves cluster: the shard on which the index last saw the
// cluster first, then the others, as long as do fails with 403, which kcp's
// virtual workspace answers for a cluster that does not bind the export on
// that shard (or lives on another one). The shard on which do succeeds is
// known to serve cluster from then on (see Serving). A cluster that no
// shard serves binds no export, so OnShardOf then returns nil without
// anything done, unless the index holds dependents of it: then every shard
// refused a workspace that binds the export, as one that is starting does,
// and it fails with an error that RetryCause retries. do is also passed the
// state of src.
func (ix *Index) OnShardOf(src Source, cluster logicalcluster.Name, do func(c *vw.Client, state State) error) error {
	w := ix.watch(src)
	if w == nil {
		return fmt.Errorf("%s is not watched", src)
	}
	state := w.State()
	urls, inspected := w.Shards(cluster)
	if !inspected {
		return fmt.Errorf("%s: %w", src, ErrNotInspected)
	}
	_, known := w.Serving(cluster)
	for i, u := range urls {
		c, err := ix.clients.For(u)
		if err != nil {
			return err
		}
		err = do(c, state)
		if apierrors.IsForbidden(err) {
			continue
		}
		if err == nil && (i > 0 || !known) {
			// The shard that served is known from now on (writes go
			// there at once).
			w.ReadThrough(cluster, u)
		}
		return err
	}
	if w.Store().Holds(cluster) {
		// Every shard refused a workspace that the index holds dependents
		// of: it binds the export, and a virtual workspace that is starting
		// has not synced its bindings yet.
		return fmt.Errorf("%s in logical cluster %s: %w", src, cluster, errRefused)
	}
	// No shard serves the cluster and the index holds nothing of it: it
	// does not bind the export (any more), so it holds no dependents.
	return nil
}
