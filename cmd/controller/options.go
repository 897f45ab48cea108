package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/pflag"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// options are the command line options of the controller.
type options struct {
	// APIExportName is the name of the APIExport serving DependencyRules in
	// the workspace of the kubeconfig.
	APIExportName string
	// WebhookURL is the URL kcp calls for DELETE admission reviews.
	WebhookURL string
	// WebhookCABundleFile is a PEM file with the CA that signed the
	// webhook's serving certificate; it is re-read when it changes.
	WebhookCABundleFile string
	// WebhookTimeoutSeconds is how long kcp waits for the webhook.
	WebhookTimeoutSeconds int32
	// FailurePolicy is what kcp does when the webhook cannot be called.
	FailurePolicy string
	// MetricsBindAddress is where Prometheus metrics are served; 0 disables.
	MetricsBindAddress string
	// HealthProbeBindAddress is where /healthz and /readyz are served.
	HealthProbeBindAddress string
	// LeaderElect enables leader election, so that only one replica writes.
	LeaderElect bool
	// LeaderElectionNamespace is the namespace of the lease, in the
	// workspace of the kubeconfig.
	LeaderElectionNamespace string
	// ResyncPeriod is how often everything is recomputed without an event.
	ResyncPeriod time.Duration
	// CABundleCheckInterval is how often the CA bundle file is re-read.
	CABundleCheckInterval time.Duration
}

func newOptions() *options {
	return &options{
		APIExportName:           "dependencies.opendefense.cloud",
		WebhookTimeoutSeconds:   5,
		FailurePolicy:           string(admissionregistrationv1.Fail),
		MetricsBindAddress:      ":8080",
		HealthProbeBindAddress:  ":8081",
		LeaderElect:             true,
		LeaderElectionNamespace: "default",
		ResyncPeriod:            10 * time.Minute,
		CABundleCheckInterval:   10 * time.Second,
	}
}

func (o *options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.APIExportName, "api-export-name", o.APIExportName, "Name of the APIExport (and its APIExportEndpointSlice) that serves DependencyRules, in the workspace the kubeconfig points at.")
	fs.StringVar(&o.WebhookURL, "webhook-url", o.WebhookURL, "HTTPS URL of the webhook's validating endpoint, as kcp reaches it, e.g. https://dependency-webhook.example.com:9443/validate.")
	fs.StringVar(&o.WebhookCABundleFile, "webhook-ca-bundle", o.WebhookCABundleFile, "PEM file with the CA bundle that verifies the webhook's serving certificate; re-read when it changes. Empty: kcp uses its system roots.")
	fs.Int32Var(&o.WebhookTimeoutSeconds, "webhook-timeout-seconds", o.WebhookTimeoutSeconds, "Seconds kcp waits for the webhook before applying the failure policy (1-30).")
	fs.StringVar(&o.FailurePolicy, "failure-policy", o.FailurePolicy, "What kcp does when the webhook cannot be called: Fail (deletes of protected objects are refused) or Ignore (they are allowed).")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader among replicas; only the leader writes. The lease lives in the workspace of the kubeconfig.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election lease.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "How often all rules and webhook configurations are reconciled without an event.")
	fs.DurationVar(&o.CABundleCheckInterval, "webhook-ca-bundle-check-interval", o.CABundleCheckInterval, "How often the CA bundle file is checked for changes.")
}

func (o *options) Validate() error {
	var errs []error
	if o.APIExportName == "" {
		errs = append(errs, errors.New("--api-export-name must not be empty"))
	}
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
	switch admissionregistrationv1.FailurePolicyType(o.FailurePolicy) {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		errs = append(errs, fmt.Errorf("--failure-policy must be Fail or Ignore, got %q", o.FailurePolicy))
	}
	if o.ResyncPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--resync-period must be at least 1s, got %s", o.ResyncPeriod))
	}
	if o.CABundleCheckInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--webhook-ca-bundle-check-interval must be at least 100ms, got %s", o.CABundleCheckInterval))
	}
	return errors.Join(errs...)
}
