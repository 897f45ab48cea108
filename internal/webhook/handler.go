package webhook

import (
	"context"
	"errors"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Handler routes the admission requests of kcp by endpoint (see
// EndpointFrom) and operation: the labels endpoint to the LabelMutator
// (package references), the records endpoint to the RecordGuard, the
// admitted endpoint to the LedgerGuard and the skip-protection endpoint to
// the SkipGuard (package guard), and otherwise DELETE to the deletion
// Validator (package deletion), CREATE and UPDATE to the
// ReferenceValidator (package references); anything else is allowed.
type Handler struct {
	// Deletion judges DELETE requests.
	Deletion admission.Handler
	// References judges CREATE and UPDATE requests of dependents.
	References admission.Handler
	// Records guards the webhook's records on protected objects.
	Records admission.Handler
	// Labels labels dependents with what they reference.
	Labels admission.Handler
	// Admitted keeps the ledgers of admitted references on protected
	// objects as the webhook wrote them.
	Admitted admission.Handler
	// SkipProtection records who set skip-protection on protected
	// objects, if that user may delete them, and keeps the record.
	SkipProtection admission.Handler
}

// Handle implements admission.Handler.
func (h Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	switch EndpointFrom(ctx) {
	case EndpointLabels:
		return h.Labels.Handle(ctx, req)
	case EndpointRecords:
		return h.Records.Handle(ctx, req)
	case EndpointAdmitted:
		return h.Admitted.Handle(ctx, req)
	case EndpointSkipProtection:
		return h.SkipProtection.Handle(ctx, req)
	}
	switch req.Operation {
	case admissionv1.Delete:
		return h.Deletion.Handle(ctx, req)
	case admissionv1.Create, admissionv1.Update:
		return h.References.Handle(ctx, req)
	default:
		return admission.Allowed("")
	}
}

// wellFormed refuses, with code 400, requests without what every request
// from an API server has, before they reach the handler.
type wellFormed struct {
	admission.Handler
}

// Handle implements admission.Handler.
func (h wellFormed) Handle(ctx context.Context, req admission.Request) admission.Response {
	switch {
	case req.UID == "":
		return admission.Errored(http.StatusBadRequest, errors.New("malformed AdmissionReview: request.uid is empty"))
	case req.Operation == "":
		return admission.Errored(http.StatusBadRequest, errors.New("malformed AdmissionReview: request.operation is empty"))
	case req.Resource.Resource == "":
		return admission.Errored(http.StatusBadRequest, errors.New("malformed AdmissionReview: request.resource is missing"))
	}
	return h.Handler.Handle(ctx, req)
}
