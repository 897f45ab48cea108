package webhook_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// clearerListings records the listings of the protected VPCs that the
// clearer makes through the virtual workspace: by the workspace in their
// path for those that select by the cleared label ("*" for every one),
// "full" for a full pass (every workspace, no selector, in pages).
type clearerListings struct {
	lock     sync.Mutex
	clusters []string
}

func (r *clearerListings) wrap(rt http.RoundTripper) http.RoundTripper {
	return kcpenv.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		_, rest, ok := strings.Cut(req.URL.Path, "/clusters/")
		if req.Method == http.MethodGet && ok && strings.HasSuffix(rest, "/apis/network.test.io/v1/vpcs") && q.Get("limit") == "500" {
			cluster, _, _ := strings.Cut(rest, "/")
			switch {
			case strings.Contains(q.Get("labelSelector"), depv1alpha1.LabelCleared):
			case cluster == "*" && q.Get("labelSelector") == "":
				cluster = "full"
			default:
				cluster = ""
			}
			if cluster != "" {
				r.lock.Lock()
				r.clusters = append(r.clusters, cluster)
				r.lock.Unlock()
			}
		}
		return rt.RoundTrip(req)
	})
}

// take returns the workspaces listed since the last call.
func (r *clearerListings) take() []string {
	r.lock.Lock()
	defer r.lock.Unlock()
	out := r.clusters
	r.clusters = nil
	return out
}

var _ = Describe("The clearer", Ordered, func() {
	var (
		network, compute, consumerA, consumerB logicalcluster.Path
		clusterA, clusterB                     string
		listings                               = &clearerListings{}
	)
	vmRef := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }

	BeforeAll(func(ctx context.Context) {
		root := core.RootCluster.Path()
		depCtrl := newDepCtrlWorkspace(ctx, root)
		_, network = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"})).To(Succeed())
		_, compute = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute"))
		Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io", kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"})).To(Succeed())
		consent(ctx, network, depCtrl, "network-provider", false)
		consent(ctx, compute, depCtrl, "compute-provider", false)
		wsA, pathA := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer-a"))
		wsB, pathB := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer-b"))
		consumerA, consumerB, clusterA, clusterB = pathA, pathB, wsA.Spec.Cluster, wsB.Spec.Cluster
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			bindExports(ctx, ws, export{network, "network.test.io"}, export{compute, "compute.test.io"})
		}
		Expect(cli.Cluster(compute).Create(ctx, &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: "vm-vpcs"}, Spec: depv1alpha1.DependencyRuleSpec{
			Dependent: depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
			Dependencies: []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"},
				Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"}}},
		}})).To(Succeed())

		By("starting the webhook, clearing every second, and the controller")
		wh := startWebhook(ctx, depCtrl, listings.wrap, func(o *webhookserver.Options) { o.ClearanceInterval = time.Second })
		stop := startController(ctx, depCtrl, wh, caBundleFile(wh), 10)
		DeferCleanup(func() { Expect(stop()).To(Succeed()) })
		expectCondition(ctx, compute, "vm-vpcs", depv1alpha1.ConditionReady, metav1.ConditionTrue, "Protecting")
	})

	It("lists again only the workspaces in which dependents changed, not every referenced object", func(ctx context.Context) {
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			create(ctx, ws, newObject(vpcGVR, "default", "vpc-1", nil))
			create(ctx, ws, newObject(vmGVR, "default", "vm-1", vmRef("vpc-1")))
		}
		By("the clearer lists the objects of both workspaces once they changed, and then leaves B alone")
		Eventually(func(g Gomega) {
			g.Expect(listings.take()).To(Or(ContainElement(clusterB), ContainElement("*")))
		}).WithTimeout(2 * time.Minute).WithPolling(interval).Should(Succeed())
		Eventually(func(g Gomega) {
			time.Sleep(4 * time.Second)
			g.Expect(listings.take()).NotTo(Or(ContainElement(clusterB), ContainElement("*")))
		}).WithTimeout(2 * time.Minute).WithPolling(interval).Should(Succeed())

		By("VMs keep coming in consumer A: A is listed again, B, whose referenced VPC stays as it was, is not")
		deadline := time.Now().Add(12 * time.Second)
		for i := 2; time.Now().Before(deadline); i++ {
			create(ctx, consumerA, newObject(vmGVR, "default", "vm-"+strings.Repeat("x", i), vmRef("vpc-1")))
			time.Sleep(2 * time.Second)
		}
		listed := listings.take()
		Expect(listed).To(ContainElement(clusterA), "the workspace in which VMs came")
		Expect(listed).NotTo(ContainElement(clusterB), "a workspace in which nothing changed")
		// A relist of the index (a watch that expired) changes any
		// workspace, and the pass after it lists every one; more than one
		// such pass means the passes did not list by workspace.
		wildcard := 0
		for _, c := range listed {
			if c == "*" {
				wildcard++
			}
		}
		Expect(wildcard).To(BeNumerically("<=", 1), "every workspace listed for changes in one: %v", listed)
	})
})
