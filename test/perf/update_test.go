//go:build perf

package perf

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// recordWrites is the webhook's count of the writes that its guard of
// records judged: every call kcp made to the guard.
const recordWrites = "dependency_webhook_record_writes_total"

// updates measures UPDATEs (merge PATCHes) of a protected object, a VPC
// referenced by a VM, that leave the records of deferred deletions (the
// deletion-requested label and the deletion-request annotation) alone: one
// that changes a spec field and one that changes a label, with the rule,
// under which the guard of records is configured for VPCs and kcp
// evaluates its match condition on every UPDATE, and without any rule. It
// fails the test if kcp called the guard for any of them.
func (s *setup) updates(ctx context.Context, t *testing.T) []string {
	const ns = "update"
	s.createNamespace(ctx, t, ns)
	createObjects(t, s.dyn, vpcs, ns, 2, func(i int) (string, map[string]any) {
		return []string{"target", "control"}[i], map[string]any{"cidr": "10.0.0.0/16"}
	})
	createObjects(t, s.dyn, vms, ns, 1, func(int) (string, map[string]any) { return "vm-target", vmSpec("target") })
	vpcsIn := s.dyn.Resource(vpcs).Namespace(ns)
	seq := 0
	patch := func(body string) error {
		_, err := vpcsIn.Patch(ctx, "target", types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	spec := func() error {
		seq++
		return patch(fmt.Sprintf(`{"spec":{"cidr":"10.%d.%d.0/24"}}`, seq/256%256, seq%256))
	}
	label := func() error {
		seq++
		return patch(fmt.Sprintf(`{"metadata":{"labels":{"perf-seq":"%d"}}}`, seq))
	}

	s.protect(ctx, t, s.standard)
	s.waitRecordsGuarded(ctx, t, ns, "control")
	writes0 := s.sum(t, recordWrites)
	guardedSpec, guardedLabel := measure(t, spec), measure(t, label)
	writes1 := s.sum(t, recordWrites)
	if writes1 != writes0 {
		t.Errorf("kcp called the guard of records %.0f times for %d UPDATEs that left the records alone; want none", writes1-writes0, 2*(samples+2))
	}
	s.protect(ctx, t, nil)
	freeSpec, freeLabel := measure(t, spec), measure(t, label)
	diff := func(with, without latency) string { return fmt.Sprintf("%+.1f", msOf(with.p50-without.p50)) }
	return []string{"## Protected object UPDATE (p50 / p99, ms): a merge PATCH of a referenced VPC that leaves the records of deferred deletions alone", "",
		"| change | no rule | with the rule (guard of records configured) | with minus without (p50) |",
		"|---|---|---|---|",
		fmt.Sprintf("| a spec field | %s | %s | %s |", freeSpec, guardedSpec, diff(guardedSpec, freeSpec)),
		fmt.Sprintf("| a label | %s | %s | %s |", freeLabel, guardedLabel, diff(guardedLabel, freeLabel)),
		"",
		fmt.Sprintf("Calls of the guard of records for the %d UPDATEs with the rule (%s, every outcome): %.0f (%.0f before, %.0f after). "+
			"Before them, a dry-run write of the label %s by the admin was refused by the guard, and counted.",
			2*(samples+2), recordWrites, writes1-writes0, writes0, writes1, depv1alpha1.LabelDeletionRequested), ""}
}

// waitRecordsGuarded waits until the guard of records refuses the admin's
// dry-run write of the deletion-requested label on the VPC name in ns, and
// the webhook counts it: kcp calls the guard for a write that sets it.
func (s *setup) waitRecordsGuarded(ctx context.Context, t *testing.T, ns, name string) {
	body := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, depv1alpha1.LabelDeletionRequested)
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		denied := s.counter(t, recordWrites+`{outcome="denied"}`)
		_, last = s.dyn.Resource(vpcs).Namespace(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(last) && s.counter(t, recordWrites+`{outcome="denied"}`) > denied, nil
	}); err != nil {
		t.Fatalf("the guard of records does not refuse the admin's write of %s: %v", depv1alpha1.LabelDeletionRequested, last)
	}
}
