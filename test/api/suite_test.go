// Package api_test checks the DependencyRule API as kcp serves it: the
// generated APIResourceSchema and APIExport from config/kcp are installed
// into a workspace of a real kcp, a provider workspace binds them, and rules
// are validated by kcp's API server.
package api_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

var (
	cli clusterclient.ClusterClient
	// depCtrlPath is the workspace that hosts the project's APIExport.
	depCtrlPath logicalcluster.Path
	// providerPath is a provider workspace bound to the project's APIExport,
	// where DependencyRules are created.
	providerPath logicalcluster.Path
)

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "DependencyRule API on kcp")
}

var _ = BeforeSuite(func(ctx context.Context) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))

	env, err := kcpenv.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	cli = env.Client

	_, depCtrlPath = envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("dep-ctrl"))
	By("installing the generated APIResourceSchema and APIExport into " + depCtrlPath.String())
	Expect(kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrlPath))).To(Succeed())

	_, providerPath = envtest.NewWorkspaceFixture(GinkgoT(), cli, core.RootCluster.Path(), envtest.WithNamePrefix("provider"))
	By("binding the APIExport in " + providerPath.String())
	_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(providerPath), cli.Cluster(depCtrlPath), depCtrlPath, kcpenv.DepCtrlExportName)
	Expect(err).NotTo(HaveOccurred())
})
