package command

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// DefaultAPIExportName is the default of --api-export-name: the APIExport
// that config/kcp defines.
const DefaultAPIExportName = "dependencies.opendefense.cloud"

// CommonOptions are the options that the controller and the webhook share,
// with the same flags and validation. Each binary's options embed them and
// call their AddFlags and Validate from their own.
type CommonOptions struct {
	// APIExportName is the name of the APIExport that serves
	// DependencyRules, and of its APIExportEndpointSlice, in the workspace
	// of the kubeconfig.
	APIExportName string
	// MetricsBindAddress is where Prometheus metrics are served; "0"
	// disables them.
	MetricsBindAddress string
	// HealthProbeBindAddress is where /healthz and /readyz are served; "0"
	// disables them.
	HealthProbeBindAddress string
	// ResyncPeriod is how often a binary reads everything again without an
	// event, repairing what missed events left behind.
	ResyncPeriod time.Duration
	// LeaderElect enables leader election among the replicas of a binary:
	// only the leader writes (the controller everything, the webhook the
	// deletions it replays); every webhook replica answers requests.
	LeaderElect bool
	// LeaderElectionNamespace is the namespace of the lease, in the
	// workspace of the kubeconfig.
	LeaderElectionNamespace string
}

// NewCommonOptions returns the defaults of the common options, with
// resyncPeriod as the default of --resync-period, which differs between
// the binaries.
func NewCommonOptions(resyncPeriod time.Duration) CommonOptions {
	return CommonOptions{
		APIExportName:           DefaultAPIExportName,
		MetricsBindAddress:      ":8080",
		HealthProbeBindAddress:  ":8081",
		ResyncPeriod:            resyncPeriod,
		LeaderElect:             true,
		LeaderElectionNamespace: "default",
	}
}

// AddFlags registers the common options as flags, with their current values
// as defaults.
func (o *CommonOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.APIExportName, "api-export-name", o.APIExportName, "Name of the APIExport (and its APIExportEndpointSlice) that serves DependencyRules, in the workspace the kubeconfig points at.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader among replicas; only the leader writes (the controller: webhook configurations and status; the webhook: replayed deletions). The lease lives in the workspace of the kubeconfig.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election lease.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "How often everything is read again without an event, to repair missed events: the controller reconciles all rules and webhook configurations, the webhook lists all DependencyRules.")
}

// Validate reports every invalid common option, naming its flag.
func (o *CommonOptions) Validate() error {
	var errs []error
	if o.APIExportName == "" {
		errs = append(errs, errors.New("--api-export-name must not be empty"))
	}
	if o.ResyncPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--resync-period must be at least 1s, got %s", o.ResyncPeriod))
	}
	return errors.Join(errs...)
}

// ManagerOptions returns the manager options that the common options
// determine: where metrics and health probes are served, and leader
// election (each binary names its own lease).
func (o *CommonOptions) ManagerOptions() manager.Options {
	return manager.Options{
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		LeaderElection:          o.LeaderElect,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	}
}
