package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// AuditDecision is the audit annotation key of the decision on a request
// (one of the Decision values). kcp prefixes it with the webhook's name.
const AuditDecision = "decision"

// Decisions on a DELETE request (and, but for DecisionBypassed, on the
// other requests the handlers judge): the values of the decision audit
// annotation and of the outcome label of the metrics.
const (
	// DecisionAllowed: nothing references the object (or it is not
	// protected).
	DecisionAllowed = "allowed"
	// DecisionDenied: objects still reference it.
	DecisionDenied = "denied"
	// DecisionBypassed: the skip-protection annotation allowed it.
	DecisionBypassed = "bypassed"
	// DecisionError: the request was malformed, the webhook was not ready,
	// or the dependents could not be read; the delete is refused.
	DecisionError = "error"
	// DecisionInFlight: a reference to the object may be in flight (a
	// dependent's create or update recorded it on the object and has not
	// been stored yet); the delete is refused, with when to retry.
	DecisionInFlight = "in-flight"
)

// Readiness tells whether the rule registry is complete;
// *rulesync.Readiness implements it.
type Readiness interface {
	// Loaded reports whether every existing rule has been registered.
	Loaded() bool
}

// NotLoaded is the answer while the rule registry is not loaded.
func NotLoaded() admission.Response {
	return Unavailable("the dependency webhook is starting and has not loaded all DependencyRules yet; retry in a few seconds")
}

// Unavailable denies with 503, telling the client to retry.
func Unavailable(msg string) admission.Response {
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

// Misdirected checks that the webhook serves the workspace cluster, which
// binds the export of src: a webhook that reads only some shards refuses,
// with 421, a request for a workspace on another shard (kcp must call the
// webhook of that shard), and with 503 one it cannot tell. It asks serves
// within timeout (see WithBudget), and reports whether the request may go
// on; if not, the response is the answer.
func Misdirected(ctx context.Context, logger logr.Logger, serves func(context.Context, index.Source, logicalcluster.Name) error, src index.Source, cluster logicalcluster.Name, timeout time.Duration) (admission.Response, bool) {
	ctx, cancel := WithBudget(ctx, timeout)
	defer cancel()
	err := serves(ctx, src, cluster)
	switch {
	case err == nil:
		return admission.Response{}, true
	case errors.Is(err, index.ErrNotServed):
		logger.Error(err, "Refused a request for a workspace on another shard; route each shard's requests to its own webhook")
		resp := admission.Errored(http.StatusMisdirectedRequest, fmt.Errorf("this dependency webhook does not answer for this workspace: %w; kcp must call the webhook of the shard that serves it", err))
		resp.AuditAnnotations = map[string]string{AuditDecision: DecisionError}
		return resp, false
	default:
		return Unavailable(fmt.Sprintf("could not tell whether this dependency webhook serves the workspace (%v); retry", err)), false
	}
}
