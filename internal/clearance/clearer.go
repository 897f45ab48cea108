package clearance

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buger/jsonparser"
	"github.com/prometheus/client_golang/prometheus"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/teardown"
)

// Targets lists the protected resources; *registry.Registry implements it.
type Targets interface {
	Protections() []registry.Protection
}

// Objects lists and patches protected objects through their provider's
// virtual workspace; *objects.Client implements it.
type Objects interface {
	ListObjects(ctx context.Context, src index.Source, labelSelector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error
	ListObjectsIn(ctx context.Context, src index.Source, cluster logicalcluster.Name, labelSelector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error
	Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error)
}

// Decider decides whether an object may be cleared, and under which
// fingerprint; *deletion.Validator implements it.
type Decider interface {
	// Clearance returns the fingerprint the object (raw) may be cleared
	// under, or why it may not.
	Clearance(ctx context.Context, provider logicalcluster.Name, resource schema.GroupVersionResource, raw []byte) (string, string)
	// ClearanceFingerprint returns the fingerprint the objects of target
	// are cleared under now, and whether they can be cleared at all.
	ClearanceFingerprint(target index.Source) (string, bool)
	// Referenced reports whether the index holds a dependent that
	// references obj, an object of target.
	Referenced(target index.Source, obj kcp.Meta) bool
	// WarmClearance prepares the decision of an object that is not due
	// yet, and reports whether nothing is left to prepare (see
	// deletion.Validator.WarmClearance).
	WarmClearance(ctx context.Context, provider logicalcluster.Name, resource schema.GroupVersionResource, obj kcp.Meta) bool
}

// Generations tell whether the index's contents changed: the indexed
// dependents and the watched protected objects (the elected replica's
// audit watches them).
type Generations interface {
	// Generation grows with every change of the index's contents.
	Generation() uint64
	// ChangedClusters returns the workspaces whose contents changed after
	// generation g, if it knows them and there are at most most.
	ChangedClusters(g uint64, most int) ([]logicalcluster.Name, bool)
}

// Namespaces tell whether a namespace is being deleted, as kcp says, asking
// it through the virtual workspace of src and remembering the answer;
// *objects.Client implements it.
type Namespaces interface {
	NamespaceTerminating(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string) (bool, error)
}

// Teardowns tell which objects kcp's teardowns were deleting lately, as
// their items to the DELETE webhook showed; *deletion.Validator implements
// it.
type Teardowns interface {
	// TearingDown reports whether kcp is deleting every object of resource
	// in namespace (empty for cluster-scoped objects) of cluster.
	TearingDown(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) bool
}

// Options configure a Clearer.
type Options struct {
	// Interval is how often the protected objects are listed (default
	// 30s).
	Interval time.Duration
	// Workers is how many clearances are written at once (default 4).
	Workers int
	// FullEvery is how often a pass lists every protected object (the
	// first pass, and then every FullEvery-th; default 10). The other
	// passes list only the objects not labelled cleared under the
	// current fingerprint (api/v1alpha1.LabelCleared), so that objects
	// cleared before cost kcp nothing; a full pass clears an object whose
	// label an earlier release let someone else set, or kept by an older
	// webhook's write.
	FullEvery int
	// Index, if set, tells whether the index changed since a listing (see
	// Clearer.Pass); *index.Index implements it.
	Index Generations
	// Settle is how long the index must not have changed before a pass
	// begins, waiting at most Interval (default 2s; see Clearer.settle).
	Settle time.Duration
	// Teardowns and Namespaces, if set, tell the objects that a teardown
	// under way is about to delete: kcp's teardown sent the DELETE webhook
	// an item of their resource in their namespace lately, or kcp says
	// their namespace (for a cluster-scoped object, their workspace) is
	// being deleted. Those are neither cleared nor labelled, since the
	// teardown makes the write useless and the webhook decides its items
	// from the index. Where neither tells (no item yet, and the provider's
	// APIExport does not claim events), objects are cleared.
	Teardowns  Teardowns
	Namespaces Namespaces
	// Metrics, if set, counts the clearances written.
	Metrics *Metrics
}

// Clearer writes clearances on the protected objects that nothing
// references; see the package documentation.
type Clearer struct {
	targets Targets
	objects Objects
	decider Decider
	opts    Options
	now     func() time.Time
	// passes counts the passes started.
	passes atomic.Int64
	// listings are the last listing of each protected resource, for the
	// passes that need not list it again; only Pass uses them, and passes
	// do not overlap.
	listings map[index.Source]*listing
}

// New returns a Clearer of the objects of targets.
func New(targets Targets, objects Objects, decider Decider, opts Options) *Clearer {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.FullEvery <= 0 {
		opts.FullEvery = 10
	}
	if opts.Settle <= 0 {
		opts.Settle = 2 * time.Second
	}
	return &Clearer{targets: targets, objects: objects, decider: decider, opts: opts, now: time.Now}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (c *Clearer) NeedLeaderElection() bool {
	return true
}

// Start implements manager.Runnable: it clears at once and then every
// Interval after a pass ended, until ctx is done.
func (c *Clearer) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("clearance")
	ctx = log.IntoContext(ctx, logger)
	logger.Info("Clearing unreferenced objects", "interval", c.opts.Interval)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		c.settle(ctx)
		c.Pass(ctx)
	}, c.opts.Interval)
	return nil
}

// settle waits, with Options.Index, until the index has not changed for
// Options.Settle, at most Options.Interval: a pass then does not run while
// dependents are going in bulk (a teardown, or a stack deleted from the
// top), whose targets are usually deleted next, so that it does not clear
// objects a moment before they go. The items of a teardown's protected
// types, which follow its dependents, tell the pass to leave those alone
// (see doomed).
func (c *Clearer) settle(ctx context.Context) {
	if c.opts.Index == nil {
		return
	}
	last, quiet := c.opts.Index.Generation(), time.Duration(0)
	tick := c.opts.Settle / 4
	for waited := time.Duration(0); quiet < c.opts.Settle && waited < c.opts.Interval; waited += tick {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tick):
		}
		if g := c.opts.Index.Generation(); g != last {
			last, quiet = g, 0
			continue
		}
		quiet += tick
	}
}

// candidate is an object to decide, as listed.
type candidate struct {
	src      index.Source
	provider logicalcluster.Name
	meta     kcp.Meta
	raw      []byte
	ledger   inflight.Ledger
	// label: the object is cleared under fingerprint, and only the label
	// that says so is to be written.
	label       bool
	fingerprint string
	// listing is the listing the candidate comes from.
	listing *listing
}

// Pass lists the objects of every protected resource and clears those
// that may be cleared; it returns how many it cleared. The first pass and
// every Options.FullEvery-th list every object, the others only those not
// labelled cleared under the current fingerprint, and, with Options.Index,
// only the resources whose last listing is no longer current (see
// listing.current), and of those only the workspaces that changed where
// the index knows them (see listing.scope): a quiet system is not listed
// at all.
func (c *Clearer) Pass(ctx context.Context) int {
	full := (c.passes.Add(1)-1)%int64(c.opts.FullEvery) == 0
	listings := map[index.Source]*listing{}
	work := make(chan candidate)
	// The namespaces of which kcp could not tell in this pass whether they
	// are being deleted (kcp.ObjectKey); they are not asked again.
	var unknown cannotTell
	var workers sync.WaitGroup
	var n atomic.Int64
	for range c.opts.Workers {
		workers.Go(func() {
			for cand := range work {
				switch {
				case c.doomed(ctx, cand, &unknown):
				case cand.label:
					if !c.label(ctx, cand) {
						cand.listing.listAgain(cand.meta.Cluster)
					}
				case c.clear(ctx, cand):
					n.Add(1)
				default:
					cand.listing.listAgain(cand.meta.Cluster)
				}
			}
		})
	}
	for _, p := range c.targets.Protections() {
		if ctx.Err() != nil {
			break
		}
		if l := c.list(ctx, p, full, work); l != nil {
			listings[p.Source] = l
		}
	}
	// The listings of resources that are no longer protected, or whose
	// objects cannot be cleared now, are forgotten: such a resource is
	// listed again once they can.
	c.listings = listings
	close(work)
	workers.Wait()
	return int(n.Load())
}

// list lists the objects of the protected resource p, as the pass says
// (see Pass): every object in a full pass; otherwise, unless its last
// listing is current, the objects not labelled cleared under the current
// fingerprint, in the workspaces that changed if that is known (see
// listing.scope) or in every one. It sends the candidates to work, and
// returns the resource's listing: the last one if it was current, nil if
// its objects cannot be cleared now.
func (c *Clearer) list(ctx context.Context, p registry.Protection, full bool, work chan<- candidate) *listing {
	logger := log.FromContext(ctx)
	// A resource whose objects cannot be cleared is not listed; an
	// object cleared under the current fingerprint is not decided
	// again, only labelled if it is not.
	current, ok := c.decider.ClearanceFingerprint(p.Source)
	if !ok {
		return nil
	}
	now := c.now()
	var (
		l        = newListing(0, current)
		scope    []logicalcluster.Name
		scoped   bool
		selector string
		kind     = ListingFull
	)
	if c.opts.Index != nil {
		l.generation = c.opts.Index.Generation()
		last := c.listings[p.Source]
		if !full && last != nil {
			if last.current(l.generation, current, now) {
				c.warm(ctx, p, last)
				return last
			}
			if scope, scoped = last.scope(c.opts.Index.ChangedClusters, current, now); scoped {
				l.inherit(last, scope)
			}
		}
	}
	if !full {
		selector, kind = depv1alpha1.LabelCleared+"!="+current, ListingUncleared
	}
	listed := 0
	keep := func(m kcp.Meta, raw []byte) bool {
		listed++
		o := newListed(m, raw)
		if o.unlabelled(current) {
			return true
		}
		due, ok := o.dueAt(current)
		if ok && now.Before(due) {
			l.noteDue(m.Cluster, due)
			// Its decision is prepared once the listing is done: the
			// listing tells the router the shard of each workspace,
			// which the preparation needs.
			if _, seen := l.warm[m.Cluster]; !seen {
				l.warm[m.Cluster] = m
			}
		}
		return ok && !now.Before(due) && !c.decider.Referenced(p.Source, m)
	}
	visit := func(m kcp.Meta, raw []byte) error {
		if raw == nil {
			return nil
		}
		o := newListed(m, raw)
		cand := candidate{src: p.Source, provider: p.Target.Cluster, meta: m, raw: raw, ledger: o.ledger,
			label: o.unlabelled(current), fingerprint: current, listing: l}
		select {
		case work <- cand:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	if !scoped {
		if err := c.objects.ListObjects(ctx, p.Source, selector, keep, visit); err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Failed to list protected objects to clear", "resource", p.Source)
			}
			l.listAgain("")
		}
	} else {
		// Only the workspaces in which something changed, one by one.
		kind = ListingWorkspaces
		for _, cluster := range scope {
			if err := c.objects.ListObjectsIn(ctx, p.Source, cluster, selector, keep, visit); err != nil {
				if ctx.Err() != nil {
					break
				}
				logger.Error(err, "Failed to list protected objects to clear", "resource", p.Source, "cluster", cluster)
				l.listAgain(cluster)
			}
		}
	}
	c.warm(ctx, p, l)
	c.opts.Metrics.listedObjects(kind, listed)
	return l
}

// warm prepares the decisions of the objects of l not due yet, that is
// still to be done (see Decider.WarmClearance): after the listing, and at
// every pass that leaves the resource out while that is not done (a
// preparation that could not be done at once, say a probe still under way
// or retried moments later, is not left to the next listing, which may
// come only when the objects are due).
func (c *Clearer) warm(ctx context.Context, p registry.Protection, l *listing) {
	for cluster, m := range l.warm {
		if c.decider.WarmClearance(ctx, p.Target.Cluster, p.Source.Resource, m) {
			delete(l.warm, cluster)
		}
	}
}

// doomed reports whether a teardown under way is about to delete cand:
// kcp's teardown sent the webhook an item of its resource in its namespace
// lately (Options.Teardowns), or its namespace, or for a cluster-scoped
// object its workspace (whose namespace teardown.WorkspaceNamespace is
// deleted only with it), is being deleted. Options.Namespaces remembers
// its answers (a namespace being deleted for minutes, one that is not for
// seconds); a namespace of which kcp cannot tell, noted in unknown, is
// asked once per pass, also when the pass's workers come to it together.
func (c *Clearer) doomed(ctx context.Context, cand candidate, unknown *cannotTell) bool {
	logger := log.FromContext(ctx).WithValues("resource", cand.src.Resource.GroupResource(), "cluster", cand.meta.Cluster,
		"namespace", cand.meta.Namespace, "name", cand.meta.Name)
	if c.opts.Teardowns != nil && c.opts.Teardowns.TearingDown(cand.meta.Cluster, cand.meta.Namespace, cand.src.Resource.GroupResource()) {
		logger.V(1).Info("Not clearing an object that a teardown is deleting", "by", "its items")
		return true
	}
	if c.opts.Namespaces == nil {
		return false
	}
	namespace := cand.meta.Namespace
	if namespace == "" {
		namespace = teardown.WorkspaceNamespace
	}
	asking := unknown.of(kcp.ObjectKey{Cluster: cand.meta.Cluster, Name: namespace})
	asking.Lock()
	defer asking.Unlock()
	if asking.unknown {
		return false
	}
	terminating, err := c.opts.Namespaces.NamespaceTerminating(ctx, cand.src, cand.meta.Cluster, namespace)
	switch {
	case err != nil:
		asking.unknown = true
		logger.V(1).Info("Clearing without knowing whether the namespace is being deleted", "error", err.Error())
	case terminating:
		logger.V(1).Info("Not clearing an object that a teardown is deleting", "by", "kcp")
	}
	return terminating
}

// cannotTell notes, for one pass, the namespaces of which kcp cannot tell
// whether they are being deleted. Its entries also serialise the questions
// about one namespace, so that workers that come to it together ask once.
type cannotTell struct{ namespaces sync.Map } // kcp.ObjectKey -> *namespaceAsk

// namespaceAsk is the questions about one namespace in one pass.
type namespaceAsk struct {
	sync.Mutex
	// unknown is set once kcp could not tell.
	unknown bool
}

func (ct *cannotTell) of(key kcp.ObjectKey) *namespaceAsk {
	a, _ := ct.namespaces.LoadOrStore(key, &namespaceAsk{})
	return a.(*namespaceAsk)
}

// listed is an object as listed, with its ledger read once.
type listed struct {
	meta kcp.Meta
	raw  []byte
	// ledger is the object's ledger; ledgerErr why it does not parse.
	ledger    inflight.Ledger
	ledgerErr error
}

func newListed(m kcp.Meta, raw []byte) listed {
	l := listed{meta: m, raw: raw}
	l.ledger, l.ledgerErr = inflight.LedgerOf(raw)
	return l
}

// unlabelled reports whether an object, as listed, is cleared under
// current but lacks the label that says so (cleared by a release before
// the label, or the label was removed by someone else).
func (o listed) unlabelled(current string) bool {
	m := o.meta
	if m.Terminating || m.UID == "" {
		return false
	}
	if o.ledgerErr != nil || o.ledger.Clearance != inflight.Clearance(current, m.UID) {
		return false
	}
	label, _ := inflight.ClearedLabel(o.raw)
	return label != current
}

// dueAt returns from when an object, as listed, may be clearable: it is
// not being deleted, has no deletion deferred or bypassed, a ledger that
// parses and no clearance under current (the fingerprint its resource is
// cleared under now); and it is old enough that nothing recorded on it can
// be in flight (from the time returned on). It returns false if the
// object is not worth deciding at any time as it is. The decision proper
// is the Decider's.
func (o listed) dueAt(current string) (time.Time, bool) {
	m, ledger := o.meta, o.ledger
	if m.Terminating || m.DeletionRequested || m.SkipProtection || m.UID == "" || o.ledgerErr != nil {
		return time.Time{}, false
	}
	if ledger.Clearance == inflight.Clearance(current, m.UID) {
		return time.Time{}, false
	}
	ts, err := jsonparser.GetString(o.raw, "metadata", "creationTimestamp")
	if err != nil {
		return time.Time{}, false
	}
	created, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return time.Time{}, false
	}
	due := created.Add(time.Second + inflight.MaxInFlight)
	if floor := ledger.EffectiveFloor(); !floor.IsZero() {
		// A lease counts as a floor at its end.
		due = inflight.Later(due, floor.Add(inflight.MaxInFlight))
	}
	// A young mark may have landed already, but the decision would wait
	// for one that has not: it is decided once it cannot be in flight.
	for _, mark := range ledger.Marks {
		due = inflight.Later(due, mark.At.Add(inflight.MaxInFlight))
	}
	return due, true
}

// Results of writing a clearance, the values of the result label of
// dependency_webhook_clearances_total.
const (
	// ResultCleared: the clearance was written.
	ResultCleared = "cleared"
	// ResultChanged: the object changed since it was listed (a reference
	// was recorded, or anything else); it is decided again next time.
	ResultChanged = "changed"
	// ResultFailed: the write failed otherwise.
	ResultFailed = "failed"
	// ResultLabelled: an object cleared before got the label that says
	// so, and is left out of the listings from then on.
	ResultLabelled = "labelled"
)

// clear decides a candidate and writes its clearance if it may be
// cleared.
func (c *Clearer) clear(ctx context.Context, cand candidate) bool {
	fingerprint, why := c.decider.Clearance(ctx, cand.provider, cand.src.Resource, cand.raw)
	if fingerprint == "" {
		log.FromContext(ctx).V(1).Info("Not clearing an object", "resource", cand.src.Resource.GroupResource(), "cluster", cand.meta.Cluster,
			"namespace", cand.meta.Namespace, "name", cand.meta.Name, "why", why)
		return false
	}
	value := inflight.Clearance(fingerprint, cand.meta.UID)
	if cand.ledger.Clearance == value {
		return false
	}
	ledger := cand.ledger
	ledger.Clearance = value
	return c.write(ctx, cand, fingerprint, &ledger, ResultCleared)
}

// label writes the label that says a candidate is cleared (see write).
func (c *Clearer) label(ctx context.Context, cand candidate) bool {
	return c.write(ctx, cand, cand.fingerprint, nil, ResultLabelled)
}

// write writes the label that says a candidate is cleared under
// fingerprint and, if set, its ledger, with the listed resourceVersion as
// a precondition: an object that changed since (a reference recorded,
// which ended the clearance) is decided again at the next pass. It counts
// the write as done (ResultCleared or ResultLabelled), changed or failed,
// and reports whether it was written.
func (c *Clearer) write(ctx context.Context, cand candidate, fingerprint string, ledger *inflight.Ledger, done string) bool {
	body, err := patchBody(cand.meta.ResourceVersion, fingerprint, ledger)
	if err == nil {
		_, err = c.objects.Patch(ctx, cand.src, cand.meta.Cluster, cand.meta.Namespace, cand.meta.Name, types.MergePatchType, body)
	}
	logger := log.FromContext(ctx).WithValues("resource", cand.src.Resource.GroupResource(), "cluster", cand.meta.Cluster,
		"namespace", cand.meta.Namespace, "name", cand.meta.Name, "fingerprint", fingerprint)
	switch {
	case err == nil:
		c.opts.Metrics.written(done)
		logger.V(1).Info("Cleared an unreferenced object", "result", done)
		return true
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		c.opts.Metrics.written(ResultChanged)
	default:
		c.opts.Metrics.written(ResultFailed)
		logger.Error(err, "Failed to clear an unreferenced object", "result", done)
	}
	return false
}

// patchBody is the merge patch that sets the label that says the object is
// cleared under fingerprint and, if set, the ledger, with resourceVersion
// as a precondition: the clearance holds only for the state it was decided
// on.
func patchBody(resourceVersion, fingerprint string, ledger *inflight.Ledger) ([]byte, error) {
	metadata := map[string]any{
		"resourceVersion": resourceVersion,
		"labels":          map[string]string{depv1alpha1.LabelCleared: fingerprint},
	}
	if ledger != nil {
		metadata["annotations"] = map[string]string{depv1alpha1.AnnotationAdmittedReferences: ledger.String()}
	}
	return json.Marshal(map[string]any{"metadata": metadata})
}

// Metrics are the Clearer's Prometheus metrics, a prometheus.Collector. A
// nil *Metrics records nothing.
type Metrics struct {
	writes *prometheus.CounterVec
	listed *prometheus.CounterVec
}

// Kinds of listing, the values of the listing label of
// dependency_webhook_clearance_listed_objects_total.
const (
	// ListingFull: every object of a protected resource (the first pass
	// and every Options.FullEvery-th).
	ListingFull = "full"
	// ListingUncleared: the objects not labelled cleared under the
	// current fingerprint, in every workspace.
	ListingUncleared = "uncleared"
	// ListingWorkspaces: the objects not labelled cleared under the
	// current fingerprint, in the workspaces in which the index changed
	// (see listing.scope), one LIST each.
	ListingWorkspaces = "workspaces"
)

// NewMetrics creates the metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_clearances_total",
			Help: "Clearances written on unreferenced protected objects, whose DELETE kcp then admits without calling the webhook, by result: cleared, labelled (an object cleared before got the label that leaves it out of later listings), changed (the object changed since it was listed; decided again at the next pass) or failed.",
		}, []string{"result"}),
		listed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dependency_webhook_clearance_listed_objects_total",
			Help: "Protected objects that the clearer listed through the virtual workspaces (in the passes whose listing was not current), by listing: full (every object, a wildcard LIST per protected resource and shard; the first pass and every tenth), uncleared (those not labelled cleared under the current fingerprint, referenced ones included, a wildcard LIST per protected resource and shard) or workspaces (the same, only in the workspaces in which dependents or protected objects changed, a LIST per workspace).",
		}, []string{"listing"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.writes.Describe(ch)
	m.listed.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.writes.Collect(ch)
	m.listed.Collect(ch)
}

func (m *Metrics) written(result string) {
	if m != nil {
		m.writes.WithLabelValues(result).Inc()
	}
}

// listedObjects counts n objects listed by a listing of the given kind.
func (m *Metrics) listedObjects(listing string, n int) {
	if m != nil && n > 0 {
		m.listed.WithLabelValues(listing).Add(float64(n))
	}
}
