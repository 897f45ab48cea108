package webhook_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// ringSizeEnv names the size of the large ring that "tears down a ring of
// … in one namespace" measures (default 1,000; 0 leaves it out).
const ringSizeEnv = "TEARDOWN_RING_SIZE"

// kcp's own teardowns of objects that reference each other in cycles,
// with the webhook and the controller running as deployed: a cycle is
// broken only where a teardown under way deletes every object that
// references an object of it, and then whatever its size; elsewhere the
// teardown waits, and says for what.
var _ = Describe("Teardowns of cycles", Ordered, func() {
	var (
		depCtrl, network, compute, consumer logicalcluster.Path
		wh                                  *kcpenv.Webhook
	)
	linkGVR := schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "links"}
	vmRef := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	peerOf := func(namespace, name string) map[string]any {
		return map[string]any{"peer": map[string]any{"namespace": namespace, "name": name}}
	}
	exists := func(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, namespace, name string) bool {
		GinkgoHelper()
		err := cli.Cluster(ws).Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, newObject(gvr, namespace, name, nil))
		if apierrors.IsNotFound(err) {
			return false
		}
		Expect(err).NotTo(HaveOccurred())
		return true
	}
	// createAll creates the objects, 16 at a time.
	createAll := func(ctx context.Context, ws logicalcluster.Path, objs []map[string]any, gvr schema.GroupVersionResource, namespace string) {
		GinkgoHelper()
		var wg sync.WaitGroup
		work := make(chan int)
		errs := make(chan error, len(objs))
		for range 16 {
			wg.Go(func() {
				for i := range work {
					o := objs[i]
					err := retryCreate(ctx, cli.Cluster(ws), newObject(gvr, namespace, o["name"].(string), o["spec"].(map[string]any)))
					if err != nil {
						errs <- err
					}
				}
			})
		}
		for i := range objs {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	// ringOf returns n objects named prefix-0000 … that each reference the
	// next at .spec.next.name, the last the first.
	ringOf := func(prefix string, n int) []map[string]any {
		objs := make([]map[string]any, n)
		for i := range n {
			objs[i] = map[string]any{"name": fmt.Sprintf("%s-%04d", prefix, i),
				"spec": map[string]any{"next": map[string]any{"name": fmt.Sprintf("%s-%04d", prefix, (i+1)%n)}}}
		}
		return objs
	}
	// deleteNamespaces deletes the namespaces and waits, at most within,
	// until they are gone; it returns how long that took.
	deleteNamespaces := func(ctx context.Context, ws logicalcluster.Path, within time.Duration, names ...string) time.Duration {
		GinkgoHelper()
		start := time.Now()
		for _, name := range names {
			Expect(cli.Cluster(ws).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, name := range names {
				err := cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace %s is still there (%v)", name, err)
			}
		}).WithTimeout(within).WithPolling(250 * time.Millisecond).Should(Succeed())
		return time.Since(start)
	}
	createNamespace := func(ctx context.Context, ws logicalcluster.Path, name string) {
		GinkgoHelper()
		Expect(cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	}
	cyclesBroken := func() float64 {
		GinkgoHelper()
		n, err := wh.Counter("dependency_webhook_teardown_cycles_broken_total", nil)
		Expect(err).NotTo(HaveOccurred())
		return n
	}

	BeforeAll(func(ctx context.Context) {
		root := core.RootCluster.Path()
		depCtrl = newDepCtrlWorkspace(ctx, root)
		_, network = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), "network.test.io",
			kcpenv.Resource{Kind: "VPC", Plural: "vpcs"},
			kcpenv.Resource{Kind: "Subnet", Plural: "subnets"},
			kcpenv.Resource{Kind: "Link", Plural: "links"})).To(Succeed())
		_, compute = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io",
			kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"},
			kcpenv.Resource{Kind: "Gateway", Plural: "gateways", ClusterScoped: true})).To(Succeed())
		consent(ctx, network, depCtrl, "network-provider", false)
		// VMs are protected here: the compute provider grants what a
		// protected provider does, create for the namespace probe's dry-run
		// Events and the Events of teardowns.
		consent(ctx, compute, depCtrl, "compute-provider", true)
		_, consumer = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
		bindExports(ctx, consumer, export{network, "network.test.io"}, export{compute, "compute.test.io"})

		By("rules: VMs reference VPCs, VPCs their gateway VM (two bindings' types), Subnets the next Subnet, VMs peer VMs in any namespace, Gateways (cluster-scoped) their VM and VMs their Gateway")
		dep := func(ws logicalcluster.Path, export, group, resource string, ref depv1alpha1.FieldReference) depv1alpha1.Dependency {
			return depv1alpha1.Dependency{APIExportRef: depv1alpha1.APIExportReference{Path: ws.String(), Name: export}, Group: group, Version: "v1", Resource: resource, FieldRef: ref}
		}
		for _, r := range []struct {
			ws   logicalcluster.Path
			rule *depv1alpha1.DependencyRule
		}{
			{compute, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vm-vpcs"}, Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
				Dependencies: []depv1alpha1.Dependency{dep(network, "network.test.io", "network.test.io", "vpcs", depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"})},
			}}},
			{compute, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vm-peers"}, Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
				Dependencies: []depv1alpha1.Dependency{dep(compute, "compute.test.io", "compute.test.io", "virtualmachines", depv1alpha1.FieldReference{Path: ".spec.peer.name", NamespacePath: "namespace"})},
			}}},
			{compute, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "gateway-vms"}, Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "Gateway", Resource: "gateways"},
				Dependencies: []depv1alpha1.Dependency{dep(compute, "compute.test.io", "compute.test.io", "virtualmachines", depv1alpha1.FieldReference{Path: ".spec.vm.name", NamespacePath: "namespace"})},
			}}},
			{compute, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vm-gateways"}, Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
				Dependencies: []depv1alpha1.Dependency{dep(compute, "compute.test.io", "compute.test.io", "gateways", depv1alpha1.FieldReference{Path: ".spec.gateway"})},
			}}},
			{network, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vpc-gateways"}, Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "network.test.io", Group: "network.test.io", Version: "v1", Kind: "VPC", Resource: "vpcs"},
				Dependencies: []depv1alpha1.Dependency{dep(compute, "compute.test.io", "compute.test.io", "virtualmachines", depv1alpha1.FieldReference{Path: ".spec.gatewayVM"})},
			}}},
			{network, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "subnet-rings"}, Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "network.test.io", Group: "network.test.io", Version: "v1", Kind: "Subnet", Resource: "subnets"},
				Dependencies: []depv1alpha1.Dependency{dep(network, "network.test.io", "network.test.io", "subnets", depv1alpha1.FieldReference{Path: ".spec.next.name"})},
			}}},
		} {
			Expect(cli.Cluster(r.ws).Create(ctx, r.rule)).To(Succeed())
		}

		By("starting the webhook and the controller, as deployed")
		wh = startWebhook(ctx, depCtrl, nil, nil)
		stop := startController(ctx, depCtrl, wh, caBundleFile(wh), 10)
		DeferCleanup(func() { Expect(stop()).To(Succeed()) })
		for _, r := range []struct {
			ws   logicalcluster.Path
			name string
		}{{compute, "vm-vpcs"}, {compute, "vm-peers"}, {compute, "gateway-vms"}, {compute, "vm-gateways"}, {network, "vpc-gateways"}, {network, "subnet-rings"}} {
			expectCondition(ctx, r.ws, r.name, depv1alpha1.ConditionReady, metav1.ConditionTrue, "Protecting")
		}
	})

	It("never breaks a cycle through another binding's type in an APIBinding's teardown: no referenced object is deleted, and the binding says what it waits for", func(ctx context.Context) {
		_, ws := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("binding-cycle"))
		bindExports(ctx, ws, export{network, "network.test.io"}, export{compute, "compute.test.io"})
		create(ctx, ws, newObject(vpcGVR, "default", "vpc-a", map[string]any{"gatewayVM": "vm-1"}))
		create(ctx, ws, newObject(vmGVR, "default", "vm-1", vmRef("vpc-a")))
		expectDenied(ctx, ws, vmGVR, "default", "vm-1", "VPC/default/vpc-a")
		expectDenied(ctx, ws, vpcGVR, "default", "vpc-a", "VirtualMachine/default/vm-1")

		By("deleting the compute binding: its teardown deletes VMs only, and vpc-a, which stays, references vm-1")
		binding := &apisv1alpha2.APIBinding{ObjectMeta: metav1.ObjectMeta{Name: "compute.test.io"}}
		Expect(cli.Cluster(ws).Delete(ctx, binding)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(binding), binding)).To(Succeed())
			var msg string
			for _, c := range binding.Status.Conditions {
				if c.Type == apisv1alpha2.BindingResourceDeleteSuccess {
					msg = c.Message
				}
			}
			g.Expect(msg).To(And(ContainSubstring("still referenced by VPC/default/vpc-a"),
				ContainSubstring("only the deletion of the namespaces or the workspace of its objects breaks")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(exists(ctx, ws, vmGVR, "default", "vm-1")).To(BeTrue(), "vm-1 went while vpc-a, which the teardown does not delete, references it")
		}).WithTimeout(10 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("removing vpc-a's reference: the binding's teardown completes, vpc-a stays")
		Expect(cli.Cluster(ws).Patch(ctx, newObject(vpcGVR, "default", "vpc-a", nil), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"gatewayVM":null}}`)))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(binding), binding))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "the APIBinding was not deleted")
		Expect(exists(ctx, ws, vpcGVR, "default", "vpc-a")).To(BeTrue())
	})

	It("tears down a ring of 66 objects referencing each other in one namespace", func(ctx context.Context) {
		createNamespace(ctx, consumer, "ring-66")
		createAll(ctx, consumer, ringOf("subnet", 66), subnetGVR, "ring-66")
		expectDenied(ctx, consumer, subnetGVR, "ring-66", "subnet-0000", "Subnet/ring-66/subnet-0065")
		before := cyclesBroken()
		took := deleteNamespaces(ctx, consumer, timeout, "ring-66")
		GinkgoWriter.Printf("a ring of 66 Subnets went with its namespace in %s\n", took.Round(time.Millisecond))
		Expect(cyclesBroken()).To(BeNumerically(">", before), "no cycle was reported broken")
	})

	It("tears down a ring of 1,000 objects in one namespace within twice the time of the same namespace without rules", func(ctx context.Context) {
		n := 1000
		if s := os.Getenv(ringSizeEnv); s != "" {
			var err error
			n, err = strconv.Atoi(s)
			Expect(err).NotTo(HaveOccurred(), ringSizeEnv)
		}
		if n == 0 {
			Skip(ringSizeEnv + "=0")
		}
		By(fmt.Sprintf("the same namespace without rules: a ring of %d Links, which no rule names", n))
		baseline := fmt.Sprintf("links-%d", n)
		createNamespace(ctx, consumer, baseline)
		start := time.Now()
		createAll(ctx, consumer, ringOf("link", n), linkGVR, baseline)
		GinkgoWriter.Printf("created %d Links in %s\n", n, time.Since(start).Round(time.Millisecond))
		without := deleteNamespaces(ctx, consumer, 5*time.Minute, baseline)

		By(fmt.Sprintf("a ring of %d Subnets under the rule subnet-rings", n))
		ring := fmt.Sprintf("ring-%d", n)
		createNamespace(ctx, consumer, ring)
		start = time.Now()
		createAll(ctx, consumer, ringOf("subnet", n), subnetGVR, ring)
		GinkgoWriter.Printf("created %d Subnets in %s\n", n, time.Since(start).Round(time.Millisecond))
		expectDenied(ctx, consumer, subnetGVR, ring, "subnet-0000", fmt.Sprintf("Subnet/%s/subnet-%04d", ring, n-1))
		with := deleteNamespaces(ctx, consumer, 10*time.Minute, ring)
		AddReportEntry("teardown of a ring", fmt.Sprintf("%d objects: %s without rules, %s with (%.2fx)", n, without.Round(time.Millisecond), with.Round(time.Millisecond), with.Seconds()/without.Seconds()))
		GinkgoWriter.Printf("a namespace with a ring of %d: %s without rules, %s with (%.2fx)\n", n, without.Round(time.Millisecond), with.Round(time.Millisecond), with.Seconds()/without.Seconds())
		// kcp's namespace controller retries a namespace at 5 s at the
		// earliest when content remains: a small baseline is dominated by
		// that, not by the webhook.
		Expect(with).To(BeNumerically("<=", max(2*without, without+10*time.Second)))
	})

	It("tears down a cycle across two namespaces deleted together", func(ctx context.Context) {
		createNamespace(ctx, consumer, "pair-1")
		createNamespace(ctx, consumer, "pair-2")
		create(ctx, consumer, newObject(vmGVR, "pair-1", "vm-x", peerOf("pair-2", "vm-y")))
		create(ctx, consumer, newObject(vmGVR, "pair-2", "vm-y", peerOf("pair-1", "vm-x")))
		expectDenied(ctx, consumer, vmGVR, "pair-1", "vm-x", "VirtualMachine/pair-2/vm-y")
		expectDenied(ctx, consumer, vmGVR, "pair-2", "vm-y", "VirtualMachine/pair-1/vm-x")
		before := cyclesBroken()
		deleteNamespaces(ctx, consumer, 2*timeout, "pair-1", "pair-2")
		Expect(cyclesBroken()).To(BeNumerically(">", before), "no cycle was reported broken")
	})

	It("tears down a workspace whose cycle runs through a cluster-scoped object, which only the workspace's deletion deletes", func(ctx context.Context) {
		wsObj, ws := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("doomed"))
		bindExports(ctx, ws, export{network, "network.test.io"}, export{compute, "compute.test.io"})
		createNamespace(ctx, ws, "apps")
		create(ctx, ws, newObject(gatewayGVR, "", "gw-1", map[string]any{"vm": map[string]any{"namespace": "apps", "name": "vm-g"}}))
		create(ctx, ws, newObject(vmGVR, "apps", "vm-g", map[string]any{"gateway": "gw-1"}))
		expectDenied(ctx, ws, vmGVR, "apps", "vm-g", "Gateway/gw-1")
		expectDenied(ctx, ws, gatewayGVR, "", "gw-1", "VirtualMachine/apps/vm-g")

		By("deleting the namespace apps only: the cycle stays, since the Gateway is not deleted with it")
		Expect(cli.Cluster(ws).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}})).To(Succeed())
		Eventually(func(g Gomega) {
			ns := &corev1.Namespace{}
			g.Expect(cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: "apps"}, ns)).To(Succeed())
			var msg string
			for _, c := range ns.Status.Conditions {
				if c.Type == corev1.NamespaceDeletionContentFailure {
					msg = c.Message
				}
			}
			g.Expect(msg).To(ContainSubstring("Gateway/gw-1 (a cluster-scoped object is deleted with its workspace, which is not being deleted)"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(exists(ctx, ws, gatewayGVR, "", "gw-1")).To(BeTrue())

		By("deleting the workspace: everything goes")
		before := cyclesBroken()
		Expect(cli.Cluster(core.RootCluster.Path()).Delete(ctx, wsObj)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(core.RootCluster.Path()).Get(ctx, client.ObjectKeyFromObject(wsObj), wsObj))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "the workspace was not deleted")
		Expect(cyclesBroken()).To(BeNumerically(">", before), "no cycle was reported broken")
	})

	It("keeps a cycle with an object outside the teardown, and names it on the namespace and in an Event", func(ctx context.Context) {
		createNamespace(ctx, consumer, "half-1")
		createNamespace(ctx, consumer, "half-2")
		create(ctx, consumer, newObject(vmGVR, "half-1", "vm-p", peerOf("half-2", "vm-q")))
		create(ctx, consumer, newObject(vmGVR, "half-2", "vm-q", peerOf("half-1", "vm-p")))
		expectDenied(ctx, consumer, vmGVR, "half-1", "vm-p", "VirtualMachine/half-2/vm-q")

		By("deleting half-1 only: vm-q, which references vm-p, stays")
		Expect(cli.Cluster(consumer).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "half-1"}})).To(Succeed())
		Eventually(func(g Gomega) {
			ns := &corev1.Namespace{}
			g.Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKey{Name: "half-1"}, ns)).To(Succeed())
			var msg string
			for _, c := range ns.Status.Conditions {
				if c.Type == corev1.NamespaceDeletionContentFailure {
					msg = c.Message
				}
			}
			g.Expect(msg).To(And(ContainSubstring("still referenced by VirtualMachine/half-2/vm-q"),
				ContainSubstring(`outside it: VirtualMachine/half-2/vm-q (namespace "half-2" is not being deleted)`)))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Eventually(func(g Gomega) {
			events := &corev1.EventList{}
			g.Expect(cli.Cluster(consumer).List(ctx, events, client.InNamespace("default"))).To(Succeed())
			var found []string
			for _, e := range events.Items {
				if e.Reason == deletion.EventReasonTeardownWaits && e.InvolvedObject.Kind == "Namespace" && e.InvolvedObject.Name == "half-1" {
					found = append(found, e.Message)
				}
			}
			g.Expect(found).To(ConsistOf(ContainSubstring("VirtualMachine/half-2/vm-q")), "one Event about namespace half-1")
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(exists(ctx, consumer, vmGVR, "half-1", "vm-p")).To(BeTrue(), "vm-p went while vm-q, outside the teardown, references it")
		}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("deleting half-2 too: the cycle goes")
		deleteNamespaces(ctx, consumer, 2*timeout, "half-2")
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(consumer).Get(ctx, client.ObjectKey{Name: "half-1"}, &corev1.Namespace{}))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "namespace half-1 was not deleted")
	})
})

// retryCreate creates obj, retrying while kcp has not picked up a binding
// or a webhook configuration yet.
func retryCreate(ctx context.Context, c client.Client, obj client.Object) error {
	var err error
	for range 50 {
		if err = c.Create(ctx, obj.DeepCopyObject().(client.Object)); err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}
