package webhook_test

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/marks"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// markDelay is the webhook's --unreferenced-after in these tests.
const markDelay = 2 * time.Second

var _ = Describe("Marks of objects nothing references", Ordered, func() {
	var (
		depCtrl, network, compute, consumer logicalcluster.Path
		networkCluster, computeCluster      logicalcluster.Name
		rule                                *depv1alpha1.DependencyRule
		wh                                  *kcpenv.Webhook
	)

	// mark returns the unreferenced label of a VPC in the consumer.
	mark := func(ctx context.Context, name string) (string, error) {
		vpc := &unstructured.Unstructured{}
		vpc.SetGroupVersionKind(vpcGVR.GroupVersion().WithKind("VPC"))
		if err := cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vpc); err != nil {
			return "", err
		}
		return vpc.GetLabels()[depv1alpha1.LabelUnreferenced], nil
	}
	// fingerprint is what the controller computes for VPCs and the rule.
	fingerprint := func(ctx context.Context) string {
		GinkgoHelper()
		got := &depv1alpha1.DependencyRule{}
		Expect(cli.Cluster(compute).Get(ctx, client.ObjectKeyFromObject(rule), got)).To(Succeed())
		return marks.Fingerprint(networkCluster, vpcGVR.GroupResource(), []marks.Rule{marks.RuleOf(got)})
	}
	expectMark := func(ctx context.Context, name, want string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			got, err := mark(ctx, name)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(want))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	}

	BeforeAll(func(ctx context.Context) {
		root := core.RootCluster.Path()
		_, depCtrl = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("dep-ctrl-marks"))
		Expect(kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrl))).To(Succeed())
		rbac, err := kcpenv.LoadManifests("config/rbac/webhook")
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(depCtrl), rbac...)).To(Succeed())

		var networkWS, computeWS *tenancyv1alpha1.Workspace
		networkWS, network = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network-marks"))
		networkCluster = logicalcluster.Name(networkWS.Spec.Cluster)
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"})).To(Succeed())
		_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(network), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		computeWS, compute = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute-marks"))
		computeCluster = logicalcluster.Name(computeWS.Spec.Cluster)
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io", kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"})).To(Succeed())
		_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(compute), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		By("granting the webhook what the samples grant: reading VirtualMachines, reading and patching VPCs")
		for ws, sample := range map[logicalcluster.Path]string{compute: "compute-provider", network: "network-provider"} {
			grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples", sample, "webhook-access.yaml"))
			Expect(err).NotTo(HaveOccurred())
			Expect(kcpenv.Apply(ctx, cli.Cluster(ws), grant...)).To(Succeed())
		}
		_, consumer = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer-marks"))
		bindExports(ctx, consumer, export{network, "network.test.io"}, export{compute, "compute.test.io"})

		rule = vpcRule(network, "vm-references", depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"}, ".spec.vpcRef.name")
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())

		By("starting a webhook that marks objects unreferenced for " + markDelay.String())
		user, err := kcpEnv.AddUser("dependency-webhook")
		Expect(err).NotTo(HaveOccurred())
		user.Host += depCtrl.RequestPath()
		wh, err = kcpenv.StartWebhookWith(ctx, user, GinkgoT().TempDir(), func(o *webhookserver.Options) {
			o.UnreferencedAfter, o.MarksInterval = markDelay, 200*time.Millisecond
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(wh.Stop)
		expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReferencesGuarded, "True", depv1alpha1.ReasonGuarded)

		By("installing the configurations as the controller does once the rule is guarded: the DELETE webhook skips VPCs cleared under the rule's fingerprint")
		installWorkspaceConfig(ctx, network, networkCluster, webhookconfig.Name, wh.URL, wh.CABundle,
			&webhookconfig.Workspace{Path: network, Protected: []schema.GroupVersionResource{vpcGVR}, Cleared: []string{fingerprint(ctx)}})
		installWorkspaceConfig(ctx, compute, computeCluster, webhookconfig.Name, wh.URL, wh.CABundle,
			&webhookconfig.Workspace{Path: compute, Dependents: []schema.GroupVersionResource{vmGVR}})
	})

	It("clears a VPC nothing references after the delay, and its DELETE does not reach the webhook", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-used", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-used", map[string]any{"vpcRef": map[string]any{"name": "vpc-used"}}))
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-free", nil))
		By("kcp calls the webhook: the referenced VPC is denied")
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-used", "VirtualMachine/default/vm-used")

		fp := fingerprint(ctx)
		expectMark(ctx, "vpc-free", fp)
		got, err := mark(ctx, "vpc-used")
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(BeEmpty(), "a referenced VPC was marked")
		Expect(wh.Metrics).NotTo(BeNil())

		before, err := wh.Decided()
		Expect(err).NotTo(HaveOccurred())
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-free", client.DryRunAll)).To(Succeed())
		after, err := wh.Decided()
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(before), "the DELETE of a cleared VPC reached the webhook")

		By("the referenced VPC's DELETE still reaches the webhook")
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-used", "VirtualMachine/default/vm-used")
		after2, err := wh.Decided()
		Expect(err).NotTo(HaveOccurred())
		Expect(after2).To(BeNumerically(">", after))

		By("the rule carries the marks finalizer")
		r := &depv1alpha1.DependencyRule{}
		Expect(cli.Cluster(compute).Get(ctx, client.ObjectKeyFromObject(rule), r)).To(Succeed())
		Expect(r.Finalizers).To(ContainElement(depv1alpha1.FinalizerMarks))
	})

	It("removes the mark before admitting a new reference, so the DELETE is denied; clears it again once the reference is gone", func(ctx context.Context) {
		fp := fingerprint(ctx)
		expectMark(ctx, "vpc-free", fp)

		Expect(cli.Cluster(consumer).Create(ctx, newObject(vmGVR, "default", "vm-new", map[string]any{"vpcRef": map[string]any{"name": "vpc-free"}}))).To(Succeed())
		// The cleaner may mark it pending again before the index has seen
		// the VM: a pending mark is no clearance, and the next pass, or
		// the confirming read before a promotion, removes it.
		got, err := mark(ctx, "vpc-free")
		Expect(err).NotTo(HaveOccurred())
		Expect(got).NotTo(Equal(fp), "the VM was admitted while the VPC kept its clearance")
		Expect(got).To(Or(BeEmpty(), HavePrefix(depv1alpha1.UnreferencedPendingPrefix)))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-free", "VirtualMachine/default/vm-new")

		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-new")).To(Succeed())
		expectMark(ctx, "vpc-free", fp)
	})

	It("removes every mark, then its finalizer, when the rule is deleted", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-pending", nil))
		Eventually(func(g Gomega) {
			got, err := mark(ctx, "vpc-pending")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).NotTo(BeEmpty())
		}).WithTimeout(timeout).WithPolling(50 * time.Millisecond).Should(Succeed())

		Expect(cli.Cluster(compute).Delete(ctx, rule)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(compute).Get(ctx, client.ObjectKeyFromObject(rule), &depv1alpha1.DependencyRule{}))
		}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "the rule kept its finalizer")

		vpcs := &unstructured.UnstructuredList{}
		vpcs.SetGroupVersionKind(vpcGVR.GroupVersion().WithKind("VPCList"))
		Expect(cli.Cluster(consumer).List(ctx, vpcs)).To(Succeed())
		Expect(vpcs.Items).NotTo(BeEmpty())
		for _, vpc := range vpcs.Items {
			Expect(vpc.GetLabels()).NotTo(HaveKey(depv1alpha1.LabelUnreferenced), "VPC %s keeps a mark after its rule was deleted", vpc.GetName())
		}
	})
})
