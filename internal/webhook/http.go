package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// readTimeout bounds the time a caller has to send the body of a request.
// controller-runtime's server bounds the headers (32s) and idle connections,
// but not the body: without this, a caller could hold a connection open
// forever by sending the body slowly.
const readTimeout = 10 * time.Second

// requestKey is the context key of what the request URL says.
type requestKey struct{}

// fromURL is what the request URL says: the provider workspace, the
// endpoint within it, and the time kcp waits for the answer.
type fromURL struct {
	provider logicalcluster.Name
	endpoint string
	scheme   string
	timeout  time.Duration
}

// The endpoints of a provider workspace, after <path>/<logical cluster>
// (see webhookconfig.EndpointURL): none for the DELETE webhook and the check
// of new references (by operation), EndpointRecords for the guard of the
// webhook's records on protected objects, EndpointAdmitted for the guard of
// the ledgers of admitted references on them, EndpointSkipProtection for
// the guard of skip-protection on them, EndpointLabels for the mutating
// webhook that labels dependents.
const (
	EndpointRecords        = webhookconfig.EndpointRecords
	EndpointAdmitted       = webhookconfig.EndpointAdmitted
	EndpointSkipProtection = webhookconfig.EndpointSkipProtection
	EndpointLabels         = webhookconfig.EndpointLabels
)

// EndpointFrom returns the endpoint of the provider workspace that kcp
// called; empty for the DELETE webhook and the check of new references.
func EndpointFrom(ctx context.Context) string {
	u, _ := ctx.Value(requestKey{}).(fromURL)
	return u.endpoint
}

// SchemeFrom returns the scheme that the labelling webhook kcp called was
// configured for: the last element of its URL (see
// webhookconfig.EndpointURL).
func SchemeFrom(ctx context.Context) string {
	u, _ := ctx.Value(requestKey{}).(fromURL)
	return u.scheme
}

// WithEndpoint returns ctx with the endpoint of a request and, for a
// labelling webhook, the scheme it was configured for.
func WithEndpoint(ctx context.Context, endpoint, scheme string) context.Context {
	u, _ := ctx.Value(requestKey{}).(fromURL)
	u.endpoint, u.scheme = endpoint, scheme
	return context.WithValue(ctx, requestKey{}, u)
}

// ProviderFrom returns the logical cluster of the provider workspace whose
// webhook configuration kcp called, which the request URL names.
func ProviderFrom(ctx context.Context) (logicalcluster.Name, bool) {
	u, ok := ctx.Value(requestKey{}).(fromURL)
	return u.provider, ok && !u.provider.Empty()
}

// WithProvider returns ctx with the provider workspace of a request.
func WithProvider(ctx context.Context, cluster logicalcluster.Name) context.Context {
	u, _ := ctx.Value(requestKey{}).(fromURL)
	u.provider = cluster
	return context.WithValue(ctx, requestKey{}, u)
}

// withCallerTimeout returns ctx with the time the caller waits for the
// answer.
func withCallerTimeout(ctx context.Context, timeout time.Duration) context.Context {
	u, _ := ctx.Value(requestKey{}).(fromURL)
	u.timeout = timeout
	return context.WithValue(ctx, requestKey{}, u)
}

// WithBudget bounds ctx by the time a decision may take: limit (none if 0),
// and less than the caller waits. kcp sends, with every review, how long it
// waits (the webhook configuration's timeoutSeconds, as the timeout
// parameter of the URL); the decision takes at most four fifths of it, so
// that a slow read is answered with a clear "retry" rather than kcp's
// timeout error, whatever the configuration says.
func WithBudget(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	budget := limit
	if u, _ := ctx.Value(requestKey{}).(fromURL); u.timeout > 0 {
		b := max(u.timeout-max(u.timeout/5, 100*time.Millisecond), u.timeout/2)
		if budget <= 0 || b < budget {
			budget = b
		}
	}
	if budget <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, budget)
}

// NewAdmissionHandler serves handler as an admission webhook at
// <path>/<logical cluster>[/<endpoint>], where the logical cluster is the
// provider workspace whose webhook configuration kcp called (the controller
// installs every configuration with the URL of its workspace) and the
// endpoint one of EndpointRecords, EndpointAdmitted, EndpointSkipProtection
// and EndpointLabels. The handler finds
// them with ProviderFrom and EndpointFrom, and the time kcp waits for the
// answer bounds the decision (see WithBudget).
//
// controller-runtime's admission.Webhook serves the request: it decodes the
// review (admission.k8s.io/v1 or v1beta1, at most 7 MiB), answers a
// malformed one with an errored review (code 400, or 413), recovers panics
// into an error response and completes the response. Before it, a URL that
// names no valid logical cluster gets 404 and a method other than POST 405;
// after it, a review whose request has no uid, operation or resource is
// answered with code 400 without reaching handler.
func NewAdmissionHandler(path string, handler admission.Handler) http.Handler {
	prefix := strings.TrimSuffix(path, "/") + "/"
	parse := func(r *http.Request) (cluster logicalcluster.Name, endpoint, scheme string, ok bool) {
		c, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, prefix), "/")
		endpoint, scheme, _ = strings.Cut(rest, "/")
		ok = logicalcluster.Name(c).IsValid() && !strings.Contains(scheme, "/") &&
			(endpoint == "" && scheme == "" || (endpoint == EndpointRecords || endpoint == EndpointAdmitted || endpoint == EndpointSkipProtection) && scheme == "" || endpoint == EndpointLabels)
		return logicalcluster.Name(c), endpoint, scheme, ok
	}
	wh := &admission.Webhook{
		Handler:      wellFormed{handler},
		RecoverPanic: ptr.To(true),
		WithContextFunc: func(ctx context.Context, r *http.Request) context.Context {
			provider, endpoint, scheme, _ := parse(r)
			ctx = WithEndpoint(WithProvider(ctx, provider), endpoint, scheme)
			if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 {
				ctx = withCallerTimeout(ctx, t)
			}
			return ctx
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, _, ok := parse(r); !strings.HasPrefix(r.URL.Path, prefix) || !ok {
			http.Error(w, fmt.Sprintf("no webhook at %s: the path must be %s<logical cluster of the provider workspace>[/%s|/%s|/%s|/%s/<scheme>]", r.URL.Path, prefix, EndpointRecords, EndpointAdmitted, EndpointSkipProtection, EndpointLabels), http.StatusNotFound)
			return
		}
		if r.Method != http.MethodPost {
			http.Error(w, fmt.Sprintf("method %s not allowed; admission reviews are POSTed", r.Method), http.StatusMethodNotAllowed)
			return
		}
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(readTimeout)) // not supported by test recorders
		wh.ServeHTTP(w, r)
	})
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
