package webhook_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// The audit of dangling references, as deployed: the webhook (with a short
// grace period) and the controller, a network provider whose VPCs are
// protected, a compute provider whose VMs reference them and whose
// APIExport claims events, and a consumer.
var _ = Describe("Dangling references", Ordered, func() {
	const grace = 15 * time.Second
	var (
		network, compute, consumer logicalcluster.Path
		wh                         *kcpenv.Webhook
	)
	vmRef := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	// danglingEvents returns the DanglingReference Events on the VM name.
	danglingEvents := func(ctx context.Context, g Gomega, name string) []corev1.Event {
		events := &corev1.EventList{}
		g.Expect(cli.Cluster(consumer).List(ctx, events, client.InNamespace("default"))).To(Succeed())
		var out []corev1.Event
		for _, e := range events.Items {
			if e.InvolvedObject.Name == name && e.InvolvedObject.Kind == "VirtualMachine" && e.Reason == depv1alpha1.EventReasonDanglingReference {
				out = append(out, e)
			}
		}
		return out
	}
	// resolved returns the rule's ReferencesResolved condition.
	resolved := func(ctx context.Context, g Gomega) *metav1.Condition {
		r := &depv1alpha1.DependencyRule{}
		g.Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: "vm-vpcs"}, r)).To(Succeed())
		c := meta.FindStatusCondition(r.Status.Conditions, depv1alpha1.ConditionReferencesResolved)
		g.Expect(c).NotTo(BeNil(), "no ReferencesResolved condition")
		return c
	}
	dangling := func() float64 {
		GinkgoHelper()
		n, err := wh.Gauge("dependency_webhook_dangling_references", map[string]string{"resource": "virtualmachines.compute.test.io"})
		Expect(err).NotTo(HaveOccurred())
		return n
	}

	BeforeAll(func(ctx context.Context) {
		By("starting the webhook, with a grace period of " + grace.String() + ", and the controller")
		var d vmsOfVPCs
		d, wh = newVMsOfVPCs(ctx, func(o *webhookserver.Options) { o.DanglingGracePeriod = grace })
		network, compute, consumer = d.network, d.compute, d.consumer
		expectCondition(ctx, compute, "vm-vpcs", depv1alpha1.ConditionReferencesResolved, metav1.ConditionTrue, depv1alpha1.ReasonAllResolved)
	})

	It("reports a VM referencing a missing VPC with a Warning Event and on its rule within the grace period plus 30 s, and clears it within 30 s of the VPC's creation", func(ctx context.Context) {
		created := time.Now()
		create(ctx, consumer, newObject(vmGVR, "default", "vm-dangling", vmRef("vpc-missing")))

		By("the Event on the VM and the condition on the rule, not before the grace period, within it plus 30 s")
		const want = `VirtualMachine/default/vm-dangling references vpcs.network.test.io "vpc-missing" in namespace "default", which does not exist`
		var evented, conditioned time.Duration
		Eventually(func(g Gomega) {
			if evented == 0 {
				events := danglingEvents(ctx, g, "vm-dangling")
				g.Expect(events).NotTo(BeEmpty(), "no DanglingReference Event yet")
				evented = time.Since(created)
				g.Expect(events[0].Type).To(Equal(corev1.EventTypeWarning))
				g.Expect(events[0].Message).To(Equal(want))
			}
			if conditioned == 0 {
				c := resolved(ctx, g)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse), c.Message)
				conditioned = time.Since(created)
				g.Expect(c.Reason).To(Equal(depv1alpha1.ReasonDangling))
				g.Expect(c.Message).To(ContainSubstring("1 reference names an object that does not exist"))
				g.Expect(c.Message).To(ContainSubstring("VirtualMachine/default/vm-dangling -> vpcs default/vpc-missing"))
			}
		}).WithTimeout(grace + 30*time.Second).WithPolling(interval).Should(Succeed())
		GinkgoWriter.Printf("grace period %s: Event after %s, ReferencesResolved=False after %s\n", grace, evented.Round(100*time.Millisecond), conditioned.Round(100*time.Millisecond))
		Expect(evented).To(BeNumerically(">=", grace), "reported before the grace period")
		Expect(conditioned).To(BeNumerically(">=", grace), "reported before the grace period")
		Expect(dangling()).To(Equal(1.0))

		By("creating the VPC: the rule says AllResolved within 30 s")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-missing", nil))
		appeared := time.Now()
		Eventually(func(g Gomega) {
			c := resolved(ctx, g)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(c.Reason).To(Equal(depv1alpha1.ReasonAllResolved))
		}).WithTimeout(30 * time.Second).WithPolling(interval).Should(Succeed())
		GinkgoWriter.Printf("cleared %s after the VPC was created\n", time.Since(appeared).Round(100*time.Millisecond))
		Expect(dangling()).To(Equal(0.0))

		By("one Event for the reference, not one per pass")
		Consistently(func(g Gomega) {
			g.Expect(danglingEvents(ctx, g, "vm-dangling")).To(HaveLen(1))
		}).WithTimeout(3 * time.Second).WithPolling(time.Second).Should(Succeed())
	})

	It("leaves a VPC labelled cleared out of its watch, and reads it before it would report a VM referencing it", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-labelled", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-labelled", vmRef("vpc-labelled")))
		targets := func(g Gomega) float64 {
			n, err := wh.Gauge("dependency_webhook_source_watched_targets", map[string]string{"resource": "vpcs.network.test.io"})
			g.Expect(err).NotTo(HaveOccurred())
			return n
		}
		var watched float64
		Eventually(func(g Gomega) {
			watched = targets(g)
			g.Expect(watched).To(BeNumerically(">=", 2), "the VPCs are watched")
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		exists := func() float64 {
			GinkgoHelper()
			n, err := wh.Counter("dependency_webhook_audit_reads_total", map[string]string{"result": "exists"})
			Expect(err).NotTo(HaveOccurred())
			return n
		}
		read := exists()

		By("labelling the referenced VPC cleared, as only the webhook may (earlier releases let anyone): the watch leaves it out")
		vpc := newObject(vpcGVR, "default", "vpc-labelled", nil)
		Expect(asWebhookUser(ctx, consumer, vpcGVR.Group, vpcGVR.Resource).Patch(ctx, vpc, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+depv1alpha1.LabelCleared+`":"0123456789abcdef"},"annotations":{"`+depv1alpha1.AnnotationAdmittedReferences+`":"v1 f=0 l=0"}}}`)))).To(Succeed())
		Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(vpc), vpc)).To(Succeed())
		Expect(vpc.GetLabels()).To(HaveKeyWithValue(depv1alpha1.LabelCleared, "0123456789abcdef"))
		Eventually(func(g Gomega) {
			g.Expect(targets(g)).To(Equal(watched - 1))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("the audit reads it, finds it, and reports nothing past the grace period")
		Eventually(exists).WithTimeout(timeout).WithPolling(interval).Should(BeNumerically(">", read))
		Consistently(func(g Gomega) {
			c := resolved(ctx, g)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(danglingEvents(ctx, g, "vm-labelled")).To(BeEmpty())
		}).WithTimeout(grace + 10*time.Second).WithPolling(time.Second).Should(Succeed())
		Expect(dangling()).To(Equal(0.0))
	})

	It("warns on a CREATE of a VM that names a missing VPC, and admits it", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-here", nil))
		c, collected := warnedClient(consumer)
		missingWarning := func(name, vpc string) string {
			return `VirtualMachine "` + name + `" references vpcs "` + vpc + `", which does not exist; the reference is allowed, and reported as dangling if it does not exist within 15s`
		}
		// The controller installs the check of new references with the
		// rule; until kcp calls it, a create gets no warning.
		Eventually(func(g Gomega) {
			name := "vm-warned-" + time.Now().Format("150405.000")
			name = strings.ReplaceAll(name, ".", "-")
			g.Expect(c.Create(ctx, newObject(vmGVR, "default", name, vmRef("vpc-nowhere")))).To(Succeed())
			g.Expect(collected.Warnings()).To(ContainElement(missingWarning(name, "vpc-nowhere")))
		}).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed())

		before := len(collected.Warnings())
		Expect(c.Create(ctx, newObject(vmGVR, "default", "vm-fine", vmRef("vpc-here")))).To(Succeed())
		Expect(collected.Warnings()[before:]).To(BeEmpty(), "a reference to a VPC that exists")
	})

	// kcp's virtual workspace learns of a new APIBinding from an informer:
	// for a moment after a workspace binds an export, every shard refuses
	// it there, while its objects exist. A reference made at once must not
	// be taken for one to a missing object (unrecorded, with a warning).
	It("records the references of a workspace made right after it bound the exports, with no warning", func(ctx context.Context) {
		for round := range 3 {
			_, fresh := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("fresh"))
			bindExports(ctx, fresh, export{network, "network.test.io"}, export{compute, "compute.test.io"})
			c, collected := warnedClient(fresh)
			Eventually(func() error { return c.Create(ctx, newObject(vpcGVR, "default", "vpc-a", nil)) }).WithTimeout(timeout).WithPolling(50 * time.Millisecond).Should(Succeed())
			vm := newObject(vmGVR, "default", "vm-1", vmRef("vpc-a"))
			Eventually(func() error { return c.Create(ctx, vm.DeepCopy()) }).WithTimeout(timeout).WithPolling(50 * time.Millisecond).Should(Succeed())
			Expect(collected.Warnings()).To(BeEmpty(), "round %d: the VM's CREATE", round)

			By("the VM's admission id is in the VPC's ledger, written before the VM was stored")
			Expect(c.Get(ctx, client.ObjectKeyFromObject(vm), vm)).To(Succeed())
			id := vm.GetLabels()[depv1alpha1.LabelAdmission]
			Expect(id).NotTo(BeEmpty(), "round %d: the VM carries no admission id", round)
			vpc := newObject(vpcGVR, "default", "vpc-a", nil)
			Expect(c.Get(ctx, client.ObjectKeyFromObject(vpc), vpc)).To(Succeed())
			Expect(vpc.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]).To(ContainSubstring(id+"@"), "round %d: the VPC's ledger", round)
		}
	})

	// kcp's virtual workspace refuses (403) a workspace that does not bind
	// the export as it refuses a webhook without the provider's grant, and
	// with one shard the webhook knows that shard to serve every
	// workspace: a reference into a workspace that binds no export of the
	// protected type was taken for a missing grant, and every CREATE of
	// the dependent refused ("retry"). The export's bindings tell the two
	// apart.
	It("admits, with the warning of a missing object, a VM of a workspace that binds the compute export and no export of VPCs", func(ctx context.Context) {
		_, computeOnly := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("compute-only"))
		bindExports(ctx, computeOnly, export{compute, "compute.test.io"})
		c, collected := warnedClient(computeOnly)
		// kcp calls the compute provider's webhooks a moment after the
		// binding; until then a CREATE gets no warning.
		Eventually(func(g Gomega) {
			name := strings.ReplaceAll("vm-unbound-"+time.Now().Format("150405.000"), ".", "-")
			g.Expect(c.Create(ctx, newObject(vmGVR, "default", name, vmRef("vpc-a")))).To(Succeed())
			g.Expect(collected.Warnings()).To(ContainElement(`VirtualMachine "` + name + `" references vpcs "vpc-a", which does not exist; the reference is allowed, and reported as dangling if it does not exist within 15s`))
		}).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed())
	})
})
