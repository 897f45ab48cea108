package index

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Source identifies one dependent type as its provider serves it: the
// APIExport (in the workspace of the rules that name it) and the resource.
// The index reads the dependents of a source only through that APIExport's
// virtual workspace, with the access its provider granted.
type Source struct {
	// Export is the logical cluster and name of the APIExport.
	Export kcp.ObjectKey
	// Resource is the dependent resource, in the version the rules name.
	Resource schema.GroupVersionResource
}

// String renders the source for messages, e.g.
// "virtualmachines.compute.example.io/v1 of APIExport 2x7c/compute.example.io".
func (s Source) String() string {
	return fmt.Sprintf("%s.%s/%s of APIExport %s", s.Resource.Resource, s.Resource.Group, s.Resource.Version, s.Export)
}

// Phase is where the index stands with a source.
type Phase string

// Phases of a source. Syncing and Synced sources take part in decisions;
// the others are problems of the rules that name the source, reported in
// their status.
const (
	// PhaseSyncing: the dependents are being listed for the first time on
	// some shard; decisions confirm every miss with a live read.
	PhaseSyncing Phase = "Syncing"
	// PhaseSynced: the dependents of every shard are indexed.
	PhaseSynced Phase = "Synced"
	// PhaseExportNotFound: the rules' workspace has no such APIExport. Rules
	// naming it have no effect.
	PhaseExportNotFound Phase = "ExportNotFound"
	// PhaseAccessDenied: the provider has not granted the webhook read
	// access to the APIExport. Rules naming it have no effect.
	PhaseAccessDenied Phase = "AccessDenied"
	// PhaseResourceNotExported: the APIExport does not serve the resource
	// in any version. Rules naming it have no effect.
	PhaseResourceNotExported Phase = "ResourceNotExported"
	// PhaseVersionNotServed: the APIExport serves the resource, but not in
	// the version the rules name. Deletes that such a rule protects are
	// refused in workspaces that bind the export, since they cannot be
	// checked.
	PhaseVersionNotServed Phase = "VersionNotServed"
)

// Effective reports whether rules naming a source in this phase take part
// in decisions.
func (p Phase) Effective() bool {
	return p == PhaseSyncing || p == PhaseSynced || p == PhaseVersionNotServed
}

// State is what the index knows about a source.
type State struct {
	// Phase is where the index stands with the source.
	Phase Phase
	// Message explains the phase, naming what to fix if anything.
	Message string
	// Namespaced tells whether the resource is namespaced; valid once the
	// APIExport has been read.
	Namespaced bool
	// Kind is the kind of the resource, as its provider serves it.
	Kind string
	// Shards is the number of shards the APIExport is served on.
	Shards int
	// PathProblems are the paths to read that can never hold a name in the
	// schema of the resource, as its APIExport serves it.
	PathProblems []PathProblem
}

// Equal reports whether two states are the same.
func (s State) Equal(o State) bool {
	return s.Phase == o.Phase && s.Message == o.Message && s.Namespaced == o.Namespaced && s.Kind == o.Kind &&
		s.Shards == o.Shards && slices.Equal(s.PathProblems, o.PathProblems)
}

// schemaCheckInterval is how often the schema of a watched source is read
// again to check the paths: a provider may add a field to its schema.
const schemaCheckInterval = 5 * time.Minute

// sourceWatch keeps the store of one source current: it follows the
// APIExportEndpointSlice of the export (shards added and removed), checks
// what the export serves, and runs a reflector per shard.
type sourceWatch struct {
	src      Source
	paths    []fieldpath.Path
	ix       *Index
	store    *store
	cancel   context.CancelFunc
	done     chan struct{}
	notify   func()
	identity string

	lock  sync.Mutex
	state State
	// urls are the virtual workspace URLs of the export, one per shard,
	// valid once inspected is set: before the export has been read, no URL
	// does not mean that no shard serves it.
	urls      []string
	inspected bool
	shards    map[string]*shardWatch
	// shardOf is the URL through which a cluster was last read.
	shardOf map[logicalcluster.Name]string

	// schemaChecked is when the paths were last checked against the schema,
	// with the problems found; only run's goroutine uses them.
	schemaChecked time.Time
	pathProblems  []PathProblem

	// pending is a state that takes protection away (a phase in which the
	// source's rules have no effect, or fewer shards), seen by the last
	// inspections but not yet confirmed, since when and how often in a row;
	// only run's goroutine uses them. See confirmShrink.
	pending      string
	pendingSince time.Time
	pendingSeen  int
}

// shrinkConfirmations is how many inspections in a row, spanning at least
// that many poll intervals less one, must agree before a source stops
// being read on a shard, or its rules stop having effect.
const shrinkConfirmations = 3

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
func (sw *sourceWatch) confirmShrink(state State, urls []string, now time.Time) bool {
	sw.lock.Lock()
	current := slices.Clone(sw.urls)
	sw.lock.Unlock()
	shrinks := state.Phase != "" && !state.Phase.Effective()
	for _, u := range current {
		if state.Phase != "" && !slices.Contains(urls, u) {
			shrinks = true
		}
	}
	if !shrinks {
		sw.pending, sw.pendingSeen = "", 0
		return true
	}
	key := string(state.Phase) + " " + strings.Join(urls, ",")
	if key != sw.pending {
		sw.pending, sw.pendingSince, sw.pendingSeen = key, now, 0
	}
	sw.pendingSeen++
	return sw.pendingSeen >= shrinkConfirmations &&
		now.Sub(sw.pendingSince) >= time.Duration(shrinkConfirmations-1)*sw.ix.opts.PollInterval
}

// shardWatch is the reflector of one shard.
type shardWatch struct {
	url    string
	reader *reader
	cancel context.CancelFunc

	lock    sync.Mutex
	synced  bool
	lastErr error
}

func (w *shardWatch) setSynced() {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.synced, w.lastErr = true, nil
}

func (w *shardWatch) setError(err error) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.lastErr = err
}

func (w *shardWatch) status() (bool, error) {
	w.lock.Lock()
	defer w.lock.Unlock()
	return w.synced, w.lastErr
}

// run follows the source until ctx is done.
func (sw *sourceWatch) run(ctx context.Context) {
	defer close(sw.done)
	logger := log.FromContext(ctx).WithValues("source", sw.src.String())
	ticker := time.NewTicker(sw.ix.opts.PollInterval)
	defer ticker.Stop()
	for {
		sw.refresh(ctx, logger.V(1))
		select {
		case <-ctx.Done():
			sw.lock.Lock()
			for _, w := range sw.shards {
				w.cancel()
			}
			sw.lock.Unlock()
			return
		case <-ticker.C:
		}
	}
}

// refresh reads the endpoint slice and what the export serves, starts and
// stops shard reflectors, and recomputes the state.
func (sw *sourceWatch) refresh(ctx context.Context, logger interface{ Info(string, ...any) }) {
	state, urls := sw.inspect(ctx)
	if !sw.confirmShrink(state, urls, time.Now()) {
		logger.Info("Not applying a state that takes protection away until it is confirmed",
			"phase", state.Phase, "message", state.Message, "shards", len(urls), "seen", sw.pendingSeen)
		return
	}
	if state.Phase == PhaseSyncing && sw.watched() {
		state.PathProblems = sw.checkSchema(ctx, logger)
	}
	sw.lock.Lock()
	if state.Phase == PhaseSyncing || state.Phase == PhaseVersionNotServed {
		sw.ensureShards(ctx, urls, state.Phase == PhaseSyncing && sw.watched())
		if state.Phase == PhaseSyncing {
			state = sw.shardState(state)
		}
	} else if state.Phase != "" {
		sw.ensureShards(ctx, nil, false)
	}
	changed := false
	if state.Phase != "" {
		sw.urls, sw.inspected = urls, true
		if !state.Equal(sw.state) {
			changed = true
			sw.state = state
		}
	}
	sw.lock.Unlock()
	if changed {
		logger.Info("Source state changed", "phase", state.Phase, "message", state.Message)
		sw.notify()
	}
}

// inspect reads the endpoint slice and the discovery of the export. An empty
// phase means that the state could not be determined this time (a transient
// error) and stays as it was.
func (sw *sourceWatch) inspect(ctx context.Context) (State, []string) {
	export := sw.src.Export
	who := "the webhook's user"
	if sw.identity != "" {
		who = fmt.Sprintf("the webhook's user %q", sw.identity)
	}
	grant := fmt.Sprintf("grant %s get, list and watch on apiexports/content and apiexportendpointslices named %q in that workspace (see webhook-access.yaml in config/samples)",
		who, export.Name)
	slice := &apisv1alpha1.APIExportEndpointSlice{}
	err := sw.ix.frontProxy.getJSON(ctx, []string{export.Cluster.Path().RequestPath(), "apis", apisv1alpha1.SchemeGroupVersion.Group, apisv1alpha1.SchemeGroupVersion.Version, "apiexportendpointslices", export.Name}, slice)
	switch {
	case apierrors.IsNotFound(err):
		return State{Phase: PhaseExportNotFound, Message: fmt.Sprintf("logical cluster %s has no APIExport %q (no APIExportEndpointSlice of that name)", export.Cluster, export.Name)}, nil
	case apierrors.IsForbidden(err):
		return State{Phase: PhaseAccessDenied, Message: fmt.Sprintf("the webhook may not read the APIExportEndpointSlice %q in logical cluster %s: %s", export.Name, export.Cluster, grant)}, nil
	case err != nil:
		return State{}, nil
	}
	var urls []string
	for _, e := range slice.Status.APIExportEndpoints {
		urls = append(urls, e.URL)
	}
	slices.Sort(urls)
	urls = slices.Compact(urls)
	if len(urls) == 0 {
		// No workspace binds the export yet: nothing to index.
		return State{Phase: PhaseSynced, Message: fmt.Sprintf("No workspace binds the APIExport %q yet", export.Name)}, nil
	}

	r, err := sw.ix.reader(urls[0])
	if err != nil {
		return State{}, nil
	}
	gvr := sw.src.Resource
	group := &metav1.APIGroup{}
	err = r.getJSON(ctx, []string{logicalcluster.Wildcard.RequestPath(), "apis", gvr.Group}, group)
	switch {
	case apierrors.IsForbidden(err):
		return State{Phase: PhaseAccessDenied, Message: fmt.Sprintf("the webhook may not read the virtual workspace of the APIExport %q in logical cluster %s: %s", export.Name, export.Cluster, grant)}, nil
	case apierrors.IsNotFound(err):
		return State{Phase: PhaseResourceNotExported, Message: fmt.Sprintf("the APIExport %q does not export any resource of the group %s", export.Name, gvr.Group)}, nil
	case err != nil:
		return State{}, nil
	}
	var found *metav1.APIResource
	var servedIn []string
	for _, v := range group.Versions {
		resources := &metav1.APIResourceList{}
		if err := r.getJSON(ctx, []string{logicalcluster.Wildcard.RequestPath(), "apis", gvr.Group, v.Version}, resources); err != nil {
			return State{}, nil
		}
		for i := range resources.APIResources {
			if res := &resources.APIResources[i]; res.Name == gvr.Resource {
				servedIn = append(servedIn, v.Version)
				if v.Version == gvr.Version {
					found = res
				}
			}
		}
	}
	switch {
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
func (sw *sourceWatch) checkSchema(ctx context.Context, logger interface{ Info(string, ...any) }) []PathProblem {
	if !sw.schemaChecked.IsZero() && time.Since(sw.schemaChecked) < schemaCheckInterval {
		return sw.pathProblems
	}
	problems, err := checkPaths(ctx, sw.ix.frontProxy, sw.src.Export.Cluster, sw.src.Export.Name, sw.src.Resource, sw.paths)
	if err != nil {
		logger.Info("Cannot check the field paths against the schema", "error", err)
		return sw.pathProblems
	}
	sw.schemaChecked, sw.pathProblems = time.Now(), problems
	return problems
}

// ensureShards runs a reflector for each URL (if watch is set) and stops
// those of other shards. Callers hold the lock.
func (sw *sourceWatch) ensureShards(ctx context.Context, urls []string, watch bool) {
	want := map[string]bool{}
	for _, u := range urls {
		want[u] = true
	}
	for u, w := range sw.shards {
		if !want[u] || !watch {
			w.cancel()
			delete(sw.shards, u)
			sw.store.lock.Lock()
			sw.store.dropShard(u)
			sw.store.lock.Unlock()
		}
	}
	if !watch {
		return
	}
	for _, u := range urls {
		if _, ok := sw.shards[u]; ok {
			continue
		}
		r, err := sw.ix.reader(u)
		if err != nil {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &shardWatch{url: u, reader: r, cancel: cancel}
		sw.shards[u] = w
		lw := &listWatch{reader: r, gvr: sw.src.Resource, paths: sw.paths, onError: func(err error) {
			w.setError(err)
			if apierrors.IsForbidden(err) {
				sw.notify()
			}
		}}
		store := &shardStore{store: sw.store, shard: u, synced: func() {
			w.setSynced()
			sw.refreshState()
		}}
		reflector := cache.NewReflectorWithOptions(lw, &object{}, store, cache.ReflectorOptions{
			Name:            "dependents " + sw.src.String() + " on " + u,
			TypeDescription: sw.src.Resource.String(),
		})
		go reflector.RunWithContext(wctx)
	}
}

// watched reports whether the dependents of the source are indexed: a
// source without paths is only read (see Index.Lookup).
func (sw *sourceWatch) watched() bool {
	return len(sw.paths) > 0
}

// refreshState recomputes the state from the shard reflectors.
func (sw *sourceWatch) refreshState() {
	sw.lock.Lock()
	changed := false
	if sw.state.Phase == PhaseSyncing || sw.state.Phase == PhaseSynced {
		next := sw.shardState(sw.state)
		changed = !next.Equal(sw.state)
		sw.state = next
	}
	sw.lock.Unlock()
	if changed {
		sw.notify()
	}
}

// shardState derives Syncing, Synced or AccessDenied from the shard
// reflectors. Callers hold the lock.
func (sw *sourceWatch) shardState(base State) State {
	state := base
	if !sw.watched() {
		state.Phase, state.Message = PhaseSynced, fmt.Sprintf("Reading %s through the APIExport %q on %d shard(s)", sw.src.Resource.GroupResource(), sw.src.Export.Name, state.Shards)
		return state
	}
	state.Phase, state.Message = PhaseSynced, fmt.Sprintf("Indexing %s from the APIExport %q on %d shard(s)", sw.src.Resource.GroupResource(), sw.src.Export.Name, len(sw.shards))
	// A reflector's 403 does not make the source AccessDenied here: a shard
	// that is starting refuses lists for a few seconds, and the rules must
	// keep their effect meanwhile. A grant that was really revoked is found
	// by inspect, and confirmed (see confirmShrink).
	for _, w := range sw.shards {
		synced, err := w.status()
		if !synced {
			state.Phase = PhaseSyncing
			state.Message = fmt.Sprintf("Listing %s from the APIExport %q", sw.src.Resource.GroupResource(), sw.src.Export.Name)
			if err != nil {
				state.Message += fmt.Sprintf(" (last error on %s: %v)", w.url, err)
			}
		}
	}
	return state
}

// getJSON GETs a single object (not streamed) into into.
func (r *reader) getJSON(ctx context.Context, path []string, into any) error {
	body, err := r.get(ctx, path, nil)
	if err != nil {
		return err
	}
	defer drain(body)
	return json.NewDecoder(io.LimitReader(body, 4<<20)).Decode(into)
}
