//go:build perf

package perf

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
)

// hotWorkers is how many CREATEs of VMs referencing the hot VPC are in
// flight at once.
const hotWorkers = 16

// ledgerConflicts is the webhook's count of writes of a ledger of admitted
// references that lost a race with another write of the object and were
// tried again.
const ledgerConflicts = "dependency_webhook_ledger_conflicts_total"

// hots creates n VMs that all reference one VPC, hotWorkers at a time, with
// the rule (each CREATE's reference is recorded on that VPC, whose writer
// batches the marks of concurrent admissions) and without any rule, and
// reports how long that took, the errors the client saw (the test fails on
// any with the rule) and the ledger's write conflicts, which the webhook
// retries.
func (s *setup) hots(ctx context.Context, t *testing.T, n int) []string {
	rule := s.hot(ctx, t, n, s.standard)
	free := s.hot(ctx, t, n, nil)
	return []string{fmt.Sprintf("## A hot target (seconds): %d VMs referencing one VPC created, %d at a time", n, hotWorkers), "",
		"| N | no rule | with the rule | ratio | errors the client saw: no rule / with the rule | ledger write conflicts (retried by the webhook) |",
		"|---|---|---|---|---|---|",
		fmt.Sprintf("| %d | %.1f | %.1f | %.2f | %d / %d | %.0f |", n, free.took.Seconds(), rule.took.Seconds(), rule.took.Seconds()/free.took.Seconds(), free.errors, rule.errors, rule.conflicts),
		"",
		fmt.Sprintf("With the rule, the labelling webhook recorded the references as %s (dependency_webhook_references_recorded_total by result); the VPC's ledger afterwards: %s.", rule.recorded, rule.ledger),
		fmt.Sprintf("What kcp measured during the CREATEs without the rule: %s; with the rule: %s.", free.kcp, rule.kcp), ""}
}

// hotRun is what hot measured.
type hotRun struct {
	took   time.Duration
	errors int
	// conflicts, recorded and ledger are, under the rule, the ledger's
	// write conflicts and the recorded references meanwhile, and the VPC's
	// ledger afterwards.
	conflicts        float64
	recorded, ledger string
	// kcp is what kcp measured meanwhile.
	kcp string
}

// hot creates the VPC "hot" and n VMs referencing it in a namespace of its
// own under p (nil: no rule).
func (s *setup) hot(ctx context.Context, t *testing.T, n int, p *protection) hotRun {
	ns := "hot-free"
	if p != nil {
		ns = "hot-rule"
	}
	s.protect(ctx, t, p)
	if p != nil {
		s.waitTracked(ctx, t, p)
	}
	s.createNamespace(ctx, t, ns)
	createObjects(t, s.dyn, vpcs, ns, 1, func(int) (string, map[string]any) { return "hot", map[string]any{} })
	conflicts0, recorded0, kcp0 := s.counter(t, ledgerConflicts), s.recorded(t), s.kcpTimes(ctx, t)
	var lock sync.Mutex
	var failures []string
	start := time.Now()
	must(t, parallel(n, hotWorkers, func(i int) error {
		_, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, newObject(vms, ns, fmt.Sprintf("vm-%05d", i), vmSpec("hot")), metav1.CreateOptions{})
		if err != nil {
			lock.Lock()
			failures = append(failures, fmt.Sprintf("vm-%05d: %v", i, err))
			lock.Unlock()
		}
		return nil
	}))
	run := hotRun{took: time.Since(start), errors: len(failures), kcp: s.kcpTimes(ctx, t).since(kcp0, n, "CREATE")}
	t.Logf("hot target in %s: %d VMs created in %s, %d failed", ns, n, run.took.Round(time.Millisecond), len(failures))
	if p != nil {
		run.conflicts, run.recorded = s.counter(t, ledgerConflicts)-conflicts0, s.recorded(t).since(recorded0)
		obj, err := s.dyn.Resource(vpcs).Namespace(ns).Get(ctx, "hot", metav1.GetOptions{})
		must(t, err)
		run.ledger = describeLedger(obj.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences])
		if len(failures) > 0 {
			t.Errorf("hot target with the rule: %d of %d CREATEs failed, e.g.:\n%s", len(failures), n, strings.Join(first(failures), "\n"))
		}
	}
	s.dropNamespaces(ctx, t, ns)
	return run
}

// describeLedger describes an encoded ledger of admitted references: its
// size, floors and marks.
func describeLedger(value string) string {
	l, err := inflight.Parse(value)
	if err != nil {
		return fmt.Sprintf("%d bytes, malformed: %v", len(value), err)
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return t.Format(time.TimeOnly)
	}
	clearance := "none"
	if l.Clearance != "" {
		clearance = l.Clearance
	}
	return fmt.Sprintf("%d bytes, %d marks, floor %s, landed %s, clearance %s", len(value), len(l.Marks), at(l.Floor), at(l.Landed), clearance)
}

// cleared reports whether obj carries the webhook's clearance for its own
// UID (see inflight.Ledger.Clearance).
func cleared(obj *unstructured.Unstructured) bool {
	l, err := inflight.Parse(obj.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences])
	return err == nil && l.Clearance != "" && strings.HasSuffix(l.Clearance, "/"+string(obj.GetUID()))
}
