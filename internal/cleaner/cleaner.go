// Package cleaner marks protected objects that nothing references with the
// unreferenced label (depv1alpha1.LabelUnreferenced), so that their DELETE
// does not reach the webhook, and removes marks that no longer hold. It
// runs in the webhook, which holds the index of dependents, on one replica
// (the leader).
//
// Every object of a protected resource goes through these states, keyed by
// the fingerprint fp of the resource and its rules (package marks):
//
//	no mark, or another fingerprint's --(index: no reference)--> pending-<fp> (+ since)
//	pending-<fp>, unchanged for the delay --(live read: no reference)--> <fp>
//	any mark --(index: referenced)--> no mark
//
// Every write to an object carries the resourceVersion it was decided on,
// so that a change in between (the reference guard removing the mark before
// it admits a new reference) makes it fail with a conflict; a conflict
// means "look again". See docs/architecture.md, "Marks", for why this is
// sound.
package cleaner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/marks"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// Rules are the registered rules; *registry.Registry implements it.
type Rules interface {
	// Protections returns every protected resource with its rules.
	Protections() []registry.Protection
	// Rules returns every registered rule.
	Rules() []*registry.Rule
	// Changes receives a value whenever the rules may have changed.
	Changes() <-chan struct{}
}

// Readiness tells whether every rule is registered; *registry.Readiness
// implements it.
type Readiness interface {
	Loaded() bool
}

// Objects reads dependents and protected objects and writes marks;
// *index.Index implements it.
type Objects interface {
	// State returns what is known about a source.
	State(src index.Source) index.State
	// Hits returns the indexed dependents of src in cluster (in namespace,
	// or everywhere if it is empty) that hold name at one of paths.
	Hits(src index.Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) []kcp.Meta
	// Confirm reads the dependents of src live, after it was called, and
	// returns those that hold name at one of paths.
	Confirm(ctx context.Context, src index.Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, int, error)
	// ListObjects lists the objects of src in every workspace (matching
	// labelSelector, if not empty).
	ListObjects(ctx context.Context, src index.Source, labelSelector string, visit func(kcp.Meta) error) error
	// Patch patches one object of src.
	Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error
}

// Finalizers adds and removes depv1alpha1.FinalizerMarks on rules.
type Finalizers interface {
	// Add adds the finalizer to the rule with the key and UID.
	Add(ctx context.Context, rule kcp.ObjectKey, uid types.UID) error
	// Remove removes the finalizer from the rule with the key and UID.
	Remove(ctx context.Context, rule kcp.ObjectKey, uid types.UID) error
}

// Metrics count the marks the cleaner writes and removes; *webhook.Metrics
// implements it. Nil records nothing.
type Metrics interface {
	// Marked counts a mark written: "pending" or "cleared".
	Marked(state string)
	// Unmarked counts a mark removed, by reason: "referenced" or "stale".
	Unmarked(reason string)
}

// Outcomes counted by Metrics.
const (
	StatePending     = "pending"
	StateCleared     = "cleared"
	ReasonReferenced = "referenced"
	ReasonStale      = "stale"
)

// Options configure a Cleaner.
type Options struct {
	// Delay is how long an object must keep its pending mark, unchanged,
	// before the live read that clears it; it must exceed the longest time
	// a CREATE or UPDATE of a dependent can take from the reference
	// guard's read of the object to its commit (kcp's request timeout).
	Delay time.Duration
	// Interval is how often every protected resource is listed; changes of
	// the rules start a pass at once.
	Interval time.Duration
	// Timeout bounds each write and each live read.
	Timeout time.Duration
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Metrics, if set, count the marks written and removed.
	Metrics Metrics
}

// objectKey identifies an object of a protected resource.
type objectKey struct {
	target          registry.Target
	cluster         logicalcluster.Name
	namespace, name string
}

// observation is a pending mark as the cleaner first saw it.
type observation struct {
	// value and resourceVersion are the mark's value and the object's
	// version when the cleaner first saw it.
	value, resourceVersion string
	// seen is when: after the write of the mark had committed.
	seen time.Time
}

// Cleaner writes and removes the marks. It is a
// manager.LeaderElectionRunnable that runs on the leader only.
type Cleaner struct {
	rules      Rules
	readiness  Readiness
	objects    Objects
	finalizers Finalizers
	opts       Options

	// pending are the pending marks seen, with when they were first seen;
	// only the goroutine of Start uses them.
	pending map[objectKey]observation
}

// New returns a cleaner of the objects that rules protect, reading and
// writing them through objects, and keeping the marks finalizer on rules
// through finalizers.
func New(rules Rules, readiness Readiness, objects Objects, finalizers Finalizers, opts Options) *Cleaner {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &Cleaner{
		rules: rules, readiness: readiness, objects: objects, finalizers: finalizers, opts: opts,
		pending: map[objectKey]observation{},
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: two
// replicas would write the same marks.
func (c *Cleaner) NeedLeaderElection() bool {
	return true
}

// Start implements manager.Runnable: a pass every interval, and whenever the
// rules change, until ctx is done.
func (c *Cleaner) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("marks")
	ctx = log.IntoContext(ctx, logger)
	ticker := time.NewTicker(c.opts.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-c.rules.Changes():
		}
		if err := c.Pass(ctx); err != nil {
			logger.Info("Marks not brought up to date; trying again", "error", err.Error())
		}
	}
}

// Pass brings every mark one step further: it lists the objects of every
// protected resource and writes or removes marks, and removes the finalizer
// of rules being deleted once the marks of their resources are gone.
func (c *Cleaner) Pass(ctx context.Context) error {
	if !c.readiness.Loaded() {
		return nil
	}
	var errs []error
	protections := c.rules.Protections()
	current := make(map[registry.Target]bool, len(protections))
	// swept tells, for every protection of a rule being deleted, whether
	// its marks are gone (or cannot be reached at all).
	swept := map[kcp.ObjectKey]bool{}
	for i := range protections {
		p := &protections[i]
		current[p.Target] = true
		deleting := slices.ContainsFunc(p.Rules, func(r *registry.Rule) bool { return r.Terminating })
		var err error
		switch {
		case deleting:
			// A rule being deleted: every mark goes, whatever its
			// fingerprint; the resource is marked again once the rule is
			// gone.
			err = c.unmarkAll(ctx, p.Target, p.Source)
			for _, r := range p.Rules {
				if _, ok := swept[r.Key]; r.Terminating && (!ok || err != nil) {
					swept[r.Key] = err == nil
				}
			}
		case !c.effective(p):
			err = c.unmarkStale(ctx, p)
		default:
			err = c.mark(ctx, p)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s of logical cluster %s: %w", p.Target.Resource, p.Target.Cluster, err))
		}
	}
	for k := range c.pending {
		if !current[k.target] {
			delete(c.pending, k)
		}
	}
	for _, r := range c.rules.Rules() {
		if !r.Terminating || !r.Finalized {
			continue
		}
		if done, ok := swept[r.Key]; ok && !done {
			continue
		}
		if err := c.finalizers.Remove(ctx, r.Key, r.UID); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("failed to remove the finalizer %s from DependencyRule %s: %w", depv1alpha1.FinalizerMarks, r.Key, err))
			continue
		}
		log.FromContext(ctx).Info("Removed the marks of a rule being deleted", "rule", r.Key)
	}
	return errors.Join(errs...)
}

// readable reports whether the objects of src can be read and written.
func (c *Cleaner) readable(src index.Source) bool {
	return c.objects.State(src).Phase == index.PhaseSynced
}

// effective reports whether the objects of p can be marked: they can be
// read, and every dependent type of its rules is indexed on every shard.
func (c *Cleaner) effective(p *registry.Protection) bool {
	if !c.readable(p.Source) || len(p.Entries) == 0 {
		return false
	}
	for _, e := range p.Entries {
		if c.objects.State(e.Dependent).Phase != index.PhaseSynced {
			return false
		}
	}
	return true
}

// mark lists the objects of p and moves each one step.
func (c *Cleaner) mark(ctx context.Context, p *registry.Protection) error {
	for _, r := range p.Rules {
		if r.Finalized {
			continue
		}
		// The finalizer first: a mark written before it could outlive the
		// rule.
		if err := c.finalizers.Add(ctx, r.Key, r.UID); err != nil {
			return fmt.Errorf("failed to add the finalizer %s to DependencyRule %s: %w", depv1alpha1.FinalizerMarks, r.Key, err)
		}
	}
	var objs []kcp.Meta
	if err := c.objects.ListObjects(ctx, p.Source, "", func(m kcp.Meta) error {
		// Only what the decision needs is kept.
		objs = append(objs, kcp.Meta{Cluster: m.Cluster, Namespace: m.Namespace, Name: m.Name, UID: m.UID,
			ResourceVersion: m.ResourceVersion, Terminating: m.Terminating, Unreferenced: m.Unreferenced})
		return nil
	}); err != nil {
		return err
	}
	seen := make(map[objectKey]bool, len(objs))
	var errs []error
	for _, o := range objs {
		k := objectKey{target: p.Target, cluster: o.Cluster, namespace: o.Namespace, name: o.Name}
		seen[k] = true
		if err := c.step(ctx, p, k, o); err != nil {
			errs = append(errs, fmt.Errorf("%s/%s in logical cluster %s: %w", o.Namespace, o.Name, o.Cluster, err))
		}
	}
	for k := range c.pending {
		if k.target == p.Target && !seen[k] {
			delete(c.pending, k)
		}
	}
	return errors.Join(errs...)
}

// step moves one object one step.
func (c *Cleaner) step(ctx context.Context, p *registry.Protection, k objectKey, o kcp.Meta) error {
	logger := log.FromContext(ctx).WithValues("cluster", o.Cluster, "resource", p.Target.Resource, "namespace", o.Namespace, "name", o.Name)
	fp := p.Fingerprint
	if o.Terminating {
		delete(c.pending, k)
		return nil
	}
	if c.indexed(p, o) {
		delete(c.pending, k)
		if o.Unreferenced == "" {
			return nil
		}
		return c.unmark(ctx, logger, p.Source, o, ReasonReferenced)
	}
	switch o.Unreferenced {
	case fp:
		delete(c.pending, k)
		return nil
	case marks.Pending(fp):
		now := c.opts.Now()
		obs, ok := c.pending[k]
		if !ok || obs.value != o.Unreferenced || obs.resourceVersion != o.ResourceVersion {
			// Seen for the first time in this version: the delay starts
			// now, after the write committed, whatever the annotation says.
			c.pending[k] = observation{value: o.Unreferenced, resourceVersion: o.ResourceVersion, seen: now}
			return nil
		}
		if now.Sub(obs.seen) < c.opts.Delay {
			return nil
		}
		referenced, err := c.confirm(ctx, p, o)
		if err != nil {
			return err
		}
		delete(c.pending, k)
		if referenced {
			return c.unmark(ctx, logger, p.Source, o, ReasonReferenced)
		}
		return c.write(ctx, logger, p.Source, o, fp, "", StateCleared)
	default:
		delete(c.pending, k)
		return c.write(ctx, logger, p.Source, o, marks.Pending(fp), c.opts.Now().UTC().Format(time.RFC3339), StatePending)
	}
}

// indexed reports whether the index holds a live dependent of one of the
// rules of p that references o, as the DELETE path counts them.
func (c *Cleaner) indexed(p *registry.Protection, o kcp.Meta) bool {
	for _, e := range p.Entries {
		for _, d := range c.objects.Hits(e.Dependent, e.Paths, o.Cluster, o.Namespace, o.Name) {
			if live(e, p, o, d) {
				return true
			}
		}
	}
	return false
}

// confirm reads the dependents of every rule of p live, after it was
// called, as the DELETE path does before it allows, and reports whether one
// references o.
func (c *Cleaner) confirm(ctx context.Context, p *registry.Protection, o kcp.Meta) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	for _, e := range p.Entries {
		found, _, err := c.objects.Confirm(ctx, e.Dependent, e.Paths, o.Cluster, o.Namespace, o.Name)
		if err != nil {
			return false, fmt.Errorf("failed to read %s live: %w", e.Dependent, err)
		}
		for _, d := range found {
			if live(e, p, o, d) {
				return true, nil
			}
		}
	}
	return false, nil
}

// live reports whether dependent d of entry e counts as a reference to o:
// it is not being deleted, and it is not o itself (a type can reference
// its own kind).
func live(e registry.Entry, p *registry.Protection, o, d kcp.Meta) bool {
	if d.Terminating {
		return false
	}
	self := e.Dependent.Resource.GroupResource() == p.Target.Resource &&
		(d.UID != "" && d.UID == o.UID || d.Name == o.Name && d.Namespace == o.Namespace)
	return !self
}

// labelPatch is a JSON merge patch of the unreferenced label (removed if
// value is nil), the since annotation (if since is not nil), and the
// resourceVersion precondition (if not empty).
type labelPatch struct {
	Metadata struct {
		ResourceVersion string             `json:"resourceVersion,omitempty"`
		Labels          map[string]*string `json:"labels"`
		Annotations     map[string]*string `json:"annotations,omitempty"`
	} `json:"metadata"`
}

// write sets the mark value on o, with the since annotation if since is
// not empty (removed otherwise), on the condition that o is still at its
// resourceVersion; a conflict is not an error, the next pass looks again.
func (c *Cleaner) write(ctx context.Context, logger logr.Logger, src index.Source, o kcp.Meta, value, since, state string) error {
	var patch labelPatch
	patch.Metadata.ResourceVersion = o.ResourceVersion
	patch.Metadata.Labels = map[string]*string{depv1alpha1.LabelUnreferenced: &value}
	if since != "" {
		patch.Metadata.Annotations = map[string]*string{depv1alpha1.AnnotationUnreferencedSince: &since}
	}
	err := c.patch(ctx, src, o, patch)
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		logger.V(1).Info("The object changed since it was listed; looking again next time", "mark", value)
		return nil
	case err != nil:
		return fmt.Errorf("failed to mark it %s: %w", value, err)
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.Marked(state)
	}
	logger.V(1).Info("Marked an object that nothing references", "mark", value, "state", state)
	return nil
}

// unmark removes the mark of o and its since annotation, whatever their
// values: removing a mark is always safe, so it needs no precondition.
func (c *Cleaner) unmark(ctx context.Context, logger logr.Logger, src index.Source, o kcp.Meta, reason string) error {
	var patch labelPatch
	patch.Metadata.Labels = map[string]*string{depv1alpha1.LabelUnreferenced: nil}
	patch.Metadata.Annotations = map[string]*string{depv1alpha1.AnnotationUnreferencedSince: nil}
	if err := c.patch(ctx, src, o, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to remove its mark %s: %w", o.Unreferenced, err)
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.Unmarked(reason)
	}
	logger.Info("Removed a mark", "mark", o.Unreferenced, "reason", reason)
	return nil
}

func (c *Cleaner) patch(ctx context.Context, src index.Source, o kcp.Meta, patch labelPatch) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("failed to encode the patch: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	return c.objects.Patch(ctx, src, o.Cluster, o.Namespace, o.Name, types.MergePatchType, body)
}

// unmarkStale removes the marks of p's objects that are neither the
// current fingerprint's clearance nor its pending mark, if the objects can
// be read; the others stay until the dependents are indexed again.
func (c *Cleaner) unmarkStale(ctx context.Context, p *registry.Protection) error {
	if !c.readable(p.Source) {
		return nil
	}
	return c.unmarkWhere(ctx, p.Source, func(value string) bool { return value != p.Fingerprint && value != marks.Pending(p.Fingerprint) })
}

// unmarkAll removes every mark of the objects of target, read through src.
// Objects that cannot be read (their provider revoked the grant) cannot be
// written either, and their marks match no selector the controller sets
// (their rules are not guarded): that counts as done.
func (c *Cleaner) unmarkAll(ctx context.Context, target registry.Target, src index.Source) error {
	if !c.readable(src) {
		return nil
	}
	for k := range c.pending {
		if k.target == target {
			delete(c.pending, k)
		}
	}
	return c.unmarkWhere(ctx, src, func(string) bool { return true })
}

// unmarkWhere removes the marks whose value stale accepts from the objects
// of src that carry one.
func (c *Cleaner) unmarkWhere(ctx context.Context, src index.Source, stale func(string) bool) error {
	var objs []kcp.Meta
	if err := c.objects.ListObjects(ctx, src, depv1alpha1.LabelUnreferenced, func(m kcp.Meta) error {
		if m.Unreferenced != "" && stale(m.Unreferenced) {
			objs = append(objs, kcp.Meta{Cluster: m.Cluster, Namespace: m.Namespace, Name: m.Name, Unreferenced: m.Unreferenced})
		}
		return nil
	}); err != nil {
		return err
	}
	var errs []error
	for _, o := range objs {
		logger := log.FromContext(ctx).WithValues("cluster", o.Cluster, "resource", src.Resource.GroupResource(), "namespace", o.Namespace, "name", o.Name)
		if err := c.unmark(ctx, logger, src, o, ReasonStale); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
