// Package webhookserver assembles the webhook binary: a multicluster manager
// over the dependencies APIExport, the rule registry and what keeps it
// current, the index of dependents and what reports its state on rules, the
// admission handlers with their health checks, and, on the elected replica,
// the replay of deferred deletions and the relabelling of dependents.
// cmd/webhook runs what New returns; the tests run the same.
package webhookserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/relabel"
	"github.com/opendefensecloud/dependency-controller/internal/replay"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// Options configure the webhook.
type Options struct {
	// APIExportName is the APIExport serving DependencyRules, in the
	// workspace of the kubeconfig.
	APIExportName string
	// FrontProxyURL is where the APIExportEndpointSlices of the dependents'
	// APIExports are read, as <url>/clusters/<logical cluster>/...; empty
	// means the kubeconfig's server without its /clusters/ path.
	FrontProxyURL string
	// Path is the HTTP path of the validating endpoint; kcp calls
	// <Path>/<logical cluster of the provider workspace>.
	Path string
	// RequestTimeout bounds the live reads per request; the time kcp waits
	// for the answer, which it sends with every request, bounds them too.
	RequestTimeout time.Duration
	// MaxBlockers is how many blockers a denial names.
	MaxBlockers int
	// ResyncPeriod is how often all rules are listed again.
	ResyncPeriod time.Duration
	// IndexPollInterval is how often the APIExports of the dependents are
	// read again (shards, grants).
	IndexPollInterval time.Duration
	// ReplayInterval is how often deferred deletions are listed again
	// without a change of the index; default 30s.
	ReplayInterval time.Duration
	// RecordKeysDir is the directory of the keys that sign and verify the
	// records of deferred deletions (see records.LoadDir); empty turns
	// deferred deletion off (Replay rules deny like Deny rules).
	RecordKeysDir string
	// DeferredDeletionTTL is how long a deferred deletion is replayed;
	// default replay.DefaultTTL.
	DeferredDeletionTTL time.Duration
	// RelabelInterval is how often the dependents that are not labelled
	// under the current rules are looked for without a change of the
	// rules; default 30s.
	RelabelInterval time.Duration
	// ShardName and ShardURLs, if set, make the webhook shard-affine: it
	// reads only the virtual workspaces of the shards whose base URLs are
	// ShardURLs, answers only for workspaces on them, and elects its
	// writing replica with a lease of its own (LeaseName-ShardName).
	ShardName string
	ShardURLs []string
}

// LeaseName is the name of the lease of the webhook replica that replays
// deferred deletions.
const LeaseName = "dependency-webhook"

// Webhook is the assembled webhook.
type Webhook struct {
	// Manager runs everything; start it.
	Manager mcmanager.Manager
	// Ready is the readiness check: the rules are loaded and the
	// dependents of every rule have been listed once.
	Ready func(*http.Request) error
	// Metrics are the webhook's own metrics; the binary registers them
	// where the manager serves metrics.
	Metrics *webhook.Metrics
	// KCP is the version of kcp read at start.
	KCP kcpversion.Info
}

// recordKeysInterval is how often the record keys are read again, so that
// a rotated Secret takes effect without a restart.
const recordKeysInterval = 10 * time.Second

// New assembles the webhook with the credentials of cfg, which must point
// at the workspace of the APIExport. mgrOpts configure the manager; its
// webhook server serves the admission handler. Every replica serves
// requests; with mgrOpts.LeaderElection, one of them, elected with a lease
// in the workspace of cfg, replays deferred deletions.
func New(ctx context.Context, cfg *rest.Config, opts Options, mgrOpts manager.Options) (*Webhook, error) {
	elect, electIn := mgrOpts.LeaderElection, mgrOpts.LeaderElectionNamespace
	mgrOpts.LeaderElection = false
	base, _, err := kcp.WorkspaceConfig(cfg)
	if err != nil {
		return nil, err
	}
	frontProxy := opts.FrontProxyURL
	if frontProxy == "" {
		frontProxy = base
	}
	logger := log.FromContext(ctx)
	kcpVersion := kcpversion.Check(ctx, cfg)

	reg := registry.New()
	readiness := registry.NewReadiness()
	mgr, err := vw.NewManager(ctx, cfg, opts.APIExportName, mgrOpts, registry.BindingHandler{Registry: reg})
	if err != nil {
		return nil, err
	}
	if _, err := mgr.Export.URLs(ctx); err != nil {
		// Not fatal: the webhook serves (denying deletes with a retry
		// message) and keeps trying, so that it recovers once RBAC is
		// applied or kcp is reachable, instead of crash-looping.
		logger.Error(err, "Cannot read the APIExportEndpointSlice yet; deletes of protected objects are denied until the rules are loaded")
	}

	self := webhook.NewSelfReview(cfg)
	var metrics *webhook.Metrics
	ix, err := index.New(cfg, frontProxy, index.Options{
		PollInterval: opts.IndexPollInterval,
		Identity:     identity(ctx, self),
		ReadTimeout:  opts.RequestTimeout,
		OnRetry:      func(cause string) { metrics.Retried(cause) },
		OnRead:       func(how string) { metrics.Read(how) },
		Shards:       opts.ShardURLs,
		ShardName:    opts.ShardName,
	})
	if err != nil {
		return nil, err
	}
	reg.OnSourcesChange(ix.Ensure)
	if err := mgr.GetLocalManager().Add(ix); err != nil {
		return nil, err
	}
	if err := registry.SetupWithManager(mgr, mgr.Export, reg, readiness, opts.ResyncPeriod); err != nil {
		return nil, err
	}
	if err := mgr.GetLocalManager().Add(registry.NewStatusReporter(mgr, reg, ix, time.Minute)); err != nil {
		return nil, err
	}
	ready := func(req *http.Request) error {
		if err := readiness.ReadyzCheck(req); err != nil {
			return err
		}
		if err := ix.Synced(); err != nil {
			return fmt.Errorf("the index of dependents is not synced yet: %w", err)
		}
		return nil
	}
	if err := mgr.AddReadyzCheck("rules-and-index", ready); err != nil {
		return nil, err
	}

	metrics = webhook.NewMetrics(reg.Len, ix.Len, ix.Sources)
	deletionOpts := []webhook.Option{webhook.WithTimeout(opts.RequestTimeout), webhook.WithMaxBlockers(opts.MaxBlockers), webhook.WithMetrics(metrics)}
	// One replica writes: it relabels dependents and replays deferred
	// deletions.
	writers := []manager.Runnable{relabel.New(reg, ix, registry.NewConditionWriter(mgr, registry.LabelsFieldOwner), relabel.Options{Interval: opts.RelabelInterval})}
	var (
		verifier webhook.Verifier
		recs     *replay.Records
	)
	if opts.RecordKeysDir != "" {
		keys, err := records.NewKeys(opts.RecordKeysDir, recordKeysInterval)
		if err != nil {
			return nil, err
		}
		if err := mgr.GetLocalManager().Add(keys); err != nil {
			return nil, err
		}
		recs = &replay.Records{Patcher: ix, Keys: keys, TTL: opts.DeferredDeletionTTL}
		verifier = recs
		deletionOpts = append(deletionOpts, webhook.WithRecorder(recs))
	} else {
		logger.Info("No record keys (--record-keys-dir): deferred deletion is off, and rules with the Replay deletion policy deny like Deny rules")
	}
	deletion := webhook.NewDeletionValidator(reg, readiness, ix, deletionOpts...)
	if recs != nil {
		writers = append(writers, replay.New(reg, ix, recs, deletion, replay.Options{Interval: opts.ReplayInterval, OnResult: metrics.Replayed, OnRemoved: metrics.RecordRemoved}))
	}
	handler := webhook.Handler{
		Deletion:   deletion,
		References: webhook.NewReferenceValidator(reg, readiness, ix, verifier, opts.RequestTimeout, metrics),
		Records:    webhook.NewRecordGuard(self, metrics),
		Labels:     webhook.NewLabelMutator(reg, readiness, metrics),
	}
	if err := webhook.Serve(mgr, opts.Path, handler); err != nil {
		return nil, err
	}
	lease := LeaseName
	if opts.ShardName != "" {
		lease += "-" + opts.ShardName
	}
	if err := addElected(mgr.GetLocalManager(), cfg, elect, electIn, lease, writers...); err != nil {
		return nil, err
	}
	logger.Info("Webhook assembled", "path", opts.Path, "frontProxy", frontProxy, "shard", opts.ShardName, "shardURLs", opts.ShardURLs)
	return &Webhook{Manager: mgr, Ready: ready, Metrics: metrics, KCP: kcpVersion}, nil
}

// addElected adds runnables that must run on one replica only to mgr: as
// they are without leader election, else under a manager of their own that
// holds the lease named lease in namespace. The webhook's own manager cannot elect: its
// provider of workspaces would then run on the leader only, and the other
// replicas would never load the rules.
func addElected(mgr manager.Manager, cfg *rest.Config, elect bool, namespace, lease string, runnables ...manager.Runnable) error {
	if !elect {
		for _, r := range runnables {
			if err := mgr.Add(r); err != nil {
				return err
			}
		}
		return nil
	}
	elected, err := manager.New(cfg, manager.Options{
		LeaderElection:                true,
		LeaderElectionID:              lease,
		LeaderElectionNamespace:       namespace,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
	})
	if err != nil {
		return fmt.Errorf("failed to set up leader election: %w", err)
	}
	for _, r := range runnables {
		if err := elected.Add(r); err != nil {
			return err
		}
	}
	return mgr.Add(manager.RunnableFunc(elected.Start))
}

// identity returns the user name the webhook's credentials authenticate as,
// for messages that tell providers whom to grant access, or "" if it cannot
// be learned yet; kcp answers a SelfSubjectReview in any workspace.
func identity(ctx context.Context, self *webhook.SelfReview) string {
	u, err := self.Identity(ctx)
	if err != nil {
		log.FromContext(ctx).V(1).Info("Could not learn the webhook's user name", "error", err.Error())
		return ""
	}
	return u.Username
}
