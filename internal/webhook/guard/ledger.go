package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"gomodules.xyz/jsonpatch/v2"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/buger/jsonparser"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Outcomes of the LedgerGuard, the values of the outcome label of
// dependency_webhook_record_writes_total (with the RecordGuard's).
const (
	// LedgerKept: a write by anyone but the webhook set, changed or
	// removed the ledger of admitted references or the label that says
	// the object is cleared, and the stored value was kept.
	LedgerKept = "ledger-kept"
	// LedgerWritten: the webhook wrote its own ledger, or its label.
	LedgerWritten = "ledger-written"
)

// LedgerGuard is the mutating admission.Handler that kcp calls for CREATE
// and UPDATE of protected objects that set, change or remove the ledger of
// admitted references (api/v1alpha1.AnnotationAdmittedReferences, see
// package inflight) or the label that says the object is cleared
// (api/v1alpha1.LabelCleared): whatever such a write says, the values
// stored before are kept (a CREATE gets neither), except when the webhook
// itself writes a ledger, with the label set to a clearance fingerprint or
// removed. So `kubectl replace` and GitOps tools that re-apply an exported
// object keep working, and nobody but the webhook can remove a reference in
// flight, back-date the ledger, or label an object cleared, which would
// let kcp delete it without calling the DELETE webhook; a ledger written
// anyway could only make decisions slower, since the DELETE reads it as a
// stored state.
//
// It answers the webhook's own probes (see package tracking, KindGuard), a
// dry run of the webhook's user that writes a probe's value as the ledger
// or the label, which it keeps like any other write, with an answer signed
// by answers (see webhook.Prober).
type LedgerGuard struct {
	self    Self
	probes  *webhook.Prober
	metrics *webhook.Metrics
}

// NewLedgerGuard returns a guard that lets self write ledgers, and signs
// its answers to probes with answers.
func NewLedgerGuard(self Self, answers *tracking.Answers, metrics *webhook.Metrics) *LedgerGuard {
	return &LedgerGuard{self: self, probes: &webhook.Prober{Self: self, Answers: answers}, metrics: metrics}
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
	label, labelled := inflight.ClearedLabel(req.Object.Raw)
	// What the object had before: nothing for a CREATE. A CREATE keeps
	// neither a ledger nor the label that says the object is cleared (from
	// an exported object re-applied): the new object is not.
	var stored, storedLabel string
	var was, wasLabelled bool
	if req.Operation == admissionv1.Update {
		if stored, was, err = annotation(req.OldObject.Raw, key); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to read the old object's annotations: %w", err)), ""
		}
		storedLabel, wasLabelled = inflight.ClearedLabel(req.OldObject.Raw)
	}
	ledgerChanged := set != was || value != stored
	labelChanged := labelled != wasLabelled || label != storedLabel
	if !ledgerChanged && !labelChanged {
		return admission.Allowed(""), ""
	}
	// The webhook's own write: a ledger (its probes of the guard write a
	// throwaway value instead), and the label only with a fingerprint or
	// not at all.
	if req.Operation == admissionv1.Update && set && (!labelled || reflabels.IsClearanceFingerprint(label)) {
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
	var ops []jsonpatch.JsonPatchOperation
	var warnings []string
	outcome := ""
	if labelChanged {
		ops = append(ops, webhook.MetadataPatch(req.Object.Raw, "labels", depv1alpha1.LabelCleared, storedLabel, wasLabelled, labelled))
		if req.Operation == admissionv1.Create {
			warnings = append(warnings, fmt.Sprintf("the label %s is managed by the dependency webhook and was removed (drop it from the manifest)", depv1alpha1.LabelCleared))
		} else {
			warnings = append(warnings, fmt.Sprintf("the label %s is managed by the dependency webhook, which sets it on objects it cleared; the stored value was kept (drop it from the manifest)", depv1alpha1.LabelCleared))
			outcome = LedgerKept
		}
	}
	if ledgerChanged {
		ops = append(ops, webhook.MetadataPatch(req.Object.Raw, "annotations", key, stored, was, set))
		warnings = append(warnings, fmt.Sprintf("the annotation %s is managed by the dependency webhook, which records there the references to this object it admitted; the stored value was kept (drop it from the manifest)", key))
		outcome = LedgerKept
	}
	// A probe writes one of them; the other is unchanged.
	probed := label
	if ledgerChanged {
		probed = value
	}
	if op, ok := g.probes.Answer(ctx, req, tracking.KindGuard, probed, ""); ok {
		ops, outcome = append(ops, op), webhook.ResultProbe
	}
	resp := admission.Patched("", ops...)
	resp.Warnings = warnings
	return resp, outcome
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

// annotationPatch is webhook.MetadataPatch of an annotation.
func annotationPatch(raw []byte, key, value string, want, set bool) jsonpatch.JsonPatchOperation {
	return webhook.MetadataPatch(raw, "annotations", key, value, want, set)
}
