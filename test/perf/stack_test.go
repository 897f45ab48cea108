//go:build perf

package perf

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// stackWorkers is how many DELETEs a stack deletion has in flight, the same
// for both ways of deleting (kubectl sends one at a time).
const stackWorkers = 4

// stackLevel is a level of the stack: object i of a level references object
// i of the level below.
type stackLevel struct {
	gvr    schema.GroupVersionResource
	prefix string
	// ref is the path of the reference to the level below; empty at the
	// bottom.
	ref string
}

// stack are the levels, bottom first: Subnets reference VPCs, VirtualMachines
// reference Subnets.
var stack = []stackLevel{{vpcs, "vpc", ""}, {subnets, "subnet", ".spec.vpcRef.name"}, {vms, "vm", ".spec.subnetRef.name"}}

func (l stackLevel) name(i int) string {
	return fmt.Sprintf("%s-%05d", l.prefix, i)
}

// stacks measures deleting a stack of n objects per level for each n: in
// one go under Replay rules (as `kubectl delete vpcs,subnets,vms --all`
// does: every VPC, then every Subnet, then every VM, one DELETE each; the
// refused ones are recorded and replayed), against an ordered deletion
// without rules (every VM, wait until they are gone, every Subnet, wait,
// every VPC, wait) made once before and once after it: the ratio is to
// their mean, so that a machine whose speed drifts during the part (a
// shared host) does not decide it.
func (s *setup) stacks(ctx context.Context, t *testing.T, sizes []int) []string {
	var rules []*depv1alpha1.DependencyRule
	for k, l := range stack[1:] {
		below := stack[k]
		rules = append(rules, s.rule(l.prefix+"-to-"+below.prefix, l.gvr, below.gvr, l.ref, depv1alpha1.DeletionPolicyReplay))
	}
	replay := &protection{rules: rules}
	report := []string{fmt.Sprintf("## Deleting a stack (seconds): N VPCs <- N Subnets <- N VMs, %d DELETEs in flight", stackWorkers), "",
		"| N | ordered, no rules: before / after | in one go, Replay rules | ratio (to the mean of before and after) | in one go: VMs / Subnets / VPCs gone after | replayed DELETEs: deleted / refused |",
		"|---|---|---|---|---|---|"}
	for _, n := range sizes {
		before, _ := s.deleteStack(ctx, t, fmt.Sprintf("stack-ordered-%d", n), n, nil)
		deleted, refused := s.replayed(t)
		oneGo, levels := s.deleteStack(ctx, t, fmt.Sprintf("stack-replay-%d", n), n, replay)
		deleted2, refused2 := s.replayed(t)
		after, _ := s.deleteStack(ctx, t, fmt.Sprintf("stack-ordered-after-%d", n), n, nil)
		report = append(report, fmt.Sprintf("| %d | %.1f / %.1f | %.1f | %.2f | %s | %.0f / %.0f |",
			n, before.Seconds(), after.Seconds(), oneGo.Seconds(), 2*oneGo.Seconds()/(before+after).Seconds(), levels, deleted2-deleted, refused2-refused))
	}
	return append(report, "")
}

// deleteStack creates a stack of n objects per level in namespace ns, new,
// and deletes it: under p (Replay rules) in one go, without rules (nil)
// level by level from the top. It returns how long the deletion took, until
// every object was gone, and when each level was gone (seconds, top first),
// after checking through watches that no object went before one that
// referenced it.
func (s *setup) deleteStack(ctx context.Context, t *testing.T, ns string, n int, p *protection) (time.Duration, string) {
	s.protect(ctx, t, p)
	if p != nil {
		s.settleTracking(ctx, t, p, ns+"-probe")
	}
	must(t, s.cli.Cluster(s.consumer).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for k, l := range stack {
		createObjects(t, s.dyn, l.gvr, ns, n, func(i int) (string, map[string]any) {
			if k == 0 {
				return l.name(i), map[string]any{}
			}
			return l.name(i), refSpec(l.ref, stack[k-1].name(i))
		})
	}
	if p != nil {
		s.waitIndexed(ctx, t)
	}
	deletedAt := s.watchDeletions(t, ns)

	kcp0, cpu0 := s.kcpTimes(ctx, t), s.cpuTimes(ctx, t)
	if p != nil {
		s.profileKCP(ctx, t, fmt.Sprintf("stack-%d", n), 30)
	}
	start := time.Now()
	var gone []string
	waitGone := func(l stackLevel) {
		s.waitGone(ctx, t, ns, l)
		gone = append(gone, fmt.Sprintf("%.1f", time.Since(start).Seconds()))
	}
	if p != nil {
		// Where the time of the refused DELETEs goes: each is decided
		// twice (the record changes the object, and kcp admits the DELETE
		// again on the new state).
		const sum, count = `dependency_webhook_decision_duration_seconds_sum{outcome="denied"}`, `dependency_webhook_decision_duration_seconds_count{outcome="denied"}`
		sum0, count0 := s.counter(t, sum), s.counter(t, count)
		const listed, selected, caughtUp = `dependency_webhook_live_reads_total{how="list"}`, `dependency_webhook_live_reads_total{how="label"}`, `dependency_webhook_live_reads_total{how="index"}`
		listed0, selected0, caughtUp0 := s.counter(t, listed), s.counter(t, selected), s.counter(t, caughtUp)
		decided0 := s.decisions(t)
		for k, l := range stack {
			s.deleteEach(ctx, t, ns, l.gvr, k < len(stack)-1)
			if k == len(stack)-2 {
				decided := s.counter(t, count) - count0
				t.Logf("in one go: the refused DELETEs took %s, with %.0f denials of the webhook taking %.1f ms each on average",
					time.Since(start).Round(time.Millisecond), decided, 1000*(s.counter(t, sum)-sum0)/decided)
			}
		}
		// The levels go top first, if in dependency order.
		for _, l := range slices.Backward(stack) {
			waitGone(l)
		}
		t.Logf("in one go: live reads of dependents: %.0f listed in full, %.0f listed by label, %.0f answered by the index once caught up; DELETEs decided via teardown / horizon / revision / live / index / in-flight: %s",
			s.counter(t, listed)-listed0, s.counter(t, selected)-selected0, s.counter(t, caughtUp)-caughtUp0, s.decisions(t).since(decided0))
	} else {
		for _, l := range slices.Backward(stack) {
			s.deleteEach(ctx, t, ns, l.gvr, false)
			waitGone(l)
		}
	}
	took := time.Since(start)
	t.Logf("stack of %d per level in %s deleted in %s; VMs, Subnets, VPCs gone after %s s; CPU used: %s", n, ns, took.Round(time.Millisecond), strings.Join(gone, ", "), s.cpuTimes(ctx, t).since(cpu0))
	t.Logf("what kcp served while %s was deleted: %s", ns, s.kcpTimes(ctx, t).sinceOf(kcp0, 3*n, "object"))
	checkDependencyOrder(ctx, t, n, deletedAt)
	return took, strings.Join(gone, " / ")
}

// settleTracking waits, before a stack under p is created, until the
// webhook may decide from the index what it would otherwise read: until
// MaxInFlight (and the index's lag) after the rules of p report
// ReferencesTracked=True and after the webhook found, with probes of kcp's
// admission, the labelling webhook of each dependent type and the guard of
// each protected type's ledger in effect, as on an installation whose rules
// protect long before a stack goes. The probes need an object of each level
// to probe with and an allowed DELETE of each protected level to start
// them: one of each in the namespace probe, none referencing another.
func (s *setup) settleTracking(ctx context.Context, t *testing.T, p *protection, probe string) {
	tracked := s.waitTracked(ctx, t, p)
	s.createNamespace(ctx, t, probe)
	for _, l := range stack {
		createObjects(t, s.dyn, l.gvr, probe, 1, func(i int) (string, map[string]any) {
			if l.ref == "" {
				return l.name(i), map[string]any{}
			}
			return l.name(i), refSpec(l.ref, "missing")
		})
	}
	s.waitIndexed(ctx, t)
	for _, l := range stack[:len(stack)-1] {
		must(t, s.dyn.Resource(l.gvr).Namespace(probe).Delete(ctx, l.name(0), dryRun))
	}
	settled := later(tracked, time.Now()).Add(inflight.MaxInFlight + 15*time.Second)
	t.Logf("waiting %s, until %s after the rules were tracked and the webhook probed kcp's admission", time.Until(settled).Round(time.Second), inflight.MaxInFlight+15*time.Second)
	time.Sleep(time.Until(settled))
}

// deleteEach lists the objects of gvr in ns and deletes each with a DELETE
// of its own, stackWorkers at a time. Each must be deferred (refused and
// recorded) if deferred is set, and allowed otherwise.
func (s *setup) deleteEach(ctx context.Context, t *testing.T, ns string, gvr schema.GroupVersionResource, deferred bool) {
	list, err := s.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	must(t, parallel(len(list.Items), stackWorkers, func(i int) error {
		name := list.Items[i].GetName()
		err := s.dyn.Resource(gvr).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		switch {
		case deferred && err == nil:
			return fmt.Errorf("deleting %s %s: it was deleted, want its deletion deferred", gvr.Resource, name)
		case deferred && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "its deletion is deferred")):
			return fmt.Errorf("deleting %s %s: want its deletion deferred: %w", gvr.Resource, name, err)
		case !deferred && err != nil:
			return fmt.Errorf("deleting %s %s: %w", gvr.Resource, name, err)
		}
		return nil
	}))
}

// waitGone waits until ns holds no object of the level.
func (s *setup) waitGone(ctx context.Context, t *testing.T, ns string, l stackLevel) {
	s.waitNone(ctx, t, l.gvr, ns)
}

// waitNone waits until ns holds no object of gvr.
func (s *setup) waitNone(ctx context.Context, t *testing.T, gvr schema.GroupVersionResource, ns string) {
	must(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
		list, err := s.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, err
	}))
}

// deletions are the revisions at which the objects of each level were
// deleted, by name.
type deletions func(l stackLevel, name string) (int64, bool)

// watchDeletions watches the levels of the stack in ns until the test ends
// and returns at which revision each object was deleted (see
// kcpenv.WatchDeletions).
func (s *setup) watchDeletions(t *testing.T, ns string) deletions {
	watchCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	deleted := map[string]*kcpenv.Deletions{}
	for _, l := range stack {
		d, err := kcpenv.WatchDeletions(watchCtx, s.dyn.Resource(l.gvr).Namespace(ns))
		must(t, err)
		deleted[l.prefix] = d
	}
	return func(l stackLevel, name string) (int64, bool) {
		rv, ok, err := deleted[l.prefix].Revision(ns, name)
		must(t, err)
		return rv, ok
	}
}

// checkDependencyOrder fails the test unless the watches saw every object of
// a stack of n per level deleted, each after the object that referenced it.
func checkDependencyOrder(ctx context.Context, t *testing.T, n int, deletedAt deletions) {
	t.Helper()
	var problems []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		problems = nil
		for k, l := range stack {
			for i := range n {
				at, ok := deletedAt(l, l.name(i))
				if !ok {
					problems = append(problems, "no deletion seen of "+l.name(i))
					continue
				}
				if k == len(stack)-1 {
					continue
				}
				above := stack[k+1]
				if dependentAt, ok := deletedAt(above, above.name(i)); ok && at < dependentAt {
					problems = append(problems, fmt.Sprintf("%s deleted at %d, before %s, which referenced it, at %d", l.name(i), at, above.name(i), dependentAt))
				}
			}
		}
		return len(problems) == 0, nil
	})
	if err != nil {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("and %d more", len(problems)-10))
		}
		t.Fatalf("the stack was not deleted in dependency order:\n%s", strings.Join(problems, "\n"))
	}
}

// replayed returns how many replays of deferred deletions the webhook
// counted as deleted and as refused.
func (s *setup) replayed(t *testing.T) (deleted, refused float64) {
	return s.counter(t, `dependency_webhook_deletions_replayed_total{result="deleted"}`),
		s.counter(t, `dependency_webhook_deletions_replayed_total{result="refused"}`)
}
