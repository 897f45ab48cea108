package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/rulesync"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

const (
	timeout  = 60 * time.Second
	interval = 200 * time.Millisecond
)

var (
	kcpEnv    *kcpenv.Env
	kcpConfig *rest.Config
	cli       clusterclient.ClusterClient
)

func TestWebhook(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook on kcp")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	env, err := kcpenv.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	kcpEnv, kcpConfig, cli = env, env.Config, env.Client
})

var (
	vpcGVR     = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"}
	routerGVR  = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "routers"}
	subnetGVR  = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "subnets"}
	vmGVR      = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "virtualmachines"}
	gatewayGVR = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "gateways"}
)

func kindOf(gvr schema.GroupVersionResource) string {
	return map[string]string{"vpcs": "VPC", "routers": "Router", "subnets": "Subnet", "virtualmachines": "VirtualMachine", "gateways": "Gateway", "volumes": "Volume", "backups": "Backup",
		"httproutes": "HTTPRoute", "clusterroutes": "ClusterRoute", "appliances": "Appliance", "ports": "Port", "links": "Link", "loadbalancers": "LoadBalancer"}[gvr.Resource]
}

func newObject(gvr schema.GroupVersionResource, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kindOf(gvr))
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

func create(ctx context.Context, ws logicalcluster.Path, obj *unstructured.Unstructured) {
	GinkgoHelper()
	if ns := obj.GetNamespace(); ns != "" && ns != "default" {
		err := cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	Eventually(func() error { return cli.Cluster(ws).Create(ctx, obj.DeepCopy()) }).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

func deleteObject(ctx context.Context, c client.Client, gvr schema.GroupVersionResource, namespace, name string, opts ...client.DeleteOption) error {
	return c.Delete(ctx, newObject(gvr, namespace, name, nil), opts...)
}

// expectDenied waits until deleting the object is denied with a message
// containing every part, and returns the message.
func expectDenied(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, namespace, name string, parts ...string) string {
	GinkgoHelper()
	var msg string
	Eventually(func(g Gomega) {
		err := deleteObject(ctx, cli.Cluster(ws), gvr, namespace, name, client.DryRunAll)
		g.Expect(err).To(HaveOccurred(), "delete was allowed")
		msg = err.Error()
		for _, p := range parts {
			g.Expect(msg).To(ContainSubstring(p))
		}
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	// A real delete gets the same answer as the dry run.
	err := deleteObject(ctx, cli.Cluster(ws), gvr, namespace, name)
	Expect(err).To(HaveOccurred(), "delete was allowed")
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "denial is a 403: %v", err)
	for _, p := range parts {
		Expect(err.Error()).To(ContainSubstring(p))
	}
	return msg
}

func expectDeletable(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, name string) {
	GinkgoHelper()
	expectDeletableIn(ctx, ws, gvr, "default", name)
}

// expectDeletableIn waits until the object in namespace can be deleted, and
// deletes it.
func expectDeletableIn(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, namespace, name string) {
	GinkgoHelper()
	Eventually(func() error {
		return deleteObject(ctx, cli.Cluster(ws), gvr, namespace, name)
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// installWebhookConfig installs a webhook configuration in the workspace ws
// (logical cluster cluster) that protects the given resources, as the
// controller would.
func installWebhookConfig(ctx context.Context, ws logicalcluster.Path, cluster logicalcluster.Name, name, url string, ca []byte, resources ...schema.GroupVersionResource) {
	GinkgoHelper()
	installWorkspaceConfig(ctx, ws, cluster, name, url, ca, &webhookconfig.Workspace{Path: ws, Protected: resources})
}

// installWorkspaceConfig installs the webhook configurations of a
// workspace ws (logical cluster cluster), as the controller would: the
// validating one, and the mutating one if spec labels dependents.
func installWorkspaceConfig(ctx context.Context, ws logicalcluster.Path, cluster logicalcluster.Name, name, url string, ca []byte, spec *webhookconfig.Workspace) {
	GinkgoHelper()
	opts := webhookconfig.Options{URL: url, CABundle: ca, TimeoutSeconds: 10, FailurePolicy: admissionregistrationv1.Fail}
	if cfg := webhookconfig.Validating(spec, cluster, opts); cfg != nil {
		cfg.Name = name
		Expect(cli.Cluster(ws).Create(ctx, cfg)).To(Succeed())
	}
	if cfg := webhookconfig.Mutating(spec, cluster, opts); cfg != nil {
		cfg.Name = name
		Expect(cli.Cluster(ws).Create(ctx, cfg)).To(Succeed())
	}
}

var _ = Describe("Deletion validator behind kcp's admission chain", Ordered, func() {
	var (
		depCtrl, network, compute, storage, consumer, consumer2 logicalcluster.Path
		networkCluster, computeCluster                          logicalcluster.Name
		rule                                                    *depv1alpha1.DependencyRule
		wh                                                      *kcpenv.Webhook
	)

	BeforeAll(func(ctx context.Context) {
		root := core.RootCluster.Path()
		_, depCtrl = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("dep-ctrl"))
		Expect(kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrl))).To(Succeed())
		By("granting the webhook's user what config/rbac/webhook grants in the dep-ctrl workspace")
		rbac, err := kcpenv.LoadManifests("config/rbac/webhook")
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(depCtrl), rbac...)).To(Succeed())

		var networkWS *tenancyv1alpha1.Workspace
		networkWS, network = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network"))
		networkCluster = logicalcluster.Name(networkWS.Spec.Cluster)
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), "network.test.io",
			kcpenv.Resource{Kind: "VPC", Plural: "vpcs"},
			kcpenv.Resource{Kind: "Router", Plural: "routers", ClusterScoped: true},
			kcpenv.Resource{Kind: "Subnet", Plural: "subnets"})).To(Succeed())
		_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(network), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())

		var computeWS *tenancyv1alpha1.Workspace
		computeWS, compute = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute"))
		computeCluster = logicalcluster.Name(computeWS.Spec.Cluster)
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io",
			kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"},
			kcpenv.Resource{Kind: "Gateway", Plural: "gateways", ClusterScoped: true})).To(Succeed())
		_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(compute), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		By("granting the webhook read access to the compute export, as config/samples/compute-provider/webhook-access.yaml does")
		grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples/compute-provider/webhook-access.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(compute), grant...)).To(Succeed())

		// A provider that writes a rule without granting the webhook access.
		_, storage = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("storage"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(storage), "storage.test.io", kcpenv.Resource{Kind: "Volume", Plural: "volumes"})).To(Succeed())
		_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(storage), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())

		for _, ws := range []*logicalcluster.Path{&consumer, &consumer2} {
			_, *ws = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
			bindExports(ctx, *ws, export{network, "network.test.io"}, export{compute, "compute.test.io"}, export{storage, "storage.test.io"})
		}

		rule = &depv1alpha1.DependencyRule{
			ObjectMeta: metav1.ObjectMeta{Name: "compute-references"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent: depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
				Dependencies: []depv1alpha1.Dependency{
					{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"}},
					{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.nics[*].vpc"}},
					{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "routers", FieldRef: depv1alpha1.FieldReference{Path: ".spec.router"}},
				},
			},
		}
		Expect(cli.Cluster(compute).Create(ctx, rule)).To(Succeed())
		gatewayRule := &depv1alpha1.DependencyRule{
			ObjectMeta: metav1.ObjectMeta{Name: "gateway-references"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent: depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "Gateway", Resource: "gateways"},
				Dependencies: []depv1alpha1.Dependency{
					{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.vpc"}},
				},
			},
		}
		Expect(cli.Cluster(compute).Create(ctx, gatewayRule)).To(Succeed())

		By("starting the webhook with its own identity")
		wh = startWebhook(ctx, depCtrl, nil, nil)
		installWebhookConfig(ctx, network, networkCluster, webhookconfig.Name, wh.URL, wh.CABundle, vpcGVR, routerGVR)
	})

	It("denies deleting a VPC that a VM references, naming the VM, and allows it once the VM is gone", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-a", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-2", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
		create(ctx, consumer, newObject(vmGVR, "default", "unrelated", map[string]any{"vpcRef": map[string]any{"name": "vpc-b"}}))

		msg := expectDenied(ctx, consumer, vpcGVR, "default", "vpc-a", "VirtualMachine/default/vm-1, VirtualMachine/default/vm-2")
		Expect(msg).NotTo(ContainSubstring("unrelated"))

		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-1")).To(Succeed())
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-a", "still referenced by VirtualMachine/default/vm-2;")
		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-2")).To(Succeed())
		expectDeletable(ctx, consumer, vpcGVR, "vpc-a")
	})

	It("answers confirming reads from the index while VMs keep changing, and still sees every VM created before the DELETE", func(ctx context.Context) {
		By("creating and deleting unrelated VMs in the background, so that the index's watch of VMs is busy")
		churnCtx, stopChurn := context.WithCancel(ctx)
		churned := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(churned)
			for i := 0; churnCtx.Err() == nil; i++ {
				name := fmt.Sprintf("churn-%d", i)
				if err := cli.Cluster(consumer).Create(churnCtx, newObject(vmGVR, "default", name, map[string]any{"vpcRef": map[string]any{"name": "nothing"}})); err == nil {
					_ = deleteObject(churnCtx, cli.Cluster(consumer), vmGVR, "default", name)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		DeferCleanup(func() {
			stopChurn()
			<-churned
		})
		// Wait until the index has seen the churn.
		time.Sleep(time.Second)

		before, err := wh.LiveReads("index")
		Expect(err).NotTo(HaveOccurred())
		for i := range 20 {
			vpc, free, vm := fmt.Sprintf("busy-vpc-%d", i), fmt.Sprintf("free-vpc-%d", i), fmt.Sprintf("busy-vm-%d", i)
			create(ctx, consumer, newObject(vpcGVR, "default", vpc, nil))
			create(ctx, consumer, newObject(vpcGVR, "default", free, nil))
			create(ctx, consumer, newObject(vmGVR, "default", vm, map[string]any{"vpcRef": map[string]any{"name": vpc}}))
			// The first answer counts: no retries.
			err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", vpc)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting %s, which %s references: %v", vpc, vm, err)
			Expect(err.Error()).To(ContainSubstring("VirtualMachine/default/" + vm))
			Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", free)).To(Succeed(), "deleting %s, which nothing references", free)
		}
		after, err := wh.LiveReads("index")
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(BeNumerically(">", before), "no read was answered from the index")
		GinkgoWriter.Printf("reads answered from the index: %.0f\n", after-before)
	})

	It("leaves another consumer unaffected", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "shared-name", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-shared", map[string]any{"vpcRef": map[string]any{"name": "shared-name"}}))
		create(ctx, consumer2, newObject(vpcGVR, "default", "shared-name", nil))

		expectDenied(ctx, consumer, vpcGVR, "default", "shared-name", "VirtualMachine/default/vm-shared")
		expectDeletable(ctx, consumer2, vpcGVR, "shared-name")
	})

	It("does not apply a rule to another provider's type of the same group and resource", func(ctx context.Context) {
		root := core.RootCluster.Path()
		otherWS, otherNetwork := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network-other"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(otherNetwork), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"})).To(Succeed())
		_, consumer3 := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
		bindExports(ctx, consumer3, export{otherNetwork, "network.test.io"}, export{compute, "compute.test.io"})
		// kcp calls the webhook for the other provider's VPCs too, as it
		// would if a rule protected them; the rule names the first provider.
		installWebhookConfig(ctx, otherNetwork, logicalcluster.Name(otherWS.Spec.Cluster), webhookconfig.Name, wh.URL, wh.CABundle, vpcGVR)
		create(ctx, consumer3, newObject(vpcGVR, "default", "vpc-elsewhere", nil))
		create(ctx, consumer3, newObject(vmGVR, "default", "vm-elsewhere", map[string]any{"vpcRef": map[string]any{"name": "vpc-elsewhere"}}))

		before, err := wh.Decisions("allowed", "index")
		Expect(err).NotTo(HaveOccurred())
		// Dry runs until kcp has picked up the new configuration and calls
		// the webhook: every one of them must be allowed.
		Eventually(func(g Gomega) {
			g.Expect(deleteObject(ctx, cli.Cluster(consumer3), vpcGVR, "default", "vpc-elsewhere", client.DryRunAll)).To(Succeed())
			after, err := wh.Decisions("allowed", "index")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after).To(BeNumerically(">", before), "kcp did not call the webhook for the other provider's VPC")
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		expectDeletable(ctx, consumer3, vpcGVR, "vpc-elsewhere")
	})

	It("follows [*] paths into lists", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-nic", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-nics", map[string]any{
			"nics": []any{map[string]any{"vpc": "other"}, map[string]any{"vpc": "vpc-nic"}},
		}))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-nic", "VirtualMachine/default/vm-nics")
	})

	It("is blocked by a cluster-scoped dependent of a namespaced target", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "team-a", "vpc-gw", nil))
		create(ctx, consumer, newObject(gatewayGVR, "", "edge-gateway", map[string]any{"vpc": "vpc-gw"}))
		expectDenied(ctx, consumer, vpcGVR, "team-a", "vpc-gw", "Gateway/edge-gateway")
	})

	It("protects a cluster-scoped target from dependents in any namespace", func(ctx context.Context) {
		create(ctx, consumer, newObject(routerGVR, "", "core-router", nil))
		create(ctx, consumer, newObject(vmGVR, "ns-1", "vm-r", map[string]any{"router": "core-router"}))
		expectDenied(ctx, consumer, routerGVR, "", "core-router", "VirtualMachine/ns-1/vm-r")
	})

	It("does not count dependents that are being deleted", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-t", nil))
		vm := newObject(vmGVR, "default", "vm-terminating", map[string]any{"vpcRef": map[string]any{"name": "vpc-t"}})
		vm.SetFinalizers([]string{"test.dependencies.opendefense.cloud/hold"})
		create(ctx, consumer, vm)
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-t", "VirtualMachine/default/vm-terminating")

		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-terminating")).To(Succeed())
		expectDeletable(ctx, consumer, vpcGVR, "vpc-t")

		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(vmGVR.GroupVersion().WithKind("VirtualMachine"))
		Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vm-terminating"}, got)).To(Succeed())
		got.SetFinalizers(nil)
		Expect(cli.Cluster(consumer).Update(ctx, got)).To(Succeed())
	})

	// The Trust boundary suite has the provider's grant: there
	// skip-protection set by an administrator takes effect.
	It("gives skip-protection no effect while the protected provider has not let the webhook ask kcp who may delete, and says what is missing", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-skip", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-skip", map[string]any{"vpcRef": map[string]any{"name": "vpc-skip"}}))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-skip", "VirtualMachine/default/vm-skip")

		c, collected := warnedClient(consumer)
		Expect(c.Patch(ctx, newObject(vpcGVR, "default", "vpc-skip", nil), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, depv1alpha1.AnnotationSkipProtection)))).To(Succeed())
		Expect(collected.Warnings()).To(ContainElement(And(ContainSubstring("has no effect"), ContainSubstring("cannot ask kcp whether admin may delete it"),
			ContainSubstring("network.test.io"))))

		err := deleteObject(ctx, c, vpcGVR, "default", "vpc-skip")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleted: %v", err)
		Expect(err.Error()).To(ContainSubstring("VirtualMachine/default/vm-skip"))
		Expect(collected.Warnings()).To(ContainElement(ContainSubstring("has no effect: it was not set by a user who may delete the object")))
	})

	It("refuses a forged review whose cluster name would make a read of something else, before anything is read", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-forged", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-forged", map[string]any{"vpcRef": map[string]any{"name": "vpc-forged"}}))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-forged", "VirtualMachine/default/vm-forged")
		before, err := wh.Decided()
		Expect(err).NotTo(HaveOccurred())

		old := fmt.Sprintf(`{"apiVersion":"network.test.io/v1","kind":"VPC","metadata":{"name":"vpc-forged","namespace":"default","annotations":{%q:%q}}}`,
			logicalcluster.AnnotationKey, "root:victim/api/v1/namespaces/default/secrets?")
		body, err := json.Marshal(&admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "forged", Operation: admissionv1.Delete, Name: "vpc-forged", Namespace: "default",
				Kind:      metav1.GroupVersionKind{Group: vpcGVR.Group, Version: vpcGVR.Version, Kind: "VPC"},
				Resource:  metav1.GroupVersionResource{Group: vpcGVR.Group, Version: vpcGVR.Version, Resource: vpcGVR.Resource},
				OldObject: runtime.RawExtension{Raw: []byte(old)},
			},
		})
		Expect(err).NotTo(HaveOccurred())
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM(wh.CABundle)).To(BeTrue())
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		resp, err := c.Post(wh.URL+"/"+networkCluster.String(), "application/json", bytes.NewReader(body))
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		got := &admissionv1.AdmissionReview{}
		Expect(json.NewDecoder(resp.Body).Decode(got)).To(Succeed())
		Expect(got.Response).NotTo(BeNil())
		Expect(got.Response.Allowed).To(BeFalse())
		Expect(got.Response.Result.Code).To(BeEquivalentTo(http.StatusBadRequest))
		Expect(got.Response.Result.Message).To(ContainSubstring("is not a logical cluster name"))
		Expect(got.Response.Result.Message).NotTo(ContainSubstring("vm-forged"))

		after, err := wh.Decided()
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(before), "the forged review reached a decision")
	})

	It("denies from the index, without reading the dependents live, once it has indexed them", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-indexed", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-indexed", map[string]any{"vpcRef": map[string]any{"name": "vpc-indexed"}}))
		before, err := wh.Decisions("denied", "index")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			msg := expectDenied(ctx, consumer, vpcGVR, "default", "vpc-indexed", "VirtualMachine/default/vm-indexed")
			g.Expect(msg).NotTo(BeEmpty())
			after, err := wh.Decisions("denied", "index")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after).To(BeNumerically(">", before), "no denial came from the index")
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("always blocks the DELETE of an object whose dependent was created just before", func(ctx context.Context) {
		// No waiting between the dependent's CREATE and the DELETE: the
		// index may not have seen the dependent yet, and the live read
		// must find it.
		for i := range 30 {
			vpc, vm := fmt.Sprintf("vpc-race-%d", i), fmt.Sprintf("vm-race-%d", i)
			Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", vpc, nil))).To(Succeed())
			Expect(cli.Cluster(consumer).Create(ctx, newObject(vmGVR, "default", vm, map[string]any{"vpcRef": map[string]any{"name": vpc}}))).To(Succeed())
			err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", vpc)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting %s right after %s was created: %v", vpc, vm, err)
			Expect(err.Error()).To(ContainSubstring("VirtualMachine/default/" + vm))
		}
	})

	It("decides the items of kcp's own namespace deletion: dependents first; the namespace's VMs from the index, the workspace's Gateways live until their index passes a fence", func(ctx context.Context) {
		By("granting the webhook what config/samples/network-provider/webhook-access.yaml grants: with create, it asks kcp whether the namespace is being deleted")
		grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples/network-provider/webhook-access.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(network), grant...)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			for _, o := range grant {
				Expect(client.IgnoreNotFound(cli.Cluster(network).Delete(ctx, o))).To(Succeed())
			}
		})
		c := cli.Cluster(consumer)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown"}}
		Expect(c.Create(ctx, ns)).To(Succeed())
		for i := range 3 {
			vpc := fmt.Sprintf("vpc-td-%d", i)
			create(ctx, consumer, newObject(vpcGVR, ns.Name, vpc, nil))
			create(ctx, consumer, newObject(vmGVR, ns.Name, fmt.Sprintf("vm-td-%d", i), map[string]any{"vpcRef": map[string]any{"name": vpc}}))
		}
		create(ctx, consumer, newObject(vpcGVR, ns.Name, "vpc-td-unreferenced", nil))
		By("waiting until the index holds the dependents")
		before, err := wh.Decisions("denied", "index")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			expectDenied(ctx, consumer, vpcGVR, ns.Name, "vpc-td-2", "VirtualMachine/teardown/vm-td-2")
			after, err := wh.Decisions("denied", "index")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after).To(BeNumerically(">", before))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		teardownBefore, err := wh.Decisions("allowed", "teardown")
		Expect(err).NotTo(HaveOccurred())
		liveBefore, err := wh.Decisions("allowed", "live")
		Expect(err).NotTo(HaveOccurred())
		By("deleting the namespace")
		Expect(c.Delete(ctx, ns)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "the namespace was not deleted")

		// kcp's namespace controller sent each VPC as an item of a
		// DeleteCollection (no name, as system:apiserver). kcp said the
		// namespace is being deleted, so no VM can appear in it: the VMs
		// were not read. A Gateway (cluster-scoped) could be created
		// anywhere meanwhile, so the Gateways were read live until the
		// index of Gateways had passed a resourceVersion read after the
		// teardown began (a fence, see index.Fenced; the first item waits
		// briefly for that, so every item may be decided from the index).
		// Which items were read live depends on when the Gateways' watch
		// passed the fence; index/fence_test.go shows the fence itself.
		teardownAfter, err := wh.Decisions("allowed", "teardown")
		Expect(err).NotTo(HaveOccurred())
		liveAfter, err := wh.Decisions("allowed", "live")
		Expect(err).NotTo(HaveOccurred())
		Expect(liveAfter-liveBefore+teardownAfter-teardownBefore).To(BeNumerically(">=", 4), "VPCs allowed as teardown items")
	})

	It("reports a rule whose provider has not granted the webhook access to its dependents, and gives it no effect", func(ctx context.Context) {
		volumeRule := vpcRule(network, "volume-references", depv1alpha1.DependentResource{APIExportName: "storage.test.io", Group: "storage.test.io", Version: "v1", Kind: "Volume", Resource: "volumes"}, ".spec.vpc")
		Expect(cli.Cluster(storage).Create(ctx, volumeRule)).To(Succeed())
		expectIndexed(ctx, storage, volumeRule.Name, metav1.ConditionFalse, "AccessDenied", `"dependency-webhook"`, "apiexports/content", "storage.test.io")

		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-volume", nil))
		create(ctx, consumer, newObject(schema.GroupVersionResource{Group: "storage.test.io", Version: "v1", Resource: "volumes"}, "default", "volume-1", map[string]any{"vpc": "vpc-volume"}))
		expectDeletable(ctx, consumer, vpcGVR, "vpc-volume")
		Expect(cli.Cluster(storage).Delete(ctx, volumeRule)).To(Succeed())
	})

	It("refuses a new reference to a VPC that is being deleted, once the network provider lets the webhook read VPCs", func(ctx context.Context) {
		By("installing the check of new references of VirtualMachines in the compute workspace, as the controller does")
		installWorkspaceConfig(ctx, compute, computeCluster, webhookconfig.Name, wh.URL, wh.CABundle, &webhookconfig.Workspace{Path: compute, Dependents: []schema.GroupVersionResource{vmGVR}, ReferenceFields: []string{"spec"}})
		guarded := func(status metav1.ConditionStatus, reason string, parts ...string) {
			GinkgoHelper()
			expectCondition(ctx, compute, rule.Name, depv1alpha1.ConditionReferencesGuarded, status, reason, parts...)
		}
		guarded(metav1.ConditionFalse, "AccessDenied", `"dependency-webhook"`, "network.test.io", "apiexports/content")

		By("granting the webhook read access to the network export, as config/samples/network-provider/webhook-access.yaml does")
		grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples/network-provider/webhook-access.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(network), grant...)).To(Succeed())
		guarded(metav1.ConditionTrue, "Guarded", "vpcs.network.test.io")

		By("deleting a VPC that has a finalizer: it stays, being deleted")
		doomed := newObject(vpcGVR, "default", "vpc-doomed", nil)
		doomed.SetFinalizers([]string{"test.io/hold"})
		create(ctx, consumer, doomed)
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-doomed")).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(cli.Cluster(consumer).Patch(ctx, newObject(vpcGVR, "default", "vpc-doomed", nil), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
		})

		By("refusing a new VirtualMachine that references it")
		Eventually(func(g Gomega) {
			err := cli.Cluster(consumer).Create(ctx, newObject(vmGVR, "default", "vm-late", map[string]any{"vpcRef": map[string]any{"name": "vpc-doomed"}}))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating vm-late: %v", err)
			g.Expect(err.Error()).To(ContainSubstring(`VirtualMachine "vm-late" cannot reference vpcs "vpc-doomed": it is being deleted`))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("allowing a reference to a VPC that does not exist yet, so that creation order does not matter")
		Expect(cli.Cluster(consumer).Create(ctx, newObject(vmGVR, "default", "vm-early", map[string]any{"vpcRef": map[string]any{"name": "vpc-later"}}))).To(Succeed())

		By("never refusing an update that keeps the references of a VirtualMachine")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-held", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-held", map[string]any{"vpcRef": map[string]any{"name": "vpc-held"}}))
		held := newObject(vpcGVR, "default", "vpc-held", nil)
		Expect(cli.Cluster(consumer).Patch(ctx, held, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["test.io/hold"],"annotations":{"dependencies.opendefense.cloud/skip-protection":"true"}}}`)))).To(Succeed())
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-held")).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(cli.Cluster(consumer).Patch(ctx, newObject(vpcGVR, "default", "vpc-held", nil), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
		})
		checks := func() float64 {
			GinkgoHelper()
			n, err := wh.Counter("dependency_webhook_reference_checks_total", map[string]string{"outcome": "allowed"})
			Expect(err).NotTo(HaveOccurred())
			return n
		}
		before := checks()
		vm := newObject(vmGVR, "default", "vm-held", nil)
		Expect(cli.Cluster(consumer).Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"gold"}},"spec":{"cpu":8}}`)))).To(Succeed())
		Expect(checks()).To(Equal(before+1), "kcp did not call the check for an UPDATE of the spec")

		By("not even calling the check for an update of labels, annotations or finalizers only (its match condition)")
		Expect(cli.Cluster(consumer).Patch(ctx, vm, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"tier":"silver"},"annotations":{"note":"x"},"finalizers":["test.io/keep"]}}`)))).To(Succeed())
		Expect(cli.Cluster(consumer).Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
		Expect(checks()).To(Equal(before+1), "kcp called the check for UPDATEs of metadata only")

		By("refusing an update that adds a reference to a VPC that is being deleted")
		err = cli.Cluster(consumer).Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nics":[{"vpc":"vpc-doomed"}]}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "adding a reference to vpc-doomed: %v", err)
		Expect(err.Error()).To(ContainSubstring(`VirtualMachine "vm-held" cannot reference vpcs "vpc-doomed": it is being deleted`))
	})

	It("defers the deletion of a referenced Subnet under a Replay rule and deletes it once its VMs are gone; removing the label cancels it", func(ctx context.Context) {
		By("granting the webhook patch and delete on the network export, as config/samples/network-provider/webhook-access.yaml does")
		grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples/network-provider/webhook-access.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(network), grant...)).To(Succeed())
		replayRule := &depv1alpha1.DependencyRule{
			ObjectMeta: metav1.ObjectMeta{Name: "subnet-references"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent: depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
				Dependencies: []depv1alpha1.Dependency{
					{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "subnets", FieldRef: depv1alpha1.FieldReference{Path: ".spec.subnet"}},
				},
				DeletionPolicy: depv1alpha1.DeletionPolicyReplay,
			},
		}
		Expect(cli.Cluster(compute).Create(ctx, replayRule)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(cli.Cluster(compute).Delete(ctx, replayRule)).To(Succeed()) })
		installWebhookConfig(ctx, network, networkCluster, "dependency-replay", wh.URL, wh.CABundle, subnetGVR)
		DeferCleanup(func(ctx context.Context) {
			Expect(cli.Cluster(network).Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "dependency-replay"}})).To(Succeed())
		})

		for _, name := range []string{"subnet-a", "subnet-b"} {
			create(ctx, consumer, newObject(subnetGVR, "default", name, nil))
		}
		create(ctx, consumer, newObject(vmGVR, "default", "vm-s1", map[string]any{"subnet": "subnet-a"}))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-s2", map[string]any{"subnet": "subnet-a"}))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-s3", map[string]any{"subnet": "subnet-b"}))
		labelOf := func(name string) (string, bool) {
			GinkgoHelper()
			got := newObject(subnetGVR, "default", name, nil)
			Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
			v, ok := got.GetLabels()[depv1alpha1.LabelDeletionRequested]
			return v, ok
		}

		By("answering a dry run with what would happen, recording nothing")
		Eventually(func(g Gomega) {
			err := deleteObject(ctx, cli.Cluster(consumer), subnetGVR, "default", "subnet-a", client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("its deletion would be deferred until its 2 dependents are gone"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		_, recorded := labelOf("subnet-a")
		Expect(recorded).To(BeFalse(), "a dry run recorded the deletion")

		By("refusing the DELETE, so that the provider does not start tearing the Subnet down, and recording it")
		err = deleteObject(ctx, cli.Cluster(consumer), subnetGVR, "default", "subnet-a", client.PropagationPolicy(metav1.DeletePropagationForeground))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting subnet-a: %v", err)
		Expect(err.Error()).To(ContainSubstring("VirtualMachine/default/vm-s1, VirtualMachine/default/vm-s2"))
		Expect(err.Error()).To(ContainSubstring("its deletion is deferred: it will be deleted once its 2 dependents are gone (remove its label " + depv1alpha1.LabelDeletionRequested + " to cancel)"))
		got := newObject(subnetGVR, "default", "subnet-a", nil)
		Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
		Expect(got.GetLabels()).To(HaveKeyWithValue(depv1alpha1.LabelDeletionRequested, "true"))
		var request depv1alpha1.DeletionRequest
		Expect(json.Unmarshal([]byte(got.GetAnnotations()[depv1alpha1.AnnotationDeletionRequest]), &request)).To(Succeed())
		Expect(request.User).NotTo(BeEmpty())
		Expect(request.PropagationPolicy).To(Equal(ptr.To(metav1.DeletePropagationForeground)))
		Expect(got.GetDeletionTimestamp()).To(BeNil())

		By("deferring subnet-b too, then cancelling it by removing the label")
		err = deleteObject(ctx, cli.Cluster(consumer), subnetGVR, "default", "subnet-b")
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("its deletion is deferred"))
		Expect(cli.Cluster(consumer).Patch(ctx, newObject(subnetGVR, "default", "subnet-b", nil), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+depv1alpha1.LabelDeletionRequested+`":null}}}`)))).To(Succeed())

		By("keeping subnet-a while one VM still references it")
		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-s1")).To(Succeed())
		Consistently(func() error {
			return cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(got), newObject(subnetGVR, "default", "subnet-a", nil))
		}).WithTimeout(3 * time.Second).WithPolling(interval).Should(Succeed())

		By("deleting subnet-a once the last VM is gone, and not subnet-b, whose deletion was cancelled")
		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-s2")).To(Succeed())
		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-s3")).To(Succeed())
		Eventually(func() bool {
			err := cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(got), newObject(subnetGVR, "default", "subnet-a", nil))
			return apierrors.IsNotFound(err)
		}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "subnet-a was not deleted")
		Consistently(func() error {
			return cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "subnet-b"}, newObject(subnetGVR, "default", "subnet-b", nil))
		}).WithTimeout(3*time.Second).WithPolling(interval).Should(Succeed(), "subnet-b was deleted although its deletion was cancelled")
		replayed, err := wh.Replayed("deleted")
		Expect(err).NotTo(HaveOccurred())
		Expect(replayed).To(BeNumerically(">=", 1))
	})

	It("reports a field path that the dependent's schema cannot hold, and keeps working for the other rules", func(ctx context.Context) {
		typo := vpcRule(network, "typo-references", depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"}, ".sepc.vpcRef.name")
		Expect(cli.Cluster(compute).Create(ctx, typo)).To(Succeed())
		expectIndexed(ctx, compute, typo.Name, metav1.ConditionFalse, depv1alpha1.ReasonFieldPathNotInSchema, `.sepc.vpcRef.name: there is no field "sepc"`)
		expectIndexed(ctx, compute, rule.Name, metav1.ConditionTrue, "Indexed")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-typo", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-typo", map[string]any{"vpcRef": map[string]any{"name": "vpc-typo"}}))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-typo", "VirtualMachine/default/vm-typo")
		Expect(cli.Cluster(compute).Delete(ctx, typo)).To(Succeed())
	})

	It("decides the first deletes after a dependent type was freshly exported and bound, without a spurious failure", func(ctx context.Context) {
		By("exporting a new dependent type, granting the webhook access to it, binding it in a new consumer")
		_, fresh := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("fresh"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(fresh), "fresh.test.io", kcpenv.Resource{Kind: "Backup", Plural: "backups"})).To(Succeed())
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(fresh), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		sample, err := os.ReadFile(filepath.Join(kcpenv.RepoRoot(), "config/samples/compute-provider/webhook-access.yaml"))
		Expect(err).NotTo(HaveOccurred())
		grant, err := kcpenv.DecodeYAML(bytes.ReplaceAll(sample, []byte("compute.test.io"), []byte("fresh.test.io")))
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(fresh), grant...)).To(Succeed())
		_, consumer4 := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("consumer"))
		bindExports(ctx, consumer4, export{network, "network.test.io"}, export{fresh, "fresh.test.io"})
		backupRule := vpcRule(network, "backup-references", depv1alpha1.DependentResource{APIExportName: "fresh.test.io", Group: "fresh.test.io", Version: "v1", Kind: "Backup", Resource: "backups"}, ".spec.vpc")
		Expect(cli.Cluster(fresh).Create(ctx, backupRule)).To(Succeed())
		create(ctx, consumer4, newObject(vpcGVR, "default", "vpc-backed-up", nil))
		create(ctx, consumer4, newObject(vpcGVR, "default", "vpc-free", nil))
		create(ctx, consumer4, newObject(schema.GroupVersionResource{Group: "fresh.test.io", Version: "v1", Resource: "backups"}, "default", "backup-1", map[string]any{"vpc": "vpc-backed-up"}))

		By("waiting only until the webhook has registered the rule (its first condition), not until it has indexed anything")
		Eventually(func(g Gomega) {
			got := &depv1alpha1.DependencyRule{}
			g.Expect(cli.Cluster(fresh).Get(ctx, client.ObjectKeyFromObject(backupRule), got)).To(Succeed())
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, depv1alpha1.ConditionDependentsIndexed)).NotTo(BeNil())
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("the first delete of each VPC gets its final answer")
		err = deleteObject(ctx, cli.Cluster(consumer4), vpcGVR, "default", "vpc-backed-up", client.DryRunAll)
		Expect(err).To(HaveOccurred())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("Backup/default/backup-1"))
		Expect(deleteObject(ctx, cli.Cluster(consumer4), vpcGVR, "default", "vpc-free", client.DryRunAll)).To(Succeed())
		Expect(cli.Cluster(fresh).Delete(ctx, backupRule)).To(Succeed())
	})

	It("reports a rule naming a version of its dependent that the export does not serve, and denies rather than allowing", func(ctx context.Context) {
		stale := vpcRule(network, "stale-version", depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v2", Kind: "VirtualMachine", Resource: "virtualmachines"}, ".spec.vpcRef.name")
		Expect(cli.Cluster(compute).Create(ctx, stale)).To(Succeed())
		expectIndexed(ctx, compute, stale.Name, metav1.ConditionFalse, string(index.PhaseVersionNotServed), "not in v2")
		By("a VPC that nothing references cannot be deleted while the rule cannot be checked")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-unchecked", nil))
		msg := expectDenied(ctx, consumer, vpcGVR, "default", "vpc-unchecked", "cannot check whether", "not in v2")
		Expect(msg).NotTo(ContainSubstring("still referenced by"))
		Expect(cli.Cluster(compute).Delete(ctx, stale)).To(Succeed())
		expectDeletable(ctx, consumer, vpcGVR, "vpc-unchecked")
	})

	It("follows in-place rule edits and rule deletion", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-edit", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-edit", map[string]any{"vpcRef": map[string]any{"name": "vpc-edit"}}))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-edit", "VirtualMachine/default/vm-edit")

		By("moving the reference to another field")
		// The webhook patches the rule's status concurrently: retry on conflict.
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			current := &depv1alpha1.DependencyRule{}
			if err := cli.Cluster(compute).Get(ctx, client.ObjectKeyFromObject(rule), current); err != nil {
				return err
			}
			current.Spec.Dependencies[0].FieldRef.Path = ".spec.primaryVPC"
			current.Spec.Dependencies = current.Spec.Dependencies[:1]
			return cli.Cluster(compute).Update(ctx, current)
		})).To(Succeed())
		create(ctx, consumer, newObject(vmGVR, "default", "vm-primary", map[string]any{"primaryVPC": "vpc-edit"}))
		msg := expectDenied(ctx, consumer, vpcGVR, "default", "vpc-edit", "VirtualMachine/default/vm-primary")
		Expect(msg).NotTo(ContainSubstring("vm-edit"))

		By("deleting the rules")
		Expect(cli.Cluster(compute).DeleteAllOf(ctx, &depv1alpha1.DependencyRule{})).To(Succeed())
		expectDeletable(ctx, consumer, vpcGVR, "vpc-edit")
	})

	It("denies every delete with a retry message while the registry is not initialized", func(ctx context.Context) {
		// A second validator whose registry never initializes, behind its own
		// webhook configuration for subnets.
		certDir := GinkgoT().TempDir()
		ca, err := kcpenv.WriteServingCerts(certDir, "127.0.0.1")
		Expect(err).NotTo(HaveOccurred())
		port, err := kcpenv.FreePort()
		Expect(err).NotTo(HaveOccurred())
		srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})
		srv.Register("/validate/", webhook.NewAdmissionHandler("/validate", deletion.NewValidator(registry.New(), rulesync.NewReadiness(), nil)))
		srvCtx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		go func() {
			defer GinkgoRecover()
			Expect(srv.Start(srvCtx)).To(Succeed())
		}()
		Eventually(func() error { return srv.StartedChecker()(&http.Request{}) }).WithTimeout(timeout).Should(Succeed())

		installWebhookConfig(ctx, network, networkCluster, "not-initialized", fmt.Sprintf("https://127.0.0.1:%d/validate", port), ca, subnetGVR)
		create(ctx, consumer, newObject(subnetGVR, "default", "subnet-1", nil))
		Eventually(func(g Gomega) {
			// Dry runs: kcp picks the new configuration up a moment later,
			// and a delete admitted before that must not remove the object.
			err := deleteObject(ctx, cli.Cluster(consumer), subnetGVR, "default", "subnet-1", client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(And(ContainSubstring("has not loaded all DependencyRules yet"), ContainSubstring("retry")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})
})

// vpcRule returns a rule whose dependent references VPCs of the network
// provider at path.
func vpcRule(network logicalcluster.Path, name string, dependent depv1alpha1.DependentResource, path string) *depv1alpha1.DependencyRule {
	return &depv1alpha1.DependencyRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: depv1alpha1.DependencyRuleSpec{
			Dependent: dependent,
			Dependencies: []depv1alpha1.Dependency{{
				APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"},
				Group:        "network.test.io", Version: "v1", Resource: "vpcs",
				FieldRef: depv1alpha1.FieldReference{Path: path},
			}},
		},
	}
}

// expectIndexed waits until the DependentsIndexed condition of the rule
// name in ws has status and reason, and a message with every part.
func expectIndexed(ctx context.Context, ws logicalcluster.Path, name string, status metav1.ConditionStatus, reason string, parts ...string) {
	GinkgoHelper()
	expectCondition(ctx, ws, name, depv1alpha1.ConditionDependentsIndexed, status, reason, parts...)
}

// expectCondition waits until the condition of type conditionType of the
// rule name in ws has status and reason, and a message with every part.
func expectCondition(ctx context.Context, ws logicalcluster.Path, name, conditionType string, status metav1.ConditionStatus, reason string, parts ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := &depv1alpha1.DependencyRule{}
		g.Expect(cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: name}, got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, conditionType)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason))
		for _, p := range parts {
			g.Expect(c.Message).To(ContainSubstring(p))
		}
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// export names an APIExport by the path of its workspace and its name.
type export struct {
	path logicalcluster.Path
	name string
}

// warnedClient returns an admin client of the workspace ws and what
// collects the warnings kcp answers its requests with.
func warnedClient(ws logicalcluster.Path) (client.Client, *kcpenv.WarningCollector) {
	GinkgoHelper()
	collected := &kcpenv.WarningCollector{}
	cfg := rest.CopyConfig(kcpConfig)
	cfg.Host += ws.RequestPath()
	cfg.WarningHandlerWithContext = collected
	c, err := client.New(cfg, client.Options{})
	Expect(err).NotTo(HaveOccurred())
	return c, collected
}

// bindExports binds the exports in the workspace ws.
func bindExports(ctx context.Context, ws logicalcluster.Path, exports ...export) {
	GinkgoHelper()
	for _, e := range exports {
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(ws), cli.Cluster(e.path), e.path, e.name)
		Expect(err).NotTo(HaveOccurred())
	}
}
