// Package objects reads and writes the objects of an APIExport through the
// virtual workspace of the shard that serves their workspace: the few
// requests the webhook makes besides the reads of the index, each with the
// consent of the objects' provider (list, patch, delete or create on its
// APIExport's content). They are
//
//   - List: the objects of a source in every workspace, by label (the
//     records of deferred deletions, the dependents not labelled yet);
//   - Patch and Delete of one object (recording, removing and replaying a
//     deferred deletion; relabelling a dependent);
//   - CreateEvent: a core Event on an object whose record was removed;
//   - NamespaceTerminating: a dry-run Event create that asks kcp whether a
//     namespace is being deleted, for the decisions on kcp's teardown;
//   - ReviewAccess: a SubjectAccessReview in a consumer workspace, which
//     asks kcp whether the user who sets skip-protection may delete the
//     object.
//
// The index knows which shards serve a source and on which shard a
// workspace lives (see route.Router.OnShardOf, which index.Index embeds);
// it routes the requests, and they are retried as its reads are, within
// the deadline of their context, while they fail for a reason that clears
// by itself.
package objects

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Router routes a request for objects of a source to the virtual workspace
// of its APIExport on the shard that serves their workspace, and retries
// it; *route.Router implements it, and so does *index.Index, which embeds
// one.
type Router interface {
	// Serving returns the client of the shard known to serve cluster, and
	// false if that shard is not known.
	Serving(src index.Source, cluster logicalcluster.Name) (*vw.Client, bool, error)
	// Shards returns the clients of every shard of src, the one known to
	// serve cluster first; it fails (retryably) while the APIExport of src
	// has not been read.
	Shards(src index.Source, cluster logicalcluster.Name) ([]*vw.Client, error)
	// OnShardOf calls do on the shard that serves cluster, trying the
	// shards in turn while do fails with 403, and remembers the shard on
	// which it succeeds; it does nothing for a cluster no shard serves.
	OnShardOf(src index.Source, cluster logicalcluster.Name, do func(c *vw.Client, state index.State) error) error
	// Retry retries attempt within the deadline of ctx while it fails for
	// a reason that clears by itself.
	Retry(ctx context.Context, attempt func() error) error
	// ReadThrough records that cluster was listed through the shard whose
	// client's URL is url: that shard serves it.
	ReadThrough(src index.Source, cluster logicalcluster.Name, url string)
}

// Client lists and writes objects of sources through the virtual
// workspaces that router names.
type Client struct {
	router Router
	now    func() time.Time

	lock sync.Mutex
	// namespaces is what NamespaceTerminating learned, active when it
	// found each namespace active last.
	namespaces map[namespaceKey]namespaceState
	active     map[namespaceKey]time.Time
	// swept is when expired namespaces were last forgotten.
	swept time.Time
	// probes are the probes of namespaces in flight (see
	// NamespaceTerminating).
	probes singleflight.Group

	// bindings are the workspaces that bind each export on each shard, as
	// a LIST of the export's bindings read them last (see binds), and
	// bindingReads those LISTs in flight.
	bindings     map[string]boundClusters
	bindingReads singleflight.Group
}

// New returns a Client that routes its requests with router.
func New(router Router) *Client {
	return &Client{router: router, now: time.Now, namespaces: map[namespaceKey]namespaceState{}, active: map[namespaceKey]time.Time{}, bindings: map[string]boundClusters{}}
}

var _ Router = (*index.Index)(nil)
