//go:build perf

package perf

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// creates measures the CREATE of a dependent (a VirtualMachine referencing
// an existing VPC) without any rule and with the rule, under which kcp calls
// the labelling webhook, which computes the VM's reference labels and
// records the reference on the VPC's ledger (which also tells it whether the
// VPC is being deleted), and, once the rule reports ReferencesTracked=True,
// not the check of new references (its match condition
// references-not-recorded). The labelling call is
// isolated as an UPDATE of a VM's scheme label (what the relabeller
// writes): kcp calls the labelling webhook for it (its match condition
// covers the labels it manages) but not the check of new references (whose
// match condition covers only the fields references lie in). An UPDATE of
// another label calls neither. The CREATE without the rule is measured
// before the rule and again after it, and the ratio is to their mean. The
// measured CREATEs reference one VPC one after another, so that the webhook
// admits most of them under its lease on the VPC; the CREATE of the first
// VM referencing a VPC (a VPC created just before each) is measured too:
// it records its reference with a write of its own.
func (s *setup) creates(ctx context.Context, t *testing.T) []string {
	const ns = "create"
	s.createNamespace(ctx, t, ns)
	createObjects(t, s.dyn, vpcs, ns, 1, func(int) (string, map[string]any) { return "target", map[string]any{} })
	createObjects(t, s.dyn, vms, ns, 1, func(int) (string, map[string]any) { return "vm-relabelled", vmSpec("target") })
	seq := 0
	create := func() error {
		seq++
		_, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, newObject(vms, ns, fmt.Sprintf("vm-%05d", seq), vmSpec("target")), metav1.CreateOptions{})
		return err
	}
	// fresh creates a VPC that no VM referenced yet, and first creates a VM
	// referencing it: a reference the webhook records with a write of its
	// own, where create's follow one another within the lease the second
	// of them took (see inflight.Lease).
	var vpc string
	fresh := func() error {
		seq++
		vpc = fmt.Sprintf("vpc-first-%05d", seq)
		_, err := s.dyn.Resource(vpcs).Namespace(ns).Create(ctx, newObject(vpcs, ns, vpc, map[string]any{}), metav1.CreateOptions{})
		return err
	}
	first := func() error {
		_, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, newObject(vms, ns, "vm-"+vpc, vmSpec(vpc)), metav1.CreateOptions{})
		return err
	}
	relabel := func() error {
		seq++
		_, err := s.dyn.Resource(vms).Namespace(ns).Patch(ctx, "vm-relabelled", types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"labels":{%q:"relabel-perf-%d"}}}`, depv1alpha1.LabelReferencesScheme, seq), metav1.PatchOptions{})
		return err
	}
	label := func() error {
		seq++
		_, err := s.dyn.Resource(vms).Namespace(ns).Patch(ctx, "vm-relabelled", types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"labels":{"perf-seq":"%d"}}}`, seq), metav1.PatchOptions{})
		return err
	}
	// calls returns how often the webhook was called to label a dependent
	// and to check its new references.
	calls := func() (labelled, checked float64) {
		return s.sum(t, "dependency_webhook_labels_total"), s.sum(t, "dependency_webhook_reference_checks_total")
	}

	s.protect(ctx, t, nil)
	kcp0 := s.kcpTimes(ctx, t)
	free := measure(t, create)
	kcpFree := s.kcpTimes(ctx, t).sinceOf(kcp0, samples+2, "CREATE", createResources...)
	freeRelabel, freeLabel := measure(t, relabel), measure(t, label)
	s.protect(ctx, t, s.standard)
	s.waitReferencesGuarded(ctx, t, ns)
	s.waitTracked(ctx, t, s.standard)
	// kcp spares the check of new references a recorded CREATE once it has
	// the controller's match condition.
	spared := 0
	must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, before := calls()
		spared++
		if _, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, newObject(vms, ns, fmt.Sprintf("vm-spared-%d", spared), vmSpec("target")), metav1.CreateOptions{}); err != nil {
			return false, err
		}
		_, after := calls()
		return after == before, nil
	}))
	labelled0, checked0 := calls()
	kcp0 = s.kcpTimes(ctx, t)
	guarded := measure(t, create)
	kcpGuarded := s.kcpTimes(ctx, t).sinceOf(kcp0, samples+2, "CREATE", createResources...)
	labelled1, checked1 := calls()
	guardedRelabel := measure(t, relabel)
	labelled2, checked2 := calls()
	guardedLabel := measure(t, label)
	labelled3, checked3 := calls()
	guardedFirst := measureEach(t, fresh, first)
	// The CREATE without the rule again, once kcp calls the labelling
	// webhook no more: on a host whose speed drifts, one baseline would
	// decide the ratio, so the CREATE's row compares with the mean of the
	// two.
	s.protect(ctx, t, nil)
	must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		before, _ := calls()
		if err := create(); err != nil {
			return false, err
		}
		after, _ := calls()
		return after == before, nil
	}))
	freeAfter := measure(t, create)
	freeMean := latency{p50: (free.p50 + freeAfter.p50) / 2, p99: (free.p99 + freeAfter.p99) / 2}
	diff := func(with, without latency) string { return fmt.Sprintf("%+.1f", msOf(with.p50-without.p50)) }
	cols := func(with, without latency) string {
		return fmt.Sprintf("%s | %s | %s | %.2f", without, with, diff(with, without), float64(with.p50)/float64(without.p50))
	}
	return []string{"## Dependent writes (p50 / p99, ms): a VirtualMachine referencing an existing VPC", "",
		"| request | no rule | with the rule | with minus without (p50) | ratio (p50) |",
		"|---|---|---|---|---|",
		fmt.Sprintf("| CREATE of VMs referencing one VPC, one after another (with the rule: the labelling webhook, which admits them under its lease on the VPC; not the check of new references; no rule: the mean of the CREATEs before the rule, %s, and after it, %s) | %s |", free, freeAfter, cols(guarded, freeMean)),
		fmt.Sprintf("| CREATE of the first VM referencing its VPC (with the rule: the reference recorded with a write of its own; each VPC created just before, untimed; no rule: as above) | %s |", cols(guardedFirst, freeMean)),
		fmt.Sprintf("| UPDATE of the scheme label (with the rule: the labelling webhook alone) | %s |", cols(guardedRelabel, freeRelabel)),
		fmt.Sprintf("| UPDATE of another label (with the rule: no webhook) | %s |", cols(guardedLabel, freeLabel)),
		"",
		fmt.Sprintf("With the rule, the webhook labelled %.0f times and checked new references %.0f times during the %d CREATEs, %.0f and %.0f times during the %d UPDATEs of the scheme label, and %.0f and %.0f times during the %d UPDATEs of another label (dependency_webhook_labels_total, dependency_webhook_reference_checks_total).",
			labelled1-labelled0, checked1-checked0, samples+2, labelled2-labelled1, checked2-checked1, samples+2, labelled3-labelled2, checked3-checked2, samples+2),
		fmt.Sprintf("The CREATEs of the first row follow one another: the second took a lease on the VPC, under which the webhook admits the next ones without writing it, and names them in one write as the lease ends (--reference-lease). The first VM of a VPC pays that write: %s ms over the CREATE without a rule, of which the labelling call takes about %s ms (taking it to cost on a CREATE what it costs on an UPDATE), and recording the reference on the VPC the rest.",
			diff(guardedFirst, freeMean), diff(guardedRelabel, freeRelabel)),
		"What kcp measured (apiserver_admission_webhook_admission_duration_seconds, apiserver_request_duration_seconds; with the rule, the webhook's GET and PATCH of the VPC through the virtual workspace are among the requests, and so are the SubjectAccessReviews with which the virtual workspace authorizes them) during the CREATEs without the rule: " + kcpFree +
			"; with the rule: " + kcpGuarded + ".", ""}
}

// createResources are the resources whose requests the CREATE row reports:
// the VPCs and VMs, and the SubjectAccessReviews that kcp's virtual
// workspace sends itself to authorize the webhook's writes through it.
var createResources = []string{vpcs.Resource, vms.Resource, "subjectaccessreviews"}

// waitReferencesGuarded waits until the check of new references refuses a
// dependent in ns that references a VPC being deleted (held by a
// finalizer), so that the CREATEs measured with the rule are checked.
func (s *setup) waitReferencesGuarded(ctx context.Context, t *testing.T, ns string) {
	const finalizer = "perf.test.io/hold"
	vpcsIn := s.dyn.Resource(vpcs).Namespace(ns)
	doomed := newObject(vpcs, ns, "doomed", map[string]any{})
	doomed.SetFinalizers([]string{finalizer})
	_, err := vpcsIn.Create(ctx, doomed, metav1.CreateOptions{})
	must(t, err)
	must(t, vpcsIn.Delete(ctx, "doomed", metav1.DeleteOptions{}))
	probe := newObject(vms, ns, "vm-probe", vmSpec("doomed"))
	must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "being deleted"), nil
	}))
	_, err = vpcsIn.Patch(ctx, "doomed", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	must(t, err)
}
