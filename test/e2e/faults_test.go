//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/controller"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/internal/webhookserver"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// target is a VPC that a VM references.
type target struct {
	ws        logicalcluster.Path
	namespace string
	name      string
}

func (t target) object() *unstructured.Unstructured {
	o := vpc(t.name)
	o.SetNamespace(t.namespace)
	return o
}

// tally counts the answers to deletes of referenced objects.
type tally struct {
	lock sync.Mutex
	// denied: refused by the webhook naming the blockers; refused: any other
	// error (kcp or the webhook unavailable, a retry message); allowed: the
	// object was deleted.
	attempted, denied, refused, allowed int
	refusals                            map[string]int
}

func (t *tally) record(err error) {
	t.lock.Lock()
	defer t.lock.Unlock()
	t.attempted++
	switch {
	case err == nil:
		t.allowed++
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is still referenced by"):
		t.denied++
	default:
		t.refused++
		if t.refusals == nil {
			t.refusals = map[string]int{}
		}
		msg := err.Error()
		if len(msg) > 120 {
			msg = msg[:120]
		}
		t.refusals[msg]++
	}
}

// faultRows are the rows of the fault table, one per scenario.
var faultRows []string

// report records a scenario's row, prints the table and writes it to
// faults.md in the artifacts.
func report(scenario string, t *tally, lost int) {
	t.lock.Lock()
	row := fmt.Sprintf("| %s | %d | %d | %d | %d | %d |", scenario, t.attempted, t.denied, t.refused, t.allowed, lost)
	var reasons []string
	for msg, n := range t.refusals {
		reasons = append(reasons, fmt.Sprintf("  %dx %s", n, msg))
	}
	t.lock.Unlock()
	slices.Sort(reasons)
	faultRows = append(faultRows, row)
	table := strings.Join(append([]string{
		"| scenario (" + shardConfig + ") | deletes attempted | denied | refused (kcp or webhook unavailable) | allowed | referenced objects lost |",
		"|---|---|---|---|---|---|"}, faultRows...), "\n")
	GinkgoWriter.Printf("fault table:\n%s\nrefusals in this scenario:\n%s\n", table, strings.Join(reasons, "\n"))
	Expect(os.WriteFile(filepath.Join(artifacts, "faults.md"), []byte(table+"\n"), 0o644)).To(Succeed())
}

// makePairs creates, in a namespace of each consumer, n VPCs each
// referenced by a VM, and returns the VPCs once deleting them is denied.
func makePairs(ctx context.Context, namespace string, n int) []target {
	GinkgoHelper()
	var targets []target
	for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
		Expect(client.IgnoreAlreadyExists(cli.Cluster(ws).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))).To(Succeed())
		for i := range n {
			t := target{ws: ws, namespace: namespace, name: fmt.Sprintf("%s-vpc-%03d", namespace, i)}
			dependent := vm(fmt.Sprintf("%s-vm-%03d", namespace, i), t.name)
			dependent.SetNamespace(namespace)
			create(ctx, ws, t.object(), dependent)
			targets = append(targets, t)
		}
	}
	for _, t := range []target{targets[0], targets[len(targets)-1]} {
		Eventually(func() error {
			return cli.Cluster(t.ws).Delete(ctx, t.object(), client.DryRunAll)
		}).WithTimeout(timeout).WithPolling(interval).Should(MatchError(ContainSubstring("is still referenced by")))
	}
	return targets
}

// deleteLoop deletes the targets with the given number of workers, over and
// over, until stop is called, recording every answer in t.
func deleteLoop(ctx context.Context, targets []target, workers int, t *tally) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			defer GinkgoRecover()
			for i := w; ctx.Err() == nil; i += workers {
				tg := targets[i%len(targets)]
				reqCtx, cancelReq := context.WithTimeout(ctx, 15*time.Second)
				err := cli.Cluster(tg.ws).Delete(reqCtx, tg.object())
				cancelReq()
				if ctx.Err() != nil {
					return
				}
				t.record(err)
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// lostTargets returns how many targets are gone or being deleted.
func lostTargets(ctx context.Context, targets []target) int {
	GinkgoHelper()
	lost := 0
	for _, t := range targets {
		obj := t.object()
		var err error
		Eventually(func() error {
			err = cli.Cluster(t.ws).Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		if apierrors.IsNotFound(err) || obj.GetDeletionTimestamp() != nil {
			lost++
		}
	}
	return lost
}

// finishScenario stops the delete loop, reports the scenario's row and
// asserts that no referenced object was lost and no delete of one allowed.
func finishScenario(ctx context.Context, scenario string, stop func(), targets []target, t *tally) {
	GinkgoHelper()
	stop()
	lost := lostTargets(ctx, targets)
	report(scenario, t, lost)
	Expect(lost).To(BeZero())
	Expect(t.allowed).To(BeZero())
}

// expectProtectedAgain waits until deleting a target is denied again.
func expectProtectedAgain(ctx context.Context, t target) {
	GinkgoHelper()
	Eventually(func() error {
		return cli.Cluster(t.ws).Delete(ctx, t.object(), client.DryRunAll)
	}).WithTimeout(3 * time.Minute).WithPolling(interval).Should(MatchError(ContainSubstring("is still referenced by")))
}

// logicalClusterOf returns the logical cluster of a workspace.
func logicalClusterOf(ctx context.Context, ws logicalcluster.Path) logicalcluster.Name {
	GinkgoHelper()
	parent, name := ws.Split()
	w := &tenancyv1alpha1.Workspace{}
	Expect(cli.Cluster(parent).Get(ctx, client.ObjectKey{Name: name}, w)).To(Succeed())
	return logicalcluster.Name(w.Spec.Cluster)
}

// webhooksOf renders the webhooks of a configuration, or "none".
func webhooksOf(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) string {
	if cfg == nil {
		return "none"
	}
	var out []string
	for _, wh := range cfg.Webhooks {
		for _, r := range wh.Rules {
			out = append(out, fmt.Sprintf("%s: %s/%s %v %v", wh.Name, strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","), r.APIVersions, r.Operations))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// expectConfigurationsConverge waits until the configuration of every
// provider workspace is exactly what the rules that exist now need.
func expectConfigurationsConverge(ctx context.Context) {
	GinkgoHelper()
	workspaces := map[string]logicalcluster.Name{}
	for _, ws := range []logicalcluster.Path{network, compute} {
		workspaces[ws.String()] = logicalClusterOf(ctx, ws)
	}
	Eventually(func(g Gomega) {
		var rules []depv1alpha1.DependencyRule
		for _, ws := range []logicalcluster.Path{network, compute} {
			list := &depv1alpha1.DependencyRuleList{}
			g.Expect(cli.Cluster(ws).List(ctx, list)).To(Succeed())
			rules = append(rules, list.Items...)
		}
		desired, _ := webhookconfig.Desired(rules, workspaces)
		for _, ws := range []logicalcluster.Path{network, compute} {
			cluster := workspaces[ws.String()]
			want := "none"
			if d, ok := desired[cluster]; ok {
				want = webhooksOf(webhookconfig.Validating(d, cluster, webhookconfig.Options{}))
			}
			cfg, err := getConfigIn(ctx, ws)
			if apierrors.IsNotFound(err) {
				cfg, err = nil, nil
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(webhooksOf(cfg)).To(Equal(want), "configuration in %s", ws)
		}
	}).WithTimeout(2 * time.Minute).WithPolling(interval).Should(Succeed())
}

// superviseLikeADeployment starts the controller and the webhook again if
// they exited, as their Deployments would, and waits until each holds its
// leader election lease, renewed after since. (Each exits when it cannot
// renew its lease for a while, e.g. while kcp restarts, so that it never
// writes without holding the lease: some seconds after kcp is back, a
// process that looks ready may still exit.)
func superviseLikeADeployment(ctx context.Context, since time.Time) {
	GinkgoHelper()
	for _, p := range []struct {
		proc  *kcpenv.Process
		lease string
	}{{controllerProc, controller.ControllerName}, {webhookProc, webhookserver.LeaseName}} {
		Eventually(func() error {
			if !p.proc.Running() {
				GinkgoWriter.Printf("%s had exited (%s); starting it again, as its Deployment would\n", p.proc.Name, lastLine(p.proc.LogTail(3)))
				if err := p.proc.Start(); err != nil {
					return err
				}
			}
			if err := p.proc.Ready(); err != nil {
				return err
			}
			return leaseRenewedSince(ctx, p.lease, since)
		}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "%s log:\n%s", p.proc.Name, p.proc.LogTail(40))
	}
}

// leaseRenewedSince returns an error unless a lease of the dep-ctrl
// workspace named name (or name-<shard>) was renewed after since.
func leaseRenewedSince(ctx context.Context, name string, since time.Time) error {
	leases := &coordinationv1.LeaseList{}
	if err := cli.Cluster(depCtrl).List(ctx, leases, client.InNamespace("default")); err != nil {
		return err
	}
	for _, l := range leases.Items {
		if (l.Name == name || strings.HasPrefix(l.Name, name+"-")) && l.Spec.RenewTime != nil && !l.Spec.RenewTime.Before(&metav1.MicroTime{Time: since}) {
			return nil
		}
	}
	return fmt.Errorf("no lease %s renewed since %s", name, since.Format(time.RFC3339Nano))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// restartWith restarts a process with other arguments (nil: the same).
func restartWith(p *kcpenv.Process, args []string) {
	GinkgoHelper()
	p.Stop()
	if args != nil {
		p.Args = args
	}
	Expect(p.Start()).To(Succeed())
	Eventually(p.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed(), "%s log:\n%s", p.Name, p.LogTail(40))
}

// withArg returns args with the flag's value replaced (or added).
func withArg(args []string, flag, value string) []string {
	out := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, flag+"=") })
	return append(out, flag+"="+value)
}

// faultScenarios registers the fault scenarios. Each runs with the sample
// rule in place, counts the answers to deletes of referenced VPCs, and
// asserts that none of them was deleted.
func faultScenarios() {
	It("faults: protects again with the sample rule for the fault scenarios", func(ctx context.Context) {
		Expect(client.IgnoreAlreadyExists(cli.Cluster(compute).Create(ctx, sampleRule()))).To(Succeed())
		expectConfigInstalled(ctx)
	})

	It("faults: loses no referenced object while kcp (every shard) restarts under a loop of deletes", func(ctx context.Context) {
		targets := makePairs(ctx, "fault-kcp", 10)
		t := &tally{}
		stop := deleteLoop(ctx, targets, 4, t)
		time.Sleep(2 * time.Second)
		By("restarting kcp: cache server, every shard, front-proxy")
		start := time.Now()
		Expect(topo.Restart(ctx)).To(Succeed())
		GinkgoWriter.Printf("kcp back after %s\n", time.Since(start).Round(time.Second))
		superviseLikeADeployment(ctx, time.Now())
		expectProtectedAgain(ctx, targets[0])
		expectProtectedAgain(ctx, targets[len(targets)-1])
		time.Sleep(3 * time.Second)
		finishScenario(ctx, "kcp restarted while deletes are retried", stop, targets, t)
		Expect(t.denied).NotTo(BeZero(), "no delete was decided at all")
	})

	It("faults: loses no referenced object when the webhook is killed with SIGKILL during 100 concurrent deletes", func(ctx context.Context) {
		targets := makePairs(ctx, "fault-webhook", 50)
		t := &tally{}
		stop := deleteLoop(ctx, targets, len(targets), t)
		time.Sleep(time.Second)
		By("killing the webhook")
		webhookProc.Kill()
		time.Sleep(2 * time.Second)
		By("starting it again")
		Expect(webhookProc.Start()).To(Succeed())
		Eventually(webhookProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		time.Sleep(2 * time.Second)
		finishScenario(ctx, "webhook killed (SIGKILL) during 100 concurrent deletes, restarted", stop, targets, t)
		Expect(t.denied).NotTo(BeZero())
	})

	It("faults: converges to exactly the desired configurations when the controller is killed while rules change", func(ctx context.Context) {
		targets := makePairs(ctx, "fault-controller", 10)
		t := &tally{}
		stop := deleteLoop(ctx, targets, 4, t)

		churn := func(round int) {
			name := fmt.Sprintf("churn-%d", round%4)
			r := sampleRule()
			r.Name = name
			r.Spec.Dependencies[0].FieldRef.Path = fmt.Sprintf(".spec.churn%d", round%3)
			// The webhook writes the rules' status meanwhile: retry on conflict.
			Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
				existing := &depv1alpha1.DependencyRule{}
				err := cli.Cluster(compute).Get(ctx, client.ObjectKey{Name: name}, existing)
				switch {
				case apierrors.IsNotFound(err):
					return cli.Cluster(compute).Create(ctx, r)
				case err != nil:
					return err
				case round%2 == 0:
					return client.IgnoreNotFound(cli.Cluster(compute).Delete(ctx, existing))
				default:
					existing.Spec = r.Spec
					return client.IgnoreNotFound(cli.Cluster(compute).Update(ctx, existing))
				}
			})).To(Succeed())
		}
		// A rule in the network workspace makes VirtualMachines protected
		// and VPCs dependents, so that both workspaces' configurations change.
		gateway := func(present bool) {
			r := gatewayRule("fault-gateway")
			if present {
				Expect(client.IgnoreAlreadyExists(cli.Cluster(network).Create(ctx, r))).To(Succeed())
			} else {
				Expect(client.IgnoreNotFound(cli.Cluster(network).Delete(ctx, r))).To(Succeed())
			}
		}
		for round := range 6 {
			churn(round)
		}
		gateway(true)
		// Installed for the gateway rule: a DELETE webhook for VMs in the
		// compute workspace and a CREATE/UPDATE webhook for VPCs in the
		// network workspace, which the restarted controller must remove.
		expectConfigurationsConverge(ctx)
		cfg, err := getConfigIn(ctx, network)
		Expect(err).NotTo(HaveOccurred())
		Expect(webhooksOf(cfg)).To(ContainSubstring(webhookconfig.ReferencesWebhookName))
		By("killing the controller while rules are created, edited and deleted")
		controllerProc.Kill()
		for round := 6; round < 15; round++ {
			churn(round)
			time.Sleep(100 * time.Millisecond)
		}
		gateway(false)
		churn(15)
		By("starting it again")
		Expect(controllerProc.Start()).To(Succeed())
		Eventually(controllerProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		start := time.Now()
		expectConfigurationsConverge(ctx)
		GinkgoWriter.Printf("configurations converged %s after the restart\n", time.Since(start).Round(100*time.Millisecond))
		finishScenario(ctx, "controller killed (SIGKILL) while rules change, restarted", stop, targets, t)

		for i := range 4 {
			r := &depv1alpha1.DependencyRule{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i)}}
			Expect(client.IgnoreNotFound(cli.Cluster(compute).Delete(ctx, r))).To(Succeed())
		}
		expectConfigurationsConverge(ctx)
	})

	It("faults: no longer protects a type whose rule was deleted while the webhook was down", func(ctx context.Context) {
		By("protecting VirtualMachines with a rule of the network provider")
		gateway := gatewayRule("fault-gateway-down")
		Expect(cli.Cluster(network).Create(ctx, gateway)).To(Succeed())
		create(ctx, consumerA, vm("gw-vm", "none"), object(vpcs, "gw-vpc", map[string]any{"gatewayVM": "gw-vm"}))
		t := &tally{}
		Eventually(func() error {
			return cli.Cluster(consumerA).Delete(ctx, vm("gw-vm", ""), client.DryRunAll)
		}).WithTimeout(timeout).WithPolling(interval).Should(MatchError(ContainSubstring("still referenced by VPC/default/gw-vpc")))
		t.record(cli.Cluster(consumerA).Delete(ctx, vm("gw-vm", ""), client.DryRunAll))

		By("deleting the rule while the webhook and the controller are down, so that kcp keeps calling the webhook")
		controllerProc.Stop()
		webhookProc.Kill()
		Expect(cli.Cluster(network).Delete(ctx, gateway)).To(Succeed())
		t.record(cli.Cluster(consumerA).Delete(ctx, vm("gw-vm", ""), client.DryRunAll))
		Expect(webhookProc.Start()).To(Succeed())
		Eventually(webhookProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		cfg, err := getConfigIn(ctx, compute)
		Expect(err).NotTo(HaveOccurred())
		Expect(webhooksOf(cfg)).To(ContainSubstring(webhookconfig.WebhookName), "kcp still calls the webhook for deletes of VirtualMachines")

		By("the restarted webhook allows the delete: it loaded the rules as they are")
		Eventually(func() error {
			return cli.Cluster(consumerA).Delete(ctx, vm("gw-vm", ""), client.DryRunAll)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		t.record(nil)
		Expect(controllerProc.Start()).To(Succeed())
		Eventually(controllerProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		expectConfigurationsConverge(ctx)
		report("rule deleted while the webhook was down (VMs no longer protected; the allowed delete is expected)", t, 0)
		Expect(t.allowed).To(Equal(1))
	})

	It("faults: loses no referenced object when one of two webhook replicas behind one URL is killed", func(ctx context.Context) {
		targets := makePairs(ctx, "fault-replicas", 10)
		By("starting a second replica and a proxy in front of both, and pointing the configurations at it")
		port, err := kcpenv.FreePort()
		Expect(err).NotTo(HaveOccurred())
		second := &kcpenv.Process{
			Name: "webhook-2", Binary: webhookProc.Binary, LogPath: filepath.Join(artifacts, "webhook-2.log"), HealthAddr: freeAddr(),
		}
		second.Args = withArg(withArg(webhookProc.Args, "--port", fmt.Sprint(port)), "--health-probe-bind-address", second.HealthAddr)
		Expect(second.Start()).To(Succeed())
		DeferCleanup(second.Stop)
		Eventually(second.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		firstAddr := "127.0.0.1:" + argValue(webhookProc.Args, "--port")
		proxy, err := kcpenv.StartProxy(firstAddr, fmt.Sprintf("127.0.0.1:%d", port))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Stop)
		directURL := argValue(controllerProc.Args, "--webhook-url")
		restartWith(controllerProc, withArg(controllerProc.Args, "--webhook-url", "https://"+proxy.Addr+"/validate"))
		Eventually(func(g Gomega) {
			cfg, err := getConfig(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(*cfg.Webhooks[0].ClientConfig.URL).To(HavePrefix("https://" + proxy.Addr + "/"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		t := &tally{}
		stop := deleteLoop(ctx, targets, 8, t)
		time.Sleep(2 * time.Second)
		By("killing the first replica")
		webhookProc.Kill()
		time.Sleep(4 * time.Second)
		finishScenario(ctx, "one of two webhook replicas behind one URL killed (SIGKILL)", stop, targets, t)
		t.lock.Lock()
		Expect(t.denied).To(BeNumerically(">", t.refused), "the surviving replica decides most deletes")
		t.lock.Unlock()

		By("going back to one replica at the direct URL")
		Expect(webhookProc.Start()).To(Succeed())
		Eventually(webhookProc.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		restartWith(controllerProc, withArg(controllerProc.Args, "--webhook-url", directURL))
		second.Stop()
		Eventually(func(g Gomega) {
			cfg, err := getConfig(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(*cfg.Webhooks[0].ClientConfig.URL).To(HavePrefix(directURL + "/"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		expectProtectedAgain(ctx, targets[0])
	})
}

// argValue returns the value of a --flag=value argument.
func argValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	Fail("no " + flag + " in " + strings.Join(args, " "))
	return ""
}
