package webhook_test

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/command"
	"github.com/opendefensecloud/dependency-controller/internal/controllerserver"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// startWebhook starts the webhook as deployed: with its own identity
// (dependency-webhook), in the workspace depCtrl, its requests to kcp passed
// through wrap and its options changed by configure (each if not nil). It
// stops when the current node's cleanup runs.
func startWebhook(ctx context.Context, depCtrl logicalcluster.Path, wrap transport.WrapperFunc, configure func(*webhookserver.Options)) *kcpenv.Webhook {
	GinkgoHelper()
	user, err := kcpEnv.AddUser("dependency-webhook")
	Expect(err).NotTo(HaveOccurred())
	user.Host += depCtrl.RequestPath()
	if wrap != nil {
		user.WrapTransport = wrap
	}
	wh, err := kcpenv.StartWebhookWith(ctx, user, GinkgoT().TempDir(), configure)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(wh.Stop)
	return wh
}

// caBundleFile writes the CA bundle of wh to a file that lasts until the
// current node's cleanup runs, and returns its path.
func caBundleFile(wh *kcpenv.Webhook) string {
	GinkgoHelper()
	caFile := filepath.Join(GinkgoT().TempDir(), "ca.crt")
	Expect(os.WriteFile(caFile, wh.CABundle, 0o600)).To(Succeed())
	return caFile
}

// startController runs the controller as cmd/controller assembles it, in
// the workspace depCtrl, installing configurations that call wh (whose CA
// bundle caFile holds) and that kcp waits timeoutSeconds for, failing
// closed. It returns the function that stops it.
func startController(ctx context.Context, depCtrl logicalcluster.Path, wh *kcpenv.Webhook, caFile string, timeoutSeconds int32) (stop func() error) {
	GinkgoHelper()
	controllerCfg := rest.CopyConfig(kcpConfig)
	controllerCfg.Host += depCtrl.RequestPath()
	c, err := controllerserver.New(ctx, controllerCfg, controllerserver.Options{
		CommonOptions:         command.CommonOptions{APIExportName: kcpenv.DepCtrlExportName, ResyncPeriod: time.Hour},
		WebhookURL:            wh.URL,
		WebhookCABundleFile:   caFile,
		CABundleCheckInterval: time.Second,
		WebhookTimeoutSeconds: timeoutSeconds,
		FailurePolicy:         admissionregistrationv1.Fail,
		WebhookUser:           controllerserver.DefaultWebhookUser,
	}, kcpenv.TestManagerOptions())
	Expect(err).NotTo(HaveOccurred())
	return kcpenv.RunInBackground(c.Manager.Start)
}

// newDepCtrlWorkspace creates the dep-ctrl workspace under root as
// `make deploy` sets it up: the dependency API and its APIExport, and what
// config/rbac grants the webhook's and the controller's users there.
func newDepCtrlWorkspace(ctx context.Context, root logicalcluster.Path) logicalcluster.Path {
	GinkgoHelper()
	_, depCtrl := envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("dep-ctrl"))
	Expect(kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrl))).To(Succeed())
	for _, dir := range []string{"config/rbac/webhook", "config/rbac/controller"} {
		rbac, err := kcpenv.LoadManifests(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(kcpenv.Apply(ctx, cli.Cluster(depCtrl), rbac...)).To(Succeed())
	}
	return depCtrl
}

// consent has the provider workspace ws consent as the provider of
// config/samples/<provider> does: it binds the dependency API of depCtrl
// and grants the webhook what the sample's webhook-access.yaml grants, and
// create on its APIExport's content as well if withCreate (for the
// webhook's Events and the namespace probe's dry-run Events).
func consent(ctx context.Context, ws, depCtrl logicalcluster.Path, provider string, withCreate bool) {
	GinkgoHelper()
	_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(ws), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
	Expect(err).NotTo(HaveOccurred())
	grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples", provider, "webhook-access.yaml"))
	Expect(err).NotTo(HaveOccurred())
	if withCreate {
		grantVerb(grant, "create")
	}
	Expect(kcpenv.Apply(ctx, cli.Cluster(ws), grant...)).To(Succeed())
}

// asWebhookUser returns a client of the workspace ws as the webhook's user
// (dependency-webhook), which may get and patch the resource of group
// there: it writes what the webhook's guards let only the webhook write,
// as releases before those guards let anyone.
func asWebhookUser(ctx context.Context, ws logicalcluster.Path, group, resource string) client.Client {
	GinkgoHelper()
	cfg, err := kcpEnv.AddUser(controllerserver.DefaultWebhookUser)
	Expect(err).NotTo(HaveOccurred())
	name := "webhook-user-" + resource
	Expect(kcpenv.Apply(ctx, cli.Cluster(ws), toUnstructured(&rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{NonResourceURLs: []string{"/"}, Verbs: []string{"access"}},
			{APIGroups: []string{group}, Resources: []string{resource}, Verbs: []string{"get", "patch"}},
		},
	}), toUnstructured(&rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: controllerserver.DefaultWebhookUser}},
	}))).To(Succeed())
	cfg.Host += ws.RequestPath()
	c, err := client.New(cfg, client.Options{Scheme: kcpenv.NewScheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// vmsOfVPCs is a deployment in its own workspaces: the dep-ctrl workspace,
// a network provider whose VPCs are protected, a compute provider whose VMs
// reference them (its export claims events, and it grants their create), a
// consumer that binds both, and the compute provider's rule vm-vpcs on
// .spec.vpcRef.name.
type vmsOfVPCs struct {
	depCtrl, network, compute, consumer logicalcluster.Path
}

// newVMsOfVPCs sets up vmsOfVPCs under root, and starts the webhook (with
// configure) and the controller, until the rule reports Ready.
func newVMsOfVPCs(ctx context.Context, configure func(*webhookserver.Options)) (vmsOfVPCs, *kcpenv.Webhook) {
	GinkgoHelper()
	root := core.RootCluster.Path()
	var d vmsOfVPCs
	d.depCtrl = newDepCtrlWorkspace(ctx, root)
	_, d.network = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("network"))
	Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(d.network), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"})).To(Succeed())
	_, d.compute = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("compute"))
	Expect(kcpenv.InstallProviderAPI(ctx, cli.Cluster(d.compute), "compute.test.io", kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"})).To(Succeed())
	consent(ctx, d.network, d.depCtrl, "network-provider", false)
	consent(ctx, d.compute, d.depCtrl, "compute-provider", true)
	_, d.consumer = envtest.NewWorkspaceFixture(GinkgoT(), cli, root, envtest.WithNamePrefix("consumer"))
	bindExports(ctx, d.consumer, export{d.network, "network.test.io"}, export{d.compute, "compute.test.io"})
	Expect(cli.Cluster(d.compute).Create(ctx, &depv1alpha1.DependencyRule{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-vpcs"},
		Spec: depv1alpha1.DependencyRuleSpec{
			Dependent:    depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
			Dependencies: []depv1alpha1.Dependency{{APIExportRef: depv1alpha1.APIExportReference{Path: d.network.String(), Name: "network.test.io"}, Group: "network.test.io", Version: "v1", Resource: "vpcs", FieldRef: depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"}}},
		},
	})).To(Succeed())
	wh := startWebhook(ctx, d.depCtrl, nil, configure)
	stop := startController(ctx, d.depCtrl, wh, caBundleFile(wh), 10)
	DeferCleanup(func() { Expect(stop()).To(Succeed()) })
	expectCondition(ctx, d.compute, "vm-vpcs", depv1alpha1.ConditionReady, metav1.ConditionTrue, "Protecting")
	return d, wh
}
