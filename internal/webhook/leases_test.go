package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
)

// The webhook admits the references to one VPC that come in a stream under
// a lease on the VPC (see inflight.Lease): one write stores it, the VMs
// admitted until it ends cost no write of the VPC, one write names them as
// it ends, and a DELETE of the VPC waits for the leases on it to end.
var _ = Describe("Leases", Ordered, func() {
	const lease = 2 * time.Second
	var consumer logicalcluster.Path
	vmRef := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	ledgerOf := func(ctx context.Context, name string) (inflight.Ledger, string) {
		GinkgoHelper()
		vpc := newObject(vpcGVR, "default", name, nil)
		Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(vpc), vpc)).To(Succeed())
		l, err := inflight.Parse(vpc.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences])
		Expect(err).NotTo(HaveOccurred())
		return l, vpc.GetResourceVersion()
	}
	createVM := func(ctx context.Context, name, vpc string) {
		GinkgoHelper()
		vm := newObject(vmGVR, "default", name, vmRef(vpc))
		Expect(cli.Cluster(consumer).Create(ctx, vm)).To(Succeed())
		Expect(vm.GetLabels()).To(HaveKey(depv1alpha1.LabelAdmission))
	}
	// writeLedger writes the VPC's ledger as the webhook's user does: as
	// another replica of the webhook would.
	writeLedger := func(ctx context.Context, name string, l inflight.Ledger) {
		GinkgoHelper()
		Expect(asWebhookUser(ctx, consumer, vpcGVR.Group, vpcGVR.Resource).Patch(ctx, newObject(vpcGVR, "default", name, nil), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, depv1alpha1.AnnotationAdmittedReferences, l.String())))).To(Succeed())
	}

	BeforeAll(func(ctx context.Context) {
		By("starting the webhook, with leases of " + lease.String() + ", and the controller")
		d, _ := newVMsOfVPCs(ctx, func(o *webhookserver.Options) { o.ReferenceLease = lease })
		consumer = d.consumer
		Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", "vpc-warmup", nil))).To(Succeed())
		// kcp calls the compute provider's webhooks a moment after the
		// binding: until a VM carries an admission id, its reference was
		// not recorded, and it is created again.
		Eventually(func(g Gomega) {
			vm := newObject(vmGVR, "default", "vm-warmup", vmRef("vpc-warmup"))
			g.Expect(cli.Cluster(consumer).Create(ctx, vm)).To(Succeed())
			if vm.GetLabels()[depv1alpha1.LabelAdmission] == "" {
				g.Expect(cli.Cluster(consumer).Delete(ctx, vm)).To(Succeed())
			}
			g.Expect(vm.GetLabels()).To(HaveKey(depv1alpha1.LabelAdmission), "the VM was admitted before the webhooks applied")
		}).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed())
	})

	It("admits a stream of VMs referencing one VPC under one lease: the VMs after the one that took it cost no write of the VPC, one write names them as it ends, and the VPC's DELETE is denied naming each", func(ctx context.Context) {
		Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", "vpc-stream", nil))).To(Succeed())
		createVM(ctx, "vm-stream-0", "vpc-stream")
		createVM(ctx, "vm-stream-1", "vpc-stream")
		l, rv := ledgerOf(ctx, "vpc-stream")
		Expect(l.Leases).To(HaveLen(1), "the second VM within moments of the first took a lease: %s", l)
		Expect(l.Leases[0].Until).To(BeTemporally(">", time.Now()))
		for i := 2; i < 8; i++ {
			createVM(ctx, fmt.Sprintf("vm-stream-%d", i), "vpc-stream")
		}
		_, after := ledgerOf(ctx, "vpc-stream")
		Expect(after).To(Equal(rv), "VMs admitted under the lease wrote the VPC")

		By("naming them as the lease ends")
		Eventually(func(g Gomega) {
			l, _ := ledgerOf(ctx, "vpc-stream")
			g.Expect(l.Leases).To(BeEmpty())
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("denying the VPC's DELETE, naming the VMs")
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-stream", "vm-stream-0", "vm-stream-7")
	})

	It("denies the DELETE of a VPC sent right after a VM admitted under its lease was created, naming the VM, and allows it once the VMs are gone, without waiting for the lease to end", func(ctx context.Context) {
		Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", "vpc-soon", nil))).To(Succeed())
		createVM(ctx, "vm-soon-0", "vpc-soon")
		createVM(ctx, "vm-soon-1", "vpc-soon")
		createVM(ctx, "vm-soon-2", "vpc-soon")
		l, _ := ledgerOf(ctx, "vpc-soon")
		Expect(l.Leases).To(HaveLen(1))
		err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-soon")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "DELETE: %v", err)
		Expect(err.Error()).To(ContainSubstring("vm-soon-2"))

		By("deleting the VMs, and under a new lease, the VPC at once")
		createVM(ctx, "vm-soon-3", "vpc-soon")
		createVM(ctx, "vm-soon-4", "vpc-soon")
		for i := range 5 {
			Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", fmt.Sprintf("vm-soon-%d", i))).To(Succeed())
		}
		l, _ = ledgerOf(ctx, "vpc-soon")
		Expect(l.Leases).To(HaveLen(1), "the VMs' lease")
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-soon")).To(Succeed())
	})

	It("has the DELETE of a VPC with another replica's lease wait for it to end, and decide on the VPC as that replica left it", func(ctx context.Context) {
		Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", "vpc-other", nil))).To(Succeed())
		end := time.Now().Add(lease)
		writeLedger(ctx, "vpc-other", inflight.Ledger{}.WithLease(inflight.NewReplica(), end))
		// The other replica names what it admitted under the lease as the
		// lease ends: nothing. kcp admitted the DELETE on the state with
		// the lease, so it commits only after admitting it again on this.
		go func() {
			defer GinkgoRecover()
			time.Sleep(time.Until(end) + 200*time.Millisecond)
			writeLedger(ctx, "vpc-other", inflight.Ledger{})
		}()
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-other")).To(Succeed())
		Expect(time.Now()).To(BeTemporally(">=", end), "the DELETE did not wait for the lease to end")
	})

	It("refuses the DELETE of a VPC with another replica's lease that it never ends, as a reference in flight, saying so", func(ctx context.Context) {
		Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", "vpc-stuck", nil))).To(Succeed())
		end := time.Now().Add(time.Second)
		writeLedger(ctx, "vpc-stuck", inflight.Ledger{}.WithLease(inflight.NewReplica(), end))
		err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-stuck")
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "DELETE: %v", err)
		Expect(err.Error()).To(And(ContainSubstring("in flight"), ContainSubstring("lease")))
		Expect(strings.Contains(err.Error(), "retry in")).To(BeTrue())
	})
})
