package webhook_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// Two providers export VPCs (network.test.io, each from its own
// workspace), and the compute provider has a rule on .spec.vpcRef.name of
// its VMs for each. A consumer binds one of them: kcp binds no two exports
// of one resource in a workspace.
var _ = Describe("Two providers of one resource", Ordered, func() {
	const grace = 5 * time.Second
	var (
		depCtrl, compute logicalcluster.Path
		networks         [2]logicalcluster.Path
		consumers        [2]logicalcluster.Path
	)
	vmRef := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	rules := []string{"vm-vpcs-first", "vm-vpcs-second"}

	BeforeAll(func(ctx context.Context) {
		root := core.RootCluster.Path()
		depCtrl = newDepCtrlWorkspace(ctx, root)
		for i := range networks {
			_, networks[i] = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network"))
			Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(networks[i]), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"})).To(Succeed())
			consent(ctx, networks[i], depCtrl, "network-provider", false)
		}
		_, compute = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io", kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"})).To(Succeed())
		consent(ctx, compute, depCtrl, "compute-provider", true)
		for i := range consumers {
			_, consumers[i] = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
			bindExports(ctx, consumers[i], export{networks[i], "network.test.io"}, export{compute, "compute.test.io"})
		}
		for i, name := range rules {
			Expect(cli.Cluster(compute).Create(ctx, &depv1alpha1.DependencyRule{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: depv1alpha1.DependencyRuleSpec{
					Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
					Dependencies: []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: networks[i].String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"}}},
				},
			})).To(Succeed())
		}

		By("starting the webhook, with a grace period of " + grace.String() + ", and the controller")
		wh := startWebhook(ctx, depCtrl, nil, func(o *webhookserver.Options) { o.DanglingGracePeriod = grace })
		stop := startController(ctx, depCtrl, wh, caBundleFile(wh), 10)
		DeferCleanup(func() { Expect(stop()).To(Succeed()) })
		for _, name := range rules {
			expectCondition(ctx, compute, name, depv1alpha1.ConditionReady, metav1.ConditionTrue, "Protecting")
		}
	})

	It("records a VM's reference on the VPC of the provider its workspace binds, with no warning, protects that VPC, and reports no reference as dangling", func(ctx context.Context) {
		for i, ws := range consumers {
			c, collected := warnedClient(ws)
			Expect(c.Create(ctx, newObject(vpcGVR, "default", "vpc-a", nil))).To(Succeed())
			// kcp calls the compute provider's webhooks a moment after
			// the binding: until a VM carries an admission id, its
			// reference was not recorded, and it is created again.
			Eventually(func(g Gomega) {
				vm := newObject(vmGVR, "default", "vm-1", vmRef("vpc-a"))
				g.Expect(c.Create(ctx, vm)).To(Succeed())
				if vm.GetLabels()[depv1alpha1.LabelAdmission] == "" {
					g.Expect(c.Delete(ctx, vm)).To(Succeed())
				}
				g.Expect(vm.GetLabels()).To(HaveKey(depv1alpha1.LabelAdmission), "the VM was admitted before the webhooks applied")
			}).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed())
			Expect(collected.Warnings()).To(BeEmpty(), "consumer %d: a VM that references a VPC of the provider its workspace binds", i)

			By("recording the reference of the next VM in the VPC's ledger, without waiting for the other provider's export to settle")
			vm := newObject(vmGVR, "default", "vm-2", vmRef("vpc-a"))
			start := time.Now()
			Expect(c.Create(ctx, vm)).To(Succeed())
			GinkgoWriter.Printf("consumer %d: the second VM created in %s\n", i, time.Since(start))
			Expect(collected.Warnings()).To(BeEmpty())
			id := vm.GetLabels()[depv1alpha1.LabelAdmission]
			Expect(id).NotTo(BeEmpty())
			vpc := newObject(vpcGVR, "default", "vpc-a", nil)
			Expect(c.Get(ctx, client.ObjectKeyFromObject(vpc), vpc)).To(Succeed())
			Expect(vpc.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]).To(ContainSubstring(id+"@"), "consumer %d: the VPC's ledger", i)
			expectDenied(ctx, ws, vpcGVR, "default", "vpc-a", "vm-1", "vm-2")
		}

		By("warning once about a VPC that neither provider holds")
		c, collected := warnedClient(consumers[0])
		Expect(c.Create(ctx, newObject(vmGVR, "default", "vm-nowhere", vmRef("vpc-nowhere")))).To(Succeed())
		Expect(collected.Warnings()).To(ConsistOf(ContainSubstring(`VirtualMachine "vm-nowhere" references vpcs "vpc-nowhere", which does not exist`)))
		Expect(c.Delete(ctx, newObject(vmGVR, "default", "vm-nowhere", nil))).To(Succeed())

		By("reporting no reference as dangling under either rule after the grace period")
		time.Sleep(grace)
		Consistently(func(g Gomega) {
			for _, name := range rules {
				r := &depv1alpha1.DependencyRule{}
				g.Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: name}, r)).To(Succeed())
				for _, c := range r.Status.Conditions {
					if c.Type == depv1alpha1.ConditionReferencesResolved {
						g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", name, c.Message)
					}
				}
			}
		}).WithTimeout(3 * grace).WithPolling(time.Second).Should(Succeed())
	})
})
