//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

var (
	vpcs = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"}
	vms  = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "virtualmachines"}
)

func object(gvr schema.GroupVersionResource, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(map[string]string{"vpcs": "VPC", "virtualmachines": "VirtualMachine"}[gvr.Resource])
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

func vpc(name string) *unstructured.Unstructured { return object(vpcs, name, map[string]any{}) }

func vm(name, vpcName string) *unstructured.Unstructured {
	return object(vms, name, map[string]any{"vpcRef": map[string]any{"name": vpcName}})
}

// gatewayRule returns the rule name of the network provider under which a
// VPC references its gateway VirtualMachine at .spec.gatewayVM: VMs are then
// protected, and VPCs dependents.
func gatewayRule(name string) *depv1alpha1.DependencyRule {
	return &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: depv1alpha1.DependencyRuleSpec{
		Dependent: depv1alpha1.DependentResource{APIExportName: "network.test.io", Group: "network.test.io", Version: "v1", Kind: "VPC", Resource: "vpcs"},
		Dependencies: []depv1alpha1.Dependency{{
			APIExportRef: depv1alpha1.APIExportReference{Path: compute.String(), Name: "compute.test.io"},
			Group:        "compute.test.io", Version: "v1", Resource: "virtualmachines",
			FieldRef: depv1alpha1.FieldReference{Path: ".spec.gatewayVM"},
		}},
	}}
}

func create(ctx context.Context, ws logicalcluster.Path, objs ...*unstructured.Unstructured) {
	GinkgoHelper()
	for _, o := range objs {
		Eventually(func() error { return client.IgnoreAlreadyExists(cli.Cluster(ws).Create(ctx, o.DeepCopy())) }).
			WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	}
}

func remove(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, name string) error {
	return cli.Cluster(ws).Delete(ctx, object(gvr, name, nil))
}

// expectDenied waits until deleting the object is denied with a message
// containing every part (with a dry run, which must get the same answer).
func expectDenied(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, name string, parts ...string) string {
	GinkgoHelper()
	var msg string
	Eventually(func(g Gomega) {
		err := cli.Cluster(ws).Delete(ctx, object(gvr, name, nil), client.DryRunAll)
		g.Expect(err).To(HaveOccurred(), "the delete was allowed")
		msg = err.Error()
		for _, p := range parts {
			g.Expect(msg).To(ContainSubstring(p))
		}
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	return msg
}

func expectDeletable(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, name string) {
	GinkgoHelper()
	Eventually(func() error { return remove(ctx, ws, gvr, name) }).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

func sampleRule() *depv1alpha1.DependencyRule {
	GinkgoHelper()
	objs := readSample("compute-provider/dependencyrule.yaml")
	rule := &depv1alpha1.DependencyRule{}
	Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, rule)).To(Succeed())
	return rule
}

func getConfig(ctx context.Context) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	return getConfigIn(ctx, network)
}

func getConfigIn(ctx context.Context, ws logicalcluster.Path) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	return cfg, cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg)
}

// mergePatch patches an object with a JSON merge patch.
func mergePatch(ctx context.Context, ws logicalcluster.Path, obj *unstructured.Unstructured, patch string) error {
	return cli.Cluster(ws).Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// deleteHeld deletes a VPC that has a finalizer, so that it stays, being
// deleted, until the end of the spec.
func deleteHeld(ctx context.Context, ws logicalcluster.Path, name string) {
	GinkgoHelper()
	Expect(mergePatch(ctx, ws, vpc(name), `{"metadata":{"finalizers":["test.io/hold"],"annotations":{"`+depv1alpha1.AnnotationSkipProtection+`":"true"}}}`)).To(Succeed())
	Expect(remove(ctx, ws, vpcs, name)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(mergePatch(ctx, ws, vpc(name), `{"metadata":{"finalizers":null}}`)).To(Succeed())
	})
}

func expectConfigInstalled(ctx context.Context) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		cfg, err := getConfig(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cfg.Webhooks).To(HaveLen(2), "the deletion webhook and the guard of records")
		g.Expect(cfg.Webhooks[1].Name).To(Equal(webhookconfig.RecordsWebhookName))
		g.Expect(cfg.Webhooks[0].Rules).To(HaveLen(1))
		g.Expect(cfg.Webhooks[0].Rules[0].Resources).To(Equal([]string{"vpcs"}))
		g.Expect(cfg.Webhooks[0].Rules[0].Operations).To(Equal([]admissionregistrationv1.OperationType{admissionregistrationv1.Delete}))
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

func expectConfigRemoved(ctx context.Context) {
	GinkgoHelper()
	Eventually(func() bool {
		_, err := getConfig(ctx)
		return apierrors.IsNotFound(err)
	}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "the webhook configuration should be removed")
}

func updateRule(ctx context.Context, mutate func(*depv1alpha1.DependencyRule)) {
	GinkgoHelper()
	Eventually(func() error {
		rule := &depv1alpha1.DependencyRule{}
		if err := cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: "vm-dependencies"}, rule); err != nil {
			return err
		}
		mutate(rule)
		return cli.Cluster(compute).Update(ctx, rule)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// watchDeletions watches the resources in the workspaces until the spec
// ends, and returns a function that tells at which revision an object was
// deleted (see kcpenv.WatchDeletions).
func watchDeletions(workspaces []logicalcluster.Path, resources ...schema.GroupVersionResource) func(ws logicalcluster.Path, gvr schema.GroupVersionResource, namespace, name string) (int64, bool) {
	GinkgoHelper()
	cfg, err := topo.AdminConfig()
	Expect(err).NotTo(HaveOccurred())
	type watchKey struct {
		ws  logicalcluster.Path
		gvr schema.GroupVersionResource
	}
	deleted := map[watchKey]*kcpenv.Deletions{}
	watchCtx, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	for _, ws := range workspaces {
		wsCfg := rest.CopyConfig(cfg)
		wsCfg.Host += ws.RequestPath()
		dyn, err := dynamic.NewForConfig(wsCfg)
		Expect(err).NotTo(HaveOccurred())
		for _, gvr := range resources {
			deleted[watchKey{ws, gvr}], err = kcpenv.WatchDeletions(watchCtx, dyn.Resource(gvr))
			Expect(err).NotTo(HaveOccurred())
		}
	}
	return func(ws logicalcluster.Path, gvr schema.GroupVersionResource, namespace, name string) (int64, bool) {
		rv, ok, err := deleted[watchKey{ws, gvr}].Revision(namespace, name)
		Expect(err).NotTo(HaveOccurred())
		return rv, ok
	}
}

// raceNamespaces is how many namespaces of each consumer the race spreads
// its pairs over, so that each live read scans a few dozen objects rather
// than all of them.
const raceNamespaces = 20

// race creates pairs of a VPC and a VM that references it, concurrently,
// spread over the namespaces prefix-0.. of two consumers (one per shard in
// the multi-shard topology), and deletes each VPC once its VM's CREATE has
// returned: every DELETE must be denied, naming the VM, and every VPC must
// still exist. With across set, each VM is in the next namespace and
// references its VPC with its namespace (.spec.vpcRef.namespace).
func race(ctx context.Context, prefix string, pairs int, across bool) {
	GinkgoHelper()
	const workers = 16
	for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
		for n := range raceNamespaces {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, n)}}
			Expect(client.IgnoreAlreadyExists(cli.Cluster(ws).Create(ctx, ns))).To(Succeed())
		}
	}
	var (
		lock                   sync.Mutex
		denied, allowed, other int
		failures               []string
	)
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			defer GinkgoRecover()
			for i := range work {
				ws, n := []logicalcluster.Path{consumerA, consumerB}[i%2], (i/2)%raceNamespaces
				ns, vmNamespace := fmt.Sprintf("%s-%d", prefix, n), fmt.Sprintf("%s-%d", prefix, n)
				vpcName, vmName := fmt.Sprintf("vpc-%04d", i), fmt.Sprintf("vm-%04d", i)
				spec := map[string]any{"vpcRef": map[string]any{"name": vpcName}}
				if across {
					vmNamespace = fmt.Sprintf("%s-%d", prefix, (n+1)%raceNamespaces)
					spec = map[string]any{"vpcRef": map[string]any{"name": vpcName, "namespace": ns}}
				}
				target := object(vpcs, vpcName, map[string]any{})
				target.SetNamespace(ns)
				dependent := object(vms, vmName, spec)
				dependent.SetNamespace(vmNamespace)
				if err := cli.Cluster(ws).Create(ctx, target); err != nil {
					Fail(fmt.Sprintf("creating %s: %v", vpcName, err))
				}
				if err := cli.Cluster(ws).Create(ctx, dependent); err != nil {
					Fail(fmt.Sprintf("creating %s: %v", vmName, err))
				}
				// The VM's CREATE has returned: the DELETE must be denied.
				err := cli.Cluster(ws).Delete(ctx, target)
				lock.Lock()
				switch {
				case err == nil:
					allowed++
					failures = append(failures, fmt.Sprintf("%s %s/%s was deleted while %s/%s referenced it", ws, ns, vpcName, vmNamespace, vmName))
				case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "VirtualMachine/"+vmNamespace+"/"+vmName):
					denied++
				default:
					other++
					failures = append(failures, fmt.Sprintf("%s %s/%s: %v", ws, ns, vpcName, err))
				}
				lock.Unlock()
			}
		})
	}
	for i := range pairs {
		work <- i
	}
	close(work)
	wg.Wait()
	GinkgoWriter.Printf("%s: %d pairs in %s: %d denied, %d allowed (wrong), %d other errors\n", prefix, pairs, time.Since(start).Round(time.Millisecond), denied, allowed, other)
	Expect(failures).To(BeEmpty())
	Expect(denied).To(Equal(pairs))

	By("checking that every VPC still exists")
	remaining := 0
	for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(vpcs.GroupVersion().String())
		list.SetKind("VPCList")
		Expect(cli.Cluster(ws).List(ctx, list)).To(Succeed())
		for _, item := range list.Items {
			if strings.HasPrefix(item.GetNamespace(), prefix+"-") && item.GetDeletionTimestamp() == nil {
				remaining++
			}
		}
	}
	Expect(remaining).To(Equal(pairs))
}

var _ = Describe("Deletion protection across workspaces", Ordered, func() {
	It("installs the webhook configuration in the nested network provider workspace when the rule is created", func(ctx context.Context) {
		Expect(cli.Cluster(compute).Create(ctx, sampleRule())).To(Succeed())
		expectConfigInstalled(ctx)

		Eventually(func(g Gomega) {
			rule := &depv1alpha1.DependencyRule{}
			g.Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: "vm-dependencies"}, rule)).To(Succeed())
			ready := meta.FindStatusCondition(rule.Status.Conditions, depv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
			g.Expect(ready.Message).To(ContainSubstring(network.String()))
			// The controller read kcp's version through the front-proxy
			// at start.
			tested := meta.FindStatusCondition(rule.Status.Conditions, depv1alpha1.ConditionKCPVersionTested)
			g.Expect(tested).NotTo(BeNil())
			g.Expect(tested.Status).To(Equal(map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[topo.Version.Tested]), tested.Message)
			g.Expect(tested.Message).To(ContainSubstring("kcp " + topo.Version.KCP))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("denies deleting a VPC while a VM references it, naming the VM", func(ctx context.Context) {
		create(ctx, consumerA, vpc("vpc-a"), vm("vm-1", "vpc-a"), vm("vm-2", "vpc-a"))
		msg := expectDenied(ctx, consumerA, vpcs, "vpc-a", "VirtualMachine/default/vm-1", "VirtualMachine/default/vm-2")
		GinkgoWriter.Printf("kcp answered: %s\n", msg)
	})

	It("still denies it when one of two referencing VMs is removed", func(ctx context.Context) {
		Expect(remove(ctx, consumerA, vms, "vm-1")).To(Succeed())
		msg := expectDenied(ctx, consumerA, vpcs, "vpc-a", "still referenced by VirtualMachine/default/vm-2;")
		Expect(msg).NotTo(ContainSubstring("vm-1"))
	})

	It("leaves another consumer's VPC of the same name deletable", func(ctx context.Context) {
		create(ctx, consumerB, vpc("vpc-a"))
		expectDeletable(ctx, consumerB, vpcs, "vpc-a")
		expectDenied(ctx, consumerA, vpcs, "vpc-a", "VirtualMachine/default/vm-2")
	})

	It("protects VPCs in the consumer on the last shard", func(ctx context.Context) {
		ws := &tenancyv1alpha1.Workspace{}
		parent, name := consumerB.Split()
		Expect(cli.Cluster(parent).Get(ctx, client.ObjectKey{Name: name}, ws)).To(Succeed())
		shard := envtest.WorkspaceShardOrDie(GinkgoT(), cli, ws)
		Expect(shard.Name).To(Equal(topo.Shards[len(topo.Shards)-1].Name))
		if len(topo.Shards) > 1 {
			Expect(shard.Name).NotTo(Equal("root"), "consumer-b must be on another shard than the providers")
		}

		create(ctx, consumerB, vpc("vpc-b"), vm("vm-b", "vpc-b"))
		expectDenied(ctx, consumerB, vpcs, "vpc-b", "VirtualMachine/default/vm-b")
	})

	It("never deletes a VPC that a VM created before the DELETE references, in 1,000 concurrent create-then-delete pairs", func(ctx context.Context) {
		race(ctx, "race", 1000, false)
	})

	It("records every new reference on the object it names once the rule reports ReferencesTracked", func(ctx context.Context) {
		expectTracked(ctx)
	})

	It(fmt.Sprintf("never deletes a VPC after a VM that references it was stored, in %d rounds of the VM's CREATE and the VPC's DELETE sent at the same moment", concurrentRounds), func(ctx context.Context) {
		concurrentRace(ctx, "concurrent", concurrentRounds, false, false)
	})

	It(fmt.Sprintf("never deletes a VPC after a VM that references it was stored, in %d rounds of the VM's CREATE under the webhook's lease on the VPC and the VPC's DELETE sent at the same moment", leasedRounds), func(ctx context.Context) {
		concurrentRace(ctx, "leased", leasedRounds, false, true)
	})

	It("clears VPCs that nothing references: kcp deletes them without calling the webhook, a new reference ends a clearance, and a copied one is not kept", func(ctx context.Context) {
		create(ctx, consumerA, vpc("vpc-clear-1"), vpc("vpc-clear-2"), vpc("vpc-uncleared"))
		create(ctx, consumerA, vm("vm-uncleared", "vpc-uncleared"))

		By("the DELETE webhook honours clearances once the rules track references")
		Eventually(func(g Gomega) {
			cfg, err := getConfig(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.Webhooks[0].Name).To(Equal(webhookconfig.WebhookName))
			g.Expect(cfg.Webhooks[0].MatchConditions).To(BeEmpty())
			g.Expect(cfg.Webhooks[0].ObjectSelector.MatchExpressions).To(ConsistOf(HaveField("Key", depv1alpha1.LabelCleared)))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("the elected replica clears the unreferenced VPCs once nothing can be in flight (created more than 65s before)")
		ledger := func(g Gomega, name string) (string, string) {
			got := vpc(name)
			g.Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, got)).To(Succeed())
			return got.GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences], string(got.GetUID())
		}
		label := func(g Gomega, name string) string {
			got := vpc(name)
			g.Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, got)).To(Succeed())
			return got.GetLabels()[depv1alpha1.LabelCleared]
		}
		cleared := map[string]string{}
		Eventually(func(g Gomega) {
			for _, name := range []string{"vpc-clear-1", "vpc-clear-2"} {
				l, uid := ledger(g, name)
				g.Expect(l).To(MatchRegexp(` c=[0-9a-f]{16}/`+uid+`$`), name)
				cleared[name] = l
			}
		}).WithTimeout(4 * time.Minute).WithPolling(interval).Should(Succeed())
		Consistently(func(g Gomega) {
			l, _ := ledger(g, "vpc-uncleared")
			g.Expect(l).NotTo(ContainSubstring(" c="))
		}).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Succeed())
		fingerprint, _, _ := strings.Cut(cleared["vpc-clear-1"][strings.LastIndex(cleared["vpc-clear-1"], " c=")+len(" c="):], "/")
		By("a cleared VPC is labelled with the fingerprint, so that the next listings leave it out")
		for _, name := range []string{"vpc-clear-1", "vpc-clear-2"} {
			Expect(label(Default, name)).To(Equal(fingerprint), name)
		}
		Expect(label(Default, "vpc-uncleared")).To(BeEmpty())

		By("a copied clearance is not kept: the guard keeps the ledger and the label the webhook wrote")
		_, uncleared := ledger(Default, "vpc-uncleared")
		forged := fmt.Sprintf("v1 f=0 l=0 c=%s/%s", fingerprint, uncleared)
		Expect(mergePatch(ctx, consumerA, vpc("vpc-uncleared"), fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q}}}`,
			depv1alpha1.LabelCleared, fingerprint, depv1alpha1.AnnotationAdmittedReferences, forged))).To(Succeed())
		l, _ := ledger(Default, "vpc-uncleared")
		Expect(l).NotTo(Equal(forged))
		Expect(label(Default, "vpc-uncleared")).To(BeEmpty())
		expectDenied(ctx, consumerA, vpcs, "vpc-uncleared", "VirtualMachine/default/vm-uncleared")
		Expect(mergePatch(ctx, consumerA, vpc("vpc-uncleared"), fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, depv1alpha1.LabelCleared, fingerprint))).To(Succeed())
		Expect(label(Default, "vpc-uncleared")).To(BeEmpty(), "the label alone, copied from a cleared VPC, was kept")
		expectDenied(ctx, consumerA, vpcs, "vpc-uncleared", "VirtualMachine/default/vm-uncleared")

		By("a cleared VPC exported and applied again as a new object keeps neither the clearance nor the label")
		copied := vpc("vpc-clear-copy")
		copied.SetLabels(map[string]string{depv1alpha1.LabelCleared: fingerprint})
		copied.SetAnnotations(map[string]string{depv1alpha1.AnnotationAdmittedReferences: cleared["vpc-clear-1"]})
		create(ctx, consumerA, copied)
		Expect(label(Default, "vpc-clear-copy")).To(BeEmpty())
		l, _ = ledger(Default, "vpc-clear-copy")
		Expect(l).NotTo(ContainSubstring(" c="))
		Expect(remove(ctx, consumerA, vpcs, "vpc-clear-copy")).To(Succeed())

		By("a new reference ends the clearance, and removes the label, before the VM is stored: the DELETE is denied")
		create(ctx, consumerA, vm("vm-clear-2", "vpc-clear-2"))
		l, _ = ledger(Default, "vpc-clear-2")
		Expect(l).NotTo(ContainSubstring(" c="))
		Expect(label(Default, "vpc-clear-2")).To(BeEmpty())
		expectDenied(ctx, consumerA, vpcs, "vpc-clear-2", "VirtualMachine/default/vm-clear-2")

		By("with the webhook down, kcp deletes the cleared VPC without calling it, and refuses the DELETE of one not cleared")
		webhookProc.Stop()
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				Expect(webhookProc.Start()).To(Succeed())
			}
		})
		Eventually(func(g Gomega) {
			err := cli.Cluster(consumerA).Delete(ctx, vpc("vpc-clear-2"), client.DryRunAll)
			g.Expect(err).To(MatchError(ContainSubstring("failed calling webhook")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(remove(ctx, consumerA, vpcs, "vpc-clear-1")).To(Succeed())
		Expect(webhookProc.Start()).To(Succeed())
		restarted = true
		Eventually(webhookProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		expectDenied(ctx, consumerA, vpcs, "vpc-clear-2", "VirtualMachine/default/vm-clear-2")
		Expect(remove(ctx, consumerA, vms, "vm-clear-2")).To(Succeed())
		expectDeletable(ctx, consumerA, vpcs, "vpc-clear-2")
		Expect(remove(ctx, consumerA, vms, "vm-uncleared")).To(Succeed())
		expectDeletable(ctx, consumerA, vpcs, "vpc-uncleared")
	})

	It(fmt.Sprintf("never deletes a cleared VPC after a VM that references it was stored, in %d rounds of the VM's CREATE and the VPC's DELETE sent at the same moment", clearedRounds), func(ctx context.Context) {
		concurrentRace(ctx, "cleared", clearedRounds, true, false)
	})

	It("never deletes a VPC that a VM in another namespace references, in 500 concurrent create-then-delete pairs", func(ctx context.Context) {
		By("a second rule: a VM's vpcRef may name the VPC's namespace")
		rule := sampleRule()
		rule.Name = "vm-network-refs"
		rule.Spec.Dependencies = rule.Spec.Dependencies[:1]
		rule.Spec.Dependencies[0].FieldRef = depv1alpha1.FieldReference{Path: ".spec.vpcRef.name", NamespacePath: "namespace"}
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cli.Cluster(compute).Delete(ctx, rule))).To(Succeed())
		})
		Eventually(func(g Gomega) {
			got := &depv1alpha1.DependencyRule{}
			g.Expect(cli.Cluster(compute).Get(ctx, client.ObjectKeyFromObject(rule), got)).To(Succeed())
			for _, t := range []string{depv1alpha1.ConditionReady, depv1alpha1.ConditionDependentsIndexed} {
				c := meta.FindStatusCondition(got.Status.Conditions, t)
				g.Expect(c).NotTo(BeNil(), t)
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		race(ctx, "xrace", 500, true)

		By("removing the namespaces of the variant")
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			for n := range raceNamespaces {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("xrace-%d", n)}}
				Expect(client.IgnoreNotFound(cli.Cluster(ws).Delete(ctx, ns))).To(Succeed())
			}
		}
	})

	It("tears the race namespaces down in dependency order: no VPC goes before the VM that references it", func(ctx context.Context) {
		// kcp's namespace controller deletes each namespace's content as
		// DeleteCollection items, which the webhook decides from the index
		// alone. The order is observed through watches of both types in each
		// consumer: the resourceVersion of a DELETED event is the revision of
		// the deletion, and both types of one workspace share its shard's
		// revisions.
		deletedAt := watchDeletions([]logicalcluster.Path{consumerA, consumerB}, vms, vpcs)

		start := time.Now()
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			for n := range raceNamespaces {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("race-%d", n)}}
				Expect(cli.Cluster(ws).Delete(ctx, ns)).To(Succeed())
			}
		}
		Eventually(func(g Gomega) {
			for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
				for n := range raceNamespaces {
					err := cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: fmt.Sprintf("race-%d", n)}, &corev1.Namespace{})
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace race-%d of %s still exists", n, ws)
				}
			}
		}).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
		GinkgoWriter.Printf("teardown: 40 namespaces with 1,000 VPCs and 1,000 VMs deleted in %s\n", time.Since(start).Round(time.Millisecond))

		By("checking that every VM was deleted before the VPC it referenced")
		var wrong []string
		Eventually(func(g Gomega) {
			wrong = nil
			for i := range 1000 {
				ws, ns := []logicalcluster.Path{consumerA, consumerB}[i%2], fmt.Sprintf("race-%d", (i/2)%raceNamespaces)
				vmAt, ok := deletedAt(ws, vms, ns, fmt.Sprintf("vm-%04d", i))
				g.Expect(ok).To(BeTrue(), "no deletion of vm-%04d seen", i)
				vpcAt, ok := deletedAt(ws, vpcs, ns, fmt.Sprintf("vpc-%04d", i))
				g.Expect(ok).To(BeTrue(), "no deletion of vpc-%04d seen", i)
				if vpcAt < vmAt {
					wrong = append(wrong, fmt.Sprintf("%s vpc-%04d deleted at %d, before vm-%04d at %d", ws, i, vpcAt, i, vmAt))
				}
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(wrong).To(BeEmpty(), "VPCs deleted while a VM referenced them")
	})

	It("deletes a whole stack in one go under a Replay rule, in dependency order, finishing after the replaying webhook is killed; removing the label cancels", func(ctx context.Context) {
		const n, ns = 60, "stack"
		workspaces := []logicalcluster.Path{consumerA, consumerB}
		inStack := func(o *unstructured.Unstructured) *unstructured.Unstructured {
			o.SetNamespace(ns)
			return o
		}
		updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.DeletionPolicy = depv1alpha1.DeletionPolicyReplay })
		DeferCleanup(func(ctx context.Context) {
			updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.DeletionPolicy = "" })
		})
		for _, ws := range workspaces {
			Expect(client.IgnoreAlreadyExists(cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
			for i := range n {
				create(ctx, ws, inStack(vpc(fmt.Sprintf("vpc-%02d", i))), inStack(vm(fmt.Sprintf("vm-%02d", i), fmt.Sprintf("vpc-%02d", i))))
			}
			// Two VMs on vpc-00; vpc-keep's deletion is cancelled.
			create(ctx, ws, inStack(vm("vm-extra", "vpc-00")), inStack(vpc("vpc-keep")), inStack(vm("vm-keep", "vpc-keep")))
		}
		deletedAt := watchDeletions(workspaces, vms, vpcs)
		Eventually(func(g Gomega) {
			err := cli.Cluster(consumerA).Delete(ctx, inStack(vpc("vpc-00")), client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("its deletion would be deferred until its 2 dependents are gone"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed(), "the webhook has not taken the Replay policy up")

		By("deleting every VPC first, as kubectl delete vpcs,virtualmachines --all does: each is refused and recorded")
		for _, ws := range workspaces {
			names := []string{"vpc-keep"}
			for i := range n {
				names = append(names, fmt.Sprintf("vpc-%02d", i))
			}
			for _, name := range names {
				err := cli.Cluster(ws).Delete(ctx, inStack(vpc(name)))
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting %s in %s: %v", name, ws, err)
				Expect(err.Error()).To(ContainSubstring("its deletion is deferred: it will be deleted once"))
			}
			Expect(mergePatch(ctx, ws, inStack(vpc("vpc-keep")), `{"metadata":{"labels":{"`+depv1alpha1.LabelDeletionRequested+`":null}}}`)).To(Succeed())
		}

		By("deleting the first half of the VMs: their VPCs follow")
		deleteVMs := func(from, to int) {
			GinkgoHelper()
			for _, ws := range workspaces {
				for i := from; i < to; i++ {
					Expect(cli.Cluster(ws).Delete(ctx, inStack(vm(fmt.Sprintf("vm-%02d", i), "")))).To(Succeed())
				}
			}
		}
		gone := func(ws logicalcluster.Path, name string) bool {
			err := cli.Cluster(ws).Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, inStack(vpc(name)))
			return apierrors.IsNotFound(err)
		}
		deleteVMs(1, n/2)
		Eventually(func(g Gomega) {
			for _, ws := range workspaces {
				for i := 1; i < n/2; i++ {
					g.Expect(gone(ws, fmt.Sprintf("vpc-%02d", i))).To(BeTrue(), "vpc-%02d in %s", i, ws)
				}
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("killing the webhook, deleting the other VMs while it is down, and restarting it: it finds the recorded VPCs and deletes them")
		webhookProc.Kill()
		deleteVMs(n/2, n)
		Expect(webhookProc.Start()).To(Succeed())
		Eventually(webhookProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Eventually(func(g Gomega) {
			for _, ws := range workspaces {
				for i := 1; i < n; i++ {
					g.Expect(gone(ws, fmt.Sprintf("vpc-%02d", i))).To(BeTrue(), "vpc-%02d in %s", i, ws)
				}
			}
		}).WithTimeout(2 * time.Minute).WithPolling(interval).Should(Succeed())

		By("keeping vpc-00 while vm-extra references it, then deleting it")
		for _, ws := range workspaces {
			Expect(gone(ws, "vpc-00")).To(BeFalse(), "vpc-00 in %s went while vm-extra referenced it", ws)
			Expect(cli.Cluster(ws).Delete(ctx, inStack(vm("vm-00", "")))).To(Succeed())
			Expect(cli.Cluster(ws).Delete(ctx, inStack(vm("vm-extra", "")))).To(Succeed())
			Expect(cli.Cluster(ws).Delete(ctx, inStack(vm("vm-keep", "")))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, ws := range workspaces {
				g.Expect(gone(ws, "vpc-00")).To(BeTrue(), "vpc-00 in %s", ws)
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("checking, through each consumer's watches, that no VPC went before a VM that referenced it")
		var wrong []string
		Eventually(func(g Gomega) {
			wrong = nil
			for _, ws := range workspaces {
				for i := range n {
					vpcAt, ok := deletedAt(ws, vpcs, ns, fmt.Sprintf("vpc-%02d", i))
					g.Expect(ok).To(BeTrue(), "no deletion of vpc-%02d seen in %s", i, ws)
					referencing := []string{fmt.Sprintf("vm-%02d", i)}
					if i == 0 {
						referencing = append(referencing, "vm-extra")
					}
					for _, v := range referencing {
						vmAt, ok := deletedAt(ws, vms, ns, v)
						g.Expect(ok).To(BeTrue(), "no deletion of %s seen in %s", v, ws)
						if vpcAt < vmAt {
							wrong = append(wrong, fmt.Sprintf("%s: vpc-%02d deleted at %d, before %s at %d", ws, i, vpcAt, v, vmAt))
						}
					}
				}
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(wrong).To(BeEmpty(), "VPCs deleted while a VM referenced them")

		By("leaving vpc-keep, whose deletion was cancelled")
		Consistently(func(g Gomega) {
			for _, ws := range workspaces {
				g.Expect(gone(ws, "vpc-keep")).To(BeFalse(), "vpc-keep in %s", ws)
			}
		}).WithTimeout(5 * time.Second).WithPolling(interval).Should(Succeed())
	})

	It("reads nothing but what providers granted: the webhook's identity cannot read Secrets", func(ctx context.Context) {
		webhookCfg, err := clientcmd.BuildConfigFromFlags("", webhookKubeconfig)
		Expect(err).NotTo(HaveOccurred())
		httpClient, err := rest.HTTPClientFor(webhookCfg)
		Expect(err).NotTo(HaveOccurred())
		status := func(url string) int {
			resp, err := httpClient.Get(url)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			return resp.StatusCode
		}
		for _, ws := range []logicalcluster.Path{consumerA, consumerB, compute, network} {
			Expect(status(FrontProxyURL+ws.RequestPath()+"/api/v1/secrets")).To(Equal(http.StatusForbidden), "listing Secrets in %s as the webhook", ws)
		}

		By("not even through the virtual workspace of the APIExport it may read")
		slice := &apisv1alpha1.APIExportEndpointSlice{}
		Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: "compute.test.io"}, slice)).To(Succeed())
		Expect(slice.Status.APIExportEndpoints).NotTo(BeEmpty())
		for _, e := range slice.Status.APIExportEndpoints {
			Expect(status(e.URL+"/clusters/*/api/v1/secrets")).To(BeElementOf(http.StatusForbidden, http.StatusNotFound), "listing Secrets through %s", e.URL)
		}
		By("while it may read what the compute provider granted")
		for _, e := range slice.Status.APIExportEndpoints {
			Expect(status(e.URL+"/clusters/*/apis/compute.test.io/v1/virtualmachines")).To(Equal(http.StatusOK), "listing VirtualMachines through %s", e.URL)
		}
	})

	It("allows the delete with the skip-protection annotation, and warns", func(ctx context.Context) {
		create(ctx, consumerA, vpc("vpc-skip"), vm("vm-skip", "vpc-skip"))
		expectDenied(ctx, consumerA, vpcs, "vpc-skip", "VirtualMachine/default/vm-skip")

		// As kubectl annotate does: a read-modify-write could conflict with
		// the webhook's cleaner, which removes a mark set before vm-skip.
		Expect(mergePatch(ctx, consumerA, vpc("vpc-skip"), fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, depv1alpha1.AnnotationSkipProtection))).To(Succeed())

		warnings := &kcpenv.WarningCollector{}
		cfg, err := topo.AdminConfig()
		Expect(err).NotTo(HaveOccurred())
		cfg = rest.CopyConfig(cfg)
		cfg.Host += consumerA.RequestPath()
		cfg.WarningHandlerWithContext = warnings
		c, err := client.New(cfg, client.Options{})
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Delete(ctx, vpc("vpc-skip"))).To(Succeed())
		Expect(warnings.Warnings()).To(ContainElement(ContainSubstring("bypassed by kcp-admin")))
	})

	It("refuses a new reference to a VPC that is being deleted, in consumers on every shard, and never an unchanged one", func(ctx context.Context) {
		cfg, err := getConfigIn(ctx, compute)
		Expect(err).NotTo(HaveOccurred(), "the compute workspace checks new references of its VirtualMachines")
		Expect(cfg.Webhooks).To(ConsistOf(HaveField("Name", webhookconfig.ReferencesWebhookName)))
		// The rule tracks references (see above): the labelling webhook
		// checks what it records, and kcp spares the check those writes.
		Eventually(func(g Gomega) {
			cfg, err := getConfigIn(ctx, compute)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.Webhooks[0].MatchConditions).To(ContainElement(HaveField("Name", webhookconfig.NotRecordedConditionName)))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			create(ctx, ws, vpc("vpc-going"), vpc("vpc-kept"), vm("vm-kept", "vpc-kept"))
			deleteHeld(ctx, ws, "vpc-going")
			deleteHeld(ctx, ws, "vpc-kept")

			err := cli.Cluster(ws).Create(ctx, vm("vm-late", "vpc-going"))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating a VM that references a VPC being deleted in %s: %v", ws, err)
			Expect(err.Error()).To(ContainSubstring(`VirtualMachine "vm-late" cannot reference vpcs "vpc-going": it is being deleted`))
			Expect(err.Error()).To(ContainSubstring(webhookconfig.LabelsWebhookSuffix), "refused by the labelling webhook, from its record of the reference")

			Expect(mergePatch(ctx, ws, vm("vm-kept", ""), `{"metadata":{"labels":{"tier":"gold"}}}`)).To(Succeed(), "an update that keeps the reference in %s", ws)
			Expect(cli.Cluster(ws).Create(ctx, vm("vm-early", "vpc-not-yet"))).To(Succeed(), "a reference to a VPC that does not exist yet in %s", ws)
		}
	})

	It("removes the configurations when the rule is deleted: deletes and new references are allowed", func(ctx context.Context) {
		Expect(cli.Cluster(compute).Delete(ctx, sampleRule())).To(Succeed())
		expectConfigRemoved(ctx)
		Eventually(func() bool {
			_, err := getConfigIn(ctx, compute)
			return apierrors.IsNotFound(err)
		}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "the check of new references should be removed")
		create(ctx, consumerA, vpc("vpc-free"), vm("vm-free", "vpc-free"))
		expectDeletable(ctx, consumerA, vpcs, "vpc-free")
		create(ctx, consumerA, vpc("vpc-going-free"))
		deleteHeld(ctx, consumerA, "vpc-going-free")
		Expect(cli.Cluster(consumerA).Create(ctx, vm("vm-unchecked", "vpc-going-free"))).To(Succeed())
	})

	It("protects again when the rule is recreated", func(ctx context.Context) {
		Expect(cli.Cluster(compute).Create(ctx, sampleRule())).To(Succeed())
		expectConfigInstalled(ctx)
		expectDenied(ctx, consumerA, vpcs, "vpc-a", "VirtualMachine/default/vm-2")
	})

	It("enforces an in-place edit of fieldRef.path without recreating the rule", func(ctx context.Context) {
		create(ctx, consumerA, vpc("vpc-backup"), object(vms, "vm-backup", map[string]any{"backupVPC": "vpc-backup"}))
		expectDeletable(ctx, consumerA, vpcs, "vpc-backup")
		create(ctx, consumerA, vpc("vpc-backup"))

		updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.Dependencies[0].FieldRef.Path = ".spec.backupVPC" })
		expectDenied(ctx, consumerA, vpcs, "vpc-backup", "VirtualMachine/default/vm-backup")
		// .spec.vpcRef.name no longer counts; a dry run keeps vpc-a for later specs.
		Eventually(func() error {
			return cli.Cluster(consumerA).Delete(ctx, vpc("vpc-a"), client.DryRunAll)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.Dependencies[0].FieldRef.Path = ".spec.vpcRef.name" })
	})

	It("follows [*] paths into lists", func(ctx context.Context) {
		updateRule(ctx, func(r *depv1alpha1.DependencyRule) {
			d := r.Spec.Dependencies[0]
			d.FieldRef.Path = ".spec.nics[*].vpc"
			r.Spec.Dependencies = append(r.Spec.Dependencies, d)
		})
		create(ctx, consumerA, vpc("vpc-nic"), object(vms, "vm-nics", map[string]any{
			"nics": []any{map[string]any{"vpc": "other"}, map[string]any{"vpc": "vpc-nic"}},
		}))
		expectDenied(ctx, consumerA, vpcs, "vpc-nic", "VirtualMachine/default/vm-nics")
	})

	pluginScenarios()

	trustScenarios()

	upgradeScenarios()

	shardScenarios()

	It("denies deletes after a webhook restart until its registry is initialized, then decides correctly", func(ctx context.Context) {
		create(ctx, consumerA, vpc("vpc-unreferenced"))
		webhookArgs := webhookProc.Args

		By("restarting the webhook so that it cannot load the rules (no endpoint slice for its APIExport name)")
		webhookProc.Stop()
		webhookProc.Args = append(append([]string{}, webhookArgs...), "--api-export-name=not-deployed.example.com")
		Expect(webhookProc.Start()).To(Succeed())
		Eventually(func(g Gomega) {
			err := cli.Cluster(consumerA).Delete(ctx, vpc("vpc-unreferenced"), client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(And(ContainSubstring("has not loaded all DependencyRules yet"), ContainSubstring("retry")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(webhookProc.Ready()).To(MatchError(ContainSubstring("/readyz: 500")), "/readyz must fail before initialization")

		By("restarting it with its normal arguments")
		webhookProc.Stop()
		webhookProc.Args = webhookArgs
		Expect(webhookProc.Start()).To(Succeed())
		Eventually(webhookProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		expectDenied(ctx, consumerA, vpcs, "vpc-a", "VirtualMachine/default/vm-2")
		expectDeletable(ctx, consumerA, vpcs, "vpc-unreferenced")
	})

	It("removes the stale configuration on restart when the rule was deleted while the controller was stopped", func(ctx context.Context) {
		controllerProc.Stop()
		Expect(cli.Cluster(compute).Delete(ctx, sampleRule())).To(Succeed())
		Consistently(func() error {
			_, err := getConfig(ctx)
			return err
		}).WithTimeout(3*interval*4).Should(Succeed(), "nothing else removes the configuration")

		Expect(controllerProc.Start()).To(Succeed())
		Eventually(controllerProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		expectConfigRemoved(ctx)
		expectDeletable(ctx, consumerA, vpcs, "vpc-a")
	})

	faultScenarios()

	It("removes what it deployed with make undeploy", func(ctx context.Context) {
		controllerProc.Stop()
		webhookProc.Stop()
		makeTarget("undeploy", "KUBECONFIG="+topo.AdminKubeconfig, "DEPCTRL_WORKSPACE="+depCtrl.String())
		for _, obj := range []client.Object{
			&apisv1alpha2.APIExport{ObjectMeta: metav1.ObjectMeta{Name: "dependencies.opendefense.cloud"}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dependency-controller"}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dependency-webhook"}},
		} {
			err := cli.Cluster(depCtrl).Get(ctx, client.ObjectKeyFromObject(obj), obj)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s still exists in %s: %v", obj, obj.GetName(), depCtrl, err)
		}
	})
})
