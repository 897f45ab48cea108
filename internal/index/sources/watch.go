package sources

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/index/targets"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Config is what all watches share.
type Config struct {
	// ClusterClients reach the front-proxy (APIExportEndpointSlices, APIExports and
	// APIResourceSchemas in the workspaces of the exports) and discover what
	// a virtual workspace serves.
	ClusterClients *vw.ClusterClients
	// FrontProxy is the base URL of the front-proxy, without a /clusters/
	// path.
	FrontProxy string
	// Clients read the virtual workspaces of the shards.
	Clients *vw.Clients
	// PollInterval is how often the endpoint slice and what the export
	// serves are read again.
	PollInterval time.Duration
	// Identity is the webhook's user name, for messages that say what to
	// grant; may be empty.
	Identity string
	// Notify is called whenever the state of a watch may have changed.
	Notify func()
	// Changed, if set, is called after the dependents in a watch's store
	// changed (added, updated, removed, or listed again), with the cluster
	// whose dependents changed (empty after a listing: any of them).
	Changed func(cluster logicalcluster.Name)
	// Shards, if set, are the base URLs of the shards to read: an endpoint
	// of an APIExportEndpointSlice is read only if its URL starts with one
	// of them. Empty: every shard.
	Shards []string
	// SampleInterval is how often the resourceVersion of each shard is
	// sampled, for the store's currency (see store.Currency). Zero: never,
	// and the currency is never known.
	SampleInterval time.Duration
	// WatchTimeout is the shortest timeout a watch of dependents asks for
	// (see listWatch.timeout): kcp sends a bookmark 2 s before a watch
	// times out, so the store's progress follows the shard every
	// WatchTimeout or so even when nothing of its resource changes. Zero,
	// and for the watches of targets: client-go's, 5 to 10 minutes.
	WatchTimeout time.Duration
	// AdmissionMemory is how long the store remembers the admission ids it
	// has seen (see store.SetAdmissionMemory).
	AdmissionMemory time.Duration
	// SampleFailed, if set, is called after a sample of a shard's
	// resourceVersion failed.
	SampleFailed func(Source)
	// TargetsChanged, if set, is called after the objects in a watch's
	// set of targets changed (see Watch.SetWatchTargets).
	TargetsChanged func()
	// TargetsAdded, if set, is called after an object may have been added
	// to a watch's set of targets (one added, with its cluster, or a shard
	// listed, with none), before TargetsChanged.
	TargetsAdded func(cluster logicalcluster.Name)
}

// onShards keeps the endpoint URLs that are on one of shards (all if there
// are none).
func onShards(urls, shards []string) []string {
	if len(shards) == 0 {
		return urls
	}
	return slices.DeleteFunc(urls, func(u string) bool {
		return !slices.ContainsFunc(shards, func(s string) bool { return strings.HasPrefix(u, strings.TrimSuffix(s, "/")+"/") })
	})
}

// schemaCheckInterval is how often the schema of a watched source is read
// again to check the paths: a provider may add a field to its schema.
const schemaCheckInterval = 5 * time.Minute

// shrinkConfirmations is how many inspections in a row, spanning at least
// that many poll intervals less one, must agree before a source stops
// being read on a shard, or its rules stop having effect.
const shrinkConfirmations = 3

// Watch keeps the store of one source current: it follows the
// APIExportEndpointSlice of the export (shards added and removed), checks
// what the export serves, and runs a reflector per shard. A Watch without
// paths only inspects the export: its objects are read one by one, not
// indexed; with SetWatchTargets, it also keeps the set of its objects that
// exist (their cluster, namespace and name only), for the audit of
// dangling references.
type Watch struct {
	src     Source
	paths   []fieldpath.Reference
	cfg     Config
	store   *store.Store
	targets *targets.Set
	done    chan struct{}
	// poke makes Run refresh at once.
	poke chan struct{}

	lock  sync.Mutex
	state State
	// reinspected is when Reinspect last poked Run.
	reinspected time.Time
	// watchTargets is set while the objects of a source without paths
	// are watched into targets.
	watchTargets bool
	// urls are the virtual workspace URLs of the export, one per shard,
	// valid once inspected is set: before the export has been read, no URL
	// does not mean that no shard serves it.
	urls      []string
	inspected bool
	shards    map[string]*shardWatch
	// readThrough is the URL through which a cluster was last read.
	readThrough map[logicalcluster.Name]string

	// schemaChecked is when the paths were last checked against the schema,
	// with the problems found; only Run's goroutine uses them.
	schemaChecked time.Time
	pathProblems  []PathProblem

	// pending is a state that takes protection away (a phase in which the
	// source's rules have no effect, or fewer shards), seen by the last
	// inspections but not yet confirmed, since when and how often in a row;
	// only Run's goroutine uses them. See confirmShrink.
	pending      string
	pendingSince time.Time
	pendingSeen  int
}

// NewWatch returns a watch of src that reads the strings at paths of each
// object. Run starts it.
func NewWatch(src Source, paths []fieldpath.Reference, cfg Config) *Watch {
	st := store.New(cfg.Changed)
	st.SetAdmissionMemory(cfg.AdmissionMemory)
	return &Watch{
		src: src, paths: paths, cfg: cfg, store: st, targets: targets.New(cfg.TargetsChanged, cfg.TargetsAdded), done: make(chan struct{}), poke: make(chan struct{}, 1),
		state:  State{Phase: PhaseSyncing, Message: fmt.Sprintf("Reading the APIExport %q", src.Export.Name)},
		shards: map[string]*shardWatch{}, readThrough: map[logicalcluster.Name]string{},
	}
}

// Paths returns the paths the watch reads, in the order of the indices the
// store uses.
func (w *Watch) Paths() []fieldpath.Reference {
	return w.paths
}

// Store returns the store the watch keeps current.
func (w *Watch) Store() *store.Store {
	return w.store
}

// SetWatchTargets turns the watch of the source's objects into its set of
// targets on or off; it takes effect at once if Run runs. It changes
// nothing for a source with paths, whose store holds every object.
func (w *Watch) SetWatchTargets(on bool) {
	w.lock.Lock()
	changed := w.watchTargets != on
	w.watchTargets = on
	w.lock.Unlock()
	if changed {
		select {
		case w.poke <- struct{}{}:
		default:
		}
	}
}

// reinspectInterval bounds how often Reinspect has the export read again.
const reinspectInterval = time.Second

// Reinspect has Run read the export's endpoint slice again at once, at most
// once per reinspectInterval: a request found no shard that serves a
// workspace, and kcp lists a shard in an export's endpoint slice only once
// a workspace on that shard binds the export, so the first binding of an
// export (or its first on a shard) would otherwise be seen up to a poll
// interval later. Requests that wait for a binding to settle (see
// route.BindingSettle) then find the shard within it.
func (w *Watch) Reinspect() {
	w.lock.Lock()
	due := time.Since(w.reinspected) >= reinspectInterval
	if due {
		w.reinspected = time.Now()
	}
	w.lock.Unlock()
	if due {
		select {
		case w.poke <- struct{}{}:
		default:
		}
	}
}

// Targets returns the set of the objects of a source without paths, and
// whether it holds every object of the source as far as the reflectors
// have read: the watch of targets is on, the export was inspected and
// serves the resource, and the reflector of every shard has listed and its
// watch is not broken since.
func (w *Watch) Targets() (*targets.Set, bool) {
	w.lock.Lock()
	defer w.lock.Unlock()
	if w.indexed() || !w.watchTargets || !w.inspected || w.state.Phase != PhaseSynced || len(w.shards) != len(w.urls) {
		return w.targets, false
	}
	for _, u := range w.urls {
		s := w.shards[u]
		if s == nil {
			return w.targets, false
		}
		if synced, _, _ := s.status(); !synced {
			return w.targets, false
		}
	}
	return w.targets, true
}

// Done is closed when Run has returned.
func (w *Watch) Done() <-chan struct{} {
	return w.done
}

// State returns the current state of the source.
func (w *Watch) State() State {
	w.lock.Lock()
	defer w.lock.Unlock()
	return w.state
}

// Shards returns the virtual workspace URLs of the export, one per shard,
// ordered so that the one that serves cluster as far as the watch knows
// (see Serving) comes first, and whether the export has been inspected at
// all: before it has, no URL does not mean that no shard serves it.
func (w *Watch) Shards(cluster logicalcluster.Name) ([]string, bool) {
	w.lock.Lock()
	urls, inspected := slices.Clone(w.urls), w.inspected
	w.lock.Unlock()
	if hint, ok := w.Serving(cluster); ok {
		if i := slices.Index(urls, hint); i > 0 {
			urls[0], urls[i] = urls[i], urls[0]
		}
	}
	return urls, inspected
}

// Serving returns the virtual workspace URL of the shard that serves
// cluster, if the watch knows it: the only shard there is (if it reads
// every shard), the one where dependents of cluster were indexed, or the
// one it was last read through.
// A logical cluster stays on its shard, so what is known stays true.
func (w *Watch) Serving(cluster logicalcluster.Name) (string, bool) {
	if shard, ok := w.store.Shard(cluster); ok {
		return shard, true
	}
	w.lock.Lock()
	defer w.lock.Unlock()
	if len(w.urls) == 1 && len(w.cfg.Shards) == 0 {
		return w.urls[0], true
	}
	url, ok := w.readThrough[cluster]
	return url, ok
}

// ReadThrough records that cluster was read through the virtual workspace at
// url, so that Shards names it first next time.
func (w *Watch) ReadThrough(cluster logicalcluster.Name, url string) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.readThrough[cluster] = url
}

// Run follows the source until ctx is done.
func (w *Watch) Run(ctx context.Context) {
	defer close(w.done)
	logger := log.FromContext(ctx).WithValues("source", w.src.String())
	ticker := time.NewTicker(w.cfg.PollInterval)
	defer ticker.Stop()
	// The first refresh comes at once: a change before it needs none.
	select {
	case <-w.poke:
	default:
	}
	for {
		w.refresh(ctx, logger.V(1))
		select {
		case <-ctx.Done():
			w.lock.Lock()
			for _, s := range w.shards {
				s.cancel()
			}
			w.lock.Unlock()
			return
		case <-ticker.C:
		case <-w.poke:
		}
	}
}

// confirmShrink reports whether the inspected state and shard URLs may be
// applied now. A shard of kcp that is starting answers 403 and 404 for a
// few seconds before its caches are synced, and an endpoint slice may list
// fewer shards for a moment, which must not switch protection off. A state
// that takes something away (its rules would have no effect: the provider
// revoked the grant, removed the export or the resource; or a shard the
// source is read on would be dropped) applies only once it has been seen
// shrinkConfirmations times in a row. Until then the source keeps its
// previous state, reflectors and store (or stays uninspected), so that
// deletes are decided from what was indexed or refused with "retry", never
// allowed because of it.
func (w *Watch) confirmShrink(state State, urls []string, now time.Time) bool {
	w.lock.Lock()
	current := slices.Clone(w.urls)
	w.lock.Unlock()
	shrinks := state.Phase != "" && !state.Phase.Effective()
	for _, u := range current {
		if state.Phase != "" && !slices.Contains(urls, u) {
			shrinks = true
		}
	}
	if !shrinks {
		w.pending, w.pendingSeen = "", 0
		return true
	}
	key := string(state.Phase) + " " + strings.Join(urls, ",")
	if key != w.pending {
		w.pending, w.pendingSince, w.pendingSeen = key, now, 0
	}
	w.pendingSeen++
	return w.pendingSeen >= shrinkConfirmations &&
		now.Sub(w.pendingSince) >= time.Duration(shrinkConfirmations-1)*w.cfg.PollInterval
}

// refresh reads the endpoint slice and what the export serves, starts and
// stops shard reflectors, and recomputes the state.
func (w *Watch) refresh(ctx context.Context, logger interface{ Info(string, ...any) }) {
	state, urls := w.inspect(ctx)
	if !w.confirmShrink(state, urls, time.Now()) {
		logger.Info("Not applying a state that takes protection away until it is confirmed",
			"phase", state.Phase, "message", state.Message, "shards", len(urls), "seen", w.pendingSeen)
		return
	}
	if state.Phase == PhaseSyncing && w.indexed() {
		state.PathProblems = w.checkSchema(ctx, logger)
	}
	w.lock.Lock()
	if state.Phase == PhaseSyncing || state.Phase == PhaseVersionNotServed {
		w.ensureShards(ctx, urls, state.Phase == PhaseSyncing && (w.indexed() || w.watchTargets))
		if state.Phase == PhaseSyncing {
			state = w.shardState(state)
		}
	} else if state.Phase != "" {
		w.ensureShards(ctx, nil, false)
	}
	changed := false
	if state.Phase != "" {
		w.urls, w.inspected = urls, true
		if !state.Equal(w.state) {
			changed = true
			w.state = state
		}
	}
	w.lock.Unlock()
	if changed {
		logger.Info("Source state changed", "phase", state.Phase, "message", state.Message)
		w.cfg.Notify()
	}
}

// inspect reads the endpoint slice and the discovery of the export. An empty
// phase means that the state could not be determined this time (a transient
// error) and stays as it was.
func (w *Watch) inspect(ctx context.Context) (State, []string) {
	export := w.src.Export
	who := "the webhook's user"
	if w.cfg.Identity != "" {
		who = fmt.Sprintf("the webhook's user %q", w.cfg.Identity)
	}
	grant := fmt.Sprintf("grant %s get, list and watch on apiexports/content and apiexportendpointslices named %q in that workspace (see webhook-access.yaml in config/samples)",
		who, export.Name)
	c, err := w.cfg.ClusterClients.Cluster(w.cfg.FrontProxy, export.Cluster.Path())
	if err != nil {
		return State{}, nil
	}
	urls, err := vw.Endpoints(ctx, c, export.Name)
	urls = onShards(urls, w.cfg.Shards)
	switch {
	case apierrors.IsNotFound(err):
		return State{Phase: PhaseExportNotFound, Message: fmt.Sprintf("logical cluster %s has no APIExport %q (no APIExportEndpointSlice of that name)", export.Cluster, export.Name)}, nil
	case apierrors.IsForbidden(err):
		return State{Phase: PhaseAccessDenied, Message: fmt.Sprintf("the webhook may not read the APIExportEndpointSlice %q in logical cluster %s: %s", export.Name, export.Cluster, grant)}, nil
	case err != nil:
		return State{}, nil
	}
	if len(urls) == 0 {
		// No workspace binds the export yet: nothing to index.
		if len(w.cfg.Shards) > 0 {
			return State{Phase: PhaseSynced, Message: fmt.Sprintf("No workspace on the shards this webhook reads binds the APIExport %q yet", export.Name)}, nil
		}
		return State{Phase: PhaseSynced, Message: fmt.Sprintf("No workspace binds the APIExport %q yet", export.Name)}, nil
	}

	gvr := w.src.Resource
	found, servedIn, err := w.cfg.ClusterClients.Served(urls[0], gvr)
	switch {
	case apierrors.IsForbidden(err):
		return State{Phase: PhaseAccessDenied, Message: fmt.Sprintf("the webhook may not read the virtual workspace of the APIExport %q in logical cluster %s: %s", export.Name, export.Cluster, grant)}, nil
	case err != nil:
		return State{}, nil
	case found != nil:
		return State{Phase: PhaseSyncing, Namespaced: found.Namespaced, Kind: found.Kind, Shards: len(urls)}, urls
	case len(servedIn) > 0:
		return State{Phase: PhaseVersionNotServed, Shards: len(urls), Message: fmt.Sprintf(
			"the APIExport %q serves %s.%s in %s, not in %s",
			export.Name, gvr.Resource, gvr.Group, strings.Join(servedIn, ", "), gvr.Version)}, urls
	default:
		return State{Phase: PhaseResourceNotExported, Message: fmt.Sprintf("the APIExport %q does not export %s.%s", export.Name, gvr.Resource, gvr.Group)}, nil
	}
}

// checkSchema returns the paths of the source that can never hold a name in
// the schema of its resource, at most every schemaCheckInterval; if the
// schema cannot be read, the last result.
func (w *Watch) checkSchema(ctx context.Context, logger interface{ Info(string, ...any) }) []PathProblem {
	if !w.schemaChecked.IsZero() && time.Since(w.schemaChecked) < schemaCheckInterval {
		return w.pathProblems
	}
	c, err := w.cfg.ClusterClients.Cluster(w.cfg.FrontProxy, w.src.Export.Cluster.Path())
	if err != nil {
		return w.pathProblems
	}
	problems, err := checkPaths(ctx, c, w.src.Export.Name, w.src.Resource, w.paths)
	if err != nil {
		logger.Info("Cannot check the field paths against the schema", "error", err)
		return w.pathProblems
	}
	w.schemaChecked, w.pathProblems = time.Now(), problems
	return problems
}

// indexed reports whether the dependents of the source are indexed: a
// source without paths is only inspected (and its objects, with
// SetWatchTargets, kept in its set of targets).
func (w *Watch) indexed() bool {
	return len(w.paths) > 0
}

// shardWatch is the reflector of one shard. It is synced from its first
// complete list on, except while its watch is broken: from an error of the
// list or the watch until the reflector has listed again or watches again
// from where it stopped, the store may lack changes.
type shardWatch struct {
	url    string
	cancel context.CancelFunc

	lock    sync.Mutex
	listed  bool
	broken  bool
	lastErr error
}

// setListed records a complete list.
func (s *shardWatch) setListed() {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.listed, s.broken, s.lastErr = true, false, nil
}

// setWatching records that a watch started where the last one ended.
func (s *shardWatch) setWatching() {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.broken = false
}

// setError records an error of the list or the watch.
func (s *shardWatch) setError(err error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.lastErr, s.broken = err, true
}

// status returns whether the store holds every change of the shard's
// objects up to what the reflector has seen (listed, and the watch not
// broken since), whether it was listed at all, and the last error.
func (s *shardWatch) status() (synced, listed bool, err error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.listed && !s.broken, s.listed, s.lastErr
}

// ensureShards runs a reflector for each URL (if run is set) and stops
// those of other shards. The reflectors of an indexed source feed its
// store; those of a source without paths its set of targets, with only
// the metadata of the objects that TargetsSelector selects. Callers hold
// the lock.
func (w *Watch) ensureShards(ctx context.Context, urls []string, run bool) {
	for u, s := range w.shards {
		if !run || !slices.Contains(urls, u) {
			s.cancel()
			delete(w.shards, u)
			w.store.DropShard(u)
			w.targets.DropShard(u)
		}
	}
	if !run {
		return
	}
	for _, u := range urls {
		if _, ok := w.shards[u]; ok {
			continue
		}
		r, err := w.cfg.Clients.For(u)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		s := &shardWatch{url: u, cancel: cancel}
		w.shards[u] = s
		lw := &listWatch{client: r, gvr: w.src.Resource, paths: w.paths, timeout: w.cfg.WatchTimeout, onError: func(err error) {
			s.setError(err)
			w.refreshState()
			if apierrors.IsForbidden(err) {
				w.cfg.Notify()
			}
		}, onWatching: func() {
			s.setWatching()
			w.refreshState()
		}}
		listed := func() {
			s.setListed()
			w.refreshState()
		}
		rs, what := w.store.ForShard(u, listed), "dependents "
		if !w.indexed() {
			rs, what = w.targets.ForShard(u, listed), "targets "
			lw.labelSelector = TargetsSelector
			// A set of targets needs no progress through bookmarks (see
			// Config.WatchTimeout): its watch asks for the reflector's
			// timeout, and is not made again every few seconds.
			lw.timeout = 0
		}
		reflector := cache.NewReflectorWithOptions(lw, &store.Object{}, rs, cache.ReflectorOptions{
			Name:            what + w.src.String() + " on " + u,
			TypeDescription: w.src.Resource.String(),
			// MinWatchTimeout is not set: client-go honours no value
			// below 5 minutes; listWatch asks for Config.WatchTimeout
			// itself.
		})
		go reflector.RunWithContext(sctx)
		if w.cfg.SampleInterval > 0 && w.indexed() {
			go w.sample(sctx, r, u)
		}
	}
}

// ShardSynced reports whether the reflector of the shard at url runs and
// its store holds every change of the shard's objects up to its progress:
// it has listed, and its watch has not broken since (see shardWatch).
func (w *Watch) ShardSynced(url string) bool {
	w.lock.Lock()
	s := w.shards[url]
	w.lock.Unlock()
	if s == nil {
		return false
	}
	synced, _, _ := s.status()
	return synced
}

// refreshState recomputes the state from the shard reflectors.
func (w *Watch) refreshState() {
	w.lock.Lock()
	changed := false
	if w.state.Phase == PhaseSyncing || w.state.Phase == PhaseSynced {
		next := w.shardState(w.state)
		changed = !next.Equal(w.state)
		w.state = next
	}
	w.lock.Unlock()
	if changed {
		w.cfg.Notify()
	}
}

// shardState derives Syncing or Synced from the shard reflectors. Callers
// hold the lock.
func (w *Watch) shardState(base State) State {
	state := base
	if !w.indexed() {
		state.Phase, state.Message = PhaseSynced, fmt.Sprintf("Reading %s through the APIExport %q on %d shard(s)", w.src.Resource.GroupResource(), w.src.Export.Name, state.Shards)
		return state
	}
	state.Phase, state.Message = PhaseSynced, fmt.Sprintf("Indexing %s from the APIExport %q on %d shard(s)", w.src.Resource.GroupResource(), w.src.Export.Name, len(w.shards))
	state.Listed = true
	// A reflector's 403 does not make the source AccessDenied here: a shard
	// that is starting refuses lists for a few seconds, and the rules must
	// keep their effect meanwhile. A grant that was really revoked is found
	// by inspect, and confirmed (see confirmShrink).
	// In the order of their URLs, so that the message names the same
	// shard each time.
	for _, u := range slices.Sorted(maps.Keys(w.shards)) {
		s := w.shards[u]
		synced, listed, err := s.status()
		state.Listed = state.Listed && listed
		if !synced {
			state.Phase = PhaseSyncing
			state.Message = fmt.Sprintf("Listing %s from the APIExport %q", w.src.Resource.GroupResource(), w.src.Export.Name)
			if listed {
				state.Message = fmt.Sprintf("The watch of %s from the APIExport %q broke; listing again", w.src.Resource.GroupResource(), w.src.Export.Name)
			}
			if err != nil {
				state.Message += fmt.Sprintf(" (last error on %s: %v)", s.url, err)
			}
		}
	}
	return state
}
