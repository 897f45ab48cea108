package controller_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/client-go/rest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	clusterclient "github.com/kcp-dev/multicluster-provider/client"

	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

var (
	// kcpConfig is an admin config for the kcp server, without a workspace.
	kcpConfig *rest.Config
	cli       clusterclient.ClusterClient
	// kcpVersion is the version of the kcp binary started.
	kcpVersion kcpversion.Info
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller on kcp")
}

var _ = BeforeSuite(func(ctx context.Context) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))

	env, err := kcpenv.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	kcpConfig, cli, kcpVersion = env.Config, env.Client, env.Version
})
