package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/replay"
)

// Audit annotation keys. kcp prefixes them with the webhook's name.
const (
	AuditDecision         = "decision"
	AuditBlockers         = "blockers"
	AuditSkipProtectionBy = "skip-protection-user"
	AuditFailedRule       = "failed-rule"
	AuditDeferred         = "deferred"
)

// Decisions on a DELETE request: the values of the decision audit annotation
// and of the outcome label of the metrics.
const (
	// DecisionAllowed: nothing references the object (or it is not
	// protected).
	DecisionAllowed = "allowed"
	// DecisionDenied: objects still reference it.
	DecisionDenied = "denied"
	// DecisionBypassed: the skip-protection annotation allowed it.
	DecisionBypassed = "bypassed"
	// DecisionError: the request was malformed, the webhook was not ready,
	// or the dependents could not be read; the delete is refused.
	DecisionError = "error"
)

// DefaultMaxBlockers is how many blockers a denial names unless
// WithMaxBlockers says otherwise.
const DefaultMaxBlockers = 10

// RuleFinder finds the rules protecting a resource; *registry.Registry
// implements it.
type RuleFinder interface {
	Find(target registry.Target) []registry.Entry
}

// Readiness tells whether the rule registry is complete;
// *registry.Readiness implements it.
type Readiness interface {
	// Loaded reports whether every existing rule has been registered.
	Loaded() bool
}

// Dependents finds the dependents that reference an object; *index.Index
// implements it.
type Dependents interface {
	// State returns what is known about a source.
	State(src index.Source) index.State
	// Hits returns the indexed dependents of src in cluster (in namespace,
	// or everywhere if it is empty) that hold name at one of paths.
	Hits(src index.Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) []kcp.Meta
	// Confirm reads the dependents of src in cluster that can reference an
	// object in namespace live, after it was called, and returns those that
	// hold name at one of paths, with how many it read; it retries what
	// clears by itself within the deadline of ctx.
	Confirm(ctx context.Context, src index.Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, int, error)
	// Serves returns an error wrapping index.ErrNotServed if the webhook
	// reads only some shards and the workspace cluster, which binds the
	// export of src, is on none of them.
	Serves(ctx context.Context, src index.Source, cluster logicalcluster.Name) error
}

// Recorder records deferred deletions on objects; replay.Recorder
// implements it.
type Recorder interface {
	Record(ctx context.Context, target index.Source, obj kcp.Meta, request depv1alpha1.DeletionRequest) error
}

// DeletionValidator is an admission.Handler that denies the deletion of an
// object while objects in the same workspace still reference it, as
// declared by DependencyRules.
//
// It decides from the rule registry and the index of dependents: a
// dependent in the index that references the object denies the delete at
// once; when the index holds none, the dependents are read live before the
// delete is allowed, since the index may not have seen a dependent created a
// moment ago.
type DeletionValidator struct {
	rules       RuleFinder
	readiness   Readiness
	dependents  Dependents
	maxBlockers int
	timeout     time.Duration
	metrics     *Metrics
	recorder    Recorder
	now         func() time.Time
}

// Option configures a DeletionValidator.
type Option func(*DeletionValidator)

// WithMaxBlockers sets how many blockers a denial names (default
// DefaultMaxBlockers); the rest are counted.
func WithMaxBlockers(n int) Option {
	return func(v *DeletionValidator) { v.maxBlockers = n }
}

// WithTimeout bounds the time spent reading dependents per request (default
// none); the time kcp waits for the answer bounds it too (see withBudget).
func WithTimeout(d time.Duration) Option {
	return func(v *DeletionValidator) { v.timeout = d }
}

// WithMetrics records decisions in m.
func WithMetrics(m *Metrics) Option {
	return func(v *DeletionValidator) { v.metrics = m }
}

// WithRecorder defers deletions under rules with the Replay deletion policy:
// a denied DELETE is recorded on the object through r.
func WithRecorder(r Recorder) Option {
	return func(v *DeletionValidator) { v.recorder = r }
}

// NewDeletionValidator returns a validator that finds rules in rules, waits
// until readiness reports them loaded, and finds dependents in dependents.
func NewDeletionValidator(rules RuleFinder, readiness Readiness, dependents Dependents, opts ...Option) *DeletionValidator {
	v := &DeletionValidator{rules: rules, readiness: readiness, dependents: dependents, maxBlockers: DefaultMaxBlockers, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	return v
}

// How a decision was reached: from the index alone, by reading the
// dependents live, or, for an item of kcp's own teardown, from the index
// alone without a confirming read (see teardown).
const (
	viaIndex    = "index"
	viaLive     = "live"
	viaTeardown = "teardown"
)

// kcp runs its namespace controller, the deletion of a workspace's content
// and the deletion of an APIBinding's objects in-process, as this user in
// this group; each sends a DeleteCollection per resource, whose items reach
// admission without a name in the request.
const (
	kcpUser  = "system:apiserver"
	kcpGroup = "system:masters"
)

// teardown reports whether a DELETE is an item of a DeleteCollection that
// kcp itself sends to tear down a namespace, a workspace or an APIBinding's
// objects. Such items are decided from the index alone: see
// docs/architecture.md, "Teardown".
func teardown(req admission.Request) bool {
	return req.Name == "" && req.UserInfo.Username == kcpUser && slices.Contains(req.UserInfo.Groups, kcpGroup)
}

// decision is the outcome of one request, for the metrics.
type decision struct {
	outcome string
	via     string
	scanned int
}

// Handle implements admission.Handler.
func (v *DeletionValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := v.now()
	resp, d := v.handle(ctx, req)
	v.metrics.observe(d, v.now().Sub(start))
	return resp
}

func (v *DeletionValidator) handle(ctx context.Context, req admission.Request) (admission.Response, decision) {
	start := v.now()
	logger := log.FromContext(ctx, "resource", req.Resource, "name", req.Name, "namespace", req.Namespace)
	failed := decision{outcome: DecisionError}

	// 1. Only deletions are judged.
	if req.Operation != admissionv1.Delete {
		return admission.Allowed(""), decision{outcome: DecisionAllowed}
	}

	// 2. Without every rule registered, a delete could slip through.
	if !v.readiness.Loaded() {
		return notLoaded(), failed
	}

	// 3. The object being deleted, the consumer workspace it lives in, and
	// the provider workspace whose webhook configuration kcp called.
	obj, errResp := readSubject(ctx, req.OldObject.Raw, "oldObject")
	if errResp != nil {
		return *errResp, failed
	}
	name, namespace, cluster, provider := obj.Name, obj.Namespace, obj.Cluster, obj.provider
	if name == "" {
		name = req.Name
	}

	// 4. Explicit bypass, audited and warned about.
	if obj.SkipProtection {
		user := req.UserInfo.Username
		logger.Info("Deletion protection bypassed", "user", user)
		resp := admission.Allowed("").WithWarnings(fmt.Sprintf(
			"deletion protection of %s %q was bypassed by %s with the %s annotation; objects that still reference it may break",
			req.Resource.Resource, name, user, depv1alpha1.AnnotationSkipProtection))
		resp.AuditAnnotations = map[string]string{AuditDecision: DecisionBypassed, AuditSkipProtectionBy: user}
		return resp, decision{outcome: DecisionBypassed}
	}

	logger = logger.WithValues("cluster", cluster, "provider", provider)

	// 5. The rules protecting this resource of this provider.
	target := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	entries := v.rules.Find(registry.Target{Cluster: provider, Resource: target})
	if len(entries) == 0 {
		return admission.Allowed(""), decision{outcome: DecisionAllowed, via: viaIndex}
	}

	self := selfRef{target: target, namespace: namespace, name: name, uid: obj.UID}
	groups := v.groupByDependent(entries, namespace)
	denial := denial{logger: logger, req: req, target: target, obj: obj, source: entries[0].Target, deferrable: v.recorder != nil && !teardown(req)}

	// 6. Dependents in the index that reference the object deny at once.
	for _, g := range groups {
		denial.add(g, v.blocking(g, self, v.dependents.Hits(g.src, g.paths, cluster, g.namespace, name)))
	}
	if len(denial.blockers) > 0 {
		return v.deny(ctx, denial), decision{outcome: DecisionDenied, via: viaIndex}
	}

	// 7. Nothing in the index: a webhook that reads only some shards
	// allows nothing for a workspace on another shard.
	if resp, ok := v.misdirected(ctx, logger, entries[0].Target, cluster); !ok {
		return resp, failed
	}

	// 8. An item of kcp's teardown is allowed without a confirming read
	// once every dependent type is indexed on every shard: nothing can be
	// created in a namespace that is being deleted, and an object the index
	// has not seen yet is torn down with the rest.
	if teardown(req) && !slices.ContainsFunc(groups, func(g *dependentGroup) bool { return !g.synced }) {
		logger.V(1).Info("Allowed an item of kcp's teardown from the index", "took", v.now().Sub(start))
		return admission.Allowed(""), decision{outcome: DecisionAllowed, via: viaTeardown}
	}

	// 9. None in the index: read the dependents live before allowing.
	ctx, cancel := withBudget(ctx, v.timeout)
	defer cancel()
	scanned := 0
	for _, g := range groups {
		found, n, err := v.dependents.Confirm(ctx, g.src, g.paths, cluster, g.namespace, name)
		scanned += n
		denial.add(g, v.blocking(g, self, found))
		if errors.Is(err, index.ErrVersionNotServed) {
			resp := admission.Denied(fmt.Sprintf("cannot check whether %s %q is still referenced: %v", target, name, err))
			resp.AuditAnnotations = map[string]string{AuditDecision: DecisionError, AuditFailedRule: g.rules[0].String()}
			return resp, decision{outcome: DecisionError, via: viaLive, scanned: scanned}
		}
		if err != nil {
			logger.Error(err, "Failed to read dependents", "dependent", g.src, "rules", g.rules)
			resp := unavailable(fmt.Sprintf("could not check whether %s %q is still referenced (reading %s failed: %v); retry the delete",
				target.Resource, name, g.src.Resource.GroupResource(), err))
			resp.AuditAnnotations = map[string]string{AuditDecision: DecisionError, AuditFailedRule: g.rules[0].String()}
			return resp, decision{outcome: DecisionError, via: viaLive, scanned: scanned}
		}
	}
	if len(denial.blockers) == 0 {
		logger.V(1).Info("Allowed deletion", "scanned", scanned, "took", v.now().Sub(start))
		return admission.Allowed(""), decision{outcome: DecisionAllowed, via: viaLive, scanned: scanned}
	}
	return v.deny(ctx, denial), decision{outcome: DecisionDenied, via: viaLive, scanned: scanned}
}

// misdirected checks that the webhook serves the workspace cluster, which
// binds the export of src: a webhook that reads only some shards refuses,
// with 421, a request for a workspace on another shard (kcp must call the
// webhook of that shard), and with 503 one it cannot tell.
func misdirected(ctx context.Context, logger logr.Logger, serves func(context.Context, index.Source, logicalcluster.Name) error, src index.Source, cluster logicalcluster.Name, timeout time.Duration) (admission.Response, bool) {
	ctx, cancel := withBudget(ctx, timeout)
	defer cancel()
	err := serves(ctx, src, cluster)
	switch {
	case err == nil:
		return admission.Response{}, true
	case errors.Is(err, index.ErrNotServed):
		logger.Error(err, "Refused a request for a workspace on another shard; route each shard's requests to its own webhook")
		resp := admission.Errored(http.StatusMisdirectedRequest, fmt.Errorf("this dependency webhook does not answer for this workspace: %w; kcp must call the webhook of the shard that serves it", err))
		resp.AuditAnnotations = map[string]string{AuditDecision: DecisionError}
		return resp, false
	default:
		return unavailable(fmt.Sprintf("could not tell whether this dependency webhook serves the workspace (%v); retry", err)), false
	}
}

func (v *DeletionValidator) misdirected(ctx context.Context, logger logr.Logger, src index.Source, cluster logicalcluster.Name) (admission.Response, bool) {
	return misdirected(ctx, logger, v.dependents.Serves, src, cluster, v.timeout)
}

// denial collects the blockers of a DELETE, and whether the deletion may
// be deferred.
type denial struct {
	logger   logr.Logger
	req      admission.Request
	target   schema.GroupResource
	obj      *subject
	blockers []Blocker
	// source is the protected resource as its provider serves it.
	source index.Source
	// deferrable is set while every dependent type that blocks is one
	// whose rules all defer deletions (and a recorder is set, and the
	// request is not an item of kcp's teardown).
	deferrable bool
}

// add adds blockers found among the dependents of g.
func (d *denial) add(g *dependentGroup, blockers []Blocker) {
	if len(blockers) > 0 {
		d.blockers = append(d.blockers, blockers...)
		d.deferrable = d.deferrable && g.replay
	}
}

// deny answers that the object is still referenced by the blockers, and
// defers the deletion if every blocking rule says so.
func (v *DeletionValidator) deny(ctx context.Context, d denial) admission.Response {
	name := d.obj.Name
	if name == "" {
		name = d.req.Name
	}
	slices.SortFunc(d.blockers, compareBlockers)
	d.blockers = slices.Compact(d.blockers)
	msg := deniedMessage(d.target, d.obj.Namespace, name, d.blockers, v.maxBlockers)
	audit := map[string]string{AuditDecision: DecisionDenied, AuditBlockers: strconv.Itoa(len(d.blockers))}
	if d.deferrable {
		var deferred bool
		msg, deferred = v.deferDeletion(ctx, d, msg)
		if deferred {
			audit[AuditDeferred] = "true"
		}
	}
	d.logger.V(1).Info("Denied deletion", "blockers", len(d.blockers), "deferred", audit[AuditDeferred] != "")
	resp := admission.Denied(msg)
	resp.AuditAnnotations = audit
	return resp
}

// deferDeletion records the request on the object (not for a dry run, nor
// twice) and returns the denial message saying so, and whether the deletion
// is deferred.
func (v *DeletionValidator) deferDeletion(ctx context.Context, d denial, msg string) (string, bool) {
	dependents := "its dependent is"
	if n := len(d.blockers); n > 1 {
		dependents = fmt.Sprintf("its %d dependents are", n)
	}
	cancel := fmt.Sprintf("remove its label %s to cancel", depv1alpha1.LabelDeletionRequested)
	switch {
	case d.req.DryRun != nil && *d.req.DryRun:
		v.metrics.deferred(DeferredDryRun)
		return fmt.Sprintf("%s; its deletion would be deferred until %s gone", msg, dependents), false
	case d.obj.DeletionRequested:
		// Also the answer to the DELETE that recorded it: the record
		// changes the object, so kcp admits that DELETE again on the new
		// state before it answers.
		v.metrics.deferred(DeferredAlready)
		return fmt.Sprintf("%s; its deletion is deferred: it will be deleted once %s gone (%s)", msg, dependents, cancel), true
	}
	request, err := replay.Request(d.req.UserInfo.Username, metav1.NewTime(v.now()), d.req.Options.Raw)
	if err == nil {
		ctx, stop := withBudget(ctx, v.timeout)
		defer stop()
		err = v.recorder.Record(ctx, d.source, d.obj.Meta, request)
	}
	if err != nil {
		v.metrics.deferred(DeferredFailed)
		d.logger.Error(err, "Failed to defer a deletion")
		return fmt.Sprintf("%s; its deletion could not be deferred (%v)", msg, err), false
	}
	v.metrics.deferred(DeferredRecorded)
	return fmt.Sprintf("%s; its deletion is deferred: it will be deleted once %s gone (%s)", msg, dependents, cancel), true
}

// selfRef identifies the object being deleted, which never blocks itself.
type selfRef struct {
	target          schema.GroupResource
	namespace, name string
	uid             types.UID
}

// is reports whether a dependent of resource gr is the object itself.
func (s selfRef) is(gr schema.GroupResource, namespace, name string, uid types.UID) bool {
	return gr == s.target && (uid == s.uid && uid != "" || name == s.name && namespace == s.namespace)
}

// dependentGroup is one dependent source with every path at which any rule
// says it references the target, and the scope in which its dependents can
// reference the object.
type dependentGroup struct {
	src   index.Source
	kind  string
	paths []fieldpath.Reference
	rules []kcp.ObjectKey
	// namespace is the namespace of the target, empty for a cluster-scoped
	// one: a namespaced target is referenced from its own namespace, and by
	// cluster-scoped dependents; a cluster-scoped target from anywhere.
	namespace string
	// synced is set when the index has listed the source on every shard.
	synced bool
	// replay is set when every rule of the group defers deletions.
	replay bool
}

// groupByDependent groups the entries by dependent source, leaving out
// sources whose rules have no effect (their provider has not granted access,
// or the rule names what the provider does not export).
func (v *DeletionValidator) groupByDependent(entries []registry.Entry, namespace string) []*dependentGroup {
	var groups []*dependentGroup
	bySource := map[index.Source]*dependentGroup{}
	for _, e := range entries {
		g, ok := bySource[e.Dependent]
		if !ok {
			state := v.dependents.State(e.Dependent)
			if !state.Phase.Effective() {
				continue
			}
			g = &dependentGroup{src: e.Dependent, kind: e.DependentKind, synced: state.Phase == index.PhaseSynced, replay: true}
			if state.Kind != "" {
				g.kind = state.Kind
			}
			g.namespace = namespace
			bySource[e.Dependent] = g
			groups = append(groups, g)
		}
		g.rules = append(g.rules, e.Rule)
		g.paths = append(g.paths, e.Paths...)
		g.replay = g.replay && e.Replay
	}
	for _, g := range groups {
		g.paths = compactPaths(g.paths)
	}
	return groups
}

// compactPaths drops duplicate paths, keeping the first of each.
func compactPaths(paths []fieldpath.Reference) []fieldpath.Reference {
	out := paths[:0]
	seen := map[fieldpath.Reference]bool{}
	for _, p := range paths {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// blocking returns the blockers among the dependents of g that reference
// the object: those not being deleted already (waiting for them could
// deadlock a namespace deletion) and not the object itself.
func (v *DeletionValidator) blocking(g *dependentGroup, self selfRef, deps []kcp.Meta) []Blocker {
	var out []Blocker
	for _, d := range deps {
		if !d.Terminating && !self.is(g.src.Resource.GroupResource(), d.Namespace, d.Name, d.UID) {
			out = append(out, Blocker{Kind: g.kind, Namespace: d.Namespace, Name: d.Name})
		}
	}
	return out
}

// Referenced reports whether the index holds a dependent, not being
// deleted, that references obj, an object of target (a protected resource
// as its provider serves it), under the rules that protect it. It reads
// nothing live: a miss is no proof, and whoever acts on it deletes through
// kcp, whose admission asks Handle.
func (v *DeletionValidator) Referenced(target index.Source, obj kcp.Meta) bool {
	gr := target.Resource.GroupResource()
	entries := v.rules.Find(registry.Target{Cluster: target.Export.Cluster, Resource: gr})
	self := selfRef{target: gr, namespace: obj.Namespace, name: obj.Name, uid: obj.UID}
	for _, g := range v.groupByDependent(entries, obj.Namespace) {
		if len(v.blocking(g, self, v.dependents.Hits(g.src, g.paths, obj.Cluster, g.namespace, obj.Name))) > 0 {
			return true
		}
	}
	return false
}
