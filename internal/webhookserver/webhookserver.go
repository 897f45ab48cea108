// Package webhookserver assembles the webhook binary from its Options: the
// HTTPS server with its client certificate check, a multicluster manager
// over the dependencies APIExport, the rule registry and what keeps it
// current (rulesync), the index of dependents and what reports its state on
// rules (conditions), the client of protected objects that the index routes
// (objects), the admission handlers with their health checks, the metrics
// of all of them, and, on the elected replica, the replay of deferred
// deletions and the relabelling of dependents.
// cmd/webhook binds Options to its flags and runs what New returns; the
// tests run the same.
package webhookserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/opendefensecloud/dependency-controller/internal/audit"
	"github.com/opendefensecloud/dependency-controller/internal/clearance"
	"github.com/opendefensecloud/dependency-controller/internal/conditions"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/internal/objects"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/relabel"
	"github.com/opendefensecloud/dependency-controller/internal/replay"
	"github.com/opendefensecloud/dependency-controller/internal/rulesync"
	"github.com/opendefensecloud/dependency-controller/internal/tracking"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/guard"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/references"
)

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
	// Metrics are the webhook's own metrics, those of each of its parts in
	// one collector; the binary registers them where the manager serves
	// metrics.
	Metrics prometheus.Collector
	// KCP is the version of kcp read at start.
	KCP kcpversion.Info
}

// recordKeysInterval is how often the record keys are read again, so that
// a rotated Secret takes effect without a restart.
const recordKeysInterval = 10 * time.Second

// New assembles the webhook with the credentials of cfg, which must point
// at the workspace of the APIExport. mgrOpts configure the manager
// (cmd/webhook passes opts.ManagerOptions()); New sets its webhook server,
// which serves the admission handlers as opts say. Every replica serves requests; with mgrOpts.LeaderElection, one of
// them, elected with a lease in the workspace of cfg, replays deferred
// deletions and relabels dependents.
func New(ctx context.Context, cfg *rest.Config, opts Options, mgrOpts manager.Options) (*Webhook, error) {
	server, clientCA, err := newServer(ctx, opts)
	if err != nil {
		return nil, err
	}
	mgrOpts.WebhookServer = server
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
	kcpVersion := kcpversion.Check(ctx, cfg)

	a := &assembly{opts: opts, reg: registry.New(), readiness: rulesync.NewReadiness(), self: guard.NewSelfReview(cfg),
		metrics: webhook.NewMetrics(), replayMetrics: replay.NewMetrics(), auditMetrics: audit.NewMetrics(), clearanceMetrics: clearance.NewMetrics(),
		cfg: cfg, frontProxy: frontProxy}
	if err := a.newManager(ctx, cfg, mgrOpts); err != nil {
		return nil, err
	}
	if clientCA != nil {
		if err := a.mgr.GetLocalManager().Add(clientCA); err != nil {
			return nil, err
		}
	}
	if err := a.addIndex(ctx, cfg, frontProxy); err != nil {
		return nil, err
	}
	if err := a.addRules(); err != nil {
		return nil, err
	}
	writers, err := a.serve(ctx)
	if err != nil {
		return nil, err
	}
	lease := LeaseName
	if opts.ShardName != "" {
		lease += "-" + opts.ShardName
	}
	if err := addElected(a.mgr.GetLocalManager(), cfg, elect, electIn, lease, writers...); err != nil {
		return nil, err
	}
	log.FromContext(ctx).Info("Webhook assembled", "path", opts.Path, "frontProxy", frontProxy, "shard", opts.ShardName, "shardURLs", opts.ShardURLs)
	metrics := collectors{a.metrics, a.ix.Metrics(), a.reg.Metrics(), a.replayMetrics, a.auditMetrics, a.clearanceMetrics}
	return &Webhook{Manager: a.mgr, Ready: a.ready, Metrics: metrics, KCP: kcpVersion}, nil
}

// assembly is the webhook while New assembles it, step by step.
type assembly struct {
	opts Options
	// reg holds the rules, readiness tells whether they are loaded.
	reg       *registry.Registry
	readiness *rulesync.Readiness
	// self learns the webhook's own user name.
	self *guard.SelfReview
	// metrics are those of the admission handlers, replayMetrics those of
	// the replay of deferred deletions, auditMetrics those of the audit of
	// dangling references.
	metrics          *webhook.Metrics
	replayMetrics    *replay.Metrics
	auditMetrics     *audit.Metrics
	clearanceMetrics *clearance.Metrics
	// mgr, ix, objects and ready are set by the steps of New.
	mgr     *vw.Manager
	ix      *index.Index
	objects *objects.Client
	ready   func(*http.Request) error
	// cfg and frontProxy reach kcp as the webhook.
	cfg        *rest.Config
	frontProxy string
	// tracker tells since when the admission webhooks that record
	// references are in effect on each shard.
	tracker *tracking.Tracker
}

// newManager sets up the multicluster manager over the APIExport, which
// keeps reg current with the workspaces that bind it.
func (a *assembly) newManager(ctx context.Context, cfg *rest.Config, mgrOpts manager.Options) error {
	mgr, err := vw.NewManager(ctx, cfg, a.opts.APIExportName, mgrOpts, rulesync.BindingHandler{Registry: a.reg})
	if err != nil {
		return err
	}
	if _, err := mgr.Export.URLs(ctx); err != nil {
		// Not fatal: the webhook serves (denying deletes with a retry
		// message) and keeps trying, so that it recovers once RBAC is
		// applied or kcp is reachable, instead of crash-looping.
		log.FromContext(ctx).Error(err, "Cannot read the APIExportEndpointSlice yet; deletes of protected objects are denied until the rules are loaded")
	}
	a.mgr = mgr
	return nil
}

// addIndex adds the index of dependents, which reads the dependents'
// APIExports through frontProxy and follows the sources the rules name, and
// the client of protected objects, which it routes.
func (a *assembly) addIndex(ctx context.Context, cfg *rest.Config, frontProxy string) error {
	ix, err := index.New(cfg, frontProxy, index.Options{
		PollInterval: a.opts.IndexPollInterval,
		Identity:     identity(ctx, a.self),
		ReadTimeout:  a.opts.RequestTimeout,
		Shards:       a.opts.ShardURLs,
		ShardName:    a.opts.ShardName,
	})
	if err != nil {
		return err
	}
	a.reg.OnSourcesChange(ix.Ensure)
	a.ix, a.objects = ix, objects.New(ix)
	return a.mgr.GetLocalManager().Add(ix)
}

// addRules adds what loads the rules and reports the index's state on
// them, and the readiness check: the rules are loaded and the index is
// synced.
func (a *assembly) addRules() error {
	if err := rulesync.SetupWithManager(a.mgr, a.mgr.Export, a.reg, a.readiness, a.opts.ResyncPeriod); err != nil {
		return err
	}
	if err := a.mgr.GetLocalManager().Add(conditions.NewReporter(a.mgr, a.reg, a.ix, time.Minute, a.opts.MaxReferencesPerObject)); err != nil {
		return err
	}
	a.ready = func(req *http.Request) error {
		if err := a.readiness.ReadyzCheck(req); err != nil {
			return err
		}
		if err := a.ix.Synced(); err != nil {
			return fmt.Errorf("the index of dependents is not synced yet: %w", err)
		}
		return nil
	}
	return a.mgr.AddReadyzCheck("rules-and-index", a.ready)
}

// serve serves the admission handlers at opts.Path and returns what must
// run on one replica only: the relabelling of dependents, the report of
// whether references are tracked, the audit of dangling references, the
// clearance of unreferenced objects and, with record keys, the replay of
// deferred deletions.
func (a *assembly) serve(ctx context.Context) ([]manager.Runnable, error) {
	recs, err := a.records(ctx)
	if err != nil {
		return nil, err
	}
	signed := answers(recs)
	a.tracker = tracking.New(a.objects, tracking.Options{Answers: signed})
	// One writer of ledgers records the references of both handlers, so
	// that their writes of one object never race each other; the DELETEs
	// end its leases.
	ledgers := inflight.NewWriter(a.objects.Settled(), inflight.Options{OnConflict: a.metrics.LedgerConflict, Lease: a.opts.ReferenceLease})
	deletionOpts := []deletion.Option{deletion.WithTimeout(a.opts.RequestTimeout), deletion.WithMaxBlockers(a.opts.MaxBlockers),
		deletion.WithNamespaces(a.objects), deletion.WithEvents(a.objects), deletion.WithMetrics(a.metrics), deletion.WithHorizon(a.ix, a.tracker, ledgers)}
	var verifier references.Verifier
	if recs != nil {
		verifier = recs
		deletionOpts = append(deletionOpts, deletion.WithRecorder(recs))
	}
	deletions := deletion.NewValidator(a.reg, a.readiness, a.ix, deletionOpts...)
	recording := a.recording(recs, verifier, ledgers)
	validator := references.NewReferenceValidator(a.reg, a.readiness, a.ix, verifier, a.opts.RequestTimeout, a.metrics, references.WithGracePeriod(a.gracePeriod()),
		references.WithMaxReferences(a.opts.MaxReferencesPerObject), references.WithRevisionMarks(recording, a.reg), references.WithProbes(a.self, signed))
	handler := webhook.Handler{
		Deletion:   deletions,
		References: validator,
		Records:    guard.NewRecordGuard(a.self, a.metrics),
		Labels: references.NewLabelMutator(a.reg, a.readiness, a.metrics, references.WithRecording(recording),
			references.WithLabellingProbes(&webhook.Prober{Self: a.self, Answers: signed})),
		Admitted: guard.NewLedgerGuard(a.self, signed, a.metrics),
		// kcp answers whether the user who sets skip-protection may delete
		// the object through the protected provider's virtual workspace.
		SkipProtection: guard.NewSkipGuard(a.reg, a.readiness, a.objects, a.metrics),
	}
	if err := webhook.Serve(a.mgr, a.opts.Path, handler); err != nil {
		return nil, err
	}
	writers := []manager.Runnable{
		relabel.New(a.reg, a.objects, conditions.NewWriter(a.mgr, conditions.LabelsFieldOwner), relabel.Options{Interval: a.opts.RelabelInterval}),
		tracking.NewReporter(a.reg, tracking.NewSSARGrants(a.cfg, a.frontProxy, trackingInterval), a.ix, a.tracker,
			conditions.NewWriter(a.mgr, tracking.FieldOwner), trackingInterval, identity(ctx, a.self)),
	}
	// A shard-affine webhook sees the references of its shards only:
	// several would contradict each other on the rules.
	var resolved audit.ConditionWriter
	if a.opts.ShardName == "" {
		resolved = conditions.NewWriter(a.mgr, audit.FieldOwner)
	}
	writers = append(writers, audit.New(a.reg, a.ix, a.objects, resolved, audit.Options{GracePeriod: a.gracePeriod(), Metrics: a.auditMetrics, Reader: a.objects}))
	if a.opts.ClearanceInterval > 0 {
		writers = append(writers, clearance.New(a.reg, a.objects, deletions, clearance.Options{Interval: a.opts.ClearanceInterval, Index: a.ix, Teardowns: deletions, Namespaces: a.objects, Metrics: a.clearanceMetrics}))
	}
	if recs != nil {
		writers = append(writers, replay.New(a.reg, a.ix, a.objects, recs, deletions, replay.Options{Interval: a.opts.ReplayInterval, Metrics: a.replayMetrics}))
	}
	return writers, nil
}

// gracePeriod is how long a reference may name a missing object before
// the audit reports it.
func (a *assembly) gracePeriod() time.Duration {
	if a.opts.DanglingGracePeriod <= 0 {
		return audit.DefaultGracePeriod
	}
	return a.opts.DanglingGracePeriod
}

// records returns the records of deferred deletions, signed and verified
// with the keys in opts.RecordKeysDir, which it adds to the manager to be
// re-read; nil without a directory: deferred deletion is off.
func (a *assembly) records(ctx context.Context) (*replay.Records, error) {
	if a.opts.RecordKeysDir == "" {
		log.FromContext(ctx).Info("No record keys (--record-keys-dir): deferred deletion is off, and rules with the Replay deletion policy deny like Deny rules")
		return nil, nil
	}
	keys, err := records.NewKeys(a.opts.RecordKeysDir, recordKeysInterval)
	if err != nil {
		return nil, err
	}
	if err := a.mgr.GetLocalManager().Add(keys); err != nil {
		return nil, err
	}
	return &replay.Records{Patcher: a.objects, Keys: keys, TTL: a.opts.DeferredDeletionTTL}, nil
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
func identity(ctx context.Context, self *guard.SelfReview) string {
	u, err := self.Identity(ctx)
	if err != nil {
		log.FromContext(ctx).V(1).Info("Could not learn the webhook's user name", "error", err.Error())
		return ""
	}
	return u.Username
}

// collectors are the metrics of the webhook's parts, as one
// prometheus.Collector.
type collectors []prometheus.Collector

// Describe implements prometheus.Collector.
func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}
