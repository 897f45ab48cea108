package conditions

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// SourceStates tells what the index knows about a source; *index.Index
// implements it.
type SourceStates interface {
	State(src index.Source) index.State
	Changes() <-chan struct{}
	// Largest returns the indexed dependent of src that holds the most
	// references, and how many.
	Largest(src index.Source) (kcp.Meta, int)
}

// FieldOwner is the field manager under which the webhook applies its
// conditions to the status of rules.
const FieldOwner = "dependency-webhook"

// Reporter writes the DependentsIndexed and ReferencesGuarded conditions
// of every registered rule from what the index knows about the rule's
// dependent type and its protected types: whenever the index reports a
// change, and every interval to repair lost writes. It applies exactly
// these two conditions with server-side apply under its own field manager
// (FieldOwner): conditions are a list map keyed by type, so that the
// controller's conditions, which the controller applies under its own, are
// never touched. It writes only when a condition differs from what the
// manager's cache holds. It is a manager.Runnable that runs on every
// replica; replicas that see the same state write nothing.
//
// DependentsIndexed also says, in its message, which dependent of the type
// references the most objects once that is close to maxReferences, the
// most one may reference (see WithLargest); every interval, as that reads
// every indexed dependent.
type Reporter struct {
	mgr           mcmanager.Manager
	registry      *registry.Registry
	states        SourceStates
	interval      time.Duration
	maxReferences int

	// largest is what the last report found of each dependent type, read
	// anew on every tick.
	largest map[index.Source]Largest
}

// NewReporter returns a Reporter for the rules of reg, reading rules
// through the manager's workspaces, whose dependents may reference
// maxReferences objects each.
func NewReporter(mgr mcmanager.Manager, reg *registry.Registry, states SourceStates, interval time.Duration, maxReferences int) *Reporter {
	return &Reporter{mgr: mgr, registry: reg, states: states, interval: interval, maxReferences: maxReferences, largest: map[index.Source]Largest{}}
}

// Start implements manager.Runnable.
func (s *Reporter) Start(ctx context.Context) error {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.states.Changes():
		case <-ticker.C:
			s.largest = map[index.Source]Largest{}
		}
		s.reportAll(ctx)
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (s *Reporter) NeedLeaderElection() bool {
	return false
}

// reportAll reports on every registered rule.
func (s *Reporter) reportAll(ctx context.Context) {
	logger := log.FromContext(ctx).WithName("status")
	for _, r := range s.registry.Rules() {
		if err := s.report(ctx, r); err != nil && !apierrors.IsNotFound(err) {
			logger.V(1).Info("Failed to report the index state on a rule", "rule", r.Key, "error", err)
		}
	}
}

// report applies the conditions of one rule if they differ from those in
// the manager's cache.
func (s *Reporter) report(ctx context.Context, r *registry.Rule) error {
	return applyOwn(ctx, s.mgr, r.Key, FieldOwner, func(rule *depv1alpha1.DependencyRule) []metav1.Condition {
		if rule.UID != r.UID {
			return nil // another object of that name; the registry will see it
		}
		paths := make([]fieldpath.Reference, 0, len(r.References))
		for _, ref := range r.References {
			paths = append(paths, ref.Path)
		}
		state := s.states.State(r.Dependent)
		want := []metav1.Condition{WithLargest(Indexed(state, paths, rule.Generation), state.Kind, s.largestOf(r.Dependent))}
		if g, ok := s.registry.GuardOf(r.Key); ok {
			want = append(want, Guarded(g, s.states.State, rule.Generation))
		}
		return want
	})
}

// largestOf returns the dependent of src that references the most objects,
// as the last tick found it (read now if it has not).
func (s *Reporter) largestOf(src index.Source) Largest {
	l, ok := s.largest[src]
	if !ok {
		l.Dependent, l.References = s.states.Largest(src)
		l.Max = s.maxReferences
		s.largest[src] = l
	}
	return l
}
