package references

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// GuardFinder finds the rules whose dependent type a provider workspace
// serves; *registry.Registry implements it.
type GuardFinder interface {
	FindGuards(dependent registry.Target) []registry.Guard
}

// Targets reads protected objects live; *index.Index implements it.
type Targets interface {
	// State returns what is known about a source.
	State(src index.Source) index.State
	// Lookup reads the objects of src named name in cluster (in namespace,
	// or in every namespace if it is empty and the resource is namespaced).
	// Reads that fail for a reason that clears by itself are retried within
	// the deadline of ctx.
	Lookup(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, error)
	// ListTargets reads the objects of src in namespace of cluster (of a
	// cluster-scoped resource if it is empty) and calls visit with each; it
	// stops once it has read more than most, and then returns false.
	ListTargets(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string, most int, visit func(raw []byte) error) (bool, error)
	// Serves returns an error wrapping index.ErrNotServed if the webhook
	// reads only some shards and the workspace cluster, which binds the
	// export of src, is on none of them.
	Serves(ctx context.Context, src index.Source, cluster logicalcluster.Name) error
}

// Verifier verifies the records of deferred deletions; *replay.Records
// implements it.
type Verifier interface {
	// Verify returns nil if obj, an object of target, carries a record
	// of a deferred deletion that verifies (see package records).
	Verify(target schema.GroupResource, obj kcp.Meta) error
}

// ReferenceValidator is an admission.Handler that kcp calls for CREATE and
// UPDATE of dependents: it refuses a new reference to an object that is
// being deleted, which would dangle as soon as that object is gone.
//
// Only references that the request adds are checked: an UPDATE that keeps
// a dependent's references (a status or label change) is never refused,
// and neither is a dependent that is being deleted itself. A reference to an
// object that does not exist is allowed, so that a dependent may be created
// before what it references (as GitOps tools do).
//
// A reference to an object whose deletion is deferred (it carries a record
// that verifies, see package records) is refused too: otherwise a stack
// whose deletion is deferred could gain dependents forever. A record that
// does not verify refuses nothing.
//
// A write that adds references to a dependent and leaves it referencing
// more objects than the limit (WithMaxReferences) is refused at once; one
// that leaves it close to the limit gets a warning.
type ReferenceValidator struct {
	rules       GuardFinder
	readiness   webhook.Readiness
	targets     Targets
	records     Verifier
	timeout     time.Duration
	metrics     *webhook.Metrics
	limit       limit
	concurrency int
	// grace is the audit's grace period, for the warnings; 0 if unknown.
	grace time.Duration
	// recording and labelling, if set, record the references of the types
	// that cannot be labelled (see WithRevisionMarks).
	recording *Recording
	labelling LabellingFinder
	// self, if set, tells the webhook's own requests apart, whose probes
	// the check answers, signed by answers (see WithProbes).
	self    Self
	answers *tracking.Answers
	now     func() time.Time
}

// Self tells whether a request was sent with the webhook's own
// credentials; *guard.SelfReview implements it.
type Self = webhook.Self

// WithProbes has the check answer the probes with which the webhook learns
// that kcp calls it on a shard (see package tracking, KindCheck): a dry
// run of the webhook's own user that adds a reference to a name starting
// with tracking.CheckProbePrefix is refused with
// tracking.CheckProbeAnswer, signed by answers, before anything is read.
func WithProbes(self Self, answers *tracking.Answers) ValidatorOption {
	return func(v *ReferenceValidator) { v.self, v.answers = self, answers }
}

// ValidatorOption configures a ReferenceValidator.
type ValidatorOption func(*ReferenceValidator)

// WithGracePeriod has the warning about a reference to an object that does
// not exist say after how long the audit reports it.
func WithGracePeriod(d time.Duration) ValidatorOption {
	return func(v *ReferenceValidator) { v.grace = d }
}

// WithMaxReferences sets how many objects one dependent may reference
// (DefaultMaxReferences if n is 0 or less).
func WithMaxReferences(n int) ValidatorOption {
	return func(v *ReferenceValidator) {
		if n > 0 {
			v.limit.max = n
		}
	}
}

// WithRevisionMarks has the ReferenceValidator record every reference that
// a write of a dependent whose type cannot be labelled (labelling says
// why: a reference in the status, or rules of the type that name different
// exports or versions) adds on the object it names, before it answers, as
// the LabelMutator records those of the other types: under the id of the
// revision the write was admitted on, or of the dependent's CREATE (see
// inflight.RevisionID), since neither a write through the status
// subresource nor a validating webhook can set the admission label. kube-
// apiserver stores an UPDATE only over the revision it admitted it on, so
// the index knows such a reference landed (or never will) once it sees the
// dependent change from that revision; the DELETE of the object waits for
// it, or refuses while it is in flight (see package inflight). It refuses
// a new reference to an object being deleted as the check does without
// it. Dry runs record nothing, and marks are never withdrawn: two writes
// admitted on one revision share an id.
func WithRevisionMarks(r Recording, labelling LabellingFinder) ValidatorOption {
	return func(v *ReferenceValidator) {
		v.recording, v.labelling = &r, labelling
	}
}

// NewReferenceValidator returns a validator that finds rules in rules,
// waits until readiness reports them loaded, reads targets through
// targets (DefaultConcurrency at a time), within timeout per request (none
// if 0; the time kcp waits for the answer bounds it too, see
// webhook.WithBudget), verifies records of deferred deletions with records
// (none are honoured if nil), and records checks in metrics (if not nil).
func NewReferenceValidator(rules GuardFinder, readiness webhook.Readiness, targets Targets, records Verifier, timeout time.Duration, metrics *webhook.Metrics, opts ...ValidatorOption) *ReferenceValidator {
	v := &ReferenceValidator{rules: rules, readiness: readiness, targets: targets, records: records, timeout: timeout, metrics: metrics,
		limit: limit{max: DefaultMaxReferences}, concurrency: DefaultConcurrency, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Handle implements admission.Handler.
func (v *ReferenceValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp, outcome := v.handle(ctx, req)
	v.metrics.ReferenceChecked(outcome)
	return resp
}

// probe answers the webhook's own probe (see WithProbes), if the request is
// one: it reports whether it is.
func (v *ReferenceValidator) probe(ctx context.Context, req admission.Request, obj *webhook.Subject, gr schema.GroupResource, added []reference) (admission.Response, bool) {
	// Only a replica that records the references of the type answers: the
	// probe asks whether they are recorded.
	if v.self == nil || req.DryRun == nil || !*req.DryRun || !v.recordsFor(obj, gr) {
		return admission.Response{}, false
	}
	for _, r := range added {
		if !strings.HasPrefix(r.name, tracking.CheckProbePrefix) {
			continue
		}
		if self, err := v.self.Is(ctx, req.UserInfo); err != nil || !self {
			return admission.Response{}, false
		}
		return admission.Denied(tracking.CheckProbeAnswer(r.name, v.answers.Sign(tracking.KindCheck, r.name, ""))), true
	}
	return admission.Response{}, false
}

// reference is a target a request adds a reference to.
type reference struct {
	target    index.Source
	namespace string
	name      string
}

// object names what r references whatever export serves it: the resource,
// namespace and name. Two rules on one field that name exports of one
// resource by two providers give two references to one object, of which a
// workspace holds at most one (see alternatives).
type object struct {
	resource        schema.GroupResource
	namespace, name string
}

// object returns the object r names.
func (r reference) object() object {
	return object{r.target.Resource.GroupResource(), r.namespace, r.name}
}

// describe names the target of r for a message about a dependent in
// namespace: quoted, with its namespace if that is another one.
func (r reference) describe(namespace string) string {
	if r.namespace == "" || r.namespace == namespace {
		return strconv.Quote(r.name)
	}
	return fmt.Sprintf("%q in namespace %q", r.name, r.namespace)
}

func (v *ReferenceValidator) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed(""), webhook.DecisionAllowed
	}
	if !v.readiness.Loaded() {
		return webhook.NotLoaded(), webhook.DecisionError
	}
	obj, errResp := webhook.ReadWriteSubject(ctx, req)
	if errResp != nil {
		return *errResp, webhook.DecisionError
	}
	if obj.Terminating {
		return admission.Allowed(""), webhook.DecisionAllowed
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	guards := v.rules.FindGuards(registry.Target{Cluster: obj.Provider, Resource: gr})
	if len(guards) == 0 {
		return admission.Allowed(""), webhook.DecisionAllowed
	}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errors.New("the UPDATE request has no oldObject")), webhook.DecisionError
	}
	refs, err := referencesIn(v.targets, req, obj, guards)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), webhook.DecisionError
	}
	refused, warnings := v.limit.check(req.Kind.Kind, obj.DisplayName(), refs)
	if refused != nil {
		return *refused, webhook.DecisionDenied
	}
	if len(refs.added) == 0 {
		return withWarnings(admission.Allowed(""), warnings), webhook.DecisionAllowed
	}
	if resp, ok := v.probe(ctx, req, obj, gr, refs.added); ok {
		return resp, webhook.ResultProbe
	}
	// A webhook that reads only some shards checks nothing for a workspace
	// on another shard (its reads there would find nothing).
	if resp, ok := webhook.Misdirected(ctx, log.FromContext(ctx), v.targets.Serves, guards[0].Dependent, obj.Cluster, v.timeout); !ok {
		return resp, webhook.DecisionError
	}
	if id, ok := v.revisionID(req, obj, gr); ok {
		mk := marker{r: v.recording, metrics: v.metrics, concurrency: v.concurrency}
		out, resp, outcome := mk.mark(ctx, req.Kind.Kind, obj, refs.added, id, false, guards, v.now())
		if resp != nil {
			return *resp, outcome
		}
		return admission.Allowed("").WithWarnings(append(warnings, missingWarnings(req.Kind.Kind, obj.DisplayName(), obj.Namespace, out.missing, v.grace)...)...), webhook.DecisionAllowed
	}
	resp, outcome := v.checkTargets(ctx, req.Kind.Kind, obj, refs.added)
	if resp.Allowed {
		resp = withWarnings(resp, warnings)
	}
	return resp, outcome
}

// revisionID returns the id under which the references a write adds are
// recorded (see WithRevisionMarks), if they are: the write is not a dry
// run, and the labelling webhook does not record them, since the
// dependent's type cannot be labelled. An UPDATE is named by the UID and
// the resourceVersion of its old object, the stored state it was admitted
// on; a CREATE by the UID that kube-apiserver gave the object before it
// called validating webhooks.
func (v *ReferenceValidator) revisionID(req admission.Request, obj *webhook.Subject, gr schema.GroupResource) (string, bool) {
	if req.DryRun != nil && *req.DryRun || !v.recordsFor(obj, gr) {
		return "", false
	}
	uid, rv := obj.UID, ""
	if req.Operation == admissionv1.Update {
		old, err := kcp.ReadMeta(req.OldObject.Raw)
		if err != nil {
			return "", false
		}
		uid, rv = old.UID, old.ResourceVersion
		if rv == "" {
			return "", false
		}
	}
	if uid == "" {
		return "", false
	}
	return inflight.RevisionID(uid, rv), true
}

// recordsFor reports whether the check records the references that writes of
// obj, of the resource gr, add (see WithRevisionMarks): its type cannot be
// labelled.
func (v *ReferenceValidator) recordsFor(obj *webhook.Subject, gr schema.GroupResource) bool {
	if v.recording == nil {
		return false
	}
	l, ok := v.labelling.Labelling(registry.Target{Cluster: obj.Provider, Resource: gr})
	return !ok || !l.Labellable
}

// withWarnings returns resp with warnings added.
func withWarnings(resp admission.Response, warnings []string) admission.Response {
	resp.Warnings = append(resp.Warnings, warnings...)
	return resp
}

// findings is what the rules of a dependent's type find in a write of it.
type findings struct {
	// total is how many objects the written object references, each once,
	// at the paths of every rule (whether or not its targets can be read).
	total int
	// adds is set if it references one its old object (of an UPDATE) did
	// not.
	adds bool
	// added are those new references whose targets can be read (as
	// targets knows them), each once, in the order of the rules' paths and
	// of the object.
	added []reference
}

// referencesIn returns what the rules of guards find in the request's
// object and, for an UPDATE, its old object: a reference is new if the old
// object did not reference the same object at any of the paths.
func referencesIn(targets Targets, req admission.Request, obj *webhook.Subject, guards []registry.Guard) (findings, error) {
	var before map[reference]bool
	if req.Operation == admissionv1.Update {
		before = map[reference]bool{}
		for _, g := range guards {
			for _, ref := range g.References {
				refs, err := referencesOf(ref, targets.State(ref.Target).Namespaced, obj.Namespace, req.OldObject.Raw, "old object")
				if err != nil {
					return findings{}, err
				}
				for _, r := range refs {
					before[r] = true
				}
			}
		}
	}
	var f findings
	seen := map[reference]bool{}
	for _, g := range guards {
		for _, ref := range g.References {
			state := targets.State(ref.Target)
			refs, err := referencesOf(ref, state.Namespaced, obj.Namespace, req.Object.Raw, "object")
			if err != nil {
				return findings{}, err
			}
			// Targets that cannot be read are not checked: the protected
			// workspace does not bind the dependencies APIExport, or the
			// rule reports why they cannot be read.
			readable := ref.Target.Export.Name != "" && (state.Phase == index.PhaseSyncing || state.Phase == index.PhaseSynced)
			for _, r := range refs {
				if r.name == "" || seen[r] {
					continue
				}
				seen[r] = true
				if before[r] {
					continue
				}
				f.adds = true
				if readable {
					f.added = append(f.added, r)
				}
			}
		}
	}
	f.total = len(seen)
	return f, nil
}

// referencesOf returns what ref's path names in the object raw. Each
// reference names the object in its namespace, or in the dependent's
// (namespace); a reference of a cluster-scoped dependent that names none
// may be to an object of that name in any namespace.
func referencesOf(ref registry.GuardReference, namespaced bool, namespace string, raw []byte, what string) ([]reference, error) {
	values, err := ref.Path.ResolveJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s of the %s: %w", ref.Path, what, err)
	}
	out := make([]reference, 0, len(values))
	for _, v := range values {
		r := reference{target: ref.Target, name: v.Name}
		if namespaced {
			r.namespace = cmp.Or(v.Namespace, namespace)
		}
		out = append(out, r)
	}
	return out, nil
}

// checkTargets reads each added reference's target (those of many in one
// namespace with one LIST, see listTargets; the others one by one,
// concurrency at a time), and denies if one is being deleted, or its
// deletion is deferred (a record that verifies); it allows a reference to
// an object that does not exist with a warning (at most maxWarnings, and
// how many more).
func (v *ReferenceValidator) checkTargets(ctx context.Context, kind string, obj *webhook.Subject, added []reference) (admission.Response, string) {
	name := obj.DisplayName()
	ctx, cancel := webhook.WithBudget(ctx, v.timeout)
	defer cancel()
	read := make([][]kcp.Meta, len(added))
	listed, err := listTargets(ctx, v.targets, obj.Cluster, added, v.concurrency, func(i int, _ []byte, m kcp.Meta) {
		read[i] = []kcp.Meta{m}
	})
	if err != nil {
		log.FromContext(ctx).Error(err, "Failed to read referenced objects", "cluster", obj.Cluster, "references", len(added))
		return webhook.Unavailable(fmt.Sprintf("could not check whether %s %q may reference the %d objects it adds references to (reading them failed: %v); retry",
			kind, name, len(added), err)), webhook.DecisionError
	}
	alt, release := alternativesOf(ctx, added)
	defer release()
	var rest []int
	for i := range added {
		switch {
		case !listed[i]:
			rest = append(rest, i)
		case len(read[i]) > 0 && alt.group(i) != nil:
			alt.group(i).resolve()
		}
	}
	j, err := each(ctx, len(rest), v.concurrency, func(ctx context.Context, j int) error {
		i := rest[j]
		r := added[i]
		cut, err := alt.do(ctx, i, func(ctx context.Context) (bool, error) {
			var err error
			read[i], err = v.targets.Lookup(ctx, r.target, obj.Cluster, r.namespace, r.name)
			return len(read[i]) > 0, err
		})
		if cut {
			read[i] = nil
		}
		return err
	})
	if err != nil {
		j = rest[j]
	} else {
		j, err = alt.firstError()
	}
	if err != nil {
		r := added[j]
		log.FromContext(ctx).Error(err, "Failed to read a referenced object", "cluster", obj.Cluster, "target", r.target, "name", r.name, "references", len(added))
		return webhook.Unavailable(fmt.Sprintf("could not check whether %s %q may reference %s %s (reading it failed: %v); retry",
			kind, name, r.target.Resource.Resource, r.describe(obj.Namespace), err)), webhook.DecisionError
	}
	var problems []string
	missing := unresolved(added, func(i int) bool { return len(read[i]) == 0 })
	for i, r := range added {
		for _, o := range read[i] {
			if p := problemOf(kind, name, obj.Namespace, r, o, v.records); p != "" {
				problems = append(problems, p)
				break
			}
		}
	}
	if len(problems) > 0 {
		return denied(problems), webhook.DecisionDenied
	}
	return admission.Allowed("").WithWarnings(missingWarnings(kind, name, obj.Namespace, missing, v.grace)...), webhook.DecisionAllowed
}

// problemOf returns the sentence that refuses the reference r of the
// dependent kind named name in namespace to the object o, "" if o may be
// referenced: it is being deleted, or its deletion is deferred (a record
// that verifies).
func problemOf(kind, name, namespace string, r reference, o kcp.Meta, records Verifier) string {
	switch {
	case o.Terminating:
		return fmt.Sprintf("%s %q cannot reference %s %s: it is being deleted", kind, name, r.target.Resource.Resource, r.describe(namespace))
	case o.DeletionRequested && records != nil && records.Verify(r.target.Resource.GroupResource(), o) == nil:
		// Otherwise a stack whose deletion is deferred could gain new
		// dependents forever.
		return deferredProblem(kind, name, r, namespace)
	}
	return ""
}

// maxWarnings is how many references to objects that do not exist a write
// is warned about by name.
const maxWarnings = 10

// unresolved returns the references of added that name no object, as
// missing says of each, less those whose object was found under another
// export of the same group and resource: kcp binds no two exports of one
// resource in a workspace (a binding whose resources conflict with another
// is not bound), so there the rule of the other export does not apply, and
// nothing is missing.
func unresolved(added []reference, missing func(i int) bool) []reference {
	some := false
	for i := range added {
		some = some || missing(i)
	}
	switch {
	case !some:
		return nil
	case len(added) == 1:
		return added
	}
	found := map[object]bool{}
	for i, r := range added {
		if !missing(i) {
			found[r.object()] = true
		}
	}
	var out []reference
	for i, r := range added {
		if missing(i) && !found[r.object()] {
			out = append(out, r)
		}
	}
	return out
}

// missingWarnings are the warnings about the references missing of the
// dependent kind named name in namespace to objects that do not exist: one
// for each of the first maxWarnings, and how many more. grace is the
// audit's grace period (0: unknown).
func missingWarnings(kind, name, namespace string, missing []reference, grace time.Duration) []string {
	// One object of a resource missing under two exports (two providers'
	// rules on one field) is one warning.
	if len(missing) > 1 {
		seen := map[object]bool{}
		var once []reference
		for _, r := range missing {
			if !seen[r.object()] {
				seen[r.object()] = true
				once = append(once, r)
			}
		}
		missing = once
	}
	var warnings []string
	for _, r := range missing[:min(len(missing), maxWarnings)] {
		msg := fmt.Sprintf("%s %q references %s %s, which does not exist; the reference is allowed", kind, name, r.target.Resource.Resource, r.describe(namespace))
		if grace > 0 {
			msg += fmt.Sprintf(", and reported as dangling if it does not exist within %s", grace)
		}
		warnings = append(warnings, msg)
	}
	if len(missing) > maxWarnings {
		warnings = append(warnings, fmt.Sprintf("%s %q references %d more objects that do not exist", kind, name, len(missing)-maxWarnings))
	}
	return warnings
}

// maxProblems is how many refused references a denial names; the rest are
// counted.
const maxProblems = 10

// denied is the denial of a write that adds the references of problems
// (one sentence each).
func denied(problems []string) admission.Response {
	msg := strings.Join(problems[:min(len(problems), maxProblems)], "; ")
	if n := len(problems) - maxProblems; n > 0 {
		msg += fmt.Sprintf("; and %d more", n)
	}
	resp := admission.Denied(msg)
	resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionDenied}
	return resp
}

// deferredProblem is the sentence that refuses the reference r of the
// dependent kind named name in namespace to an object whose deletion is
// deferred.
func deferredProblem(kind, name string, r reference, namespace string) string {
	return fmt.Sprintf("%s %q cannot reference %s %s: its deletion is deferred until nothing references it (remove its label %s to cancel)",
		kind, name, r.target.Resource.Resource, r.describe(namespace), depv1alpha1.LabelDeletionRequested)
}
