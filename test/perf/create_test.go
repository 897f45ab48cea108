//go:build perf

package perf

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// creates measures the CREATE of a dependent (a VirtualMachine referencing
// an existing VPC) without any rule and with the rule, under which kcp calls
// the webhook's check of new references, which reads the VPC.
func (s *setup) creates(ctx context.Context, t *testing.T) []string {
	const ns = "create"
	must(t, s.cli.Cluster(s.consumer).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	createObjects(t, s.dyn, vpcs, ns, 1, func(int) (string, map[string]any) { return "target", map[string]any{} })
	seq := 0
	create := func() error {
		seq++
		_, err := s.dyn.Resource(vms).Namespace(ns).Create(ctx, newObject(vms, ns, fmt.Sprintf("vm-%05d", seq), vmSpec("target")), metav1.CreateOptions{})
		return err
	}

	s.protect(ctx, t, nil)
	free := measure(t, create)
	s.protect(ctx, t, s.standard)
	s.waitReferencesGuarded(ctx, t, ns)
	guarded := measure(t, create)
	return []string{"## Dependent CREATE (p50 / p99, ms): a VirtualMachine referencing an existing VPC", "",
		"| no rule | with the rule (new references checked) |",
		"|---|---|",
		fmt.Sprintf("| %s | %s |", free, guarded), ""}
}

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
