package references

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
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
// A reference the request adds to an object that does not exist is
// allowed with an admission warning that names it (kcp shows it to the
// client): the audit reports it as dangling if it still does not exist
// after the grace period (see WithGracePeriod and package audit).
//
// A reference to an object whose deletion is deferred (it carries a record
// that verifies, see package records) is refused too: otherwise a stack
// whose deletion is deferred could gain dependents forever. A record that
// does not verify refuses nothing.
type ReferenceValidator struct {
	rules     GuardFinder
	readiness webhook.Readiness
	targets   Targets
	records   Verifier
	timeout   time.Duration
	metrics   *webhook.Metrics
	// grace is the audit's grace period, for the warnings; 0 if unknown.
	grace time.Duration
}

// ValidatorOption configures a ReferenceValidator.
type ValidatorOption func(*ReferenceValidator)

// WithGracePeriod has the warning about a reference to an object that does
// not exist say after how long the audit reports it.
func WithGracePeriod(d time.Duration) ValidatorOption {
	return func(v *ReferenceValidator) { v.grace = d }
}

// NewReferenceValidator returns a validator that finds rules in rules,
// waits until readiness reports them loaded, reads targets through
// targets, within timeout per request (none if 0; the time kcp waits for
// the answer bounds it too, see webhook.WithBudget), verifies records of
// deferred deletions with records (none are honoured if nil), and records
// checks in metrics (if not nil).
func NewReferenceValidator(rules GuardFinder, readiness webhook.Readiness, targets Targets, records Verifier, timeout time.Duration, metrics *webhook.Metrics, opts ...ValidatorOption) *ReferenceValidator {
	v := &ReferenceValidator{rules: rules, readiness: readiness, targets: targets, records: records, timeout: timeout, metrics: metrics}
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

// reference is a target a request adds a reference to.
type reference struct {
	target    index.Source
	namespace string
	name      string
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
	obj, errResp := webhook.ReadSubject(ctx, req.Object.Raw, "object")
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
	added, err := addedReferences(v.targets, req, obj, guards)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), webhook.DecisionError
	}
	if len(added) == 0 {
		return admission.Allowed(""), webhook.DecisionAllowed
	}
	// A webhook that reads only some shards checks nothing for a workspace
	// on another shard (its reads there would find nothing).
	if resp, ok := webhook.Misdirected(ctx, log.FromContext(ctx), v.targets.Serves, guards[0].Dependent, obj.Cluster, v.timeout); !ok {
		return resp, webhook.DecisionError
	}
	return v.checkTargets(ctx, req.Kind.Kind, obj, added)
}

// addedReferences returns the references that the request's object has
// and its old object (of an UPDATE) had not, each target once, under the
// rules of guards whose targets can be read (as targets knows them).
func addedReferences(targets Targets, req admission.Request, obj *webhook.Subject, guards []registry.Guard) ([]reference, error) {
	var added []reference
	for _, g := range guards {
		for _, ref := range g.References {
			if ref.Target.Export.Name == "" {
				continue // the protected workspace does not bind the dependencies APIExport
			}
			state := targets.State(ref.Target)
			if state.Phase != index.PhaseSyncing && state.Phase != index.PhaseSynced {
				continue // the rule reports why its targets cannot be read
			}
			refs, err := referencesOf(ref, state.Namespaced, obj.Namespace, req.Object.Raw, "object")
			if err != nil {
				return nil, err
			}
			var before []reference
			if req.Operation == admissionv1.Update {
				if before, err = referencesOf(ref, state.Namespaced, obj.Namespace, req.OldObject.Raw, "old object"); err != nil {
					return nil, err
				}
			}
			for _, r := range refs {
				if r.name != "" && !slices.Contains(before, r) && !slices.Contains(added, r) {
					added = append(added, r)
				}
			}
		}
	}
	return added, nil
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

// checkTargets reads each added reference's target and denies if one is
// being deleted, or its deletion is deferred (a record that verifies); it
// allows a reference to an object that does not exist with a warning.
func (v *ReferenceValidator) checkTargets(ctx context.Context, kind string, obj *webhook.Subject, added []reference) (admission.Response, string) {
	name := obj.Name
	if name == "" {
		name = obj.GenerateName + "<generated>"
	}
	ctx, cancel := webhook.WithBudget(ctx, v.timeout)
	defer cancel()
	var problems, warnings []string
	for _, r := range added {
		found, err := v.targets.Lookup(ctx, r.target, obj.Cluster, r.namespace, r.name)
		if err != nil {
			log.FromContext(ctx).Error(err, "Failed to read a referenced object", "cluster", obj.Cluster, "target", r.target, "name", r.name)
			return webhook.Unavailable(fmt.Sprintf("could not check whether %s %q may reference %s %s (reading it failed: %v); retry",
				kind, name, r.target.Resource.Resource, r.describe(obj.Namespace), err)), webhook.DecisionError
		}
		if len(found) == 0 {
			warnings = append(warnings, v.missing(kind, name, obj.Namespace, r))
		}
		for _, o := range found {
			if o.Terminating {
				problems = append(problems, fmt.Sprintf("%s %q cannot reference %s %s: it is being deleted", kind, name, r.target.Resource.Resource, r.describe(obj.Namespace)))
				break
			}
			if o.DeletionRequested && v.records != nil && v.records.Verify(r.target.Resource.GroupResource(), o) == nil {
				// Otherwise a stack whose deletion is deferred could gain
				// new dependents forever.
				problems = append(problems, fmt.Sprintf("%s %q cannot reference %s %s: its deletion is deferred until nothing references it (remove its label %s to cancel)",
					kind, name, r.target.Resource.Resource, r.describe(obj.Namespace), depv1alpha1.LabelDeletionRequested))
				break
			}
		}
	}
	if len(problems) > 0 {
		resp := admission.Denied(strings.Join(problems, "; "))
		resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionDenied}
		return resp, webhook.DecisionDenied
	}
	return admission.Allowed("").WithWarnings(warnings...), webhook.DecisionAllowed
}

// missing is the warning about a reference r, added by dependent name of
// kind in namespace, to an object that does not exist.
func (v *ReferenceValidator) missing(kind, name, namespace string, r reference) string {
	msg := fmt.Sprintf("%s %q references %s %s, which does not exist; the reference is allowed", kind, name, r.target.Resource.Resource, r.describe(namespace))
	if v.grace > 0 {
		msg += fmt.Sprintf(", and reported as dangling if it does not exist within %s", v.grace)
	}
	return msg
}
