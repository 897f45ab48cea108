package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/objects"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Outcomes of the SkipGuard, the values of the outcome label of
// dependency_webhook_record_writes_total (with the RecordGuard's and the
// LedgerGuard's).
const (
	// SkipEffective: a user who may delete the object set skip-protection;
	// who is recorded.
	SkipEffective = "skip-protection-effective"
	// SkipNoEffect: a user who may not delete the object set
	// skip-protection, or kcp could not be asked; nothing is recorded, and
	// the annotation has no effect.
	SkipNoEffect = "skip-protection-no-effect"
	// SkipRecordKept: a write that set no skip-protection set, changed or
	// removed the record of who set it, and the stored one was kept.
	SkipRecordKept = "skip-protection-record-kept"
)

// Audit annotation keys of the SkipGuard's answer, besides
// webhook.AuditDecision ("effective" or "no-effect"). kcp prefixes them
// with the webhook's name.
const (
	// AuditSkipSetBy names the user who set skip-protection.
	AuditSkipSetBy = "set-by"
	// AuditSkipReason says why the setting has no effect.
	AuditSkipReason = "reason"
)

// Decisions of the SkipGuard, the values of its webhook.AuditDecision.
const (
	decisionEffective = "effective"
	decisionNoEffect  = "no-effect"
)

// warrantExtra is the key of the user's extra in which kcp's APIExport
// virtual workspace passes, on every write through it, a warrant of
// administrator rights in the workspace written to; the virtual workspace
// decided the write by the provider's grant of that verb on its APIExport's
// content, not of delete. A review asks about the user without it.
const warrantExtra = "authorization.kcp.io/warrant"

// Protections finds the rules that protect a resource of a provider;
// *registry.Registry implements it.
type Protections interface {
	Find(target registry.Target) []registry.Entry
}

// AccessReviewer asks kcp whether a user may do something in a workspace;
// *objects.Client implements it.
type AccessReviewer interface {
	// ReviewAccess answers a SubjectAccessReview in cluster, through the
	// virtual workspace of src; an error wraps objects.ErrNoAccessReview
	// when kcp refuses to answer it.
	ReviewAccess(ctx context.Context, src index.Source, cluster logicalcluster.Name, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
}

// SkipGuard is the mutating admission.Handler that kcp calls for CREATE
// and UPDATE of protected objects that set the skip-protection annotation
// (api/v1alpha1.AnnotationSkipProtection) to "true", or that carry a record
// of who set it (api/v1alpha1.AnnotationSkipProtectionSetBy) other than the
// stored one. The annotation bypasses the protection only if someone who
// may delete the object set it: on a write that sets it, the guard asks kcp
// with a SubjectAccessReview in the object's workspace whether the user
// (with their groups, extra and UID) may delete the object, and records
// the user if so; otherwise it records nobody (removing a record an
// earlier setting left) and warns that the annotation has no effect. Every
// other write keeps the stored record, whatever it says: only the guard
// writes it. The DELETE validator honours skip-protection only with a
// record, and names its user in the audit log.
//
// An UPDATE that keeps the annotation "true" (a GitOps tool re-applying its
// manifest) is no new setting and does not reach the guard, nor does
// removing it (the configuration's match condition): the record of the
// setting stays, and means nothing without the annotation.
type SkipGuard struct {
	rules     Protections
	readiness webhook.Readiness
	reviewer  AccessReviewer
	metrics   *webhook.Metrics
	now       func() time.Time
}

// NewSkipGuard returns a guard that finds the protected resources in
// rules, waits until readiness reports them loaded, and asks reviewer.
func NewSkipGuard(rules Protections, readiness webhook.Readiness, reviewer AccessReviewer, metrics *webhook.Metrics) *SkipGuard {
	return &SkipGuard{rules: rules, readiness: readiness, reviewer: reviewer, metrics: metrics, now: time.Now}
}

// Handle implements admission.Handler.
func (g *SkipGuard) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp, outcome := g.handle(ctx, req)
	if outcome != "" {
		g.metrics.RecordWrite(outcome)
	}
	return resp
}

func (g *SkipGuard) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update || req.SubResource != "" {
		return admission.Allowed(""), ""
	}
	const skipKey, recordKey = depv1alpha1.AnnotationSkipProtection, depv1alpha1.AnnotationSkipProtectionSetBy
	var obj, old metaAnnotations
	var err error
	if obj, err = readAnnotations(req.Object.Raw, skipKey, recordKey); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to read the object's annotations: %w", err)), ""
	}
	if req.Operation == admissionv1.Update {
		if old, err = readAnnotations(req.OldObject.Raw, skipKey, recordKey); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to read the old object's annotations: %w", err)), ""
		}
	}
	if obj.value(skipKey) != "true" || old.value(skipKey) == "true" {
		// No new setting: the stored record stays (a CREATE gets none).
		stored, was := old.get(recordKey)
		value, set := obj.get(recordKey)
		if set == was && value == stored {
			return admission.Allowed(""), ""
		}
		resp := admission.Patched("", annotationPatch(req.Object.Raw, recordKey, stored, was, set))
		resp.Warnings = []string{fmt.Sprintf("the annotation %s is managed by the dependency webhook, which records there who set %s; the stored value was kept (drop it from the manifest)", recordKey, skipKey)}
		return resp, SkipRecordKept
	}
	return g.setting(ctx, req, obj)
}

// setting answers a write that sets skip-protection: it records the user
// if kcp says they may delete the object, and otherwise none.
func (g *SkipGuard) setting(ctx context.Context, req admission.Request, obj metaAnnotations) (admission.Response, string) {
	const skipKey, recordKey = depv1alpha1.AnnotationSkipProtection, depv1alpha1.AnnotationSkipProtectionSetBy
	if !g.readiness.Loaded() {
		return webhook.NotLoaded(), ""
	}
	subject, errResp := webhook.ReadWriteSubject(ctx, req)
	if errResp != nil {
		return *errResp, ""
	}
	name := subject.Name
	if name == "" {
		name = req.Name
	}
	user := req.UserInfo.Username
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	what := describeObject(gr, subject.Namespace, name)
	recorded, hadRecord := obj.get(recordKey)
	noEffect := func(reason, why string) (admission.Response, string) {
		log.FromContext(ctx).Info("Skip-protection set without effect", "user", user, "reason", reason, "cluster", subject.Cluster)
		resp := admission.Allowed("")
		if hadRecord {
			resp = admission.Patched("", annotationPatch(req.Object.Raw, recordKey, "", false, true))
		}
		resp.Warnings = []string{fmt.Sprintf("the annotation %s=true on %s has no effect: %s; deletion protection stays (only a user who may delete the object can set it)", skipKey, what, why)}
		resp.AuditAnnotations = map[string]string{webhook.AuditDecision: decisionNoEffect, AuditSkipSetBy: user, AuditSkipReason: reason}
		return resp, SkipNoEffect
	}
	entries := g.rules.Find(registry.Target{Cluster: subject.Provider, Resource: gr})
	if len(entries) == 0 {
		return noEffect("not-protected", fmt.Sprintf("no rule protects %s, so the dependency webhook cannot ask whether %s may delete it", gr, user))
	}
	ctx, cancel := webhook.WithBudget(ctx, 0)
	defer cancel()
	status, err := g.reviewer.ReviewAccess(ctx, entries[0].Target, subject.Cluster, reviewSpec(req, gr, subject.Namespace, name))
	switch {
	case err != nil && transient(err):
		log.FromContext(ctx).Error(err, "Cannot ask kcp whether the user who sets skip-protection may delete the object; the write is refused, to be retried")
		return webhook.Unavailable(fmt.Sprintf("could not check whether %s may delete %s, which setting %s requires (%v); retry", user, what, skipKey, err)), ""
	case err != nil:
		log.FromContext(ctx).Error(err, "Cannot ask kcp whether the user who sets skip-protection may delete the object; the setting has no effect")
		return noEffect("no-access-review", fmt.Sprintf("the dependency webhook cannot ask kcp whether %s may delete it (%v)", user, err))
	case !status.Allowed || status.Denied:
		return noEffect("may-not-delete", fmt.Sprintf("%s may not delete it", user))
	}
	record, err := json.Marshal(depv1alpha1.SkipProtectionSetting{User: user, SetAt: metav1.NewTime(g.now().UTC().Truncate(time.Second))})
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("failed to encode the record of who set %s: %w", skipKey, err)), ""
	}
	log.FromContext(ctx).Info("Skip-protection set by a user who may delete the object", "user", user, "cluster", subject.Cluster)
	resp := admission.Patched("", annotationPatch(req.Object.Raw, recordKey, string(record), true, hadRecord))
	if hadRecord && recorded == string(record) {
		resp = admission.Allowed("")
	}
	resp.Warnings = []string{fmt.Sprintf("the annotation %s=true on %s takes effect: it was set by %s, who may delete it, and a DELETE of it by anyone bypasses deletion protection; objects that still reference it may break", skipKey, what, user)}
	resp.AuditAnnotations = map[string]string{webhook.AuditDecision: decisionEffective, AuditSkipSetBy: user}
	return resp, SkipEffective
}

// transient reports whether a review failed for a reason that clears by
// itself (it was retried until the budget ran out): the write is then
// refused, to be retried. Any other failure (a missing claim or grant)
// makes the setting one without effect, which protects as before.
func transient(err error) bool {
	if errors.Is(err, objects.ErrNoAccessReview) {
		return false
	}
	_, retryable := route.RetryCause(err)
	return retryable || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// reviewSpec is the SubjectAccessReview of whether the user of req may
// delete the object of resource gr named name in namespace: the user as kcp
// authenticated them, without the warrant of a write through a virtual
// workspace (see warrantExtra).
func reviewSpec(req admission.Request, gr schema.GroupResource, namespace, name string) authorizationv1.SubjectAccessReviewSpec {
	spec := authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "delete", Group: gr.Group, Version: req.Resource.Version, Resource: gr.Resource, Name: name,
		},
		User: req.UserInfo.Username, Groups: req.UserInfo.Groups, UID: req.UserInfo.UID,
	}
	for k, v := range req.UserInfo.Extra {
		if k == warrantExtra {
			continue
		}
		if spec.Extra == nil {
			spec.Extra = map[string]authorizationv1.ExtraValue{}
		}
		spec.Extra[k] = authorizationv1.ExtraValue(v)
	}
	return spec
}

// describeObject names an object for messages, e.g. vpcs.network.io
// "vpc-a" in namespace "default".
func describeObject(gr schema.GroupResource, namespace, name string) string {
	if namespace == "" {
		return fmt.Sprintf("%s %q", gr, name)
	}
	return fmt.Sprintf("%s %q in namespace %q", gr, name, namespace)
}

// metaAnnotations are some annotations of an object, as read by
// readAnnotations: the value of each key it has.
type metaAnnotations map[string]string

// get returns the annotation key, and whether the object has it.
func (m metaAnnotations) get(key string) (string, bool) {
	v, ok := m[key]
	return v, ok
}

// value returns the annotation key, or "".
func (m metaAnnotations) value(key string) string {
	return m[key]
}

// readAnnotations reads the annotations keys of the object raw; absent or
// null annotations, or keys, are not there.
func readAnnotations(raw []byte, keys ...string) (metaAnnotations, error) {
	m := metaAnnotations{}
	for _, k := range keys {
		v, ok, err := annotation(raw, k)
		if err != nil {
			return nil, err
		}
		if ok {
			m[k] = v
		}
	}
	return m, nil
}
