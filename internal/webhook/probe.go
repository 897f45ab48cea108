package webhook

import (
	"context"

	"github.com/buger/jsonparser"
	"github.com/go-openapi/jsonpointer"
	"gomodules.xyz/jsonpatch/v2"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
)

// Self tells whether a request was sent with the webhook's own
// credentials; *guard.SelfReview implements it.
type Self interface {
	Is(ctx context.Context, user authenticationv1.UserInfo) (bool, error)
}

// Prober answers the webhook's own probes (see package tracking): Self
// tells them apart, Answers signs the answers.
type Prober struct {
	Self    Self
	Answers *tracking.Answers
}

// Answer returns the JSON patch operation that answers the webhook's own
// probe of kind (tracking.KindLabelling or tracking.KindGuard) in req, a
// write of value (a scheme label, a ledger, a cleared label) with which the
// handler did what only it does (for the labelling webhook, for scheme):
// the signed answer in the annotation api/v1alpha1.AnnotationProbeAnswer of
// the object the dry run returns. It reports false if req is no such
// probe (not a dry run, not of the webhook's own user, not a probe's
// value) or answers are not signed. A nil *Prober answers nothing.
func (p *Prober) Answer(ctx context.Context, req admission.Request, kind tracking.Kind, value, scheme string) (jsonpatch.JsonPatchOperation, bool) {
	if p == nil || p.Self == nil || req.DryRun == nil || !*req.DryRun || !tracking.IsProbeValue(value) {
		return jsonpatch.JsonPatchOperation{}, false
	}
	answer := p.Answers.Sign(kind, value, scheme)
	if answer == "" {
		return jsonpatch.JsonPatchOperation{}, false
	}
	self, err := p.Self.Is(ctx, req.UserInfo)
	if err != nil {
		// Unanswered, the probe shows the webhook not in effect for now;
		// the tracker probes again within seconds.
		log.FromContext(ctx).V(1).Info("Cannot tell whether a probe is the webhook's own", "error", err.Error())
		return jsonpatch.JsonPatchOperation{}, false
	}
	if !self {
		return jsonpatch.JsonPatchOperation{}, false
	}
	return MetadataPatch(req.Object.Raw, "annotations", depv1alpha1.AnnotationProbeAnswer, answer, true, false), true
}

// MetadataPatch returns the JSON patch operation that gives the object
// raw, which has (set) or lacks the key of its metadata field (labels or
// annotations), that key with value if want, or none.
func MetadataPatch(raw []byte, field, key, value string, want, set bool) jsonpatch.JsonPatchOperation {
	path := "/metadata/" + field + "/" + jsonpointer.Escape(key)
	switch {
	case !want:
		return jsonpatch.NewOperation("remove", path, nil)
	case set:
		return jsonpatch.NewOperation("replace", path, value)
	case hasMap(raw, field):
		return jsonpatch.NewOperation("add", path, value)
	default:
		return jsonpatch.NewOperation("add", "/metadata/"+field, map[string]string{key: value})
	}
}

// hasMap reports whether the object raw has its metadata field (labels or
// annotations) as an object (not absent, not null).
func hasMap(raw []byte, field string) bool {
	_, typ, _, err := jsonparser.Get(raw, "metadata", field)
	return err == nil && typ == jsonparser.Object
}
