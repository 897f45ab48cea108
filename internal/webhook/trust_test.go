package webhook_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	"github.com/kcp-dev/sdk/apis/core"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/controllerserver"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// The trust boundary, attacked: every label, annotation and request that a
// fast path rests on is written by someone who may write objects but not
// delete them, carried along in exported YAML, or forged on the webhook's
// port. The webhook and the controller run together, as deployed.
var _ = Describe("Trust boundary", Ordered, func() {
	var (
		depCtrl, network, compute, consumer logicalcluster.Path
		networkCluster                      logicalcluster.Name
		wh                                  *kcpenv.Webhook
		tenant                              client.Client
		// tenantCfg and adminCfg reach the consumer workspace as the
		// tenant and as kcp's administrator.
		tenantCfg, adminCfg *rest.Config
		stopController      func() error
		// caFile holds the webhook's CA bundle for the controller, for as
		// long as the container runs.
		caFile string
		// breaker breaks the index's watches of the webhook.
		breaker = &kcpenv.WatchBreaker{Match: "/clusters/*/apis/compute.test.io/"}
	)
	// runController runs the controller as cmd/controller assembles it,
	// until stopController is called.
	runController := func(ctx context.Context) {
		GinkgoHelper()
		stopController = startController(ctx, depCtrl, wh, caFile, 10)
	}
	// liveReads is how many live reads of dependents the webhook made.
	liveReads := func() float64 {
		GinkgoHelper()
		var sum float64
		for _, how := range []string{"list", "label"} {
			n, err := wh.LiveReads(how)
			Expect(err).NotTo(HaveOccurred())
			sum += n
		}
		return sum
	}
	// expectFromHorizon waits until a dry-run DELETE of the consumer's
	// object is allowed from the object's horizon, without a read: until
	// the index is current past it, so that nothing can be in flight any
	// more.
	expectFromHorizon := func(ctx context.Context, gvr schema.GroupVersionResource, name string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			horizon, err := wh.Decisions("allowed", "horizon")
			g.Expect(err).NotTo(HaveOccurred())
			reads := liveReads()
			g.Expect(deleteObject(ctx, cli.Cluster(consumer), gvr, "default", name, client.DryRunAll)).To(Succeed())
			after, err := wh.Decisions("allowed", "horizon")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after).To(Equal(horizon+1), "not decided from the horizon yet")
			g.Expect(liveReads()).To(Equal(reads), "a decision from the horizon read dependents")
		}).WithTimeout(inflight.MaxInFlight + 2*time.Minute).WithPolling(5 * time.Second).Should(Succeed())
	}
	applianceGVR := schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "appliances"}
	portGVR := schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "ports"}
	vmRef := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	// get reads an object of the consumer.
	get := func(ctx context.Context, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
		GinkgoHelper()
		o := newObject(gvr, "default", name, nil)
		Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
		return o
	}
	patch := func(ctx context.Context, c client.Client, gvr schema.GroupVersionResource, name, body string) error {
		return c.Patch(ctx, newObject(gvr, "default", name, nil), client.RawPatch(types.MergePatchType, []byte(body)))
	}
	// managedLabels returns the labels of a dependent that the webhook
	// manages to say what it references (the admission id aside).
	managedLabels := func(o *unstructured.Unstructured) map[string]string {
		out := map[string]string{}
		for k, v := range o.GetLabels() {
			if reflabels.Managed(k) && k != depv1alpha1.LabelAdmission {
				out[k] = v
			}
		}
		return out
	}
	vmScheme := func(ctx context.Context) string {
		GinkgoHelper()
		r := &depv1alpha1.DependencyRule{}
		Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: "vm-vpcs"}, r)).To(Succeed())
		s, reason := reflabels.SchemeOf([]reflabels.Rule{reflabels.RuleOf(r)})
		Expect(reason).To(BeEmpty())
		return s.Fingerprint
	}
	// labelledFor returns the managed labels of a VM that references vpc
	// under the current rules.
	labelledFor := func(ctx context.Context, vpc string) map[string]string {
		return map[string]string{
			reflabels.Key(vpcGVR.GroupResource(), vpc): "",
			depv1alpha1.LabelReferencesScheme:          vmScheme(ctx),
		}
	}

	BeforeAll(func(ctx context.Context) {
		root := core.RootCluster.Path()
		depCtrl = newDepCtrlWorkspace(ctx, root)
		var networkWS *tenancyv1alpha1.Workspace
		networkWS, network = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network"))
		networkCluster = logicalcluster.Name(networkWS.Spec.Cluster)
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"})).To(Succeed())
		_, compute = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io",
			kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"},
			kcpenv.Resource{Kind: "Appliance", Plural: "appliances", Status: true},
			// Ports reference VPCs in a list of their status whose
			// elements need an id.
			kcpenv.Resource{Kind: "Port", Plural: "ports", Status: true, OpenAPI: `{"type":"object","properties":{` +
				`"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true},` +
				`"status":{"type":"object","properties":{"attachments":{"type":"array","items":{"type":"object","required":["id","vpc"],` +
				`"properties":{"id":{"type":"string"},"vpc":{"type":"string"}}}}}}}}`})).To(Succeed())
		consent(ctx, network, depCtrl, "network-provider", false)
		// Here VMs are protected too (by vpc-gateways): the compute provider
		// consents to what a protected provider grants, create for the
		// namespace probe's dry-run Events.
		consent(ctx, compute, depCtrl, "compute-provider", true)
		// The compute grant names compute.test.io, the network grant
		// network.test.io, like the samples.
		_, consumer = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
		bindExports(ctx, consumer, export{network, "network.test.io"}, export{compute, "compute.test.io"})

		By("a tenant who may read, create, update and patch VPCs and VMs, but not delete them")
		var err error
		tenantCfg, err = kcpEnv.AddUser("tenant")
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(consumer), toUnstructured(&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
			Rules: []rbacv1.PolicyRule{
				{NonResourceURLs: []string{"/"}, Verbs: []string{"access"}},
				{APIGroups: []string{"network.test.io", "compute.test.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			},
		}), toUnstructured(&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tenant"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "tenant"}},
		}))).To(Succeed())
		tenantCfg.Host += consumer.RequestPath()
		tenant, err = client.New(tenantCfg, client.Options{Scheme: kcpenv.NewScheme()})
		Expect(err).NotTo(HaveOccurred())
		adminCfg = rest.CopyConfig(kcpConfig)
		adminCfg.Host += consumer.RequestPath()

		By("rules: VMs reference VPCs (Replay), VPCs their gateway VM (a cycle), appliances reference VPCs in their status")
		Expect(cli.Cluster(compute).Create(ctx, &depv1alpha1.DependencyRule{
			ObjectMeta: metav1.ObjectMeta{Name: "vm-vpcs"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:      depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
				Dependencies:   []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"}}},
				DeletionPolicy: depv1alpha1.DeletionPolicyReplay,
			},
		})).To(Succeed())
		Expect(cli.Cluster(network).Create(ctx, &depv1alpha1.DependencyRule{
			ObjectMeta: metav1.ObjectMeta{Name: "vpc-gateways"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "network.test.io", Group: "network.test.io", Version: "v1", Kind: "VPC", Resource: "vpcs"},
				Dependencies: []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: compute.String(), Name: "compute.test.io"}, Group: "compute.test.io", Version: "v1", Resource: "virtualmachines", FieldRef: depv1alpha1.FieldReference{Path: ".spec.gatewayVM"}}},
			},
		})).To(Succeed())
		Expect(cli.Cluster(compute).Create(ctx, &depv1alpha1.DependencyRule{
			ObjectMeta: metav1.ObjectMeta{Name: "appliance-vpcs"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "Appliance", Resource: "appliances"},
				Dependencies: []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".status.vpc"}}},
			},
		})).To(Succeed())

		By("starting the webhook and the controller, as deployed")
		wh = startWebhook(ctx, depCtrl, breaker.Wrap, nil)
		caFile = caBundleFile(wh)
		runController(ctx)
		DeferCleanup(func() { Expect(stopController()).To(Succeed()) })
		expectCondition(ctx, compute, "vm-vpcs", depv1alpha1.ConditionReady, metav1.ConditionTrue, "Protecting")
		expectCondition(ctx, compute, "vm-vpcs", depv1alpha1.ConditionDependentsLabelled, metav1.ConditionTrue, "Labelled")
	})

	It("labels every VM with what it references, recomputed on every write: nobody can remove or forge the labels", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-l1", nil))
		Eventually(func() error {
			return tenant.Create(ctx, newObject(vmGVR, "default", "vm-l", vmRef("vpc-l1")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(managedLabels(get(ctx, vmGVR, "vm-l"))).To(Equal(labelledFor(ctx, "vpc-l1")))
		admission := get(ctx, vmGVR, "vm-l").GetLabels()[depv1alpha1.LabelAdmission]
		Expect(admission).To(MatchRegexp("^[0-9a-f]{16}$"), "the id of the admission that recorded the reference on vpc-l1")

		By("a tenant removing the labels: they come back")
		Expect(patch(ctx, tenant, vmGVR, "vm-l", fmt.Sprintf(`{"metadata":{"labels":{%q:null,%q:null,%q:null}}}`,
			reflabels.Key(vpcGVR.GroupResource(), "vpc-l1"), depv1alpha1.LabelReferencesScheme, depv1alpha1.LabelAdmission))).To(Succeed())
		Expect(managedLabels(get(ctx, vmGVR, "vm-l"))).To(Equal(labelledFor(ctx, "vpc-l1")))
		Expect(get(ctx, vmGVR, "vm-l").GetLabels()).To(HaveKeyWithValue(depv1alpha1.LabelAdmission, admission))

		By("a tenant forging a label for another VPC, a scheme and an admission id: they are replaced")
		Expect(patch(ctx, tenant, vmGVR, "vm-l", fmt.Sprintf(`{"metadata":{"labels":{%q:"",%q:"0000000000000000",%q:"0123456789abcdef"}}}`,
			reflabels.Key(vpcGVR.GroupResource(), "vpc-other"), depv1alpha1.LabelReferencesScheme, depv1alpha1.LabelAdmission))).To(Succeed())
		Expect(managedLabels(get(ctx, vmGVR, "vm-l"))).To(Equal(labelledFor(ctx, "vpc-l1")))
		Expect(get(ctx, vmGVR, "vm-l").GetLabels()).To(HaveKeyWithValue(depv1alpha1.LabelAdmission, admission))

		By("a tenant's dry run that writes a probe's value as the scheme label: relabelled, but unanswered (only the webhook's own probes get a signed answer)")
		probed := newObject(vmGVR, "default", "vm-l", nil)
		Expect(tenant.Patch(ctx, probed, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:"probe-tenant01"}}}`,
			depv1alpha1.LabelReferencesScheme)), client.DryRunAll)).To(Succeed())
		Expect(probed.GetLabels()).To(HaveKeyWithValue(depv1alpha1.LabelReferencesScheme, vmScheme(ctx)), "the labelling webhook set the scheme back")
		Expect(probed.GetAnnotations()).NotTo(HaveKey(depv1alpha1.AnnotationProbeAnswer))

		By("a tenant changing a label of its own: kcp does not call the labelling webhook, and the labels stay")
		// labelCalls counts the writes of dependents the labelling webhook
		// saw, by result. The probes the webhook sends on VMs in the
		// background, at any time, are left out of the metric.
		labelCalls := func() map[string]float64 {
			GinkgoHelper()
			calls := map[string]float64{}
			for _, result := range []string{"changed", "unchanged", "unvouched", "error"} {
				n, err := wh.Counter("dependency_webhook_labels_total", map[string]string{"result": result})
				Expect(err).NotTo(HaveOccurred())
				calls[result] = n
			}
			return calls
		}
		calls := labelCalls()
		Expect(patch(ctx, tenant, vmGVR, "vm-l", `{"metadata":{"labels":{"team":"blue"}}}`)).To(Succeed())
		Expect(labelCalls()).To(Equal(calls), "the labelling webhook was called for a change of an unmanaged label")
		Expect(managedLabels(get(ctx, vmGVR, "vm-l"))).To(Equal(labelledFor(ctx, "vpc-l1")))

		By("re-applying the VM's exported YAML with another reference: the labels follow the spec, not the YAML")
		exported := get(ctx, vmGVR, "vm-l")
		Expect(unstructured.SetNestedField(exported.Object, "vpc-l2", "spec", "vpcRef", "name")).To(Succeed())
		Expect(tenant.Update(ctx, exported)).To(Succeed())
		Expect(managedLabels(get(ctx, vmGVR, "vm-l"))).To(Equal(labelledFor(ctx, "vpc-l2")))
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-l2", nil))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-l2", "VirtualMachine/default/vm-l")
		expectDeletable(ctx, consumer, vpcGVR, "vpc-l1")
	})

	It("decides an allowed DELETE with reads by label, and still blocks one whose dependent was created just before", func(ctx context.Context) {
		before, err := wh.LiveReads("label")
		Expect(err).NotTo(HaveOccurred())
		listsBefore, err := wh.LiveReads("list")
		Expect(err).NotTo(HaveOccurred())
		// live is how many decisions read live, allowed or denied.
		live := func() float64 {
			GinkgoHelper()
			var sum float64
			for _, outcome := range []string{"allowed", "denied"} {
				n, err := wh.Decisions(outcome, "live")
				Expect(err).NotTo(HaveOccurred())
				sum += n
			}
			return sum
		}
		liveBefore := live()
		for i := range 10 {
			vpc, free, vm := fmt.Sprintf("vpc-lr-%d", i), fmt.Sprintf("vpc-lr-free-%d", i), fmt.Sprintf("vm-lr-%d", i)
			Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", vpc, nil))).To(Succeed())
			Expect(cli.Cluster(consumer).Create(ctx, newObject(vpcGVR, "default", free, nil))).To(Succeed())
			Expect(cli.Cluster(consumer).Create(ctx, newObject(vmGVR, "default", vm, vmRef(vpc)))).To(Succeed())
			err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", vpc, client.DryRunAll)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting %s right after %s was created: %v", vpc, vm, err)
			Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", free)).To(Succeed())
		}
		after, err := wh.LiveReads("label")
		Expect(err).NotTo(HaveOccurred())
		listsAfter, err := wh.LiveReads("list")
		Expect(err).NotTo(HaveOccurred())
		// Each allowed DELETE reads the VMs twice by label, and lists the
		// appliances, whose references in the status cannot be labelled:
		// one full list per decision that read live (kcp may admit a
		// DELETE more than once), none of the VMs.
		Expect(after-before).To(BeNumerically(">=", 20), "not every allowed delete read the VMs by label")
		decisions := live() - liveBefore
		Expect(decisions).To(BeNumerically(">=", 10), "not every allowed delete read live")
		Expect(listsAfter-listsBefore).To(BeNumerically("<=", decisions), "a confirming read listed every VM")
	})

	It("does not honour a copied clearance: the label of the earlier marks protects nothing from the webhook", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-copied", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-copied", vmRef("vpc-copied")))
		Expect(patch(ctx, tenant, vpcGVR, "vpc-copied", `{"metadata":{"labels":{"dependencies.opendefense.cloud/unreferenced":"0123456789abcdef"}}}`)).To(Succeed())
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-copied", "VirtualMachine/default/vm-copied")

		By("a VPC applied from exported YAML, label included, after the VM that references it")
		create(ctx, consumer, newObject(vmGVR, "default", "vm-first", vmRef("vpc-later")))
		later := newObject(vpcGVR, "default", "vpc-later", nil)
		later.SetLabels(map[string]string{"dependencies.opendefense.cloud/unreferenced": "0123456789abcdef"})
		create(ctx, consumer, later)
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-later", "VirtualMachine/default/vm-first")
	})

	It("lets nobody but the webhook write a record: update rights do not become delete rights", func(ctx context.Context) {
		for _, name := range []string{"vpc-t1", "vpc-t2"} {
			create(ctx, consumer, newObject(vpcGVR, "default", name, nil))
		}
		By("the tenant may not delete")
		err := tenant.Delete(ctx, newObject(vpcGVR, "default", "vpc-t1", nil))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the tenant deleted: %v", err)

		By("setting the deletion-requested label, with and without a hand-written request")
		for _, body := range []string{
			fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, depv1alpha1.LabelDeletionRequested),
			fmt.Sprintf(`{"metadata":{"labels":{%q:"true"},"annotations":{%q:%q}}}`, depv1alpha1.LabelDeletionRequested, depv1alpha1.AnnotationDeletionRequest,
				`{"user":"admin","requestedAt":"2026-11-26T00:00:00Z"}`),
			fmt.Sprintf(`{"metadata":{"annotations":{%q:"x"}}}`, depv1alpha1.AnnotationDeletionRequest),
		} {
			for _, name := range []string{"vpc-t1", "vpc-t2"} {
				err := patch(ctx, tenant, vpcGVR, name, body)
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", body, err)
				Expect(err.Error()).To(And(ContainSubstring("managed by the dependency webhook"), ContainSubstring("remove")))
			}
		}
		By("an administrator is refused as well: only the webhook writes records")
		err = patch(ctx, cli.Cluster(consumer), vpcGVR, "vpc-t1", fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, depv1alpha1.LabelDeletionRequested))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("the label " + depv1alpha1.LabelDeletionRequested + " is managed by the dependency webhook"))
		Consistently(func() error {
			return cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vpc-t2"}, newObject(vpcGVR, "default", "vpc-t2", nil))
		}).WithTimeout(6 * time.Second).WithPolling(time.Second).Should(Succeed())
	})

	It("spares the webhook's own record writes the call to the guard, and guards everyone else's", func(ctx context.Context) {
		By("the guard's configuration leaves out the webhook's user")
		Eventually(func(g Gomega) {
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			g.Expect(cli.Cluster(network).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg)).To(Succeed())
			var conditions []admissionregistrationv1.MatchCondition
			for _, w := range cfg.Webhooks {
				if w.Name == webhookconfig.RecordsWebhookName {
					conditions = w.MatchConditions
				}
			}
			g.Expect(conditions).To(ContainElement(admissionregistrationv1.MatchCondition{
				Name: webhookconfig.NotWebhookUserConditionName, Expression: webhookconfig.NotUserCondition(controllerserver.DefaultWebhookUser),
			}))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		guarded := func(outcome string) float64 {
			GinkgoHelper()
			n, err := wh.Counter("dependency_webhook_record_writes_total", map[string]string{"outcome": outcome})
			Expect(err).NotTo(HaveOccurred())
			return n
		}
		allowed, denied := guarded("allowed"), guarded("denied")

		By("the webhook records a deferred deletion: kcp does not call the guard")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-own", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-own", vmRef("vpc-own")))
		Eventually(func(g Gomega) {
			err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-own")
			g.Expect(err).To(MatchError(ContainSubstring("its deletion is deferred")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(get(ctx, vpcGVR, "vpc-own").GetLabels()).To(HaveKey(depv1alpha1.LabelDeletionRequested))
		Expect(guarded("allowed")).To(Equal(allowed), "kcp called the guard for the webhook's own record")

		By("anyone else who writes a record is still refused by the guard")
		err := patch(ctx, tenant, vpcGVR, "vpc-own", fmt.Sprintf(`{"metadata":{"annotations":{%q:"x"}}}`, depv1alpha1.AnnotationDeletionRequest))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("managed by the dependency webhook"))
		Expect(guarded("denied")).To(Equal(denied + 1))
		Expect(guarded("allowed")).To(Equal(allowed))

		By("the record is replayed once the VM is gone")
		Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-own")).To(Succeed())
		Eventually(func() bool {
			err := cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vpc-own"}, newObject(vpcGVR, "default", "vpc-own", nil))
			return apierrors.IsNotFound(err)
		}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue())
	})

	It("replays a record only on the object it was written for: exported YAML re-applied passes, a recreated object carrying it is refused", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-r", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-r", vmRef("vpc-r")))
		Eventually(func(g Gomega) {
			err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-r")
			g.Expect(err).To(MatchError(ContainSubstring("its deletion is deferred")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		recorded := get(ctx, vpcGVR, "vpc-r")
		Expect(recorded.GetLabels()).To(HaveKey(depv1alpha1.LabelDeletionRequested))
		var request depv1alpha1.DeletionRequest
		Expect(json.Unmarshal([]byte(recorded.GetAnnotations()[depv1alpha1.AnnotationDeletionRequest]), &request)).To(Succeed())
		Expect(request.UID).To(Equal(recorded.GetUID()))
		Expect(request.Signature).NotTo(BeEmpty())
		Expect(request.User).NotTo(BeEmpty())

		By("re-applying the exported object unchanged (kubectl replace)")
		Expect(cli.Cluster(consumer).Update(ctx, recorded.DeepCopy())).To(Succeed())

		By("recreating it from the exported YAML, record included")
		exported := recorded.DeepCopy()
		Expect(patch(ctx, cli.Cluster(consumer), vpcGVR, "vpc-r", fmt.Sprintf(`{"metadata":{"labels":{%q:null},"annotations":{%q:"true"}}}`,
			depv1alpha1.LabelDeletionRequested, depv1alpha1.AnnotationSkipProtection))).To(Succeed())
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-r")).To(Succeed())
		for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"} {
			unstructured.RemoveNestedField(exported.Object, "metadata", f)
		}
		err := cli.Cluster(consumer).Create(ctx, exported)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "recreated with the record: %v", err)
		Expect(err.Error()).To(ContainSubstring("managed by the dependency webhook"))
	})

	It("drops a record it did not write, with an Event, and deletes nothing", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-forged", nil))
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-carried", nil))
		By("a record the webhook wrote for another VPC")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-source", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-source", vmRef("vpc-source")))
		Eventually(func(g Gomega) {
			err := deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-source")
			g.Expect(err).To(MatchError(ContainSubstring("its deletion is deferred")))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		carried := get(ctx, vpcGVR, "vpc-source")
		By("writing records while the guard is not installed (the controller stopped, the guard removed)")
		Expect(stopController()).To(Succeed())
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(cli.Cluster(network).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg)).To(Succeed())
		withoutGuard := cfg.DeepCopy()
		withoutGuard.Webhooks = nil
		for _, w := range cfg.Webhooks {
			if w.Name != webhookconfig.RecordsWebhookName {
				withoutGuard.Webhooks = append(withoutGuard.Webhooks, w)
			}
		}
		Expect(cli.Cluster(network).Update(ctx, withoutGuard)).To(Succeed())
		Eventually(func() error {
			return patch(ctx, tenant, vpcGVR, "vpc-forged", fmt.Sprintf(`{"metadata":{"labels":{%q:"true"},"annotations":{%q:%q}}}`,
				depv1alpha1.LabelDeletionRequested, depv1alpha1.AnnotationDeletionRequest, `{"user":"admin","requestedAt":"2026-11-26T00:00:00Z"}`))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		// A record the webhook signed for another object.
		Expect(patch(ctx, tenant, vpcGVR, "vpc-carried", fmt.Sprintf(`{"metadata":{"labels":{%q:"true"},"annotations":{%q:%q}}}`,
			depv1alpha1.LabelDeletionRequested, depv1alpha1.AnnotationDeletionRequest, carried.GetAnnotations()[depv1alpha1.AnnotationDeletionRequest]))).To(Succeed())
		restart := func() { runController(ctx) }
		restart()

		By("the replayer removing both records, with an Event, deleting nothing")
		for _, name := range []string{"vpc-forged", "vpc-carried"} {
			Eventually(func(g Gomega) {
				o := newObject(vpcGVR, "default", name, nil)
				g.Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed(), "%s was deleted", name)
				g.Expect(o.GetLabels()).NotTo(HaveKey(depv1alpha1.LabelDeletionRequested))
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
			Eventually(func(g Gomega) {
				events := &corev1.EventList{}
				g.Expect(cli.Cluster(consumer).List(ctx, events, client.InNamespace("default"))).To(Succeed())
				found := false
				for _, e := range events.Items {
					found = found || e.InvolvedObject.Name == name && e.Reason == "DeferredDeletionDropped" && strings.Contains(e.Message, "not written by the dependency webhook for this object")
				}
				g.Expect(found).To(BeTrue(), "no Event on %s", name)
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		}
		removed, err := wh.Counter("dependency_webhook_records_removed_total", map[string]string{"reason": "malformed"})
		Expect(err).NotTo(HaveOccurred())
		Expect(removed).To(BeNumerically(">=", 1))
	})

	It("writes no record for a forged review sent to its port", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-port", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-port", vmRef("vpc-port")))
		// A dry run: a real DELETE would defer the deletion (a Replay rule).
		Eventually(func() error {
			return deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-port", client.DryRunAll)
		}).WithTimeout(timeout).WithPolling(interval).Should(MatchError(ContainSubstring("VirtualMachine/default/vm-port")))
		stored := get(ctx, vpcGVR, "vpc-port")
		consumerCluster := logicalcluster.Name(stored.GetAnnotations()[logicalcluster.AnnotationKey])
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(wh.CABundle)).To(BeTrue())
		httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		for _, forged := range []map[string]any{
			{"name": "vpc-port", "namespace": "default", "uid": "00000000-0000-0000-0000-000000000000", "resourceVersion": stored.GetResourceVersion()},
			{"name": "vpc-port", "namespace": "default", "uid": string(stored.GetUID()), "resourceVersion": "1"},
			{"name": "vpc-port", "namespace": "default"},
		} {
			forged["annotations"] = map[string]any{logicalcluster.AnnotationKey: consumerCluster.String()}
			oldObject, _ := json.Marshal(map[string]any{"apiVersion": "network.test.io/v1", "kind": "VPC", "metadata": forged})
			review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &admissionv1.AdmissionRequest{
				UID: "forged", Operation: admissionv1.Delete, Name: "vpc-port", Namespace: "default",
				Kind:      metav1.GroupVersionKind{Group: "network.test.io", Version: "v1", Kind: "VPC"},
				Resource:  metav1.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"},
				UserInfo:  authenticationv1.UserInfo{Username: "someone-with-no-rights"},
				OldObject: runtime.RawExtension{Raw: oldObject},
			}}
			body, _ := json.Marshal(review)
			resp, err := httpc.Post(webhookconfig.WebhookURL(wh.URL, networkCluster), "application/json", bytes.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			answer, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			Expect(string(answer)).To(ContainSubstring(`"allowed":false`))
			Expect(string(answer)).To(ContainSubstring("could not be deferred"), "the webhook said it recorded a forged review: %s", answer)
		}
		Expect(get(ctx, vpcGVR, "vpc-port").GetLabels()).NotTo(HaveKey(depv1alpha1.LabelDeletionRequested), "a forged review caused a write")
	})

	It("checks references in the status on writes through the status subresource, and reads such dependents in full", func(ctx context.Context) {
		expectCondition(ctx, compute, "appliance-vpcs", depv1alpha1.ConditionDependentsLabelled, metav1.ConditionFalse, depv1alpha1.ReasonNotLabellable, "status")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-status", nil))
		create(ctx, consumer, newObject(applianceGVR, "default", "appliance-1", nil))
		appliance := newObject(applianceGVR, "default", "appliance-1", nil)
		Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(appliance), appliance)).To(Succeed())
		Expect(unstructured.SetNestedField(appliance.Object, "vpc-status", "status", "vpc")).To(Succeed())
		Expect(cli.Cluster(consumer).Status().Update(ctx, appliance)).To(Succeed())
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-status", "Appliance/default/appliance-1")

		By("refusing a status write that references a VPC being deleted")
		doomed := newObject(vpcGVR, "default", "vpc-status-doomed", nil)
		doomed.SetFinalizers([]string{"test.io/hold"})
		create(ctx, consumer, doomed)
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-status-doomed")).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(patch(ctx, cli.Cluster(consumer), vpcGVR, "vpc-status-doomed", `{"metadata":{"finalizers":null}}`)).To(Succeed())
		})
		Expect(cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(appliance), appliance)).To(Succeed())
		Expect(unstructured.SetNestedField(appliance.Object, "vpc-status-doomed", "status", "vpc")).To(Succeed())
		err := cli.Cluster(consumer).Status().Update(ctx, appliance)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a status write referencing a VPC being deleted: %v", err)
		Expect(err.Error()).To(ContainSubstring("it is being deleted"))
	})

	It("closes the race between a status write that adds a reference and the DELETE of the VPC it names", func(ctx context.Context) {
		// A status write cannot carry the admission label: the check of new
		// references records the reference under the id of the revision
		// the write was admitted on, which the index sees end.
		statusRace(ctx, adminCfg, vpcGVR, applianceGVR, "status-race", 200)
	})

	It("decides the items of a namespace's teardown from the index, once kcp says the namespace is being deleted", func(ctx context.Context) {
		c := cli.Cluster(consumer)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown"}}
		Expect(c.Create(ctx, ns)).To(Succeed())
		for i := range 3 {
			vpc := fmt.Sprintf("vpc-td-%d", i)
			create(ctx, consumer, newObject(vpcGVR, ns.Name, vpc, nil))
			create(ctx, consumer, newObject(vmGVR, ns.Name, fmt.Sprintf("vm-td-%d", i), vmRef(vpc)))
		}
		create(ctx, consumer, newObject(vpcGVR, ns.Name, "vpc-td-unreferenced", nil))
		Eventually(func() error {
			return deleteObject(ctx, cli.Cluster(consumer), vpcGVR, ns.Name, "vpc-td-2", client.DryRunAll)
		}).WithTimeout(timeout).WithPolling(interval).Should(MatchError(ContainSubstring("VirtualMachine/teardown/vm-td-2")))
		teardownBefore, err := wh.Decisions("allowed", "teardown")
		Expect(err).NotTo(HaveOccurred())
		liveBefore, err := wh.Decisions("allowed", "live")
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Delete(ctx, ns)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "the namespace was not deleted")
		teardownAfter, err := wh.Decisions("allowed", "teardown")
		Expect(err).NotTo(HaveOccurred())
		liveAfter, err := wh.Decisions("allowed", "live")
		Expect(err).NotTo(HaveOccurred())
		// Four VPCs and three VMs (which VPCs' gateway rule protects).
		Expect(teardownAfter-teardownBefore).To(BeNumerically(">=", 7), "items allowed from the index")
		Expect(liveAfter).To(Equal(liveBefore), "an item of the teardown was read live")
	})

	It("tears a namespace down in dependency order while the index's watch is broken, reading live what it cannot vouch for", func(ctx context.Context) {
		c := cli.Cluster(consumer)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "broken-watch"}}
		Expect(c.Create(ctx, ns)).To(Succeed())
		create(ctx, consumer, newObject(vpcGVR, ns.Name, "vpc-b1", nil))
		create(ctx, consumer, newObject(vmGVR, ns.Name, "vm-b1", vmRef("vpc-b1")))
		// vpc-a2 comes first in the teardown's DELETECOLLECTION of VPCs,
		// which stops at the first item refused.
		create(ctx, consumer, newObject(vpcGVR, ns.Name, "vpc-a2", nil))
		expectDenied(ctx, consumer, vpcGVR, ns.Name, "vpc-b1", "VirtualMachine/"+ns.Name+"/vm-b1")

		By("breaking the index's watch of VMs, then creating a VM it cannot see")
		breaker.Break()
		DeferCleanup(breaker.Mend)
		Eventually(func(g Gomega) {
			rule := &depv1alpha1.DependencyRule{}
			g.Expect(cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: "vm-vpcs"}, rule)).To(Succeed())
			c := meta.FindStatusCondition(rule.Status.Conditions, depv1alpha1.ConditionDependentsIndexed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionUnknown), "a broken watch left the type %s: %s", c.Status, c.Message)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		create(ctx, consumer, newObject(vmGVR, ns.Name, "vm-b2", vmRef("vpc-a2")))

		watchCtx, stopWatch := context.WithCancel(ctx)
		DeferCleanup(stopWatch)
		vpcsDeleted, err := kcpenv.WatchDeletions(watchCtx, dynamicFor(consumer).Resource(vpcGVR).Namespace(ns.Name))
		Expect(err).NotTo(HaveOccurred())
		vmsDeleted, err := kcpenv.WatchDeletions(watchCtx, dynamicFor(consumer).Resource(vmGVR).Namespace(ns.Name))
		Expect(err).NotTo(HaveOccurred())
		// deleted returns the revisions at which vpc-a2 and vm-b2 were
		// deleted, 0 for one not seen deleted.
		deleted := func() (vpc, vm int64) {
			GinkgoHelper()
			vpc, _, vpcErr := vpcsDeleted.Revision(ns.Name, "vpc-a2")
			vm, _, vmErr := vmsDeleted.Revision(ns.Name, "vm-b2")
			Expect(cmp.Or(vpcErr, vmErr)).To(Succeed())
			return vpc, vm
		}
		teardownBefore, err := wh.Decisions("allowed", "teardown")
		Expect(err).NotTo(HaveOccurred())
		liveBefore := liveReads()
		By("deleting the namespace while the watch stays broken for a while")
		Expect(c.Delete(ctx, ns)).To(Succeed())
		time.Sleep(8 * time.Second)
		teardownBroken, err := wh.Decisions("allowed", "teardown")
		Expect(err).NotTo(HaveOccurred())
		// The VMs are protected by vpc-gateways, whose dependents (VPCs)
		// are still watched: they may be decided from the index. The VPCs'
		// dependents (VMs) are not: each VPC is read live.
		Expect(teardownBroken-teardownBefore).To(BeNumerically("<=", 2), "a VPC was decided from an index whose watch was broken")
		Expect(liveReads()).To(BeNumerically(">", liveBefore), "no VPC of the teardown was read live")
		if vpcAt, vmAt := deleted(); vpcAt != 0 {
			Expect(vmAt).NotTo(BeZero(), "vpc-a2 went while vm-b2, which references it, was there")
			Expect(vpcAt).To(BeNumerically(">", vmAt))
		}

		By("mending the watch: the teardown completes")
		breaker.Mend()
		Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "the namespace was not deleted")
		Eventually(func(g Gomega) {
			vpcAt, vmAt := deleted()
			g.Expect(vpcAt).NotTo(BeZero(), "vpc-a2 was not seen deleted")
			g.Expect(vmAt).NotTo(BeZero(), "vm-b2 was not seen deleted")
			g.Expect(vpcAt).To(BeNumerically(">", vmAt), "vpc-a2 went before vm-b2, which references it")
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("breaks a cycle of references in a namespace's teardown instead of stalling", func(ctx context.Context) {
		c := cli.Cluster(consumer)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cycle"}}
		Expect(c.Create(ctx, ns)).To(Succeed())
		create(ctx, consumer, newObject(vpcGVR, ns.Name, "vpc-c", map[string]any{"gatewayVM": "vm-c"}))
		create(ctx, consumer, newObject(vmGVR, ns.Name, "vm-c", vmRef("vpc-c")))
		expectDenied(ctx, consumer, vpcGVR, ns.Name, "vpc-c", "VirtualMachine/"+ns.Name+"/vm-c")
		expectDenied(ctx, consumer, vmGVR, ns.Name, "vm-c", "VPC/"+ns.Name+"/vpc-c")
		before, err := wh.Counter("dependency_webhook_teardown_cycles_broken_total", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Delete(ctx, ns)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "the namespace's teardown stalled on the cycle")
		after, err := wh.Counter("dependency_webhook_teardown_cycles_broken_total", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(BeNumerically(">", before), "the cycle was not reported")
	})

	It("keeps the VPCs that VMs created before an APIBinding's deletion reference, however soon before", func(ctx context.Context) {
		_, ws := envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("binding-race"))
		bindExports(ctx, ws, export{network, "network.test.io"}, export{compute, "compute.test.io"})
		const n = 10
		for i := range n {
			create(ctx, ws, newObject(vpcGVR, "default", fmt.Sprintf("vpc-%d", i), nil))
		}
		By("creating the VMs and deleting the network binding right after the last CREATE returned")
		for i := range n {
			Expect(cli.Cluster(ws).Create(ctx, newObject(vmGVR, "default", fmt.Sprintf("vm-%d", i), vmRef(fmt.Sprintf("vpc-%d", i))))).To(Succeed())
		}
		binding := &apisv1alpha2.APIBinding{ObjectMeta: metav1.ObjectMeta{Name: "network.test.io"}}
		Expect(cli.Cluster(ws).Delete(ctx, binding)).To(Succeed())
		Consistently(func(g Gomega) {
			for i := range n {
				o := newObject(vpcGVR, "default", fmt.Sprintf("vpc-%d", i), nil)
				g.Expect(cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed(), "vpc-%d went while vm-%d references it", i, i)
			}
		}).WithTimeout(8 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("deleting the VMs: the binding's deletion completes")
		for i := range n {
			Expect(deleteObject(ctx, cli.Cluster(ws), vmGVR, "default", fmt.Sprintf("vm-%d", i))).To(Succeed())
		}
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(binding), binding))
		}).WithTimeout(2*timeout).WithPolling(interval).Should(BeTrue(), "the APIBinding was not deleted")
	})

	// ledgerOf returns the ledger of admitted references of a VPC.
	ledgerOf := func(ctx context.Context, name string) string {
		GinkgoHelper()
		return get(ctx, vpcGVR, name).GetAnnotations()[depv1alpha1.AnnotationAdmittedReferences]
	}

	It("records a VM's reference on the VPC before the VM is stored, and nobody but the webhook can remove or back-date the record; re-applied exported YAML keeps working", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-ledger", nil))
		exported := get(ctx, vpcGVR, "vpc-ledger")
		Expect(tenant.Create(ctx, newObject(vmGVR, "default", "vm-ledger", vmRef("vpc-ledger")))).To(Succeed())
		id := get(ctx, vmGVR, "vm-ledger").GetLabels()[depv1alpha1.LabelAdmission]
		Expect(id).To(MatchRegexp("^[0-9a-f]{16}$"))
		stored := ledgerOf(ctx, "vpc-ledger")
		Expect(stored).To(HavePrefix("v1 "))
		Expect(stored).To(ContainSubstring(id+"@"), "the VPC's ledger names the VM's admission")

		By("a tenant removing the ledger: the stored one is kept")
		Expect(patch(ctx, tenant, vpcGVR, "vpc-ledger", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, depv1alpha1.AnnotationAdmittedReferences))).To(Succeed())
		Expect(ledgerOf(ctx, "vpc-ledger")).To(Equal(stored))

		By("a tenant back-dating it: the stored one is kept")
		Expect(patch(ctx, tenant, vpcGVR, "vpc-ledger", fmt.Sprintf(`{"metadata":{"annotations":{%q:"v1 f=0 l=0"}}}`, depv1alpha1.AnnotationAdmittedReferences))).To(Succeed())
		Expect(ledgerOf(ctx, "vpc-ledger")).To(Equal(stored))

		By("re-applying the VPC as exported before the VM (kubectl replace): accepted, the ledger kept")
		// kcp refuses an update of a custom resource without a
		// resourceVersion: the replace names the current one.
		exported.SetResourceVersion(get(ctx, vpcGVR, "vpc-ledger").GetResourceVersion())
		Expect(unstructured.SetNestedField(exported.Object, "replaced", "spec", "note")).To(Succeed())
		Expect(cli.Cluster(consumer).Update(ctx, exported)).To(Succeed())
		Expect(ledgerOf(ctx, "vpc-ledger")).To(Equal(stored))
		Expect(get(ctx, vpcGVR, "vpc-ledger").Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("note", "replaced")))

		By("creating a VPC from YAML that carries a ledger: it is not stored")
		copied := newObject(vpcGVR, "default", "vpc-ledger-copy", nil)
		copied.SetAnnotations(map[string]string{depv1alpha1.AnnotationAdmittedReferences: "v1 f=99999999999999 l=0"})
		Expect(tenant.Create(ctx, copied)).To(Succeed())
		Expect(get(ctx, vpcGVR, "vpc-ledger-copy").GetAnnotations()).NotTo(HaveKey(depv1alpha1.AnnotationAdmittedReferences))
	})

	It("records references from 500 VMs of one VPC created 16 at a time, without a conflict reaching any client", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-hot", nil))
		const n, workers = 500, 16
		var (
			lock sync.Mutex
			errs []error
		)
		work := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range work {
					if err := tenant.Create(ctx, newObject(vmGVR, "default", fmt.Sprintf("vm-hot-%03d", i), vmRef("vpc-hot"))); err != nil {
						lock.Lock()
						errs = append(errs, err)
						lock.Unlock()
					}
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		Expect(errs).To(BeEmpty())
		ledger, err := inflight.Parse(ledgerOf(ctx, "vpc-hot"))
		Expect(err).NotTo(HaveOccurred())
		Expect(len(ledger.Marks)).To(BeNumerically("<=", inflight.DefaultMaxMarks), "the ledger stays bounded")
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-hot", "VirtualMachine/default/vm-hot-000", "and 490 more")
	})

	// applied server-side applies the object of gvr named name in the
	// namespace default, with the metadata meta (name and namespace added)
	// and spec, as c with the field manager.
	applied := func(ctx context.Context, c client.Client, manager string, gvr schema.GroupVersionResource, name string, meta, spec map[string]any) error {
		meta["name"], meta["namespace"] = name, "default"
		body, err := json.Marshal(map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kindOf(gvr), "metadata": meta, "spec": spec})
		Expect(err).NotTo(HaveOccurred())
		return c.Patch(ctx, newObject(gvr, "default", name, nil), client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(manager), client.ForceOwnership)
	}
	// warned returns a client of cfg that collects the warnings kcp
	// answers.
	warned := func(cfg *rest.Config) (client.Client, *kcpenv.WarningCollector) {
		GinkgoHelper()
		collected := &kcpenv.WarningCollector{}
		cfg = rest.CopyConfig(cfg)
		cfg.WarningHandlerWithContext = collected
		c, err := client.New(cfg, client.Options{Scheme: kcpenv.NewScheme()})
		Expect(err).NotTo(HaveOccurred())
		return c, collected
	}
	skipAnnotation := func(value any) string {
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{depv1alpha1.AnnotationSkipProtection: value}}})
		return string(raw)
	}
	// setBy returns who the VPC's record of the skip-protection setting
	// names, "" if it has none.
	setBy := func(ctx context.Context, name string) string {
		GinkgoHelper()
		record, ok := get(ctx, vpcGVR, name).GetAnnotations()[depv1alpha1.AnnotationSkipProtectionSetBy]
		if !ok {
			return ""
		}
		var s depv1alpha1.SkipProtectionSetting
		Expect(json.Unmarshal([]byte(record), &s)).To(Succeed())
		return s.User
	}
	// missingOwner is an owner reference to an object that does not
	// exist: kcp's garbage collector deletes what carries it.
	missingOwner := func() string {
		return `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"6b2f4c1e-0000-4000-8000-000000000001"}]}}`
	}

	It("admits server-side applies that leave the labels and annotations of dependents and protected objects absent, empty or null, and still labels the dependents and guards what only the webhook writes", func(ctx context.Context) {
		const manager, forger = "gitops", "forger"
		team := func() map[string]any {
			return map[string]any{"labels": map[string]any{"team": "blue"}, "annotations": map[string]any{"note": "x"}}
		}
		Eventually(func() error {
			return applied(ctx, tenant, manager, vpcGVR, "vpc-ssa", team(), map[string]any{"cidr": "10.0.0.0/16"})
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(applied(ctx, tenant, manager, vmGVR, "vm-ssa", team(), vmRef("vpc-ssa"))).To(Succeed())
		ledger := ledgerOf(ctx, "vpc-ssa")
		Expect(ledger).To(HavePrefix("v1 "), "the VM's reference was recorded on the VPC")
		for _, shape := range []struct {
			what string
			// meta is the metadata applied, or patch a merge patch.
			meta  map[string]any
			patch string
		}{
			{what: "applying neither labels nor annotations: the manager drops its only ones", meta: map[string]any{}},
			{what: "applying null labels and annotations", meta: map[string]any{"labels": nil, "annotations": nil}},
			{what: "applying empty labels and annotations", meta: map[string]any{"labels": map[string]any{}, "annotations": map[string]any{}}},
			{what: "a merge patch of null labels and annotations", patch: `{"metadata":{"labels":null,"annotations":null}}`},
		} {
			By(shape.what)
			for _, o := range []struct {
				gvr  schema.GroupVersionResource
				name string
				spec map[string]any
			}{{vmGVR, "vm-ssa", vmRef("vpc-ssa")}, {vpcGVR, "vpc-ssa", map[string]any{"cidr": "10.0.0.0/16"}}} {
				if shape.patch != "" {
					Expect(patch(ctx, tenant, o.gvr, o.name, shape.patch)).To(Succeed(), "%s of %s", shape.what, o.name)
				} else {
					Expect(applied(ctx, tenant, manager, o.gvr, o.name, maps.Clone(shape.meta), o.spec)).To(Succeed(), "%s of %s", shape.what, o.name)
				}
			}
			Expect(managedLabels(get(ctx, vmGVR, "vm-ssa"))).To(Equal(labelledFor(ctx, "vpc-ssa")), "the VM's labels after %s", shape.what)
			Expect(get(ctx, vpcGVR, "vpc-ssa").GetLabels()).To(HaveKey(depv1alpha1.LabelReferencesScheme), "the VPC, a dependent of vpc-gateways, is labelled")
			Expect(ledgerOf(ctx, "vpc-ssa")).To(Equal(ledger), "the ledger after %s", shape.what)

			By(shape.what + ", then forging a record: refused")
			err := applied(ctx, tenant, forger, vpcGVR, "vpc-ssa", map[string]any{"labels": map[string]any{depv1alpha1.LabelDeletionRequested: "true"}}, nil)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a tenant's record: %v", err)
			Expect(err.Error()).To(ContainSubstring("managed by the dependency webhook"))

			By(shape.what + ", then applying them again")
			Expect(applied(ctx, tenant, manager, vmGVR, "vm-ssa", team(), vmRef("vpc-ssa"))).To(Succeed())
			Expect(applied(ctx, tenant, manager, vpcGVR, "vpc-ssa", team(), map[string]any{"cidr": "10.0.0.0/16"})).To(Succeed())
			Expect(managedLabels(get(ctx, vmGVR, "vm-ssa"))).To(Equal(labelledFor(ctx, "vpc-ssa")))
		}
		By("skip-protection applied by the tenant, who may not delete, with a forged record of who set it: no effect")
		Expect(applied(ctx, tenant, forger, vpcGVR, "vpc-ssa", map[string]any{"annotations": map[string]any{
			depv1alpha1.AnnotationSkipProtection: "true", depv1alpha1.AnnotationSkipProtectionSetBy: `{"user":"admin","setAt":"2026-01-01T00:00:00Z"}`,
		}}, nil)).To(Succeed())
		Expect(setBy(ctx, "vpc-ssa")).To(BeEmpty())
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-ssa", "VirtualMachine/default/vm-ssa")
	})

	It("gives skip-protection set by a tenant who may update but not delete no effect, with a warning: neither an administrator's DELETE nor kcp's garbage collector deletes the referenced VPC", func(ctx context.Context) {
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-skip-t", nil))
		create(ctx, consumer, newObject(vmGVR, "default", "vm-skip-t", vmRef("vpc-skip-t")))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-skip-t", "VirtualMachine/default/vm-skip-t")
		// An unreferenced VPC with the same owner reference shows that the
		// garbage collector deletes such objects.
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-orphan", nil))

		By("the tenant setting skip-protection, and an owner reference to an object that does not exist")
		c, warnings := warned(tenantCfg)
		Expect(patch(ctx, c, vpcGVR, "vpc-skip-t", skipAnnotation("true"))).To(Succeed())
		Expect(warnings.Warnings()).To(ContainElement(And(ContainSubstring(depv1alpha1.AnnotationSkipProtection+"=true"), ContainSubstring("has no effect: tenant may not delete it"))))
		Expect(setBy(ctx, "vpc-skip-t")).To(BeEmpty())
		for _, name := range []string{"vpc-skip-t", "vpc-orphan"} {
			Expect(patch(ctx, tenant, vpcGVR, name, missingOwner())).To(Succeed())
		}
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vpc-orphan"}, newObject(vpcGVR, "default", "vpc-orphan", nil)))
		}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "kcp's garbage collector did not delete the unreferenced VPC")
		Consistently(func() error {
			return cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vpc-skip-t"}, newObject(vpcGVR, "default", "vpc-skip-t", nil))
		}).WithTimeout(10*time.Second).WithPolling(time.Second).Should(Succeed(), "kcp's garbage collector deleted the referenced VPC")

		By("an administrator's DELETE: denied, saying the annotation has no effect")
		admin, adminWarnings := warned(adminCfg)
		err := deleteObject(ctx, admin, vpcGVR, "default", "vpc-skip-t")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the administrator deleted: %v", err)
		Expect(err.Error()).To(ContainSubstring("VirtualMachine/default/vm-skip-t"))
		Expect(adminWarnings.Warnings()).To(ContainElement(ContainSubstring("has no effect: it was not set by a user who may delete the object")))
	})

	It("lets skip-protection set by an administrator bypass protection, naming the administrator in the warnings; a re-apply that keeps it is no new setting, and a tenant who sets it anew takes the effect away", func(ctx context.Context) {
		for _, name := range []string{"vpc-skip-a", "vpc-skip-gc"} {
			create(ctx, consumer, newObject(vpcGVR, "default", name, nil))
			create(ctx, consumer, newObject(vmGVR, "default", "vm-"+strings.TrimPrefix(name, "vpc-"), vmRef(name)))
			expectDenied(ctx, consumer, vpcGVR, "default", name, "VirtualMachine/default/vm-"+strings.TrimPrefix(name, "vpc-"))
		}
		admin, adminWarnings := warned(adminCfg)

		By("the administrator setting it: it takes effect, recorded as theirs")
		Expect(patch(ctx, admin, vpcGVR, "vpc-skip-a", skipAnnotation("true"))).To(Succeed())
		Expect(adminWarnings.Warnings()).To(ContainElement(ContainSubstring("takes effect: it was set by admin, who may delete it")))
		Expect(setBy(ctx, "vpc-skip-a")).To(Equal("admin"))

		By("the tenant re-applying the object with the annotation unchanged (kubectl replace), without the record: kept")
		exported := get(ctx, vpcGVR, "vpc-skip-a")
		annotations := exported.GetAnnotations()
		delete(annotations, depv1alpha1.AnnotationSkipProtectionSetBy)
		exported.SetAnnotations(annotations)
		Expect(unstructured.SetNestedField(exported.Object, "replaced", "spec", "note")).To(Succeed())
		Expect(tenant.Update(ctx, exported)).To(Succeed())
		Expect(setBy(ctx, "vpc-skip-a")).To(Equal("admin"))

		By("the tenant forging the record: the stored one is kept")
		Expect(patch(ctx, tenant, vpcGVR, "vpc-skip-a", fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`,
			depv1alpha1.AnnotationSkipProtectionSetBy, `{"user":"tenant","setAt":"2026-01-01T00:00:00Z"}`))).To(Succeed())
		Expect(setBy(ctx, "vpc-skip-a")).To(Equal("admin"))

		By("the tenant removing it and setting it anew: no effect any more")
		Expect(patch(ctx, tenant, vpcGVR, "vpc-skip-a", skipAnnotation(nil))).To(Succeed())
		Expect(patch(ctx, tenant, vpcGVR, "vpc-skip-a", skipAnnotation("true"))).To(Succeed())
		Expect(setBy(ctx, "vpc-skip-a")).To(BeEmpty())
		err := deleteObject(ctx, admin, vpcGVR, "default", "vpc-skip-a")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleted while a tenant's setting was in place: %v", err)

		By("the administrator setting it anew: the DELETE bypasses protection, naming both")
		Expect(patch(ctx, admin, vpcGVR, "vpc-skip-a", skipAnnotation(nil))).To(Succeed())
		Expect(patch(ctx, admin, vpcGVR, "vpc-skip-a", skipAnnotation("true"))).To(Succeed())
		Expect(setBy(ctx, "vpc-skip-a")).To(Equal("admin"))
		Expect(deleteObject(ctx, admin, vpcGVR, "default", "vpc-skip-a")).To(Succeed())
		Expect(adminWarnings.Warnings()).To(ContainElement(And(ContainSubstring("bypassed by admin"), ContainSubstring("set by admin at"))))

		By("kcp's garbage collector deleting a referenced VPC on which the administrator set it")
		bypassed, err := wh.Decisions("bypassed", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(patch(ctx, admin, vpcGVR, "vpc-skip-gc", skipAnnotation("true"))).To(Succeed())
		Expect(patch(ctx, tenant, vpcGVR, "vpc-skip-gc", missingOwner())).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vpc-skip-gc"}, newObject(vpcGVR, "default", "vpc-skip-gc", nil)))
		}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "kcp's garbage collector did not delete the VPC")
		Expect(wh.Decisions("bypassed", "")).To(BeNumerically(">", bypassed))
	})

	// VPCs are protected by appliance-vpcs too, whose references in the
	// status cannot be labelled, so the webhook never clears a VPC (a
	// clearance needs every dependent type labelled); VMs are protected by
	// vpc-gateways alone, whose dependents (VPCs) are labelled and their
	// references tracked.
	It("keeps the label that says an object is cleared as the webhook wrote it: a tenant can neither set, copy nor remove it, and re-applied exported YAML keeps working", func(ctx context.Context) {
		const fingerprint = "0123456789abcdef"
		// cleared is the VPC's label that says it is cleared, "<none>" if
		// it has none.
		cleared := func(ctx context.Context, name string) string {
			GinkgoHelper()
			if v, ok := get(ctx, vpcGVR, name).GetLabels()[depv1alpha1.LabelCleared]; ok {
				return v
			}
			return "<none>"
		}
		labelBody := func(value any) string {
			raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{depv1alpha1.LabelCleared: value}}})
			return string(raw)
		}
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-label", nil))
		Expect(tenant.Create(ctx, newObject(vmGVR, "default", "vm-label", vmRef("vpc-label")))).To(Succeed())

		By("a tenant labelling a referenced VPC cleared: the label is not stored, with a warning, and the DELETE is still denied")
		warnedTenant, warnings := warned(tenantCfg)
		Expect(patch(ctx, warnedTenant, vpcGVR, "vpc-label", labelBody(fingerprint))).To(Succeed())
		Expect(cleared(ctx, "vpc-label")).To(Equal("<none>"))
		Expect(warnings.Warnings()).To(ContainElement(ContainSubstring(depv1alpha1.LabelCleared)))
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-label", "VirtualMachine/default/vm-label")

		By("the webhook's user labelling an unreferenced VPC cleared, with a ledger, as the webhook clears: stored")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-label-2", nil))
		Expect(patch(ctx, asWebhookUser(ctx, consumer, vpcGVR.Group, vpcGVR.Resource), vpcGVR, "vpc-label-2", fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:"v1 f=0 l=0"}}}`,
			depv1alpha1.LabelCleared, fingerprint, depv1alpha1.AnnotationAdmittedReferences))).To(Succeed())
		Expect(cleared(ctx, "vpc-label-2")).To(Equal(fingerprint))
		exported := get(ctx, vpcGVR, "vpc-label-2")

		By("a tenant removing it, or changing it: the stored label is kept")
		Expect(patch(ctx, tenant, vpcGVR, "vpc-label-2", labelBody(nil))).To(Succeed())
		Expect(cleared(ctx, "vpc-label-2")).To(Equal(fingerprint))
		Expect(patch(ctx, tenant, vpcGVR, "vpc-label-2", labelBody("fedcba9876543210"))).To(Succeed())
		Expect(cleared(ctx, "vpc-label-2")).To(Equal(fingerprint))
		Expect(patch(ctx, tenant, vpcGVR, "vpc-label-2", `{"metadata":{"labels":null}}`)).To(Succeed())
		Expect(cleared(ctx, "vpc-label-2")).To(Equal(fingerprint))

		By("re-applying the VPC as exported (kubectl replace), with the label and without it: accepted, the label kept")
		exported.SetResourceVersion(get(ctx, vpcGVR, "vpc-label-2").GetResourceVersion())
		Expect(unstructured.SetNestedField(exported.Object, "replaced", "spec", "note")).To(Succeed())
		Expect(tenant.Update(ctx, exported)).To(Succeed())
		Expect(cleared(ctx, "vpc-label-2")).To(Equal(fingerprint))
		withoutLabel := get(ctx, vpcGVR, "vpc-label-2")
		withoutLabel.SetLabels(nil)
		Expect(unstructured.SetNestedField(withoutLabel.Object, "replaced again", "spec", "note")).To(Succeed())
		Expect(tenant.Update(ctx, withoutLabel)).To(Succeed())
		Expect(cleared(ctx, "vpc-label-2")).To(Equal(fingerprint))
		Expect(get(ctx, vpcGVR, "vpc-label-2").Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("note", "replaced again")))

		By("a tenant copying it onto the referenced VPC: not stored")
		Expect(patch(ctx, tenant, vpcGVR, "vpc-label", labelBody(fingerprint))).To(Succeed())
		Expect(cleared(ctx, "vpc-label")).To(Equal("<none>"))

		By("creating a VPC from the exported YAML that carries it: not stored")
		copied := newObject(vpcGVR, "default", "vpc-label-copy", nil)
		copied.SetLabels(exported.GetLabels())
		Expect(copied.GetLabels()).To(HaveKeyWithValue(depv1alpha1.LabelCleared, fingerprint))
		Expect(tenant.Create(ctx, copied)).To(Succeed())
		Expect(cleared(ctx, "vpc-label-copy")).To(Equal("<none>"))
	})

	It("decides an allowed DELETE of a VM created and last referenced long before without reading any dependent", func(ctx context.Context) {
		// VMs are protected by vpc-gateways alone, whose dependents (VPCs)
		// are labelled: their references are tracked.
		create(ctx, consumer, newObject(vmGVR, "default", "vm-settled", nil))
		// A VPC that stays, for the probe of VPCs' labelling webhook.
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-settled-probe", nil))
		Expect(tenant.Create(ctx, newObject(vpcGVR, "default", "vpc-gw-settled", map[string]any{"gatewayVM": "vm-settled"}))).To(Succeed())
		Expect(get(ctx, vmGVR, "vm-settled").GetAnnotations()).To(HaveKey(depv1alpha1.AnnotationAdmittedReferences))
		expectDenied(ctx, consumer, vmGVR, "default", "vm-settled", "VPC/default/vpc-gw-settled")
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-gw-settled")).To(Succeed())
		expectCondition(ctx, network, "vpc-gateways", depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, depv1alpha1.ReasonTracked)

		By("waiting until the index is current past the VM's horizon: nothing can be in flight any more")
		expectFromHorizon(ctx, vmGVR, "vm-settled")

		By("a VPC naming it as its gateway is stored again: denied, from the index")
		Expect(tenant.Create(ctx, newObject(vpcGVR, "default", "vpc-gw-settled-2", map[string]any{"gatewayVM": "vm-settled"}))).To(Succeed())
		expectDenied(ctx, consumer, vmGVR, "default", "vm-settled", "VPC/default/vpc-gw-settled-2")
	})

	It("decides an allowed DELETE of a VPC last referenced long before in an Appliance's status without reading any dependent, once it has seen the check of new references record such references", func(ctx context.Context) {
		// VPCs are protected by vm-vpcs (VMs are labelled) and by
		// appliance-vpcs, whose references lie in the status, which cannot
		// be labelled: the check of new references records them, and the
		// webhook probes that kcp calls it, through the status subresource.
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-status-settled", nil))
		create(ctx, consumer, newObject(applianceGVR, "default", "appliance-settled", nil))
		// The probes need an Appliance and a VM to write (in a dry run).
		create(ctx, consumer, newObject(vmGVR, "default", "vm-status-settled", nil))
		expectCondition(ctx, compute, "appliance-vpcs", depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, depv1alpha1.ReasonTracked)
		expectCondition(ctx, compute, "vm-vpcs", depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, depv1alpha1.ReasonTracked)
		setStatusVPC := func(name string) {
			GinkgoHelper()
			Eventually(func() error {
				appliance := newObject(applianceGVR, "default", "appliance-settled", nil)
				if err := cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(appliance), appliance); err != nil {
					return err
				}
				if err := unstructured.SetNestedField(appliance.Object, name, "status", "vpc"); err != nil {
					return err
				}
				return cli.Cluster(consumer).Status().Update(ctx, appliance)
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		}
		setStatusVPC("vpc-status-settled")
		Expect(get(ctx, vpcGVR, "vpc-status-settled").GetAnnotations()).To(HaveKey(depv1alpha1.AnnotationAdmittedReferences), "the status write's reference was not recorded")
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-status-settled", "Appliance/default/appliance-settled")
		setStatusVPC("")

		By("waiting until the index is current past the VPC's horizon: nothing can be in flight any more")
		expectFromHorizon(ctx, vpcGVR, "vpc-status-settled")

		By("the Appliance's status naming it again: denied, from the index")
		setStatusVPC("vpc-status-settled")
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-status-settled", "Appliance/default/appliance-settled")
	})

	// Runs after the spec above, so the references of vpc-gateways have
	// been tracked for longer than MaxInFlight.
	// deferVMDeletions has the compute provider consent to deferred deletion
	// (delete on its export's content) and vpc-gateways defer deletions
	// until the spec ends, and waits until the webhook defers the DELETE of
	// the VM held, which a VPC names.
	deferVMDeletions := func(ctx context.Context, held string) {
		GinkgoHelper()
		setPolicy := func(ctx context.Context, policy depv1alpha1.DeletionPolicy) {
			GinkgoHelper()
			Eventually(func() error {
				r := &depv1alpha1.DependencyRule{}
				if err := cli.Cluster(network).Get(ctx, client.ObjectKey{Name: "vpc-gateways"}, r); err != nil {
					return err
				}
				r.Spec.DeletionPolicy = policy
				return cli.Cluster(network).Update(ctx, r)
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		}
		By("the compute provider consenting to deferred deletion (delete on its export's content) and vpc-gateways deferring deletions")
		grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples/compute-provider/webhook-access.yaml"))
		Expect(err).NotTo(HaveOccurred())
		grantVerb(grant, "create")
		grantVerb(grant, "delete")
		Expect(kcpenv.Apply(ctx, cli.Cluster(compute), grant...)).To(Succeed())
		setPolicy(ctx, depv1alpha1.DeletionPolicyReplay)
		DeferCleanup(func(ctx context.Context) { setPolicy(ctx, "") })
		Eventually(func(g Gomega) {
			err := deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", held, client.DryRunAll)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(ContainSubstring("its deletion would be deferred"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed(), "the webhook has not taken the Replay policy up")
	}

	It("decides the replay of a young VM's deferred deletion from the VM's revision, without reading its dependents", func(ctx context.Context) {
		create(ctx, consumer, newObject(vmGVR, "default", "vm-young", nil))
		created := get(ctx, vmGVR, "vm-young").GetCreationTimestamp().Time
		Expect(tenant.Create(ctx, newObject(vpcGVR, "default", "vpc-gw-young", map[string]any{"gatewayVM": "vm-young"}))).To(Succeed())
		deferVMDeletions(ctx, "vm-young")

		By("deleting the VM while the VPC names it: deferred")
		err := deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", "vm-young")
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting vm-young: %v", err)
		Expect(err.Error()).To(ContainSubstring("its deletion is deferred"))
		revision, err := wh.Decisions("allowed", "revision")
		Expect(err).NotTo(HaveOccurred())

		By("deleting the VPC: the replay deletes the VM, created moments before, decided from its revision")
		Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", "vpc-gw-young")).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(cli.Cluster(consumer).Get(ctx, client.ObjectKey{Namespace: "default", Name: "vm-young"}, newObject(vmGVR, "default", "vm-young", nil)))
		}).WithTimeout(timeout).WithPolling(interval).Should(BeTrue(), "vm-young was not deleted")
		Expect(time.Since(created)).To(BeNumerically("<", inflight.MaxInFlight), "vm-young outlived the creation's term of its horizon: the horizon could have decided")
		Expect(wh.Decisions("allowed", "revision")).To(Equal(revision+1), "the replay was not decided from the VM's revision")
	})

	// The race of the spec above: a reference whose admission began before
	// the VM's deletion was deferred, against the replay that the index
	// decides from the VM's revision.
	It("never deletes a VM after a VPC naming it was stored, in rounds of the VPC's CREATE and the VM's DELETE sent at the same moment and the deferred deletions replayed", func(ctx context.Context) {
		const rounds, workers = 40, 8
		type round struct {
			vm, holder, dependent string
			// stored is the revision of the stored dependent (0: its CREATE
			// was refused).
			stored               int64
			createErr, deleteErr error
		}
		all := make([]*round, rounds)
		for i := range all {
			all[i] = &round{vm: fmt.Sprintf("vm-race-%02d", i), holder: fmt.Sprintf("vpc-holder-%02d", i), dependent: fmt.Sprintf("vpc-race-%02d", i)}
		}
		parallel := func(fn func(i int, r *round)) {
			GinkgoHelper()
			var wg sync.WaitGroup
			work := make(chan int)
			for range workers {
				wg.Go(func() {
					defer GinkgoRecover()
					for i := range work {
						fn(i, all[i])
					}
				})
			}
			for i := range all {
				work <- i
			}
			close(work)
			wg.Wait()
		}
		watchCtx, stop := context.WithCancel(context.Background())
		DeferCleanup(stop)
		vmsDeleted, werr := kcpenv.WatchDeletions(watchCtx, dynamicFor(consumer).Resource(vmGVR).Namespace("default"))
		Expect(werr).NotTo(HaveOccurred())
		// deletedAt returns the revision at which a VM was deleted, and
		// whether the watch saw it deleted.
		deletedAt := func(vm string) (int64, bool) {
			GinkgoHelper()
			rv, gone, err := vmsDeleted.Revision("default", vm)
			Expect(err).NotTo(HaveOccurred())
			return rv, gone
		}

		By("young VMs, each named by a VPC that holds its deletion back")
		parallel(func(_ int, r *round) {
			Expect(cli.Cluster(consumer).Create(ctx, newObject(vmGVR, "default", r.vm, nil))).To(Succeed())
			Expect(tenant.Create(ctx, newObject(vpcGVR, "default", r.holder, map[string]any{"gatewayVM": r.vm}))).To(Succeed())
		})
		deferVMDeletions(ctx, all[0].vm)
		revision, err := wh.Decisions("allowed", "revision")
		Expect(err).NotTo(HaveOccurred())
		withdrawn := func() float64 {
			GinkgoHelper()
			n, err := wh.Counter("dependency_webhook_references_recorded_total", map[string]string{"result": "withdrawn"})
			Expect(err).NotTo(HaveOccurred())
			return n
		}
		withdrawn0 := withdrawn()

		By("sending a new VPC's CREATE naming each VM and the VM's DELETE at the same moment")
		parallel(func(i int, r *round) {
			dependent := newObject(vpcGVR, "default", r.dependent, map[string]any{"gatewayVM": r.vm})
			// One leaves up to 10 ms after the other, either way round, so
			// that the rounds cover the interleavings of the two
			// admissions.
			lag := time.Duration(i%21-10) * time.Millisecond
			// A negative delay is none.
			kcpenv.Together(-lag, func() { r.createErr = tenant.Create(ctx, dependent) },
				lag, func() { r.deleteErr = deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", r.vm) })
			if r.createErr == nil {
				rv, err := strconv.ParseInt(dependent.GetResourceVersion(), 10, 64)
				Expect(err).NotTo(HaveOccurred())
				r.stored = rv
			}
		})
		var stored, refused, deferred, inFlight int
		for _, r := range all {
			switch {
			case r.createErr == nil:
				stored++
			case apierrors.IsForbidden(r.createErr) && strings.Contains(r.createErr.Error(), "its deletion is deferred"):
				refused++
			default:
				Fail(fmt.Sprintf("the CREATE of %s neither succeeded nor was refused as naming a VM whose deletion is deferred: %v", r.dependent, r.createErr))
			}
			switch {
			case apierrors.IsForbidden(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "its deletion is deferred"):
				deferred++
			case apierrors.IsConflict(r.deleteErr) && strings.Contains(r.deleteErr.Error(), "in flight"):
				inFlight++
			default:
				Fail(fmt.Sprintf("the DELETE of %s, which %s names, was neither deferred nor refused while a reference is in flight: %v", r.vm, r.holder, r.deleteErr))
			}
		}

		// A refused CREATE's mark would hold the VM's replay back for 65 s,
		// past the wait below.
		Expect(withdrawn()-withdrawn0).To(BeNumerically("==", refused), "the refused CREATEs did not withdraw their marks")

		By("deleting the VPCs that held the VMs back: the replays delete each VM whose deletion was deferred and that no stored VPC names")
		parallel(func(_ int, r *round) {
			Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", r.holder)).To(Succeed())
		})
		hasRecord := func(r *round) bool {
			o := newObject(vmGVR, "default", r.vm, nil)
			err := cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				return true
			}
			Expect(err).NotTo(HaveOccurred())
			_, ok := o.GetAnnotations()[depv1alpha1.AnnotationDeletionRequest]
			return ok
		}
		var replayed []*round
		for _, r := range all {
			if r.stored == 0 && hasRecord(r) {
				replayed = append(replayed, r)
			}
		}
		Expect(replayed).NotTo(BeEmpty(), "no round deferred the VM's deletion before the VPC's CREATE: nothing to replay")
		Eventually(func(g Gomega) {
			for _, r := range replayed {
				_, gone := deletedAt(r.vm)
				g.Expect(gone).To(BeTrue(), "%s was not deleted by its replay", r.vm)
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		// Every replay of those has run once the last VM is gone; the index
		// would have decided one of a VM that a stored VPC names as soon.
		time.Sleep(5 * time.Second)
		var wrong []string
		for _, r := range all {
			if rv, gone := deletedAt(r.vm); gone && r.stored != 0 && rv > r.stored {
				wrong = append(wrong, fmt.Sprintf("%s was deleted (revision %d) after %s, which names it, was stored (revision %d)", r.vm, rv, r.dependent, r.stored))
			}
		}
		decided, err := wh.Decisions("allowed", "revision")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("%d rounds: VPC stored first %d (VM's DELETE refused while in flight %d), VM's deletion deferred first %d; %d replays deleted their VM, %.0f decided from the revision; wrong %d\n",
			rounds, stored, inFlight, refused, len(replayed), decided-revision, len(wrong))
		Expect(wrong).To(BeEmpty())
		Expect(stored + refused).To(Equal(rounds))
		Expect(deferred + inFlight).To(Equal(rounds))
		Expect(decided).To(BeNumerically(">", revision), "no replay was decided from the VM's revision")

		By("deleting the VPCs stored in the race: every VM goes, by its replay if its deletion was deferred")
		for _, r := range all {
			if r.stored != 0 {
				Expect(deleteObject(ctx, cli.Cluster(consumer), vpcGVR, "default", r.dependent)).To(Succeed())
			}
		}
		Eventually(func(g Gomega) {
			for _, r := range all {
				if !hasRecord(r) {
					g.Expect(deleteObject(ctx, cli.Cluster(consumer), vmGVR, "default", r.vm)).To(Succeed())
				}
				_, gone := deletedAt(r.vm)
				g.Expect(gone).To(BeTrue(), "%s was not deleted", r.vm)
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("tracks the references of a type whose schema refuses a reference set alone, by renaming one that a dependent holds in its probe", func(ctx context.Context) {
		By("a rule: Ports reference VPCs in .status.attachments[*].vpc, whose elements need an id")
		Expect(cli.Cluster(compute).Create(ctx, &depv1alpha1.DependencyRule{
			ObjectMeta: metav1.ObjectMeta{Name: "port-vpcs"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "Port", Resource: "ports"},
				Dependencies: []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".status.attachments[*].vpc"}}},
			},
		})).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(cli.Cluster(compute).Delete(ctx, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "port-vpcs"}})).To(Succeed())
		})
		expectCondition(ctx, compute, "port-vpcs", depv1alpha1.ConditionReady, metav1.ConditionTrue, "Protecting")

		By("a Port whose status attaches a VPC: denied, and the schema refuses the probe's attachment without an id")
		create(ctx, consumer, newObject(vpcGVR, "default", "vpc-attached", nil))
		create(ctx, consumer, newObject(portGVR, "default", "port-attached", nil))
		Eventually(func() error {
			port := newObject(portGVR, "default", "port-attached", nil)
			if err := cli.Cluster(consumer).Get(ctx, client.ObjectKeyFromObject(port), port); err != nil {
				return err
			}
			if err := unstructured.SetNestedSlice(port.Object, []any{map[string]any{"id": "a1", "vpc": "vpc-attached"}}, "status", "attachments"); err != nil {
				return err
			}
			return cli.Cluster(consumer).Status().Update(ctx, port)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		expectDenied(ctx, consumer, vpcGVR, "default", "vpc-attached", "Port/default/port-attached")
		err := cli.Cluster(consumer).Status().Patch(ctx, newObject(portGVR, "default", "port-attached", nil),
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"attachments":[{"vpc":"vpc-attached"}]}}`)), client.DryRunAll)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "the schema admitted an attachment without an id: %v", err)

		By("the probe renames the attachment's VPC, keeping its id: the check of new references is seen in effect")
		expectCondition(ctx, compute, "port-vpcs", depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, depv1alpha1.ReasonTracked)
	})
})

// grantVerb adds verb to the rule on apiexports/content of the sample
// grant objs.
func grantVerb(objs []*unstructured.Unstructured, verb string) {
	GinkgoHelper()
	for _, obj := range objs {
		rules, _, err := unstructured.NestedSlice(obj.Object, "rules")
		Expect(err).NotTo(HaveOccurred())
		for _, r := range rules {
			rule := r.(map[string]any)
			if resources, _ := rule["resources"].([]any); len(resources) == 1 && resources[0] == "apiexports/content" {
				rule["verbs"] = append(rule["verbs"].([]any), verb)
			}
		}
		if len(rules) > 0 {
			Expect(unstructured.SetNestedSlice(obj.Object, rules, "rules")).To(Succeed())
		}
	}
}

// toUnstructured converts a typed object for kcpenv.Apply.
func toUnstructured(obj runtime.Object) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	return &unstructured.Unstructured{Object: m}
}

// dynamicFor returns a dynamic client of the workspace ws.
func dynamicFor(ws logicalcluster.Path) dynamic.Interface {
	cfg := rest.CopyConfig(kcpConfig)
	cfg.Host += ws.RequestPath()
	return dynamic.NewForConfigOrDie(cfg)
}
