package deletion

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/cycles"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/horizon"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/message"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/teardown"
)

// Audit annotation keys of a decision on a DELETE, besides
// webhook.AuditDecision. kcp prefixes them with the webhook's name.
const (
	AuditBlockers         = "blockers"
	AuditSkipProtectionBy = "skip-protection-user"
	// AuditSkipProtectionSetBy names the user who set skip-protection on
	// a bypassed object, whom kcp allowed to delete it.
	AuditSkipProtectionSetBy = "skip-protection-set-by"
	// AuditSkipProtection is "no-effect" when the object carries
	// skip-protection that was not set by a user who may delete it.
	AuditSkipProtection = "skip-protection"
	AuditFailedRule     = "failed-rule"
	AuditDeferred       = "deferred"
)

// DefaultMaxBlockers is how many blockers a denial names unless
// WithMaxBlockers says otherwise.
const DefaultMaxBlockers = 10

// RuleFinder finds the rules protecting a resource, and how the dependents
// of a type are labelled; *registry.Registry implements it.
type RuleFinder interface {
	Find(target registry.Target) []registry.Entry
	Labelling(dependent registry.Target) (registry.Labelling, bool)
}

// Dependents finds the dependents that reference an object; *index.Index
// implements it.
type Dependents interface {
	// State returns what is known about a source.
	State(src index.Source) index.State
	// Hits returns the indexed dependents of src in cluster (in namespace,
	// or everywhere if it is empty) that hold name at one of paths.
	Hits(src index.Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) []kcp.Meta
	// Confirm reads the dependents of the query's source that can
	// reference the object live, after it was called, and returns those
	// that reference it, with how many it read; it retries what clears by
	// itself within the deadline of ctx.
	Confirm(ctx context.Context, q index.Query) ([]kcp.Meta, int, error)
	// Fenced reports whether the index holds every dependent of the
	// query's source that existed when a teardown began, which it had by
	// begun (see index.Index.Fenced).
	Fenced(ctx context.Context, q index.Query, begun time.Time) (bool, error)
	// Serves returns an error wrapping index.ErrNotServed if the webhook
	// reads only some shards and the workspace cluster, which binds the
	// export of src, is on none of them.
	Serves(ctx context.Context, src index.Source, cluster logicalcluster.Name) error
}

// Namespaces tells whether a namespace of a workspace is being deleted;
// *objects.Client implements it.
type Namespaces interface {
	// NamespaceTerminating reports whether namespace in cluster is being
	// deleted, asking kcp through the virtual workspace of src, the
	// protected resource (see objects.Client.NamespaceTerminating).
	NamespaceTerminating(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string) (bool, error)
}

// Validator is an admission.Handler that denies the deletion of an object
// while objects in the same workspace still reference it, as declared by
// DependencyRules.
//
// It decides from the rule registry and the index of dependents: a
// dependent in the index that references the object denies the delete at
// once; when the index holds none, the dependents are read live before the
// delete is allowed, since the index may not have seen a dependent created a
// moment ago.
type Validator struct {
	rules       RuleFinder
	readiness   webhook.Readiness
	dependents  Dependents
	namespaces  Namespaces
	maxBlockers int
	timeout     time.Duration
	metrics     *webhook.Metrics
	recorder    Records
	horizon     *horizon.Judge
	events      Events
	// blocked records, deduplicated, the Events of refused DELETEs.
	blocked *blockedEvents
	// cycles decides the items of kcp's teardowns on cycles of references
	// and remembers the cycles broken; waits records the Events about
	// teardowns that wait for objects outside them.
	cycles *cycles.Breaker
	waits  *teardown.Waits
	// underway remembers the resources whose objects kcp's teardowns were
	// deleting lately, for the clearer (see TearingDown).
	underway *teardown.Underway
	now      func() time.Time
}

// Option configures a Validator.
type Option func(*Validator)

// WithMaxBlockers sets how many blockers a denial names (default
// DefaultMaxBlockers); the rest are counted.
func WithMaxBlockers(n int) Option {
	return func(v *Validator) { v.maxBlockers = n }
}

// WithTimeout bounds the time spent reading dependents per request (default
// none); the time kcp waits for the answer bounds it too (see
// webhook.WithBudget).
func WithTimeout(d time.Duration) Option {
	return func(v *Validator) { v.timeout = d }
}

// WithMetrics records decisions in m.
func WithMetrics(m *webhook.Metrics) Option {
	return func(v *Validator) { v.metrics = m }
}

// WithNamespaces decides the items of kcp's teardown of a namespace from the
// index alone where n says that the namespace is being deleted (see
// fromIndexOnly); without it, only an index that has caught up with the
// teardown (index.Index.Fenced) spares the confirming read.
func WithNamespaces(n Namespaces) Option {
	return func(v *Validator) { v.namespaces = n }
}

// NewValidator returns a validator that finds rules in rules, waits until
// readiness reports them loaded, and finds dependents in dependents.
func NewValidator(rules RuleFinder, readiness webhook.Readiness, dependents Dependents, opts ...Option) *Validator {
	v := &Validator{rules: rules, readiness: readiness, dependents: dependents, maxBlockers: DefaultMaxBlockers, now: time.Now,
		waits: teardown.NewWaits(), underway: teardown.NewUnderway()}
	for _, o := range opts {
		o(v)
	}
	v.cycles = cycles.New(rules, func() cycles.Index { return v.groups() }, v.maxBlockers)
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

// kcpTeardown reports whether a DELETE is an item of a DeleteCollection that
// kcp itself sends to tear down a namespace, a workspace or an APIBinding's
// objects. Such items are decided from the index alone: see
// docs/architecture.md, "Teardown".
func kcpTeardown(req admission.Request) bool {
	return req.Name == "" && req.UserInfo.Username == kcpUser && slices.Contains(req.UserInfo.Groups, kcpGroup)
}

// decision is the outcome of one request, for the metrics.
type decision struct {
	outcome string
	via     string
	scanned int
	// clearance is the clearance fingerprint of a DELETE allowed from the
	// horizon alone, decided for a clearance (see Clearance); notCleared
	// says why a decision for a clearance did not allow from the horizon.
	clearance, notCleared string
}

// observe counts a decision in the metrics with the time it took and, for
// one that read dependents live, how many it read.
func (v *Validator) observe(d decision, took time.Duration) {
	v.metrics.DeletionDecided(d.outcome, d.via, took)
	if d.via == viaLive {
		v.metrics.DependentsScanned(d.scanned)
	}
}

// Handle implements admission.Handler.
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := v.now()
	resp, d := v.handle(ctx, req)
	v.observe(d, v.now().Sub(start))
	return resp
}

func (v *Validator) handle(ctx context.Context, req admission.Request) (admission.Response, decision) {
	// controller-runtime's logger names the request's resource, namespace
	// and name already.
	logger := log.FromContext(ctx)
	failed := decision{outcome: webhook.DecisionError}

	// 1. Only deletions are judged.
	if req.Operation != admissionv1.Delete {
		return admission.Allowed(""), decision{outcome: webhook.DecisionAllowed}
	}

	// 2. Without every rule registered, a delete could slip through.
	if !v.readiness.Loaded() {
		return webhook.NotLoaded(), failed
	}

	// 3. The object being deleted, the consumer workspace it lives in, and
	// the provider workspace whose webhook configuration kcp called.
	obj, errResp := webhook.ReadSubject(ctx, req.OldObject.Raw, "oldObject")
	if errResp != nil {
		return *errResp, failed
	}
	if obj.Name == "" {
		obj.Name = req.Name
	}

	// 4. Explicit bypass, by a user who may delete the object (see
	// guard.SkipGuard), audited and warned about. Set by anyone else, the
	// annotation has no effect, and a refusal says so.
	if obj.SkipProtection {
		if setting, ok := skipSetting(obj.SkipProtectionSetBy); ok {
			return v.bypass(logger, req, obj, setting), decision{outcome: webhook.DecisionBypassed}
		}
		resp, d := v.protect(ctx, logger, req, obj)
		return skipIgnored(resp, req, obj), d
	}
	return v.protect(ctx, logger, req, obj)
}

// protect decides the DELETE of obj from the rules that protect it.
func (v *Validator) protect(ctx context.Context, logger logr.Logger, req admission.Request, obj *webhook.Subject) (admission.Response, decision) {
	return v.protectAs(ctx, logger, req, obj, false)
}

// protectAs is protect, for a clearance if clearing.
func (v *Validator) protectAs(ctx context.Context, logger logr.Logger, req admission.Request, obj *webhook.Subject, clearing bool) (admission.Response, decision) {
	failed := decision{outcome: webhook.DecisionError}
	logger = logger.WithValues("cluster", obj.Cluster, "provider", obj.Provider)
	if req.Name == "" {
		// An item of a DELETECOLLECTION (a namespace's teardown): the
		// request names the collection only.
		logger = logger.WithValues("item", obj.Name)
	}

	// 5. The rules protecting this resource of this provider.
	target := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	entries := v.rules.Find(registry.Target{Cluster: obj.Provider, Resource: target})
	if len(entries) == 0 {
		return admission.Allowed(""), decision{outcome: webhook.DecisionAllowed, via: viaIndex}
	}
	d := &deletion{logger: logger, req: req, target: target, obj: obj, teardown: kcpTeardown(req),
		self:   selfRef{target: target, namespace: obj.Namespace, name: obj.Name, uid: obj.UID},
		groups: v.groupByDependent(entries, obj.Namespace), clearing: clearing}
	d.denial = denial{logger: logger, req: req, target: target, obj: obj, source: entries[0].Target, deferrable: v.recorder != nil && !d.teardown && !clearing}
	if d.teardown {
		d.begun = v.underway.Saw(obj.Cluster, obj.Namespace, target)
	}

	// 6. Dependents in the index that reference the object deny at once,
	// unless the object is where kcp's teardown breaks a cycle.
	if resp, dec, decided := v.fromIndex(ctx, d); decided {
		return resp, dec
	}

	// 7. Nothing in the index: a webhook that reads only some shards
	// allows nothing for a workspace on another shard.
	if resp, ok := v.misdirected(ctx, logger, entries[0].Target, obj.Cluster); !ok {
		return resp, failed
	}

	// 8. The object's own state: while a reference to it is in flight the
	// DELETE is refused; once the index is current past its horizon, it is
	// allowed without a read.
	if v.horizon != nil {
		if h := v.unleased(ctx, d, horizon.Read(req.OldObject.Raw)); !h.Malformed {
			resp, dec, a, decided, inFlight := v.settle(ctx, d, h)
			if decided {
				return resp, dec
			}
			if inFlight {
				d.inFlight, d.assessment = true, a
				d.notCleared = "a reference to it may be in flight"
			} else if how, why := v.horizon.Current(ctx, d.denial.source, d.obj.Meta, d.horizonGroups(), a, v.deferred(d)); how != horizon.NotCurrent {
				if d.clearing {
					return admission.Allowed(""), decision{outcome: webhook.DecisionAllowed, via: viaHorizon, clearance: d.clearanceFingerprint()}
				}
				via := viaHorizon
				if how == horizon.PastRevision {
					via = viaRevision
				}
				logger.V(1).Info("Allowed deletion", "via", via)
				return admission.Allowed(""), decision{outcome: webhook.DecisionAllowed, via: via}
			} else {
				logger.V(2).Info("Not deciding from the horizon", "why", why)
				d.notCleared = why
			}
		} else {
			d.notCleared = "its ledger of admitted references does not parse"
		}
	}

	// 9. Otherwise read the dependents live before allowing, but for an
	// item of kcp's teardown only those the index may lack. A clearance is
	// decided from the horizon alone.
	if d.clearing {
		return admission.Response{}, decision{notCleared: cmp.Or(d.notCleared, "no horizon")}
	}
	return v.confirm(ctx, d)
}

// deletion is what the steps of one DELETE decision share.
type deletion struct {
	logger   logr.Logger
	req      admission.Request
	target   schema.GroupResource
	obj      *webhook.Subject
	self     selfRef
	groups   []*dependentGroup
	teardown bool
	// begun is, for an item of kcp's teardown, when the first item of the
	// teardown reached the webhook: it had begun by then.
	begun  time.Time
	denial denial
	// inFlight is set when a reference to the object may be in flight
	// (assessment says which): the DELETE is refused where it would be
	// allowed.
	inFlight   bool
	assessment inflight.Assessment
	// clearing is set when the decision is asked for a clearance (see
	// Clearance): only an allowance from the horizon counts; notCleared
	// says why the horizon did not allow.
	clearing   bool
	notCleared string
}

// query returns the confirming read of the dependents of g.
func (d *deletion) query(g *dependentGroup) index.Query {
	return index.Query{Source: g.src, Paths: g.paths, Cluster: d.obj.Cluster, Namespace: g.namespace, Name: d.obj.Name, Target: d.target, Scheme: g.scheme}
}

// bypass allows the deletion of an object with the skip-protection
// annotation, set by a user who may delete it (setting), warning and
// auditing who deleted it and who set the annotation.
func (v *Validator) bypass(logger logr.Logger, req admission.Request, obj *webhook.Subject, setting depv1alpha1.SkipProtectionSetting) admission.Response {
	user := req.UserInfo.Username
	logger.Info("Deletion protection bypassed", "user", user, "setBy", setting.User, "setAt", setting.SetAt.UTC().Format(time.RFC3339))
	resp := admission.Allowed("").WithWarnings(fmt.Sprintf(
		"deletion protection of %s %q was bypassed by %s with the %s annotation, set by %s at %s; objects that still reference it may break",
		req.Resource.Resource, obj.Name, user, depv1alpha1.AnnotationSkipProtection, setting.User, setting.SetAt.UTC().Format(time.RFC3339)))
	resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionBypassed, AuditSkipProtectionBy: user, AuditSkipProtectionSetBy: setting.User}
	return resp
}

// skipSetting decodes the record of who set skip-protection (the value of
// the annotation depv1alpha1.AnnotationSkipProtectionSetBy), and reports
// whether it names a user. Only the webhook writes it, for a user whom kcp
// allows to delete the object (see guard.SkipGuard).
func skipSetting(record string) (depv1alpha1.SkipProtectionSetting, bool) {
	var s depv1alpha1.SkipProtectionSetting
	if record == "" || json.Unmarshal([]byte(record), &s) != nil {
		return s, false
	}
	return s, s.User != ""
}

// skipIgnored adds to a refusal of the DELETE of obj, which carries
// skip-protection without a record of a user who may delete it, a warning
// and an audit annotation that the annotation has no effect.
func skipIgnored(resp admission.Response, req admission.Request, obj *webhook.Subject) admission.Response {
	if resp.Allowed {
		return resp
	}
	resp.Warnings = append(resp.Warnings, fmt.Sprintf(
		"the annotation %s=true on %s %q has no effect: it was not set by a user who may delete the object (such a user removes it and sets it again)",
		depv1alpha1.AnnotationSkipProtection, req.Resource.Resource, obj.Name))
	if resp.AuditAnnotations == nil {
		resp.AuditAnnotations = map[string]string{}
	}
	resp.AuditAnnotations[AuditSkipProtection] = "no-effect"
	return resp
}

// fromIndex denies the deletion if the index holds a dependent that
// references the object, except for an item of kcp's teardown on a cycle
// of references that the teardown deletes whole (see decideTeardown); it
// reports whether it decided.
func (v *Validator) fromIndex(ctx context.Context, d *deletion) (admission.Response, decision, bool) {
	var blockers []cycles.Node
	for _, g := range d.groups {
		found := v.blocking(g, d.self, v.dependents.Hits(g.src, g.paths, d.obj.Cluster, g.namespace, d.obj.Name))
		d.denial.add(g, toBlockers(g, found))
		for _, m := range found {
			blockers = append(blockers, cycles.Node{Provider: g.src.Export.Cluster, Resource: g.src.Resource.GroupResource(), Kind: g.kind, Meta: m})
		}
	}
	if len(blockers) == 0 {
		return admission.Response{}, decision{}, false
	}
	if d.teardown {
		resp, dec := v.decideTeardown(ctx, d, blockers)
		return resp, dec, true
	}
	return v.deny(ctx, d.denial), decision{outcome: webhook.DecisionDenied, via: viaIndex}, true
}

// confirm decides a DELETE that the index holds no blocker of by reading
// the dependents live, except, for an item of kcp's teardown, those the
// index is known to hold completely (see fromIndexOnly).
func (v *Validator) confirm(ctx context.Context, d *deletion) (admission.Response, decision) {
	start := v.now()
	ctx, cancel := webhook.WithBudget(ctx, v.timeout)
	defer cancel()
	terminating := false
	if d.teardown && d.req.Namespace != "" && v.namespaces != nil {
		var err error
		if terminating, err = v.namespaces.NamespaceTerminating(ctx, d.denial.source, d.obj.Cluster, d.req.Namespace); err != nil {
			d.logger.V(1).Info("Cannot tell whether the namespace of an item of kcp's teardown is being deleted; reading live", "error", err.Error())
		}
	}
	scanned, read := 0, false
	for _, g := range d.groups {
		q := d.query(g)
		if d.teardown && v.fromIndexOnly(ctx, d, g, q, terminating) {
			continue
		}
		read = true
		found, n, err := v.dependents.Confirm(ctx, q)
		scanned += n
		d.denial.add(g, toBlockers(g, v.blocking(g, d.self, found)))
		if err != nil {
			return v.readFailed(d, g, err), decision{outcome: webhook.DecisionError, via: viaLive, scanned: scanned}
		}
	}
	via := viaLive
	if !read {
		via = viaTeardown
	}
	if len(d.denial.blockers) == 0 && d.inFlight {
		return v.refuseInFlight(ctx, d, d.assessment), decision{outcome: webhook.DecisionInFlight, via: via, scanned: scanned}
	}
	if len(d.denial.blockers) == 0 {
		d.logger.V(1).Info("Allowed deletion", "via", via, "scanned", scanned, "took", v.now().Sub(start))
		return admission.Allowed(""), decision{outcome: webhook.DecisionAllowed, via: via, scanned: scanned}
	}
	return v.deny(ctx, d.denial), decision{outcome: webhook.DecisionDenied, via: via, scanned: scanned}
}

// fromIndexOnly reports whether, for an item of kcp's teardown, the index
// holds every dependent of g that the confirming read could find (it held
// none that references the object), so that the read can be left out. The
// source must be synced (listed, its watch not broken), and either
//
//   - the item's namespace is being deleted (terminating) and the dependents
//     that can reference the object are namespaced in it: kcp creates
//     nothing in a namespace being deleted, so what the index lacks is at
//     most a dependent created within its lag before the deletion began,
//     which the same teardown deletes (only the order is lost); or
//   - the index has caught up with a fence read after the teardown began
//     (index.Index.Fenced): it holds every dependent that existed before,
//     whatever the teardown is (a workspace's, or an APIBinding's, whose
//     dependents stay).
func (v *Validator) fromIndexOnly(ctx context.Context, d *deletion, g *dependentGroup, q index.Query, terminating bool) bool {
	if !g.synced {
		return false
	}
	if terminating && v.dependents.State(g.src).Namespaced && !slices.ContainsFunc(g.paths, fieldpath.Reference.CrossesNamespaces) {
		return true
	}
	fenced, err := v.dependents.Fenced(ctx, q, d.begun)
	if err != nil {
		d.logger.V(1).Info("Cannot fence the index for an item of kcp's teardown; reading live", "dependent", g.src, "error", err.Error())
	}
	return fenced
}

// readFailed is the answer when the dependents of g could not be read.
func (v *Validator) readFailed(d *deletion, g *dependentGroup, err error) admission.Response {
	if errors.Is(err, index.ErrVersionNotServed) {
		resp := admission.Denied(fmt.Sprintf("cannot check whether %s %q is still referenced: %v", d.target, d.obj.Name, err))
		resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionError, AuditFailedRule: g.rules[0].String()}
		return resp
	}
	d.logger.Error(err, "Failed to read dependents", "dependent", g.src, "rules", g.rules)
	resp := webhook.Unavailable(fmt.Sprintf("could not check whether %s %q is still referenced (reading %s failed: %v); retry the delete",
		d.target.Resource, d.obj.Name, g.src.Resource.GroupResource(), err))
	resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionError, AuditFailedRule: g.rules[0].String()}
	return resp
}

// misdirected checks that the webhook serves the workspace cluster (see
// webhook.Misdirected).
func (v *Validator) misdirected(ctx context.Context, logger logr.Logger, src index.Source, cluster logicalcluster.Name) (admission.Response, bool) {
	return webhook.Misdirected(ctx, logger, v.dependents.Serves, src, cluster, v.timeout)
}

// denial collects the blockers of a DELETE, and whether the deletion may
// be deferred.
type denial struct {
	logger   logr.Logger
	req      admission.Request
	target   schema.GroupResource
	obj      *webhook.Subject
	blockers []message.Blocker
	// source is the protected resource as its provider serves it.
	source index.Source
	// deferrable is set while every dependent type that blocks is one
	// whose rules all defer deletions (and a recorder is set, and the
	// request is not an item of kcp's teardown).
	deferrable bool
	// inFlight is set when what holds the deletion up is a reference in
	// flight, not a blocker.
	inFlight bool
	// note is appended to the message: why kcp's teardown waits.
	note string
}

// add adds blockers found among the dependents of g.
func (d *denial) add(g *dependentGroup, blockers []message.Blocker) {
	if g == nil {
		return
	}
	if len(blockers) > 0 {
		d.blockers = append(d.blockers, blockers...)
		d.deferrable = d.deferrable && g.replay
	}
}

// deny answers that the object is still referenced by the blockers, and
// defers the deletion if every blocking rule says so.
func (v *Validator) deny(ctx context.Context, d denial) admission.Response {
	name := d.obj.Name
	if name == "" {
		name = d.req.Name
	}
	slices.SortFunc(d.blockers, message.CompareBlockers)
	d.blockers = slices.CompactFunc(d.blockers, message.SameDependent)
	msg := message.Denied(d.target, d.obj.Namespace, name, d.blockers, v.maxBlockers) + d.note
	audit := map[string]string{webhook.AuditDecision: webhook.DecisionDenied, AuditBlockers: strconv.Itoa(len(d.blockers))}
	if d.deferrable {
		var deferred bool
		msg, deferred = v.deferDeletion(ctx, d, msg)
		if deferred {
			audit[AuditDeferred] = "true"
		}
	}
	deferred := audit[AuditDeferred] != ""
	d.logger.V(1).Info("Denied deletion", "blockers", len(d.blockers), "deferred", deferred)
	// A deferred deletion leaves its record on the object instead (who
	// asked, when, and how to cancel): an Event more would double kcp's
	// writes for each object of a stack deleted in one go.
	if v.blocked != nil && !deferred && !kcpTeardown(d.req) && (d.req.DryRun == nil || !*d.req.DryRun) {
		v.blocked.blocked(ctx, d, v.dependents.State(d.source).Kind, msg, v.now())
	}
	resp := admission.Denied(msg)
	resp.Result.Details = message.Details(d.target, name, d.blockers, message.DefaultMaxCauses)
	resp.AuditAnnotations = audit
	return resp
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
	// synced is set when the index has listed the source on every shard
	// and its watch is not broken.
	synced bool
	// replay is set when every rule of the group defers deletions.
	replay bool
	// scheme is the fingerprint of the scheme under which the dependents
	// are labelled with what they reference, empty if they are not, and
	// salt the scheme's salt (see reflabels.Scheme).
	scheme, salt string
	// unlabellable is set when the dependents cannot be labelled (see
	// registry.Labelling): the check of new references records their
	// references at paths.
	unlabellable bool
	// tracked is set when every rule of the group reports its references
	// tracked (ReferencesTracked=True), since trackedSince (the latest of
	// their transitions).
	tracked      bool
	trackedSince time.Time
}

// groupByDependent groups the entries by dependent source, leaving out
// sources whose rules have no effect (their provider has not granted access,
// or the rule names what the provider does not export).
func (v *Validator) groupByDependent(entries []registry.Entry, namespace string) []*dependentGroup {
	var groups []*dependentGroup
	bySource := map[index.Source]*dependentGroup{}
	for _, e := range entries {
		g, ok := bySource[e.Dependent]
		if !ok {
			state := v.dependents.State(e.Dependent)
			if !state.Phase.Effective() {
				continue
			}
			g = &dependentGroup{src: e.Dependent, kind: e.DependentKind, synced: state.Phase == index.PhaseSynced, replay: true, tracked: true}
			if state.Kind != "" {
				g.kind = state.Kind
			}
			dependent := registry.Target{Cluster: e.Dependent.Export.Cluster, Resource: e.Dependent.Resource.GroupResource()}
			if l, ok := v.rules.Labelling(dependent); ok && l.Labellable && l.Labelled && l.Dependent == e.Dependent {
				g.scheme, g.salt = l.Scheme.Fingerprint, l.Scheme.Salt
			} else if ok && !l.Labellable {
				g.unlabellable = true
			}
			g.namespace = namespace
			bySource[e.Dependent] = g
			groups = append(groups, g)
		}
		g.rules = append(g.rules, e.Rule)
		g.paths = append(g.paths, e.Paths...)
		g.replay = g.replay && e.Replay
		since, tracked := e.Tracking.Tracked()
		g.tracked = g.tracked && tracked
		if since.After(g.trackedSince) {
			g.trackedSince = since
		}
	}
	for _, g := range groups {
		g.paths = compactPaths(g.paths)
	}
	return groups
}

// pathsText names the paths of g, joined with " or ".
func (g *dependentGroup) pathsText() string {
	texts := make([]string, len(g.paths))
	for i, p := range g.paths {
		texts[i] = p.String()
	}
	return strings.Join(texts, " or ")
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
func (v *Validator) blocking(g *dependentGroup, self selfRef, deps []kcp.Meta) []kcp.Meta {
	var out []kcp.Meta
	for _, d := range deps {
		if !d.Terminating && !self.is(g.src.Resource.GroupResource(), d.Namespace, d.Name, d.UID) {
			out = append(out, d)
		}
	}
	return out
}

// toBlockers names the dependents of g.
func toBlockers(g *dependentGroup, deps []kcp.Meta) []message.Blocker {
	out := make([]message.Blocker, 0, len(deps))
	for _, d := range deps {
		out = append(out, message.Blocker{Kind: g.kind, Namespace: d.Namespace, Name: d.Name, Rule: g.rules[0].String(), Path: g.pathsText()})
	}
	return out
}
