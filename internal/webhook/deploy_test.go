package webhook_test

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/kcp-dev/logicalcluster/v3"

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
