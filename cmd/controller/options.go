package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/pflag"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/controllerserver"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
)

// options are the command line options of the controller.
type options struct {
	// CommonOptions are the options the webhook has as well.
	command.CommonOptions
	// WebhookURL is the URL kcp calls for admission reviews.
	WebhookURL string
	// WebhookCABundleFile is a PEM file with the CA that signed the
	// webhook's serving certificate; it is re-read when it changes.
	WebhookCABundleFile string
	// WebhookTimeoutSeconds is how long kcp waits for the webhook.
	WebhookTimeoutSeconds int32
	// FailurePolicy is what kcp does when the webhook cannot be called.
	FailurePolicy string
	// CABundleCheckInterval is how often the CA bundle file is re-read.
	CABundleCheckInterval time.Duration
}

// newOptions returns the defaults.
func newOptions() *options {
	return &options{
		CommonOptions:         command.NewCommonOptions(10 * time.Minute),
		WebhookTimeoutSeconds: 5,
		FailurePolicy:         string(admissionregistrationv1.Fail),
		CABundleCheckInterval: 10 * time.Second,
	}
}

// AddFlags implements command.Options.
func (o *options) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	fs.StringVar(&o.WebhookURL, "webhook-url", o.WebhookURL, "HTTPS URL of the webhook's validating endpoint, as kcp reaches it, e.g. https://dependency-webhook.example.com:9443/validate.")
	fs.StringVar(&o.WebhookCABundleFile, "webhook-ca-bundle", o.WebhookCABundleFile, "PEM file with the CA bundle that verifies the webhook's serving certificate; re-read when it changes. Empty: kcp uses its system roots.")
	fs.Int32Var(&o.WebhookTimeoutSeconds, "webhook-timeout-seconds", o.WebhookTimeoutSeconds, "Seconds kcp waits for the webhook before applying the failure policy (1-30).")
	fs.StringVar(&o.FailurePolicy, "failure-policy", o.FailurePolicy, "What kcp does when the webhook cannot be called: Fail (deletes of protected objects, and creates and updates of dependents, are refused) or Ignore (they are allowed).")
	fs.DurationVar(&o.CABundleCheckInterval, "webhook-ca-bundle-check-interval", o.CABundleCheckInterval, "How often the CA bundle file is checked for changes.")
}

// Validate implements command.Options.
func (o *options) Validate() error {
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
	switch admissionregistrationv1.FailurePolicyType(o.FailurePolicy) {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		errs = append(errs, fmt.Errorf("--failure-policy must be Fail or Ignore, got %q", o.FailurePolicy))
	}
	if o.CABundleCheckInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--webhook-ca-bundle-check-interval must be at least 100ms, got %s", o.CABundleCheckInterval))
	}
	return errors.Join(errs...)
}

// controllerOptions returns the options of the controller's assembly.
func (o *options) controllerOptions() controllerserver.Options {
	return controllerserver.Options{
		APIExportName:         o.APIExportName,
		WebhookURL:            o.WebhookURL,
		WebhookCABundleFile:   o.WebhookCABundleFile,
		CABundleCheckInterval: o.CABundleCheckInterval,
		WebhookTimeoutSeconds: o.WebhookTimeoutSeconds,
		FailurePolicy:         admissionregistrationv1.FailurePolicyType(o.FailurePolicy),
		ResyncPeriod:          o.ResyncPeriod,
	}
}

// Build implements command.Options: the controller as controllerserver
// assembles it.
func (o *options) Build(ctx context.Context, cfg *rest.Config) (manager.Runnable, error) {
	c, err := controllerserver.New(ctx, cfg, o.controllerOptions(), o.ManagerOptions())
	if err != nil {
		return nil, err
	}
	// The manager serves controller-runtime's registry.
	if err := ctrlmetrics.Registry.Register(c.Metrics); err != nil {
		return nil, fmt.Errorf("failed to register the controller's metrics: %w", err)
	}
	if err := ctrlmetrics.Registry.Register(kcpversion.ControllerMetric(c.KCP)); err != nil {
		return nil, fmt.Errorf("failed to register the kcp version metric: %w", err)
	}
	return c.Manager, nil
}
