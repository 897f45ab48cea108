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
	key := depv1alpha1.AnnotationProbeAnswer
	if _, typ, _, err := jsonparser.Get(req.Object.Raw, "metadata", "annotations"); err == nil && typ == jsonparser.Object {
		return jsonpatch.NewOperation("add", "/metadata/annotations/"+jsonpointer.Escape(key), answer), true
	}
	return jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{key: answer}), true
}
