package controllerserver

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/opendefensecloud/dependency-controller/internal/command"
)

// Options are the settings of the controller, each bound to a command line
// flag of cmd/controller by AddFlags.
type Options struct {
	// CommonOptions are the settings the webhook has as well: the APIExport
	// serving DependencyRules, the manager's endpoints and leader election,
	// and how often everything is reconciled without an event.
	command.CommonOptions
	// WebhookURL is the HTTPS URL of the webhook's validating endpoint, as
	// kcp reaches it; every configuration calls it with the logical cluster
	// of its workspace appended.
	WebhookURL string
	// WebhookCABundleFile is a PEM file with the CA bundle that verifies the
	// webhook's serving certificate, re-read every CABundleCheckInterval; a
	// change is rolled out to every configuration at once. Empty means none:
	// kcp verifies with its system roots.
	WebhookCABundleFile string
	// CABundleCheckInterval is how often WebhookCABundleFile is re-read.
	CABundleCheckInterval time.Duration
	// WebhookTimeoutSeconds is how long kcp waits for the webhook (1 to 30).
	WebhookTimeoutSeconds int32
	// FailurePolicy is what kcp does when the webhook cannot be called.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// WebhookUser is the user name as which kcp authenticates the webhook
	// (the user config/rbac binds). kcp does not call the guard of records
	// for its writes, which the guard would allow anyway. Empty: the guard
	// reviews them too.
	WebhookUser string
}

// NewOptions returns the defaults of the controller's settings.
func NewOptions() *Options {
	return &Options{
		CommonOptions:         command.NewCommonOptions(10 * time.Minute),
		WebhookTimeoutSeconds: 5,
		FailurePolicy:         admissionregistrationv1.Fail,
		CABundleCheckInterval: 10 * time.Second,
		WebhookUser:           DefaultWebhookUser,
	}
}

// DefaultWebhookUser is the user as which the webhook is deployed: the
// user config/rbac binds and the kcp-operator sample issues a certificate
// for.
const DefaultWebhookUser = "dependency-webhook"

// serviceAccountPrefix begins the user names of service accounts, which
// are the same in every workspace.
const serviceAccountPrefix = "system:serviceaccount:"

// AddFlags registers the options as flags, with their current values as
// defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	fs.StringVar(&o.WebhookURL, "webhook-url", o.WebhookURL, "HTTPS URL of the webhook's validating endpoint, as kcp reaches it, e.g. https://dependency-webhook.example.com:9443/validate.")
	fs.StringVar(&o.WebhookCABundleFile, "webhook-ca-bundle", o.WebhookCABundleFile, "PEM file with the CA bundle that verifies the webhook's serving certificate; re-read when it changes. Empty: kcp uses its system roots.")
	fs.Int32Var(&o.WebhookTimeoutSeconds, "webhook-timeout-seconds", o.WebhookTimeoutSeconds, "Seconds kcp waits for the webhook before applying the failure policy (1-30).")
	fs.StringVar((*string)(&o.FailurePolicy), "failure-policy", string(o.FailurePolicy), "What kcp does when the webhook cannot be called: Fail (deletes of protected objects, and creates and updates of dependents, are refused) or Ignore (they are allowed).")
	fs.DurationVar(&o.CABundleCheckInterval, "webhook-ca-bundle-check-interval", o.CABundleCheckInterval, "How often the CA bundle file is checked for changes.")
	fs.StringVar(&o.WebhookUser, "webhook-user", o.WebhookUser, "User name as which kcp authenticates the webhook: kcp does not call the guard of deletion records for its writes, which the guard would allow anyway. Empty: the guard reviews the webhook's writes too (one more admission call per deferred deletion). Not a service account: its name is the same in every workspace.")
}

// Validate reports every invalid option, naming its flag.
func (o *Options) Validate() error {
	errs := []error{o.CommonOptions.Validate()}
	if o.WebhookURL == "" {
		errs = append(errs, errors.New("--webhook-url is required"))
	} else if u, err := url.Parse(o.WebhookURL); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("--webhook-url %q must be an absolute https:// URL", o.WebhookURL))
	} else if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		errs = append(errs, fmt.Errorf("--webhook-url %q must not contain user info, a query or a fragment", o.WebhookURL))
	}
	if o.WebhookTimeoutSeconds < 1 || o.WebhookTimeoutSeconds > 30 {
		errs = append(errs, fmt.Errorf("--webhook-timeout-seconds must be between 1 and 30, got %d", o.WebhookTimeoutSeconds))
	}
	switch o.FailurePolicy {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		errs = append(errs, fmt.Errorf("--failure-policy must be Fail or Ignore, got %q", o.FailurePolicy))
	}
	if strings.TrimSpace(o.WebhookUser) != o.WebhookUser {
		errs = append(errs, fmt.Errorf("--webhook-user %q must not begin or end with white space", o.WebhookUser))
	} else if strings.HasPrefix(o.WebhookUser, serviceAccountPrefix) {
		errs = append(errs, fmt.Errorf("--webhook-user %q names a service account, whose user name is the same in every workspace: leave it empty, and the guard of records recognizes the webhook by its workspace too", o.WebhookUser))
	}
	if o.CABundleCheckInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--webhook-ca-bundle-check-interval must be at least 100ms, got %s", o.CABundleCheckInterval))
	}
	return errors.Join(errs...)
}
