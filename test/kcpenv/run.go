package kcpenv

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/references"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
)

// RunInBackground calls start with a context that the returned function
// cancels; the returned function then waits for start to return and returns
// its error.
func RunInBackground(start func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// TestManagerOptions are manager options for running the project's managers
// in a test process: no metrics or probe listeners, and controller names may
// repeat because suites start managers more than once.
func TestManagerOptions() manager.Options {
	return manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
}

// Webhook is a webhook server started by StartWebhook.
type Webhook struct {
	// URL is the validating endpoint, https://127.0.0.1:<port>/validate;
	// kcp calls it with the provider workspace appended.
	URL string
	// CABundle is the PEM CA of the serving certificate.
	CABundle []byte
	// Metrics holds the webhook's own metrics.
	Metrics *prometheus.Registry
	// Stop stops the webhook and returns the manager's error.
	Stop func() error
}

// StartWebhook runs the webhook as cmd/webhook assembles it, with the
// credentials and workspace of depCtrl (a config whose host ends with the
// dep-ctrl workspace), serving TLS on 127.0.0.1 with a certificate from a new
// CA in certDir, and waits until it is ready.
func StartWebhook(ctx context.Context, depCtrl *rest.Config, certDir string) (*Webhook, error) {
	return StartWebhookWith(ctx, depCtrl, certDir, nil)
}

// StartWebhookWith is StartWebhook with the webhook's options changed by
// configure (if not nil), e.g. ClientCAFile for client certificate checks.
// The webhook signs the records of deferred deletions with a key of its
// own, in certDir.
func StartWebhookWith(ctx context.Context, depCtrl *rest.Config, certDir string, configure func(*webhookserver.Options)) (*Webhook, error) {
	ca, err := WriteServingCerts(certDir, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	keys, err := WriteRecordKey(filepath.Join(certDir, "record-keys"))
	if err != nil {
		return nil, err
	}
	metrics := prometheus.NewRegistry()
	whOpts := webhookserver.Options{
		CommonOptions:          command.CommonOptions{APIExportName: DepCtrlExportName, ResyncPeriod: time.Minute},
		BindAddress:            "127.0.0.1",
		Port:                   port,
		CertDir:                certDir,
		CertName:               "tls.crt",
		KeyName:                "tls.key",
		Path:                   "/validate",
		RequestTimeout:         8 * time.Second,
		MaxBlockers:            10,
		MaxReferencesPerObject: references.DefaultMaxReferences,
		IndexPollInterval:      time.Second,
		ReplayInterval:         5 * time.Second,
		RecordKeysDir:          keys,
		RelabelInterval:        2 * time.Second,
	}
	if configure != nil {
		configure(&whOpts)
	}
	wh, err := webhookserver.New(ctx, depCtrl, whOpts, TestManagerOptions())
	if err != nil {
		return nil, err
	}
	if err := metrics.Register(wh.Metrics); err != nil {
		return nil, err
	}
	w := &Webhook{URL: fmt.Sprintf("https://%s:%d%s", whOpts.BindAddress, whOpts.Port, whOpts.Path), CABundle: ca, Metrics: metrics, Stop: RunInBackground(wh.Manager.Start)}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return wh.Ready(nil) == nil, nil
	})
	if err != nil {
		_ = w.Stop()
		return nil, fmt.Errorf("the webhook was not ready within a minute: %w", wh.Ready(nil))
	}
	return w, nil
}

// WarningCollector records the warnings an API server returns; set it as
// rest.Config.WarningHandlerWithContext.
type WarningCollector struct {
	lock     sync.Mutex
	warnings []string
}

// HandleWarningHeaderWithContext implements rest.WarningHandlerWithContext.
func (w *WarningCollector) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.warnings = append(w.warnings, text)
}

// Warnings returns the warnings received so far.
func (w *WarningCollector) Warnings() []string {
	w.lock.Lock()
	defer w.lock.Unlock()
	return append([]string(nil), w.warnings...)
}

// Decided returns how many DELETEs the webhook allowed or denied (requests
// it refused as malformed, or could not decide, are not counted).
func (w *Webhook) Decided() (float64, error) {
	families, err := w.Metrics.Gather()
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == "dependency_webhook_decisions_total" {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && (l.GetValue() == "allowed" || l.GetValue() == "denied") {
						total += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return total, nil
}

// Decisions returns how many DELETE decisions the webhook made with the
// outcome (allowed, denied, ...) and reached via the index or a live read
// ("index", "live").
func (w *Webhook) Decisions(outcome, via string) (float64, error) {
	return w.Counter("dependency_webhook_decisions_total", map[string]string{"outcome": outcome, "via": via})
}

// Replayed returns how many attempts to replay a deferred deletion had the
// result (deleted, refused, cancelled, error).
func (w *Webhook) Replayed(result string) (float64, error) {
	return w.Counter("dependency_webhook_deletions_replayed_total", map[string]string{"result": result})
}

// LiveReads returns how many live reads of dependents were answered how
// ("list" or "index").
func (w *Webhook) LiveReads(how string) (float64, error) {
	return w.Counter("dependency_webhook_live_reads_total", map[string]string{"how": how})
}

// Counter returns the value of the series of counter name whose labels
// include labels (0 if there is none yet).
func (w *Webhook) Counter(name string, labels map[string]string) (float64, error) {
	return w.value(name, labels, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}

// Gauge returns the value of the series of gauge name whose labels include
// labels (0 if there is none yet).
func (w *Webhook) Gauge(name string, labels map[string]string) (float64, error) {
	return w.value(name, labels, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
}

// value returns what value reads of the first series of name whose labels
// include labels (0 if there is none yet).
func (w *Webhook) value(name string, labels map[string]string, value func(*dto.Metric) float64) (float64, error) {
	families, err := w.Metrics.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			has := map[string]string{}
			for _, l := range m.GetLabel() {
				has[l.GetName()] = l.GetValue()
			}
			matches := true
			for k, v := range labels {
				matches = matches && has[k] == v
			}
			if matches {
				return value(m), nil
			}
		}
	}
	return 0, nil
}
