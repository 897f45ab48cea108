package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"
)

// maxReviewSize bounds the request body, as controller-runtime does: an
// AdmissionReview for a DELETE carries one object, which the API server
// limits to a few MB.
const maxReviewSize = 7 << 20

// readTimeout bounds the time a caller has to send the body of a request.
// controller-runtime's server bounds the headers (32s) and idle connections,
// but not the body: without this, a caller could hold a connection open
// forever by sending the body slowly.
const readTimeout = 10 * time.Second

// providerKey is the context key of the provider workspace of a request.
type providerKey struct{}

// ProviderFrom returns the logical cluster of the provider workspace whose
// webhook configuration kcp called, which the request URL names.
func ProviderFrom(ctx context.Context) (logicalcluster.Name, bool) {
	cluster, ok := ctx.Value(providerKey{}).(logicalcluster.Name)
	return cluster, ok
}

// WithProvider returns ctx with the provider workspace of a request.
func WithProvider(ctx context.Context, cluster logicalcluster.Name) context.Context {
	return context.WithValue(ctx, providerKey{}, cluster)
}

// NewAdmissionHandler serves handler as a validating admission webhook at
// <path>/<logical cluster>, where the logical cluster is the provider
// workspace whose webhook configuration kcp called (the controller installs
// every configuration with the URL of its workspace). The handler finds it
// with ProviderFrom.
//
// controller-runtime's admission.Webhook runs the handler: it recovers
// panics into an error response, puts a request logger into the context and
// completes the response (UID, patch). What it does not do is refuse a
// malformed request at the HTTP level: it answers HTTP 200 with an errored
// review. This handler answers those with an HTTP error and a plain text
// message instead, so that callers and proxies see the request as refused,
// and the handler is only called for well-formed requests: 404 for a URL
// that names no valid logical cluster, 405 for a method other than POST, 413
// for a body over 7 MiB, 400 for a body that is not an AdmissionReview
// (admission.k8s.io/v1 or v1beta1) with a request that has a uid, an
// operation and a resource. The body is decoded once.
func NewAdmissionHandler(path string, handler admission.Handler) http.Handler {
	wh := &admission.Webhook{Handler: handler, RecoverPanic: ptr.To(true)}
	prefix := strings.TrimSuffix(path, "/") + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		provider := logicalcluster.Name(strings.TrimPrefix(r.URL.Path, prefix))
		if !strings.HasPrefix(r.URL.Path, prefix) || !provider.IsValid() {
			http.Error(w, fmt.Sprintf("no webhook at %s: the path must be %s<logical cluster of the provider workspace>", r.URL.Path, prefix), http.StatusNotFound)
			return
		}
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(readTimeout)) // not supported by test recorders
		review, status, err := readReview(w, r)
		if err != nil {
			http.Error(w, err.Error(), status)
			return
		}
		resp := wh.Handle(WithProvider(r.Context(), provider), admission.Request{AdmissionRequest: *review.Request})
		review.Request, review.Response = nil, &resp.AdmissionResponse
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	})
}

// readReview reads and decodes the AdmissionReview of a request, returning
// the HTTP status to answer with if it is malformed.
func readReview(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed; admission reviews are POSTed", r.Method)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, http.StatusBadRequest, fmt.Errorf("content type %q not supported; expected application/json", r.Header.Get("Content-Type"))
	}
	if r.Body == nil {
		return nil, http.StatusBadRequest, errors.New("request body is empty")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReviewSize))
	if err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds %d bytes", maxReviewSize)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("failed to read the request body: %w", err)
	}
	// admission.k8s.io/v1 and v1beta1 reviews have the same fields; the
	// answer carries the version of the request.
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	switch {
	case review.Kind != "AdmissionReview":
		return nil, http.StatusBadRequest, fmt.Errorf("malformed AdmissionReview: kind is %q", review.Kind)
	case review.APIVersion != admissionv1.SchemeGroupVersion.String() && review.APIVersion != admissionv1beta1.SchemeGroupVersion.String():
		return nil, http.StatusBadRequest, fmt.Errorf("malformed AdmissionReview: apiVersion %q not supported", review.APIVersion)
	case review.Request == nil:
		return nil, http.StatusBadRequest, errors.New("malformed AdmissionReview: no request")
	case review.Request.UID == "":
		return nil, http.StatusBadRequest, errors.New("malformed AdmissionReview: request.uid is empty")
	case review.Request.Operation == "":
		return nil, http.StatusBadRequest, errors.New("malformed AdmissionReview: request.operation is empty")
	case review.Request.Resource.Resource == "":
		return nil, http.StatusBadRequest, errors.New("malformed AdmissionReview: request.resource is missing")
	}
	return review, http.StatusOK, nil
}

// Server is the part of a manager that serves webhooks and health checks;
// a multicluster manager is one.
type Server interface {
	GetWebhookServer() ctrlwebhook.Server
	AddHealthzCheck(name string, check healthz.Checker) error
	AddReadyzCheck(name string, check healthz.Checker) error
}

// Serve serves handler at path/<logical cluster> (see NewAdmissionHandler)
// on the server's webhook server, and adds the webhook server's started check
// to the liveness and readiness checks.
func Serve(srv Server, path string, handler admission.Handler) error {
	srv.GetWebhookServer().Register(strings.TrimSuffix(path, "/")+"/", NewAdmissionHandler(path, handler))
	started := srv.GetWebhookServer().StartedChecker()
	if err := srv.AddHealthzCheck("webhook-server", started); err != nil {
		return err
	}
	return srv.AddReadyzCheck("webhook-server", started)
}
