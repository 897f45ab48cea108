// Package route routes requests for the objects of a source to the virtual
// workspace of its APIExport on the shard that serves their workspace, and
// retries them while they fail for a reason that clears by itself.
//
// The watch of a source (package sources) learns which shards serve its
// APIExport, and on which shard a workspace lives: where its dependents
// were indexed, or where a request went through. A Router asks it, and
// remembers the shard on which a request succeeds (see OnShardOf). The
// index reads through a Router and embeds it, so that package objects
// writes through the same routes; Retry retries the index's reads and
// those writes alike, and RetryCause says which failures it retries.
package route

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Watch is what a Router needs of the watch of a source; *sources.Watch
// implements it.
type Watch interface {
	// State returns the current state of the source.
	State() sources.State
	// Store returns the store of the source's dependents.
	Store() *store.Store
	// Shards returns the virtual workspace URLs of the export, one per
	// shard, the one known to serve cluster first, and whether the export
	// has been inspected at all.
	Shards(cluster logicalcluster.Name) ([]string, bool)
	// Serving returns the virtual workspace URL of the shard known to
	// serve cluster, if the watch knows it.
	Serving(cluster logicalcluster.Name) (string, bool)
	// ReadThrough records that cluster was read through the virtual
	// workspace at url.
	ReadThrough(cluster logicalcluster.Name, url string)
	// Reinspect has the export's shards read again soon: a request found
	// none that serves a workspace.
	Reinspect()
}

// Router routes requests for the objects of the sources that are watched,
// and retries them.
type Router struct {
	watch   func(src sources.Source) Watch
	clients *vw.Clients
	retried func(cause string)
}

// New returns a Router that finds the watch of a source with watch (nil for
// a source that is not watched), reaches the virtual workspaces through
// clients, and calls retried, if set, with the cause of every retry that
// Retry makes.
func New(watch func(src sources.Source) Watch, clients *vw.Clients, retried func(cause string)) *Router {
	return &Router{watch: watch, clients: clients, retried: retried}
}

// Serving returns the client of the virtual workspace of src on the shard
// that serves cluster, and true, if the index knows that shard: the only
// one there is, the one where dependents of cluster were indexed, or the
// one a request last went through (see OnShardOf).
func (r *Router) Serving(src sources.Source, cluster logicalcluster.Name) (*vw.Client, bool, error) {
	w := r.watch(src)
	if w == nil {
		return nil, false, fmt.Errorf("%s is not watched", src)
	}
	u, ok := w.Serving(cluster)
	if !ok {
		return nil, false, nil
	}
	c, err := r.clients.For(u)
	if err != nil {
		return nil, false, err
	}
	return c, true, nil
}

// ReadThrough records that the objects of src in cluster were listed
// through the virtual workspace at url (the base URL of a shard's client):
// that shard serves cluster, and requests for it go there from now on. A
// logical cluster stays on its shard, so what is recorded stays true.
func (r *Router) ReadThrough(src sources.Source, cluster logicalcluster.Name, url string) {
	if w := r.watch(src); w != nil {
		w.ReadThrough(cluster, url)
	}
}

// ServingURL returns the URL of the virtual workspace of src on the shard
// known to serve cluster, if the index knows it (see Serving).
func (r *Router) ServingURL(src sources.Source, cluster logicalcluster.Name) (string, bool) {
	w := r.watch(src)
	if w == nil {
		return "", false
	}
	return w.Serving(cluster)
}

// Dependent returns the URL of the virtual workspace of src on the shard
// known to serve cluster, and one dependent of src that the index holds on
// that shard (of any workspace), if it knows the shard and holds one.
func (r *Router) Dependent(src sources.Source, cluster logicalcluster.Name) (string, kcp.Meta, bool) {
	w := r.watch(src)
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
func (r *Router) DependentPerShard(src sources.Source) map[string]kcp.Meta {
	w := r.watch(src)
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
func (r *Router) Shards(src sources.Source, cluster logicalcluster.Name) ([]*vw.Client, error) {
	w := r.watch(src)
	if w == nil {
		return nil, fmt.Errorf("%s is not watched", src)
	}
	urls, inspected := w.Shards(cluster)
	if !inspected {
		return nil, fmt.Errorf("%s: %w", src, ErrNotInspected)
	}
	clients := make([]*vw.Client, 0, len(urls))
	for _, u := range urls {
		c, err := r.clients.For(u)
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
func (r *Router) OnShardOf(src sources.Source, cluster logicalcluster.Name, do func(c *vw.Client, state sources.State) error) error {
	w := r.watch(src)
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
		c, err := r.clients.For(u)
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
	// The export's shards may have changed since they were read: kcp lists
	// a shard only once a workspace on it binds the export.
	w.Reinspect()
	if w.Store().Holds(cluster) {
		// Every shard refused a workspace that the index holds dependents
		// of: it binds the export, and a virtual workspace that is starting
		// has not synced its bindings yet.
		return fmt.Errorf("%s in logical cluster %s: %w", src, cluster, ErrRefused)
	}
	// No shard serves the cluster and the index holds nothing of it: it
	// does not bind the export (any more), so it holds no dependents.
	return nil
}
