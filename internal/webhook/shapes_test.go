package webhook_test

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

var (
	gwGVR           = schema.GroupVersionResource{Group: "gateway.test.io", Version: "v1", Resource: "gateways"}
	routeGVR        = schema.GroupVersionResource{Group: "gateway.test.io", Version: "v1", Resource: "httproutes"}
	clusterRouteGVR = schema.GroupVersionResource{Group: "gateway.test.io", Version: "v1", Resource: "clusterroutes"}
)

// parentRef is an element of a route's parentRefs: name, then optionally
// namespace, kind and group, as Gateway API writes them.
func parentRef(name string, more ...string) map[string]any {
	ref := map[string]any{"name": name}
	for i, k := range []string{"namespace", "kind", "group"} {
		if i < len(more) && more[i] != "-" {
			ref[k] = more[i]
		}
	}
	return ref
}

func parents(refs ...map[string]any) map[string]any {
	list := make([]any, 0, len(refs))
	for _, r := range refs {
		list = append(list, r)
	}
	return map[string]any{"parentRefs": list}
}

var _ = Describe("Reference shapes of real APIs", Ordered, func() {
	var (
		gateway, consumer logicalcluster.Path
		wh                *kcpenv.Webhook
	)

	BeforeAll(func(ctx context.Context) {
		root := core.RootCluster.Path()
		_, depCtrl := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("dep-ctrl"))
		Expect(kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrl))).To(Succeed())
		rbac, err := kcpenv.LoadManifests("config/rbac/webhook")
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(depCtrl), rbac...)).To(Succeed())

		By("a provider exporting Gateways and two kinds of routes that reference them, as Gateway API does")
		gatewayWS, gatewayPath := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("gateway"))
		gateway = gatewayPath
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(gateway), "gateway.test.io",
			kcpenv.Resource{Kind: "Gateway", Plural: "gateways"},
			kcpenv.Resource{Kind: "HTTPRoute", Plural: "httproutes"},
			kcpenv.Resource{Kind: "ClusterRoute", Plural: "clusterroutes", ClusterScoped: true})).To(Succeed())
		_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(gateway), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
		Expect(err).NotTo(HaveOccurred())
		By("granting the webhook what config/samples/gateway-provider/webhook-access.yaml grants")
		sample, err := os.ReadFile(filepath.Join(kcpenv.RepoRoot(), "config/samples/gateway-provider/webhook-access.yaml"))
		Expect(err).NotTo(HaveOccurred())
		grant, err := kcpenv.DecodeYAML(sample)
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(gateway), grant...)).To(Succeed())

		_, consumer = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
		bindExports(ctx, consumer, export{gateway, "gateway.test.io"})

		toGateways := func(fieldRef depv1alpha1.FieldReference) []depv1alpha1.Dependency {
			return []depv1alpha1.Dependency{{
				APIExportRef: depv1alpha1.APIExportReference{Path: gateway.String(), Name: "gateway.test.io"},
				Group:        "gateway.test.io", Version: "v1", Resource: "gateways", FieldRef: fieldRef,
			}}
		}
		for _, rule := range []*depv1alpha1.DependencyRule{{
			ObjectMeta: metav1.ObjectMeta{Name: "httproute-parents"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent: depv1alpha1.DependentResource{APIExportName: "gateway.test.io", Group: "gateway.test.io", Version: "v1", Kind: "HTTPRoute", Resource: "httproutes"},
				Dependencies: toGateways(depv1alpha1.FieldReference{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace",
					GroupPath: "group", KindPath: "kind", Kind: "Gateway"}),
			},
		}, {
			ObjectMeta: metav1.ObjectMeta{Name: "clusterroute-parents"},
			Spec: depv1alpha1.DependencyRuleSpec{
				Dependent:    depv1alpha1.DependentResource{APIExportName: "gateway.test.io", Group: "gateway.test.io", Version: "v1", Kind: "ClusterRoute", Resource: "clusterroutes"},
				Dependencies: toGateways(depv1alpha1.FieldReference{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace"}),
			},
		}} {
			Expect(cli.Cluster(gateway).Create(ctx, rule)).To(Succeed())
		}

		wh = startWebhook(ctx, depCtrl, nil, nil)
		installWorkspaceConfig(ctx, gateway, logicalcluster.Name(gatewayWS.Spec.Cluster), webhookconfig.Name, wh.URL, wh.CABundle,
			&webhookconfig.Workspace{Path: gateway, Protected: []schema.GroupVersionResource{gwGVR}, Dependents: []schema.GroupVersionResource{routeGVR, clusterRouteGVR}})
		for _, rule := range []string{"httproute-parents", "clusterroute-parents"} {
			expectCondition(ctx, gateway, rule, depv1alpha1.ConditionReferencesGuarded, metav1.ConditionTrue, "Guarded")
		}
	})

	It("blocks deleting a Gateway that a route in another namespace references, naming the route's namespace", func(ctx context.Context) {
		create(ctx, consumer, newObject(gwGVR, "infra", "edge", nil))
		create(ctx, consumer, newObject(gwGVR, "apps", "edge", nil))
		create(ctx, consumer, newObject(routeGVR, "apps", "shop", parents(parentRef("edge", "infra"))))

		expectDenied(ctx, consumer, gwGVR, "infra", "edge", `"edge" in namespace "infra" is still referenced by HTTPRoute/apps/shop`)
		By("the Gateway of the same name in the route's own namespace is not referenced")
		expectDeletableIn(ctx, consumer, gwGVR, "apps", "edge")

		Expect(deleteObject(ctx, cli.Cluster(consumer), routeGVR, "apps", "shop")).To(Succeed())
		expectDeletableIn(ctx, consumer, gwGVR, "infra", "edge")
	})

	It("reads a reference without a namespace as one to the route's own namespace", func(ctx context.Context) {
		create(ctx, consumer, newObject(gwGVR, "apps", "local", nil))
		create(ctx, consumer, newObject(gwGVR, "infra", "local", nil))
		create(ctx, consumer, newObject(routeGVR, "apps", "blog", parents(parentRef("local"))))

		expectDenied(ctx, consumer, gwGVR, "apps", "local", "HTTPRoute/apps/blog")
		expectDeletableIn(ctx, consumer, gwGVR, "infra", "local")
	})

	It("counts only the parentRefs that name a Gateway, taking a missing group and kind for Gateway's", func(ctx context.Context) {
		for _, name := range []string{"web", "svc", "foreign", "typed"} {
			create(ctx, consumer, newObject(gwGVR, "apps", name, nil))
		}
		create(ctx, consumer, newObject(routeGVR, "apps", "mixed", parents(
			parentRef("svc", "-", "Service", ""),
			parentRef("foreign", "-", "Gateway", "other.test.io"),
			parentRef("typed", "-", "Gateway", "gateway.test.io"),
			parentRef("web"),
		)))

		expectDenied(ctx, consumer, gwGVR, "apps", "web", "HTTPRoute/apps/mixed")
		expectDenied(ctx, consumer, gwGVR, "apps", "typed", "HTTPRoute/apps/mixed")
		expectDeletableIn(ctx, consumer, gwGVR, "apps", "svc")
		expectDeletableIn(ctx, consumer, gwGVR, "apps", "foreign")
	})

	It("lets a cluster-scoped dependent reference a namespaced Gateway, in the namespace it names or in any", func(ctx context.Context) {
		for _, ns := range []string{"apps", "infra"} {
			create(ctx, consumer, newObject(gwGVR, ns, "pinned", nil))
			create(ctx, consumer, newObject(gwGVR, ns, "anywhere", nil))
		}
		create(ctx, consumer, newObject(clusterRouteGVR, "", "global", parents(parentRef("pinned", "infra"), parentRef("anywhere"))))

		expectDenied(ctx, consumer, gwGVR, "infra", "pinned", "ClusterRoute/global")
		expectDeletableIn(ctx, consumer, gwGVR, "apps", "pinned")
		expectDenied(ctx, consumer, gwGVR, "apps", "anywhere", "ClusterRoute/global")
		expectDenied(ctx, consumer, gwGVR, "infra", "anywhere", "ClusterRoute/global")
	})

	It("refuses a new reference to a Gateway in another namespace that is being deleted, naming its namespace", func(ctx context.Context) {
		closing := newObject(gwGVR, "infra", "closing", nil)
		closing.SetFinalizers([]string{"test.dependencies.opendefense.cloud/hold"})
		create(ctx, consumer, closing)
		expectDeletableIn(ctx, consumer, gwGVR, "infra", "closing")

		Eventually(func(g Gomega) {
			err := cli.Cluster(consumer).Create(ctx, newObject(routeGVR, "apps", "late", parents(parentRef("closing", "infra"))))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(`HTTPRoute "late" cannot reference gateways "closing" in namespace "infra": it is being deleted`))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		By("a route naming a Gateway of that name in its own namespace is no reference to it")
		create(ctx, consumer, newObject(routeGVR, "apps", "unrelated", parents(parentRef("closing"))))

		Expect(mergePatchIn(ctx, consumer, gwGVR, "infra", "closing", `{"metadata":{"finalizers":null}}`)).To(Succeed())
	})
})

// mergePatchIn patches an object with a JSON merge patch.
func mergePatchIn(ctx context.Context, ws logicalcluster.Path, gvr schema.GroupVersionResource, namespace, name, patch string) error {
	return cli.Cluster(ws).Patch(ctx, newObject(gvr, namespace, name, nil), client.RawPatch("application/merge-patch+json", []byte(patch)))
}
