// Package index keeps, in the webhook, an index of the references that
// dependent objects hold, and reads objects live where the index cannot
// decide. It is made of these parts:
//
//   - sources: for every dependent type that a DependencyRule names (a
//     Source), a watch of its dependents in all consumer workspaces through
//     the virtual workspace of the type's own APIExport, with the read
//     access the type's provider granted to the webhook;
//   - store: of each dependent only its cluster, namespace, name, UID,
//     whether it is being deleted, and the strings found at the paths the
//     rules name, with a reverse index from those strings;
//   - live: consistent reads of one scope, shared by concurrent decisions;
//   - targets: for the audit of dangling references, which objects of the
//     protected types exist (WatchTargets, Existing).
//
// A lookup (Hits) returns the dependents that reference a name, at a cost
// that does not depend on how many dependents there are. The index is
// eventually consistent, so a miss is not proof of absence: Confirm reads
// the dependents in scope live, which the webhook does before it allows a
// delete, and Lookup reads protected objects one by one. Both retry within
// the caller's deadline what clears by itself. See docs/architecture.md for
// why this is sound.
//
// The index knows how current it is: Currency is a time before which
// everything kcp stored of a source in a workspace is in the index, from
// samples of each shard's resourceVersion that its reflector has passed.
// And it remembers for a while which admission ids it has seen on the
// dependents of a source (Admitted, WaitAdmitted).
//
// What the watches learn about shards also routes requests for objects of
// a source: the index embeds a route.Router, whose Serving, Shards and
// OnShardOf name the virtual workspace of the shard that serves a
// workspace, and whose Retry retries as the index's reads do (package
// objects writes through them). Metrics measures the index: its size, the
// state of each source, and its live reads and their retries.
package index

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/live"
	"github.com/opendefensecloud/dependency-controller/internal/index/metrics"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
	"github.com/opendefensecloud/dependency-controller/internal/index/targets"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Source identifies a dependent or protected type as its provider serves
// it; see sources.Source.
type Source = sources.Source

// State is what the index knows about a source; see sources.State.
type State = sources.State

// Phase is where the index stands with a source; see sources.Phase.
type Phase = sources.Phase

// PathProblem is a field path that can never hold a name; see
// sources.PathProblem.
type PathProblem = sources.PathProblem

// Phases of a source; see the sources package.
const (
	PhaseSyncing             = sources.PhaseSyncing
	PhaseSynced              = sources.PhaseSynced
	PhaseExportNotFound      = sources.PhaseExportNotFound
	PhaseAccessDenied        = sources.PhaseAccessDenied
	PhaseResourceNotExported = sources.PhaseResourceNotExported
	PhaseVersionNotServed    = sources.PhaseVersionNotServed
)

// Phases are all phases of a source.
var Phases = sources.Phases

// ErrVersionNotServed is returned (wrapped) by Confirm and Lookup for a
// workspace that binds the APIExport of a source which does not serve the
// version the rules name: its objects cannot be read.
var ErrVersionNotServed = errors.New("version not served")

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
	// for a read longer than that. Default live.DefaultTimeout.
	ReadTimeout time.Duration
	// Shards, if set, are the base URLs of the shards whose virtual
	// workspaces the index reads (see sources.Config.Shards); ShardName
	// names them in messages. Empty: every shard.
	Shards    []string
	ShardName string
	// SampleInterval is how often the resourceVersion of each shard is
	// sampled for each indexed source, for Currency. Default 2s.
	SampleInterval time.Duration
	// WatchTimeout is the shortest timeout the watches of the dependents
	// ask for (up to half again as long): kcp sends a watch a bookmark 2 s
	// before it times out, so that the index follows a quiet resource, and
	// Currency advances, every WatchTimeout or so. At least 3s, or no
	// bookmark comes; default 5s.
	WatchTimeout time.Duration
	// AdmissionMemory is how long the index remembers an admission id it
	// has seen on a dependent (see Admitted). Default 10 minutes.
	AdmissionMemory time.Duration
}

// watch is what the index needs of the watch of a source; *sources.Watch
// implements it.
type watch interface {
	route.Watch
	Paths() []fieldpath.Reference
	ShardSynced(url string) bool
	SetWatchTargets(on bool)
	Targets() (*targets.Set, bool)
}

// running is a watch and how to stop it.
type running struct {
	watch
	cancel context.CancelFunc
	done   <-chan struct{}
}

// Index is the reference index of all sources. It is a manager.Runnable;
// sources start to be watched once it runs.
type Index struct {
	// Router routes requests for objects of the sources the index
	// watches, and retries them; the index's own reads go through it.
	*route.Router

	cfg     sources.Config
	clients *vw.Clients
	opts    Options
	reads   *live.Reads
	metrics *metrics.Metrics
	now     func() time.Time

	lock    sync.Mutex
	ctx     context.Context
	desired map[Source][]fieldpath.Reference
	watches map[Source]*running
	// fences are the teardown fences of scopes (see Fenced).
	fences  map[live.Scope]fences
	fencing map[live.Scope]chan struct{}
	changed chan struct{}
	updates chan struct{}
	// contents is signalled like updates, and after changes of the sets
	// of targets; watchTargets is set while they are watched (see
	// WatchTargets).
	contents     chan struct{}
	watchTargets bool
	// changes counts the changes of the dependents and the objects
	// added to the sets of targets (see Generation), and remembers their
	// workspaces (see ChangedClusters).
	changes changes
}

// New returns an index that reads with the credentials of cfg: endpoint
// slices, APIExports and schemas through the server at frontProxy (without
// a /clusters/ path), and objects through the virtual workspaces they name.
func New(cfg *rest.Config, frontProxy string, opts Options) (*Index, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	if opts.SampleInterval <= 0 {
		opts.SampleInterval = DefaultSampleInterval
	}
	if opts.WatchTimeout <= 0 {
		opts.WatchTimeout = DefaultWatchTimeout
	}
	if opts.AdmissionMemory <= 0 {
		opts.AdmissionMemory = DefaultAdmissionMemory
	}
	front, err := vw.NewClusterClients(cfg, scheme.New(), scheme.RESTMapper())
	if err != nil {
		return nil, err
	}
	ix := &Index{
		clients:  vw.NewClients(cfg),
		opts:     opts,
		desired:  map[Source][]fieldpath.Reference{},
		watches:  map[Source]*running{},
		fences:   map[live.Scope]fences{},
		fencing:  map[live.Scope]chan struct{}{},
		changed:  make(chan struct{}, 1),
		updates:  make(chan struct{}, 1),
		contents: make(chan struct{}, 1),
		now:      time.Now,
	}
	ix.metrics = metrics.New(ix.Len, ix.Sources)
	ix.Router = route.New(func(src Source) route.Watch { return ix.watch(src) }, ix.clients, ix.metrics.Retried)
	ix.cfg = sources.Config{
		ClusterClients: front, FrontProxy: frontProxy, Clients: ix.clients,
		PollInterval: opts.PollInterval, Identity: opts.Identity, Notify: ix.notify, Changed: ix.updated,
		Shards: opts.Shards, SampleInterval: opts.SampleInterval, WatchTimeout: opts.WatchTimeout,
		AdmissionMemory: opts.AdmissionMemory, SampleFailed: ix.metrics.SampleFailed, TargetsChanged: ix.contentChanged, TargetsAdded: ix.targetsAdded,
	}
	ix.reads = live.New(ix.readScope, ix.catchUp, opts.ReadTimeout)
	return ix, nil
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
	watches := make([]*running, 0, len(ix.watches))
	for _, w := range ix.watches {
		w.cancel()
		watches = append(watches, w)
	}
	ix.lock.Unlock()
	for _, w := range watches {
		<-w.done
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
// indexed; it is only inspected (access, what the export serves) and read
// with Lookup.
func (ix *Index) Ensure(desired map[Source][]fieldpath.Reference) {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	ix.desired = desired
	if ix.ctx != nil {
		ix.reconcileLocked()
	}
}

// reconcileLocked starts and stops watches. Callers hold the lock.
func (ix *Index) reconcileLocked() {
	replaced := map[Source]*running{}
	for src, w := range ix.watches {
		if paths, ok := ix.desired[src]; !ok || !slices.Equal(paths, w.Paths()) {
			w.cancel()
			delete(ix.watches, src)
			replaced[src] = w
		}
	}
	for src, paths := range ix.desired {
		if _, ok := ix.watches[src]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(ix.ctx)
		w := sources.NewWatch(src, paths, ix.cfg)
		w.SetWatchTargets(ix.watchTargets)
		if old := replaced[src]; old != nil {
			// Its paths changed: what the old watch saw was seen.
			w.Store().AdoptAdmissions(old.Store())
		}
		ix.watches[src] = &running{watch: w, cancel: cancel, done: w.Done()}
		go w.Run(ctx)
	}
	ix.notify()
}

func (ix *Index) notify() {
	select {
	case ix.changed <- struct{}{}:
	default:
	}
}

func (ix *Index) updated(cluster logicalcluster.Name) {
	ix.changes.record(cluster)
	select {
	case ix.updates <- struct{}{}:
	default:
	}
	ix.contentChanged()
}

// targetsAdded counts an object that may have been added to a set of
// targets.
func (ix *Index) targetsAdded(cluster logicalcluster.Name) {
	ix.changes.record(cluster)
}

func (ix *Index) contentChanged() {
	select {
	case ix.contents <- struct{}{}:
	default:
	}
}

// Updates receives a value whenever indexed dependents may have changed;
// values are coalesced, so one receive may stand for many changes. It has
// one receiver (the replay of deferred deletions).
func (ix *Index) Updates() <-chan struct{} {
	return ix.updates
}

// Changes receives a value whenever the state of a source may have changed.
func (ix *Index) Changes() <-chan struct{} {
	return ix.changed
}

func (ix *Index) watch(src Source) watch {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	if w, ok := ix.watches[src]; ok {
		return w.watch
	}
	return nil
}

// State returns the state of a source; a source that is not watched (yet) is
// Syncing.
func (ix *Index) State(src Source) State {
	w := ix.watch(src)
	if w == nil {
		return State{Phase: PhaseSyncing, Message: "Not watched yet"}
	}
	return w.State()
}

// Synced reports whether every source has been listed on every shard (once:
// a watch that broke since makes decisions read live, not the replica
// unready), or is in a phase in which it takes no part in decisions. An
// error describes the first source that is not.
func (ix *Index) Synced() error {
	ix.lock.Lock()
	if ix.ctx == nil {
		ix.lock.Unlock()
		return errors.New("the index has not started")
	}
	watches := make(map[Source]watch, len(ix.watches))
	for src, w := range ix.watches {
		watches[src] = w.watch
	}
	ix.lock.Unlock()
	for src, w := range watches {
		if state := w.State(); state.Phase == PhaseSyncing && !state.Listed {
			return fmt.Errorf("%s: %s", src, state.Message)
		}
	}
	return nil
}

// Hits returns the indexed dependents of src in cluster that reference the
// object named name in namespace (empty for a cluster-scoped object) at one
// of paths (see fieldpath.RefersTo for which namespaces a reference names).
func (ix *Index) Hits(src Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) []kcp.Meta {
	w := ix.watch(src)
	if w == nil {
		return nil
	}
	var idx []int
	for _, p := range paths {
		if i := slices.Index(w.Paths(), p); i >= 0 {
			idx = append(idx, i)
		}
	}
	return w.Store().Referencing(cluster, idx, namespace, name)
}

// Largest returns the indexed dependent of src that holds the most
// references, and how many (see store.Store.Largest); none (0) if src is
// not indexed or no dependent holds one.
func (ix *Index) Largest(src Source) (kcp.Meta, int) {
	w := ix.watch(src)
	if w == nil {
		return kcp.Meta{}, 0
	}
	return w.Store().Largest()
}

// Len returns the number of indexed dependents of all sources.
func (ix *Index) Len() int {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	n := 0
	for _, w := range ix.watches {
		n += w.Store().Len()
	}
	return n
}

// SourceStatus is the state of one watched source, the number of its
// dependents in the index and how current they are; see the sources
// package.
type SourceStatus = sources.Status

// Metrics returns the index's Prometheus metrics, a prometheus.Collector
// that the webhook binary registers where it serves metrics: the number of
// indexed dependents, the phase, size and currency of every source (read at
// each scrape), the live reads of scopes by how they were answered, the
// retries of reads and routed requests by cause, and the samples of shards'
// resourceVersions that failed (see the metrics package).
func (ix *Index) Metrics() prometheus.Collector {
	return ix.metrics
}

// Sources returns every watched source with its state, the number of its
// indexed dependents and their currency, in no particular order.
func (ix *Index) Sources() []SourceStatus {
	ix.lock.Lock()
	watches := make(map[Source]watch, len(ix.watches))
	for src, w := range ix.watches {
		watches[src] = w.watch
	}
	ix.lock.Unlock()
	out := make([]SourceStatus, 0, len(watches))
	for src, w := range watches {
		currency, shards := leastCurrency(w)
		targets := 0
		if set, _ := w.Targets(); set != nil {
			targets = set.Len()
		}
		out = append(out, SourceStatus{Source: src, State: w.State(), Indexed: w.Store().Len(), Targets: targets, Currency: currency, CurrencyShards: shards})
	}
	return out
}
