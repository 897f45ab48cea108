package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/live"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Query is what a confirming read looks for: the dependents of Source in
// Cluster that reference the object of Target named Name in Namespace at
// one of Paths.
type Query struct {
	Source    Source
	Paths     []fieldpath.Reference
	Cluster   logicalcluster.Name
	Namespace string
	Name      string
	// Target is the resource of the object.
	Target schema.GroupResource
	// Scheme is the fingerprint of the scheme under which the dependents of
	// Source are labelled with what they reference (see package reflabels);
	// empty if they are not.
	Scheme string
}

// scope returns the scope the dependents that can reference the object lie
// in: the object's namespace if the dependents are namespaced and no
// reference may name another namespace, the whole cluster otherwise.
func (ix *Index) scope(q Query) live.Scope {
	scope := live.Scope{Source: q.Source, Cluster: q.Cluster}
	if ix.State(q.Source).Namespaced && !slices.ContainsFunc(q.Paths, fieldpath.Reference.CrossesNamespaces) {
		scope.Namespace = q.Namespace
	}
	return scope
}

// Confirm reads the dependents of the query's source in its cluster live,
// through the virtual workspace of the shard that serves the cluster, and
// returns those that reference the object at one of the paths, with how
// many dependents it read. A cluster that does not bind the export has
// none. See scope for the scope read.
//
// With a scheme, the read is two label-selected LISTs made at once: the
// dependents that carry the object's reference label, and those not
// labelled under the scheme (created before their rule, or written by a
// webhook replica with other rules); every other dependent is labelled under
// the scheme without the object's label, so it does not reference the
// object. Without one, every dependent in scope is listed. Either way each
// listed dependent is checked against the paths.
//
// The reads are consistent LISTs, made after Confirm was called, so they see
// every dependent whose create returned before that; concurrent calls for
// one scope and selector share reads (see package live). Reads that fail
// for a reason that clears by itself are retried within the deadline of ctx.
//
// It returns an error wrapping ErrVersionNotServed if the export does not
// serve the version the rules name, and any error from reading.
func (ix *Index) Confirm(ctx context.Context, q Query) ([]kcp.Meta, int, error) {
	var (
		found   []kcp.Meta
		scanned int
	)
	err := ix.Retry(ctx, func() error {
		// The scope is decided on every attempt: an attempt that failed
		// because the export had not been read yet did not know it.
		scope := ix.scope(q)
		if q.Scheme == "" {
			var err error
			found, scanned, err = ix.reads.Confirm(ctx, scope, q.Paths, q.Namespace, q.Name)
			return err
		}
		byLabel, stale := scope, scope
		byLabel.Selector, stale.Selector = reflabels.Key(q.Target, q.Name), reflabels.StaleSelector(q.Scheme)
		type result struct {
			found   []kcp.Meta
			scanned int
			err     error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			r.found, r.scanned, r.err = ix.reads.Confirm(ctx, stale, q.Paths, q.Namespace, q.Name)
			done <- r
		}()
		labelled, n, err := ix.reads.Confirm(ctx, byLabel, q.Paths, q.Namespace, q.Name)
		other := <-done
		if err == nil {
			err = other.err
		}
		found, scanned = labelled, n+other.scanned
		for _, m := range other.found {
			if !slices.Contains(found, m) {
				found = append(found, m)
			}
		}
		return err
	})
	return found, scanned, err
}

// How a live read of a scope was answered: the values of the how label of
// dependency_webhook_live_reads_total.
const (
	// ReadListed: the scope was listed.
	ReadListed = "list"
	// ReadCaughtUp: the index answered, once it had caught up with the
	// scope's current resourceVersion (see catchUp).
	ReadCaughtUp = "index"
	// ReadSelected: the dependents of the scope that match a label
	// selector were listed (see Query.Scheme).
	ReadSelected = "label"
)

// When the index answers in place of a live read (see catchUp): only for a
// shard whose reflector stored something within catchUpBusy, and only if
// it catches up within catchUpWait.
const (
	catchUpBusy = time.Second
	catchUpWait = 250 * time.Millisecond
)

// catchUp answers for a scope from the index instead of listing it, when
// that is as good as the consistent LIST it replaces. It reads the current
// resourceVersion of the scope on the shard that serves its cluster (a
// consistent LIST of at most one object, started after the decision asked),
// and waits until the reflector of that shard has stored everything up to
// that version. kcp's resourceVersions are revisions of the shard's etcd,
// and a watch delivers a resource's changes in revision order, so every
// dependent whose create returned before the probe, and every later change
// of it up to the probe, is then in the store: what a consistent LIST
// would have returned.
//
// It declines (nil, and the scope is listed) unless the source is synced
// and indexes every path asked for, the shard is known, and its reflector
// is busy (it stored an event within catchUpBusy): a reflector passes the
// probe's version soon only with an event of its resource after it (a
// bookmark comes every WatchTimeout or so), so an idle one would only make
// the read wait. It is an optimisation of the read, never a
// different answer.
func (ix *Index) catchUp(ctx context.Context, scope live.Scope, paths []fieldpath.Reference) (live.Answer, error) {
	w := ix.watch(scope.Source)
	if w == nil || w.State().Phase != PhaseSynced || scope.Selector != "" {
		return nil, nil
	}
	indexed := w.Paths()
	for _, p := range paths {
		if !slices.Contains(indexed, p) {
			return nil, nil
		}
	}
	shard, known := w.Serving(scope.Cluster)
	if !known {
		return nil, nil
	}
	st := w.Store()
	if _, at, ok := st.Progress(shard); !ok || ix.now().Sub(at) > catchUpBusy {
		return nil, nil
	}
	c, err := ix.clients.For(shard)
	if err != nil {
		return nil, err
	}
	version, err := c.List(ctx, vw.ResourcePath(scope.Cluster.Path(), scope.Source.Resource, scope.Namespace), url.Values{"limit": {"1"}}, func([]byte) error { return nil })
	if err != nil {
		return nil, err
	}
	rv, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("unexpected resourceVersion %q of %s: %w", version, scope.Source, err)
	}
	wctx, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	if !st.WaitProgress(wctx, shard, rv) {
		return nil, nil
	}
	ix.metrics.Read(ReadCaughtUp)
	return func(paths []fieldpath.Reference, namespace, name string) []kcp.Meta {
		var idx []int
		for _, p := range paths {
			if i := slices.Index(indexed, p); i >= 0 {
				idx = append(idx, i)
			}
		}
		return st.Referencing(scope.Cluster, idx, namespace, name)
	}, nil
}

// readScope lists a scope through the shard that serves its cluster. The
// read ends when the index stops, too.
func (ix *Index) readScope(ctx context.Context, scope live.Scope, visit func(item []byte) error) error {
	ix.lock.Lock()
	base := ix.ctx
	ix.lock.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if base != nil {
		defer context.AfterFunc(base, cancel)()
	}
	how := ReadListed
	if scope.Selector != "" {
		how = ReadSelected
	}
	ix.metrics.Read(how)
	path := vw.ResourcePath(scope.Cluster.Path(), scope.Source.Resource, scope.Namespace)
	var params url.Values
	if scope.Selector != "" {
		params = url.Values{"labelSelector": {scope.Selector}}
	}
	return ix.OnShardOf(scope.Source, scope.Cluster, func(c *vw.Client, state State) error {
		_, err := c.List(ctx, path, params, visit)
		switch {
		case err == nil && state.Phase == PhaseVersionNotServed:
			return fmt.Errorf("%w: %s", ErrVersionNotServed, state.Message)
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: %s: %w", ErrVersionNotServed, state.Message, err)
		}
		return err
	})
}

// maxObjectSize bounds what Lookup reads of one object; the API server
// stores objects of at most a few MB.
const maxObjectSize = 8 << 20

// Lookup reads the objects of src named name in cluster live, through the
// virtual workspace of the shard that serves the cluster: the object in
// namespace, or, if namespace is empty and the resource is namespaced, the
// objects of that name in every namespace. An object that does not exist is
// not reported, nor is anything in a cluster that does not bind the export,
// which every shard refuses for route.BindingSettle (see ListTargets).
// Reads that fail for a reason that clears by itself are retried within the
// deadline of ctx. It returns an error wrapping ErrVersionNotServed if the
// export does not serve the version the rules name.
func (ix *Index) Lookup(ctx context.Context, src Source, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, error) {
	var found []kcp.Meta
	start := time.Now()
	err := ix.Retry(ctx, func() error {
		found = found[:0]
		served := false
		err := ix.OnShardOf(src, cluster, func(c *vw.Client, state State) error {
			err := ix.lookup(ctx, c, state, src, cluster, namespace, name, &found)
			served = err == nil
			return err
		})
		if err == nil && !served {
			return route.Unserved(src, cluster, time.Since(start), route.BindingSettle)
		}
		return err
	})
	return found, err
}

// lookup is Lookup's read on the shard c, into found.
func (ix *Index) lookup(ctx context.Context, c *vw.Client, state State, src Source, cluster logicalcluster.Name, namespace, name string, found *[]kcp.Meta) error {
	*found = (*found)[:0]
	if state.Phase == PhaseVersionNotServed {
		return fmt.Errorf("%w: %s", ErrVersionNotServed, state.Message)
	}
	add := func(raw []byte) error {
		m, err := kcp.ReadMeta(raw)
		if err != nil {
			return fmt.Errorf("failed to read %s %q: %w", src.Resource.GroupResource(), name, err)
		}
		*found = append(*found, m)
		return nil
	}
	if namespace == "" && state.Namespaced {
		params := url.Values{"fieldSelector": {fields.OneTermEqualSelector("metadata.name", name).String()}}
		_, err := c.List(ctx, vw.ResourcePath(cluster.Path(), src.Resource, ""), params, add)
		return err
	}
	body, err := c.Get(ctx, append(vw.ResourcePath(cluster.Path(), src.Resource, namespace), name), nil)
	switch err := route.Served(err, name); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	defer vw.Drain(body)
	raw, err := io.ReadAll(io.LimitReader(body, maxObjectSize))
	if err != nil {
		return fmt.Errorf("failed to read %s %q: %w", src.Resource.GroupResource(), name, err)
	}
	return add(raw)
}

// listPage bounds the objects of one page of ListTargets.
const listPage = 500

// ListTargets reads the objects of src in namespace of cluster (the
// cluster's objects of a cluster-scoped resource if namespace is empty)
// live, through the virtual workspace of the shard that serves the
// cluster, and calls visit with each one's raw JSON (valid during the call
// only): a consistent LIST, in pages of at most listPage objects that all
// read the state of the first. It is the read of many objects of one
// namespace at once, as Lookup reads one; so that a caller after a few
// objects of a large namespace reads little more than them, it stops once
// it has read more than most objects, and then returns false (true if it
// read them all). Pages that fail for a reason that clears by itself are
// retried within the deadline of ctx (visit may then see an object twice).
// Nothing is read in a cluster that does not bind the export, which every
// shard refuses for route.BindingSettle (see route.ErrUnbound): the objects
// read are those that dependents' writes add references to. It returns an
// error wrapping ErrVersionNotServed if the export does not serve the
// version the rules name.
func (ix *Index) ListTargets(ctx context.Context, src Source, cluster logicalcluster.Name, namespace string, most int, visit func(raw []byte) error) (bool, error) {
	params := url.Values{"limit": {strconv.Itoa(min(listPage, most+1))}}
	read := 0
	start := time.Now()
	for {
		var (
			meta metav1.ListMeta
			page int
		)
		err := ix.Retry(ctx, func() error {
			served := false
			err := ix.OnShardOf(src, cluster, func(c *vw.Client, state State) error {
				if state.Phase == PhaseVersionNotServed {
					return fmt.Errorf("%w: %s", ErrVersionNotServed, state.Message)
				}
				var err error
				page = 0
				meta, err = c.ListPage(ctx, vw.ResourcePath(cluster.Path(), src.Resource, namespace), params, func(raw []byte) error {
					page++
					return visit(raw)
				})
				served = err == nil
				return err
			})
			if err == nil && !served {
				return route.Unserved(src, cluster, time.Since(start), route.BindingSettle)
			}
			return err
		})
		read += page
		switch {
		case err != nil:
			return false, err
		case meta.Continue == "":
			return true, nil
		case read > most:
			return false, nil
		}
		params.Set("continue", meta.Continue)
	}
}

// ErrNotServed is returned (wrapped) by Serves for a workspace that the
// shards the index reads do not serve.
var ErrNotServed = errors.New("not served by the shards this webhook reads")

// Serves reports, for an index that reads only some shards (see
// Options.Shards), whether they serve cluster, a workspace that binds the
// export of src: with an error wrapping ErrNotServed if they do not. An
// index that reads every shard serves every workspace. A workspace whose
// dependents the index holds, or that it has read, is served; any other is
// asked once, with a LIST of at most one object from the watch cache of
// each shard it reads (kcp's virtual workspace refuses a workspace that a
// shard does not serve).
func (ix *Index) Serves(ctx context.Context, src Source, cluster logicalcluster.Name) error {
	if len(ix.opts.Shards) == 0 {
		return nil
	}
	w := ix.watch(src)
	if w == nil {
		return fmt.Errorf("%s is not watched", src)
	}
	if _, ok := w.Serving(cluster); ok {
		return nil
	}
	served := false
	err := ix.Retry(ctx, func() error {
		return ix.OnShardOf(src, cluster, func(c *vw.Client, _ State) error {
			_, err := c.List(ctx, vw.ResourcePath(cluster.Path(), src.Resource, ""), url.Values{"limit": {"1"}, "resourceVersion": {"0"}}, func([]byte) error { return nil })
			if apierrors.IsNotFound(err) {
				err = nil // the shard serves the workspace, not the version
			}
			served = err == nil
			return err
		})
	})
	if err != nil {
		return err
	}
	if !served {
		shards := strings.Join(ix.opts.Shards, ", ")
		if ix.opts.ShardName != "" {
			shards = fmt.Sprintf("%s (%s)", ix.opts.ShardName, shards)
		}
		return fmt.Errorf("logical cluster %s is %w, %s", cluster, ErrNotServed, shards)
	}
	return nil
}
