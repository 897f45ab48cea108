package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Handler routes the admission requests of kcp by endpoint (see
// EndpointFrom) and operation: the labels endpoint to the LabelMutator, the
// records endpoint to the RecordGuard, and otherwise DELETE to the
// DeletionValidator, CREATE and UPDATE to the ReferenceValidator; anything
// else is allowed.
type Handler struct {
	// Deletion judges DELETE requests.
	Deletion admission.Handler
	// References judges CREATE and UPDATE requests of dependents.
	References admission.Handler
	// Records guards the webhook's records on protected objects.
	Records admission.Handler
	// Labels labels dependents with what they reference.
	Labels admission.Handler
}

// Handle implements admission.Handler.
func (h Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	switch EndpointFrom(ctx) {
	case EndpointLabels:
		return h.Labels.Handle(ctx, req)
	case EndpointRecords:
		return h.Records.Handle(ctx, req)
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

// subject is the object a request is about, with the workspaces of the
// request.
type subject struct {
	kcp.Meta
	// provider is the provider workspace whose webhook configuration kcp
	// called.
	provider logicalcluster.Name
}

// readSubject decodes the metadata of raw, the request's object or
// oldObject (named by field), and finds the workspaces of the request: the
// consumer's from the object's kcp.io/cluster annotation, which kcp sets,
// and the provider's from the request URL. A malformed request gets the
// response to answer.
func readSubject(ctx context.Context, raw []byte, field string) (*subject, *admission.Response) {
	fail := func(err error) (*subject, *admission.Response) {
		resp := admission.Errored(http.StatusBadRequest, err)
		return nil, &resp
	}
	if len(raw) == 0 {
		return fail(fmt.Errorf("the admission request has no %s", field))
	}
	if !json.Valid(raw) {
		return fail(fmt.Errorf("failed to decode %s: not valid JSON", field))
	}
	m, err := kcp.ReadMeta(raw)
	if err != nil {
		return fail(fmt.Errorf("failed to decode %s: %w", field, err))
	}
	s := &subject{Meta: m}
	if s.Cluster.Empty() {
		return fail(fmt.Errorf("%s has no %s annotation; is the webhook called by kcp?", field, logicalcluster.AnnotationKey))
	}
	if !s.Cluster.IsValid() {
		return fail(fmt.Errorf("%s's %s annotation %q is not a logical cluster name", field, logicalcluster.AnnotationKey, s.Cluster))
	}
	var ok bool
	if s.provider, ok = ProviderFrom(ctx); !ok {
		return fail(errors.New("the request URL names no provider workspace; the webhook configuration is not the one the dependency-controller installs"))
	}
	return s, nil
}

// notLoaded is the answer while the rule registry is not loaded.
func notLoaded() admission.Response {
	return unavailable("the dependency webhook is starting and has not loaded all DependencyRules yet; retry in a few seconds")
}

// unavailable denies with 503, telling the client to retry.
func unavailable(msg string) admission.Response {
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusServiceUnavailable,
			Reason:  metav1.StatusReasonServiceUnavailable,
			Message: msg,
		},
	}}
}
