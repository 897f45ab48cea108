package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-openapi/jsonpointer"
	"gomodules.xyz/jsonpatch/v2"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/buger/jsonparser"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Outcomes of the LedgerGuard, the values of the outcome label of
// dependency_webhook_record_writes_total (with the RecordGuard's).
const (
	// LedgerKept: a write by anyone but the webhook set, changed or
	// removed the ledger of admitted references, and the stored one was
	// kept.
	LedgerKept = "ledger-kept"
	// LedgerWritten: the webhook wrote its own ledger.
	LedgerWritten = "ledger-written"
)

// LedgerGuard is the mutating admission.Handler that kcp calls for CREATE
// and UPDATE of protected objects that set, change or remove the ledger of
// admitted references (api/v1alpha1.AnnotationAdmittedReferences, see
// package inflight): whatever such a write says, the ledger stored before
// is kept (a CREATE gets none), except when the webhook itself writes a
// ledger. So `kubectl replace` and GitOps tools that re-apply an exported
// object keep working, and nobody but the webhook can remove a reference in
// flight or back-date the ledger; a value written anyway could only make
// decisions slower, since the DELETE reads it as a stored state.
type LedgerGuard struct {
	self    Self
	metrics *webhook.Metrics
}

// NewLedgerGuard returns a guard that lets self write ledgers.
func NewLedgerGuard(self Self, metrics *webhook.Metrics) *LedgerGuard {
	return &LedgerGuard{self: self, metrics: metrics}
}

// Handle implements admission.Handler.
func (g *LedgerGuard) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp, outcome := g.handle(ctx, req)
	if outcome != "" {
		g.metrics.RecordWrite(outcome)
	}
	return resp
}

func (g *LedgerGuard) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update || req.SubResource != "" {
		return admission.Allowed(""), ""
	}
	key := depv1alpha1.AnnotationAdmittedReferences
	value, set, err := annotation(req.Object.Raw, key)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to read the object's annotations: %w", err)), ""
	}
	var stored string
	var was bool
	if req.Operation == admissionv1.Update {
		if stored, was, err = annotation(req.OldObject.Raw, key); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to read the old object's annotations: %w", err)), ""
		}
	}
	// A CREATE does not keep the label that says the object is cleared
	// (from an exported object re-applied): the new object is not.
	var ops []jsonpatch.JsonPatchOperation
	var warnings []string
	if req.Operation == admissionv1.Create {
		if _, labelled := inflight.ClearedLabel(req.Object.Raw); labelled {
			ops = append(ops, jsonpatch.NewOperation("remove", "/metadata/labels/"+jsonpointer.Escape(depv1alpha1.LabelCleared), nil))
			warnings = append(warnings, fmt.Sprintf("the label %s is managed by the dependency webhook and was removed (drop it from the manifest)", depv1alpha1.LabelCleared))
		}
	}
	if set == was && value == stored {
		if len(ops) > 0 {
			resp := admission.Patched("", ops...)
			resp.Warnings = warnings
			return resp, ""
		}
		return admission.Allowed(""), ""
	}
	if set && req.Operation == admissionv1.Update {
		if _, err := inflight.Parse(value); err == nil && strings.HasPrefix(value, "v1 ") {
			ctx, cancel := webhook.WithBudget(ctx, 0)
			defer cancel()
			self, err := g.self.Is(ctx, req.UserInfo)
			if err != nil {
				log.FromContext(ctx).Error(err, "Cannot tell whether a write of a ledger is the webhook's own")
				return webhook.Unavailable(fmt.Sprintf("could not check who may write the annotation %s (%v); retry", key, err)), ""
			}
			if self {
				return admission.Allowed(""), LedgerWritten
			}
		}
	}
	resp := admission.Patched("", append(ops, annotationPatch(req.Object.Raw, key, stored, was, set))...)
	resp.Warnings = append(warnings, fmt.Sprintf("the annotation %s is managed by the dependency webhook, which records there the references to this object it admitted; the stored value was kept (drop it from the manifest)", key))
	return resp, LedgerKept
}

// annotation returns the annotation key of the object raw, and whether it
// has it.
func annotation(raw []byte, key string) (string, bool, error) {
	v, err := jsonparser.GetString(raw, "metadata", "annotations", key)
	switch {
	case errors.Is(err, jsonparser.KeyPathNotFoundError):
		return "", false, nil
	case err != nil:
		// A null value, or annotations that are not an object.
		if _, typ, _, e := jsonparser.Get(raw, "metadata", "annotations", key); e == nil && typ == jsonparser.Null {
			return "", false, nil
		}
		return "", false, err
	}
	return v, true, nil
}

// annotationPatch returns the JSON patch operation that gives the object
// raw, which has (set) or lacks the annotation key, the annotation key with
// value if want, or none.
func annotationPatch(raw []byte, key, value string, want, set bool) jsonpatch.JsonPatchOperation {
	path := "/metadata/annotations/" + jsonpointer.Escape(key)
	switch {
	case !want:
		return jsonpatch.NewOperation("remove", path, nil)
	case set:
		return jsonpatch.NewOperation("replace", path, value)
	case hasAnnotations(raw):
		return jsonpatch.NewOperation("add", path, value)
	default:
		return jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{key: value})
	}
}

// hasAnnotations reports whether the object raw has an annotations object
// (not absent, not null).
func hasAnnotations(raw []byte) bool {
	_, typ, _, err := jsonparser.Get(raw, "metadata", "annotations")
	return err == nil && typ == jsonparser.Object
}
