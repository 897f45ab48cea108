//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// previousDir holds the binaries of the release the upgrade starts from
// (make previous, PREVIOUS_REF).
var previousDir = filepath.Join(binDir, "previous")

// newFlags returns the names of the flags in args that binary does not
// know, read from its --help: the previous release runs without them, and
// the current one gets them back when it replaces it.
func newFlags(binary string, args []string) []string {
	GinkgoHelper()
	// --help exits with status 0 (pflag's ErrHelp) or 2 (flag); either way
	// it prints the flags it knows.
	out, _ := exec.Command(binary, "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	Expect(known).To(HaveKey("kubeconfig"), "%s --help printed no flags:\n%s", binary, out)
	var names []string
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if strings.HasPrefix(a, "--") && !known[name] && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// withoutFlags returns args without the flags named.
func withoutFlags(args []string, names ...string) []string {
	var out []string
	for _, a := range args {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(a, "--"+n+"=") || a == "--"+n }) {
			out = append(out, a)
		}
	}
	return out
}

// upgradeScenarios upgrade a running installation, two webhook replicas
// behind a Service-like proxy that sends new connections only to ready
// replicas, and the controller, from the previous release's binaries to the
// current ones, one replica at a time, while DELETEs of referenced objects
// keep coming.
func upgradeScenarios() {
	It("upgrades from the previous release one replica at a time under a delete loop: no referenced object is lost, no request is answered before the rules are loaded", func(ctx context.Context) {
		for _, b := range []string{"webhook", "controller"} {
			_, err := os.Stat(filepath.Join(previousDir, b))
			Expect(err).NotTo(HaveOccurred(), "the previous release's %s is missing: run `make previous`", b)
		}
		const pairs, ns = 20, "upgrade"
		newWebhookFlags := newFlags(filepath.Join(previousDir, "webhook"), webhookProc.Args)
		newControllerFlags := newFlags(filepath.Join(previousDir, "controller"), controllerProc.Args)
		GinkgoWriter.Printf("flags the previous release does not know: webhook %v, controller %v\n", newWebhookFlags, newControllerFlags)
		workspaces := []logicalcluster.Path{consumerA, consumerB}
		inUpgrade := func(o *unstructured.Unstructured) *unstructured.Unstructured {
			o.SetNamespace(ns)
			return o
		}

		By("running the previous release: two webhook replicas behind a proxy on the webhook's port, and its controller")
		serviceAddr := "127.0.0.1:" + flagValue(webhookProc.Args, "port")
		webhookProc.Stop()
		controllerProc.Stop()
		// Rolling back to a release without reference labels: remove the
		// labelling webhooks, which its webhook does not serve, as
		// docs/operations.md says (the current controller installs them
		// again after the upgrade).
		for _, ws := range []logicalcluster.Path{network, compute} {
			Expect(client.IgnoreNotFound(cli.Cluster(ws).Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: webhookconfig.Name},
			}))).To(Succeed())
		}
		replicas := make([]*kcpenv.Process, 2)
		backends := make([]string, 2)
		for i := range replicas {
			replicas[i] = &kcpenv.Process{
				Name: fmt.Sprintf("webhook-%d", i), Binary: filepath.Join(previousDir, "webhook"), LogPath: filepath.Join(artifacts, fmt.Sprintf("webhook-upgrade-%d.log", i)),
			}
		}
		controller := &kcpenv.Process{
			Name: "controller-upgrade", Binary: filepath.Join(previousDir, "controller"), LogPath: filepath.Join(artifacts, "controller-upgrade.log"),
			HealthAddr: controllerProc.HealthAddr, Args: withoutFlags(controllerProc.Args, newControllerFlags...),
		}
		var proxy *kcpenv.Proxy
		DeferCleanup(func() {
			for _, p := range append(replicas, controller) {
				p.Stop()
			}
			if proxy != nil {
				Expect(proxy.Stop()).To(Succeed())
			}
			for _, p := range []*kcpenv.Process{webhookProc, controllerProc} {
				Expect(p.Start()).To(Succeed())
				Eventually(p.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
			}
		})
		for i, p := range replicas {
			startReady(p, func() {
				addr, health := freeAddr(), freeAddr()
				_, port, _ := net.SplitHostPort(addr)
				backends[i] = addr
				p.HealthAddr = health
				p.Args = append(withoutFlags(webhookProc.Args, newWebhookFlags...), "--port="+port, "--health-probe-bind-address="+health)
			})
		}
		health := map[string]*kcpenv.Process{backends[0]: replicas[0], backends[1]: replicas[1]}
		// A Service sends new connections only to ready endpoints; kcp
		// keeps its connections to a replica until the replica closes them.
		var err error
		proxy, err = kcpenv.StartReadyProxy(serviceAddr, func(backend string) bool { return health[backend].Ready() == nil }, backends...)
		Expect(err).NotTo(HaveOccurred())
		startReady(controller, nil)

		By("creating references")
		for _, ws := range workspaces {
			Expect(client.IgnoreAlreadyExists(cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
			for i := range pairs {
				target, dependent := vpc(fmt.Sprintf("vpc-%02d", i)), vm(fmt.Sprintf("vm-%02d", i), fmt.Sprintf("vpc-%02d", i))
				target.SetNamespace(ns)
				dependent.SetNamespace(ns)
				create(ctx, ws, target, dependent)
			}
			Eventually(func(g Gomega) {
				err := cli.Cluster(ws).Delete(ctx, inUpgrade(vpc("vpc-00")), client.DryRunAll)
				g.Expect(err).To(MatchError(ContainSubstring("VirtualMachine/" + ns + "/vm-00")))
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		}

		By("deleting the referenced VPCs in a loop while the replicas are replaced")
		var (
			denied, failed, wrong, notLoaded atomic.Int64
			lock                             sync.Mutex
			failures                         []string
		)
		loopCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for w, ws := range workspaces {
			wg.Go(func() {
				defer GinkgoRecover()
				for n := 0; loopCtx.Err() == nil; n++ {
					i := (n + w) % pairs
					err := cli.Cluster(ws).Delete(loopCtx, inUpgrade(vpc(fmt.Sprintf("vpc-%02d", i))))
					switch {
					case loopCtx.Err() != nil:
						return
					case err == nil:
						wrong.Add(1)
						lock.Lock()
						failures = append(failures, fmt.Sprintf("%s vpc-%02d was deleted while vm-%02d referenced it", ws, i, i))
						lock.Unlock()
					case apierrors.IsForbidden(err) && strings.Contains(err.Error(), fmt.Sprintf("VirtualMachine/%s/vm-%02d", ns, i)):
						denied.Add(1)
					case strings.Contains(err.Error(), "has not loaded all DependencyRules yet"):
						notLoaded.Add(1)
					default:
						// kcp could not reach a webhook (a replica stopping
						// under an open connection): it fails closed.
						failed.Add(1)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
		upgrade := func(p *kcpenv.Process) {
			GinkgoHelper()
			time.Sleep(2 * time.Second)
			p.Stop()
			p.Binary = filepath.Join(binDir, filepath.Base(p.Binary))
			if p == controller {
				p.Args = append(p.Args, withNewFlags(controllerProc.Args, newControllerFlags)...)
			} else {
				p.Args = append(p.Args, withNewFlags(webhookProc.Args, newWebhookFlags)...)
			}
			startReady(p, nil)
		}
		for _, p := range append(replicas, controller) {
			upgrade(p)
		}
		time.Sleep(2 * time.Second)
		stop()
		wg.Wait()
		GinkgoWriter.Printf("upgrade: %d DELETEs denied, %d allowed (wrong), %d answered before the rules were loaded, %d failed to reach a webhook\n",
			denied.Load(), wrong.Load(), notLoaded.Load(), failed.Load())
		Expect(failures).To(BeEmpty())
		Expect(notLoaded.Load()).To(BeZero(), "a request was answered by a replica that had not loaded its rules")
		Expect(denied.Load()).To(BeNumerically(">", 0))

		By("checking that the DELETE webhook no longer skips objects the previous release cleared, and that a copied clearance deletes nothing")
		Eventually(func(g Gomega) {
			cfg, err := getConfigIn(ctx, network)
			g.Expect(err).NotTo(HaveOccurred())
			for _, wh := range cfg.Webhooks {
				for _, r := range wh.ObjectSelector.MatchExpressions {
					g.Expect(r.Key).To(Equal(depv1alpha1.LabelCleared), "webhook %s still has the object selector of the previous release", wh.Name)
				}
				g.Expect(wh.ObjectSelector.MatchLabels).To(BeEmpty(), "webhook %s still has the object selector of the previous release", wh.Name)
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		for _, ws := range workspaces {
			copied := inUpgrade(vpc("vpc-01"))
			Expect(cli.Cluster(ws).Patch(ctx, copied, client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"dependencies.opendefense.cloud/unreferenced":"0123456789abcdef"}}}`)))).To(Succeed())
			err := cli.Cluster(ws).Delete(ctx, inUpgrade(vpc("vpc-01")))
			Expect(err).To(MatchError(ContainSubstring("VirtualMachine/"+ns+"/vm-01")), "a VPC carrying a label the previous release honoured was not protected")
		}

		By("checking that every VPC still exists, and the current binaries decide")
		for _, ws := range workspaces {
			for i := range pairs {
				key := client.ObjectKeyFromObject(inUpgrade(vpc(fmt.Sprintf("vpc-%02d", i))))
				Expect(cli.Cluster(ws).Get(ctx, key, vpc(key.Name))).To(Succeed(), "%s %s", ws, key)
			}
			err := cli.Cluster(ws).Delete(ctx, inUpgrade(vpc("vpc-00")), client.DryRunAll)
			Expect(err).To(MatchError(ContainSubstring("VirtualMachine/" + ns + "/vm-00")))
		}
		for _, ws := range workspaces {
			Expect(cli.Cluster(ws).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
	})
}

// startReady starts p and waits until it is ready. A process that exits
// before it is ready (a port taken between choosing and binding it, or kcp
// slow to answer at start) is started again, as a Deployment restarts its
// Pod, at most twice, after its log is printed; place, if not nil, gives it
// new ports before each start.
func startReady(p *kcpenv.Process, place func()) {
	GinkgoHelper()
	const starts = 3
	for n := 1; ; n++ {
		if place != nil {
			place()
		}
		Expect(p.Start()).To(Succeed())
		deadline := time.Now().Add(timeout)
		err := p.Ready()
		for ; err != nil && p.Running() && time.Now().Before(deadline); err = p.Ready() {
			time.Sleep(interval)
		}
		switch {
		case err == nil:
			return
		case p.Running() || n == starts:
			Fail(fmt.Sprintf("%s is not ready after %d start(s): %v\nlog:\n%s", p.Name, n, err, p.LogTail(40)))
		}
		GinkgoWriter.Printf("%s exited before it was ready; starting it again. Its log:\n%s\n", p.Name, p.LogTail(40))
	}
}

// withNewFlags returns the flags of args that withoutFlags(args, names...)
// leaves out.
func withNewFlags(args, names []string) []string {
	var out []string
	for _, a := range args {
		if !slices.Contains(withoutFlags([]string{a}, names...), a) {
			out = append(out, a)
		}
	}
	return out
}
