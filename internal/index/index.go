// Package index keeps, in the webhook, an index of the references that
// dependent objects hold: for every dependent type that a DependencyRule
// names (a Source), it watches the dependents in all consumer workspaces
// through the virtual workspace of the type's own APIExport, with the read
// access the type's provider granted to the webhook, and keeps of each
// dependent only its cluster, namespace, name, UID, whether it is being
// deleted, and the strings found at the paths the rules name. Nothing else is
// decoded, let alone stored.
//
// A lookup (Hits) returns the dependents that reference a name, at a cost
// that does not depend on how many dependents there are. The index is
// eventually consistent, so a miss is not proof of absence: Confirm reads the
// dependents of one workspace (and namespace) live, through the same virtual
// workspace, which the webhook does before it allows a delete; concurrent
// confirmations of one scope share a read. See
// docs/architecture.md for why this is sound.
package index

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// ErrVersionNotServed is returned (wrapped) by Confirm for a workspace that
// binds the APIExport of a source which does not serve the version the rules
// name: its dependents cannot be checked.
var ErrVersionNotServed = errors.New("version not served")

// ErrNotInspected is returned (wrapped) by Confirm and Lookup while the
// APIExport of a source has not been read yet (right after the source was
// added, e.g. when the webhook starts): which shards serve it is not known,
// so nothing can be read. It clears within a poll interval; Retry waits for
// it.
var ErrNotInspected = errors.New("the APIExport has not been read yet")

// ErrRefused is returned (wrapped) by Confirm and Lookup when every shard's
// virtual workspace refuses (403) a logical cluster that binds the export,
// as far as the index knows: while a shard starts, its virtual workspace
// refuses workspaces whose bindings it has not synced yet. Retry waits for
// it; it never means "no dependents".
var ErrRefused = errors.New("every shard's virtual workspace refused a workspace that binds the export")

// Options configure an Index.
type Options struct {
	// PollInterval is how often the APIExportEndpointSlice and the resources
	// of each source's APIExport are read again (shards added or removed,
	// grants given or revoked). Default 10s.
	PollInterval time.Duration
	// Identity is the webhook's user name, for messages that say what to
	// grant.
	Identity string
	// ReadTimeout bounds one live read of a scope (see Confirm); it should
	// be the time a decision may spend reading, since no decision waits
	// for a read longer than that. Default 30s.
	ReadTimeout time.Duration
}

// Index is the reference index of all sources. It is a manager.Runnable;
// sources start to be watched once it runs.
type Index struct {
	cfg        *rest.Config
	frontProxy *reader
	opts       Options

	lock    sync.Mutex
	ctx     context.Context
	desired map[Source][]fieldpath.Path
	sources map[Source]*sourceWatch
	readers map[string]*reader
	changed chan struct{}

	// liveLock guards live, the live reads of each scope (see Confirm).
	liveLock sync.Mutex
	live     map[scopeKey]*scopeReads
}

// New returns an index that reads with the credentials of cfg: endpoint
// slices through the server at frontProxy (without a /clusters/ path), and
// dependents through the virtual workspaces they name.
func New(cfg *rest.Config, frontProxy string, opts Options) (*Index, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	fp, err := newReader(cfg, frontProxy)
	if err != nil {
		return nil, err
	}
	return &Index{
		cfg:        rest.CopyConfig(cfg),
		frontProxy: fp,
		opts:       opts,
		desired:    map[Source][]fieldpath.Path{},
		sources:    map[Source]*sourceWatch{},
		readers:    map[string]*reader{},
		changed:    make(chan struct{}, 1),
	}, nil
}

// reader returns the reader of a virtual workspace URL.
func (ix *Index) reader(url string) (*reader, error) {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	if r, ok := ix.readers[url]; ok {
		return r, nil
	}
	r, err := newReader(ix.cfg, url)
	if err != nil {
		return nil, err
	}
	ix.readers[url] = r
	return r, nil
}

// Start implements manager.Runnable: it watches the desired sources until
// ctx is done.
func (ix *Index) Start(ctx context.Context) error {
	ix.lock.Lock()
	ix.ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName("index"))
	ix.reconcileLocked()
	ix.lock.Unlock()
	<-ctx.Done()
	ix.lock.Lock()
	watches := make([]*sourceWatch, 0, len(ix.sources))
	for _, sw := range ix.sources {
		sw.cancel()
		watches = append(watches, sw)
	}
	ix.lock.Unlock()
	for _, sw := range watches {
		<-sw.done
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica keeps its own index.
func (ix *Index) NeedLeaderElection() bool {
	return false
}

// Ensure sets the sources to watch, with the paths to read of each: new
// sources are watched, sources no longer named are dropped, and a source
// whose paths changed is listed again. A source without paths is not
// watched; it is only checked (access, what the export serves) and read
// with Lookup.
func (ix *Index) Ensure(desired map[Source][]fieldpath.Path) {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	ix.desired = desired
	if ix.ctx != nil {
		ix.reconcileLocked()
	}
}

// reconcileLocked starts and stops source watches. Callers hold the lock.
func (ix *Index) reconcileLocked() {
	for src, sw := range ix.sources {
		if paths, ok := ix.desired[src]; !ok || !slices.Equal(paths, sw.paths) {
			sw.cancel()
			delete(ix.sources, src)
		}
	}
	for src, paths := range ix.desired {
		if _, ok := ix.sources[src]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(ix.ctx)
		sw := &sourceWatch{
			src: src, paths: paths, ix: ix, store: newStore(), cancel: cancel, done: make(chan struct{}),
			notify: ix.notify, identity: ix.opts.Identity,
			state:  State{Phase: PhaseSyncing, Message: fmt.Sprintf("Reading the APIExport %q", src.Export.Name)},
			shards: map[string]*shardWatch{}, shardOf: map[logicalcluster.Name]string{},
		}
		ix.sources[src] = sw
		go sw.run(ctx)
	}
	ix.notify()
}

func (ix *Index) notify() {
	select {
	case ix.changed <- struct{}{}:
	default:
	}
}

// Changes receives a value whenever the state of a source may have changed.
func (ix *Index) Changes() <-chan struct{} {
	return ix.changed
}

func (ix *Index) source(src Source) *sourceWatch {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	return ix.sources[src]
}

// State returns the state of a source; a source that is not watched (yet) is
// Syncing.
func (ix *Index) State(src Source) State {
	sw := ix.source(src)
	if sw == nil {
		return State{Phase: PhaseSyncing, Message: "Not watched yet"}
	}
	sw.lock.Lock()
	defer sw.lock.Unlock()
	return sw.state
}

// Synced reports whether every source has been listed on every shard, or is
// in a phase in which it takes no part in decisions. An error describes the
// first source that is not.
func (ix *Index) Synced() error {
	ix.lock.Lock()
	if ix.ctx == nil {
		ix.lock.Unlock()
		return errors.New("the index has not started")
	}
	watches := make([]*sourceWatch, 0, len(ix.sources))
	for _, sw := range ix.sources {
		watches = append(watches, sw)
	}
	ix.lock.Unlock()
	for _, sw := range watches {
		sw.lock.Lock()
		state := sw.state
		sw.lock.Unlock()
		if state.Phase == PhaseSyncing {
			return fmt.Errorf("%s: %s", sw.src, state.Message)
		}
	}
	return nil
}

// Hits returns the indexed dependents of src in cluster that hold name at
// one of paths: in namespace, or in the whole cluster if namespace is empty.
// Cluster-scoped dependents are in every namespace's scope.
func (ix *Index) Hits(src Source, paths []fieldpath.Path, cluster logicalcluster.Name, namespace, name string) []Dependent {
	sw := ix.source(src)
	if sw == nil {
		return nil
	}
	var idx []int
	for _, p := range paths {
		if i := slices.Index(sw.paths, p); i >= 0 {
			idx = append(idx, i)
		}
	}
	hits := sw.store.referencing(cluster, idx, name)
	if namespace == "" {
		return hits
	}
	return slices.DeleteFunc(hits, func(d Dependent) bool { return d.Namespace != "" && d.Namespace != namespace })
}

// Len returns the number of indexed dependents of all sources.
func (ix *Index) Len() int {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	n := 0
	for _, sw := range ix.sources {
		n += sw.store.len()
	}
	return n
}

// onShardOf calls read with the reader of the virtual workspace of src on
// the shard that serves cluster: the shard on which the index last saw the
// cluster first, then the others, as long as read fails with 403, which
// kcp's virtual workspace answers for a cluster that does not bind the
// export on that shard (or lives on another one). A cluster that no shard
// serves binds no export, so onShardOf then returns nil without reading.
func (ix *Index) onShardOf(src Source, cluster logicalcluster.Name, read func(r *reader, state State) error) error {
	sw := ix.source(src)
	if sw == nil {
		return fmt.Errorf("%s is not watched", src)
	}
	sw.lock.Lock()
	state, inspected := sw.state, sw.inspected
	urls := slices.Clone(sw.urls)
	hint, hinted := sw.shardOf[cluster]
	sw.lock.Unlock()
	if !inspected {
		return fmt.Errorf("%s: %w", src, ErrNotInspected)
	}
	if shard, ok := sw.store.shard(cluster); ok {
		hint, hinted = shard, true
	}
	if hinted {
		if i := slices.Index(urls, hint); i > 0 {
			urls[0], urls[i] = urls[i], urls[0]
		}
	}
	for _, u := range urls {
		r, err := ix.reader(u)
		if err != nil {
			return err
		}
		err = read(r, state)
		if apierrors.IsForbidden(err) {
			continue
		}
		if err == nil && (!hinted || hint != u) {
			sw.lock.Lock()
			sw.shardOf[cluster] = u
			sw.lock.Unlock()
		}
		return err
	}
	if sw.store.holds(cluster) {
		// Every shard refused a workspace that the index holds dependents
		// of: it binds the export, and a virtual workspace that is starting
		// has not synced its bindings yet.
		return fmt.Errorf("%s in logical cluster %s: %w", src, cluster, ErrRefused)
	}
	// No shard serves the cluster and the index holds nothing of it: it
	// does not bind the export (any more), so it holds no dependents.
	return nil
}
