package kcpcontract

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	clusterclient "github.com/kcp-dev/multicluster-provider/client"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

var (
	kcp *kcpenv.Env
	cli clusterclient.ClusterClient
)

func TestKCPContract(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "kcp contract")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	env, err := kcpenv.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	kcp, cli = env, env.Client
})
