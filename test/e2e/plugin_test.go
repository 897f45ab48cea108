//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// pluginNamespace holds the objects of the plugin's scenarios.
const pluginNamespace = "plugin"

// pluginKubeconfig writes a kubeconfig for the workspace ws with the suite's
// admin identity, through the front-proxy, with the plugin's namespace as
// the context's namespace, and returns its path.
func pluginKubeconfig(ws logicalcluster.Path) string {
	GinkgoHelper()
	cfg, err := clientcmd.LoadFromFile(topo.AdminKubeconfig)
	Expect(err).NotTo(HaveOccurred())
	ctx := cfg.Contexts["base"]
	Expect(ctx).NotTo(BeNil(), "the admin kubeconfig has a context base")
	cfg.Clusters[ctx.Cluster].Server = FrontProxyURL + ws.RequestPath()
	ctx.Namespace = pluginNamespace
	cfg.CurrentContext = "base"
	path := filepath.Join(artifacts, "plugin-"+ws.Base()+".kubeconfig")
	Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
	return path
}

// pluginRun is one run of the plugin binary.
type pluginRun struct {
	code           int
	stdout, stderr string
}

// runPlugin runs bin/kubectl-dependencies (built by make build) with the
// kubeconfig and args, as a user does.
func runPlugin(ctx context.Context, kubeconfig string, args ...string) pluginRun {
	GinkgoHelper()
	args = append([]string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(artifacts, "plugin-cache")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "kubectl-dependencies"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := pluginRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		r.code = exit.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred(), "running kubectl-dependencies")
	}
	GinkgoWriter.Printf("$ kubectl dependencies %s\n%s%s(exit %d)\n", strings.Join(args[2:], " "), r.stdout, r.stderr, r.code)
	return r
}

// pluginJSON runs the plugin with -o json and decodes its output into v.
func pluginJSON(ctx context.Context, kubeconfig string, v any, args ...string) int {
	GinkgoHelper()
	r := runPlugin(ctx, kubeconfig, append(args, "-o", "json")...)
	Expect(json.Unmarshal([]byte(r.stdout), v)).To(Succeed(), "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	return r.code
}

// inNamespace returns obj in namespace ns.
func inNamespace(ns string, obj *unstructured.Unstructured) *unstructured.Unstructured {
	obj.SetNamespace(ns)
	return obj
}

// ensureNamespace creates a namespace in ws if it does not exist.
func ensureNamespace(ctx context.Context, ws logicalcluster.Path, name string) {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	Expect(client.IgnoreAlreadyExists(cli.Cluster(ws).Create(ctx, ns))).To(Succeed())
}

// waitLabelled waits until the object carries the reference label of
// each of refs (group/resource/name, as reflabels.Key takes them).
func waitLabelled(ctx context.Context, ws logicalcluster.Path, obj *unstructured.Unstructured, keys ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := obj.DeepCopy()
		g.Expect(cli.Cluster(ws).Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		for _, k := range keys {
			g.Expect(got.GetLabels()).To(HaveKey(k), "%s/%s", got.GetKind(), got.GetName())
		}
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// whyOutput is what `why -o json` prints.
type whyOutput struct {
	Verdict  string `json:"verdict"`
	Total    int    `json:"total"`
	Blockers []struct {
		Kind, Namespace, Name, Rule, Path string
	} `json:"blockers"`
}

// refsOutput is what `refs -o json` prints.
type refsOutput struct {
	Exists       bool `json:"exists"`
	ReferencedBy []struct {
		Kind, Resource, Namespace, Name string
	} `json:"referencedBy"`
	Types int `json:"types"`
}

// orderOutput is what `order -o json` prints.
type orderOutput struct {
	Waves []struct {
		Wave    int `json:"wave"`
		Objects []struct {
			Kind, Resource, Namespace, Name string
			Cycle                           int
		} `json:"objects"`
	} `json:"waves"`
	Cycles []struct {
		Cycle   int `json:"cycle"`
		Objects []struct {
			Kind, Namespace, Name string
		} `json:"objects"`
	} `json:"cycles"`
}

// waveNames renders the waves of order as "Kind/name" lists.
func (o orderOutput) waveNames() [][]string {
	var out [][]string
	for _, w := range o.Waves {
		var names []string
		for _, obj := range w.Objects {
			names = append(names, obj.Kind+"/"+obj.Name)
		}
		out = append(out, names)
	}
	return out
}

// pluginScenarios registers the scenarios of the kubectl plugin: the
// binary of make build, run with a kubeconfig of a consumer workspace, as
// a user runs it. Each runs with the sample rule in place.
func pluginScenarios() {
	It("plugin: why answers ALLOWED, BLOCKED with every blocker (beyond the 10 of the message) and WOULD BE DEFERRED under a Replay rule", func(ctx context.Context) {
		Expect(client.IgnoreAlreadyExists(cli.Cluster(compute).Create(ctx, sampleRule()))).To(Succeed())
		expectConfigInstalled(ctx)
		ensureNamespace(ctx, consumerA, pluginNamespace)
		kubeconfig := pluginKubeconfig(consumerA)

		var objs []*unstructured.Unstructured
		objs = append(objs, inNamespace(pluginNamespace, vpc("vpc-why")), inNamespace(pluginNamespace, vpc("vpc-free")))
		for i := range 12 {
			objs = append(objs, inNamespace(pluginNamespace, vm(fmt.Sprintf("vm-why-%02d", i), "vpc-why")))
		}
		create(ctx, consumerA, objs...)

		By("BLOCKED, naming all 12 blockers with their rule and path, though the message names 10")
		Eventually(func(g Gomega) {
			var out whyOutput
			g.Expect(pluginJSON(ctx, kubeconfig, &out, "why", "vpc/vpc-why")).To(Equal(1))
			g.Expect(out.Verdict).To(Equal("Blocked"))
			g.Expect(out.Total).To(Equal(12))
			g.Expect(out.Blockers).To(HaveLen(12))
			for i, b := range out.Blockers {
				g.Expect(b.Kind).To(Equal("VirtualMachine"))
				g.Expect(b.Namespace).To(Equal(pluginNamespace))
				g.Expect(b.Name).To(Equal(fmt.Sprintf("vm-why-%02d", i)))
				g.Expect(b.Rule).To(HaveSuffix("/vm-dependencies"))
				g.Expect(b.Path).To(ContainSubstring(".spec.vpcRef.name"))
			}
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		r := runPlugin(ctx, kubeconfig, "why", "vpcs.network.test.io", "vpc-why")
		Expect(r.code).To(Equal(1))
		Expect(r.stdout).To(HavePrefix(`BLOCKED: vpcs.network.test.io "vpc-why" in namespace "plugin" is still referenced by 12 objects` + "\n"))
		// The rule has another path after the earlier specs: ".spec.nics[*].vpc or .spec.vpcRef.name".
		Expect(r.stdout).To(MatchRegexp(`VirtualMachine\s+plugin\s+vm-why-11\s+\S+/vm-dependencies\s+.*\.spec\.vpcRef\.name\n`))

		By("ALLOWED for a VPC nothing references, and the dry run deleted nothing")
		r = runPlugin(ctx, kubeconfig, "why", "VPC/vpc-free")
		Expect(r.code).To(Equal(0))
		Expect(r.stdout).To(Equal(`ALLOWED: deleting vpcs.network.test.io "vpc-free" in namespace "plugin" would be admitted now (dry run)` + "\n"))
		Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKeyFromObject(objs[1]), objs[1].DeepCopy())).To(Succeed())

		By("exit code 2 for an object that does not exist")
		r = runPlugin(ctx, kubeconfig, "why", "vpc/vpc-none")
		Expect(r.code).To(Equal(2))
		Expect(r.stderr).To(ContainSubstring(`"vpc-none" not found`))

		By("WOULD BE DEFERRED under a Replay rule, with the blockers, and nothing recorded")
		updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.DeletionPolicy = depv1alpha1.DeletionPolicyReplay })
		DeferCleanup(func(ctx context.Context) {
			updateRule(ctx, func(r *depv1alpha1.DependencyRule) { r.Spec.DeletionPolicy = "" })
		})
		Eventually(func(g Gomega) {
			var out whyOutput
			g.Expect(pluginJSON(ctx, kubeconfig, &out, "why", "vpc/vpc-why")).To(Equal(1))
			g.Expect(out.Verdict).To(Equal("WouldBeDeferred"))
			g.Expect(out.Blockers).To(HaveLen(12))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		r = runPlugin(ctx, kubeconfig, "why", "vpc/vpc-why")
		Expect(r.stdout).To(HavePrefix("WOULD BE DEFERRED: "))
		got := vpc("vpc-why")
		Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKey{Namespace: pluginNamespace, Name: "vpc-why"}, got)).To(Succeed())
		Expect(got.GetLabels()).NotTo(HaveKey(depv1alpha1.LabelDeletionRequested), "a dry run records nothing")
	})

	It("plugin: refs lists what references a VPC from the reference labels, in consumers on every shard", func(ctx context.Context) {
		for _, ws := range []logicalcluster.Path{consumerA, consumerB} {
			ensureNamespace(ctx, ws, pluginNamespace)
			ensureNamespace(ctx, ws, "plugin-other")
			kubeconfig := pluginKubeconfig(ws)
			vms := []*unstructured.Unstructured{
				inNamespace(pluginNamespace, vm("vm-refs-1", "vpc-refs")), inNamespace(pluginNamespace, vm("vm-refs-2", "vpc-refs")),
				// Another namespace's VPC of the same name: not this one.
				inNamespace("plugin-other", vm("vm-refs-other", "vpc-refs")),
			}
			create(ctx, ws, append([]*unstructured.Unstructured{inNamespace(pluginNamespace, vpc("vpc-refs")), inNamespace(pluginNamespace, vpc("vpc-alone"))}, vms...)...)
			for _, v := range vms {
				waitLabelled(ctx, ws, v, reflabels.Key(vpcs.GroupResource(), "vpc-refs"))
			}

			var out refsOutput
			Expect(pluginJSON(ctx, kubeconfig, &out, "refs", "vpc/vpc-refs")).To(Equal(1), "in %s", ws)
			Expect(out.Exists).To(BeTrue())
			var names []string
			for _, o := range out.ReferencedBy {
				names = append(names, o.Kind+"/"+o.Namespace+"/"+o.Name)
			}
			Expect(names).To(Equal([]string{"VirtualMachine/plugin/vm-refs-1", "VirtualMachine/plugin/vm-refs-2"}), "in %s", ws)

			r := runPlugin(ctx, kubeconfig, "refs", "vpcs/vpc-refs")
			Expect(r.code).To(Equal(1))
			// A note may follow while the webhook relabels the VMs after
			// the rule changes of earlier specs.
			Expect(r.stdout).To(MatchRegexp(`^KIND\s+NAMESPACE\s+NAME\nVirtualMachine\s+plugin\s+vm-refs-1\nVirtualMachine\s+plugin\s+vm-refs-2\n2 objects reference vpcs.network.test.io "vpc-refs" in namespace "plugin" \(read the reference labels of the objects of \d+ types that the workspace binds or defines\)\.\n`))

			// Exit code 0 once no VM waits to be relabelled (after the rule
			// changes of earlier specs).
			Eventually(func(g Gomega) {
				r := runPlugin(ctx, kubeconfig, "refs", "vpc", "vpc-alone")
				g.Expect(r.stdout).To(HavePrefix(`No object references vpcs.network.test.io "vpc-alone" in namespace "plugin"`))
				g.Expect(r.code).To(Equal(0), "in %s", ws)
			}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		}
	})

	It("plugin: order puts a three-level stack in waves that delete without a refusal, and reports a cycle", func(ctx context.Context) {
		By("a rule of the network provider: a VPC references its gateway VirtualMachine")
		gateway := gatewayRule("plugin-gateways")
		Expect(cli.Cluster(network).Create(ctx, gateway)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cli.Cluster(network).Delete(ctx, gateway))).To(Succeed())
			expectConfigurationsConverge(ctx)
		})
		expectConfigurationsConverge(ctx)

		const stackNS, cycleNS = "plugin-stack", "plugin-cycle"
		ensureNamespace(ctx, consumerA, stackNS)
		ensureNamespace(ctx, consumerA, cycleNS)
		kubeconfig := pluginKubeconfig(consumerA)
		gw := inNamespace(stackNS, vm("gw-a", "vpc-uplink"))
		vpcA := inNamespace(stackNS, object(vpcs, "vpc-a", map[string]any{"gatewayVM": "gw-a"}))
		vm1, vm2 := inNamespace(stackNS, vm("vm-1", "vpc-a")), inNamespace(stackNS, vm("vm-2", "vpc-a"))
		create(ctx, consumerA, gw, vpcA, vm1, vm2)
		cycleVPC := inNamespace(cycleNS, object(vpcs, "vpc-x", map[string]any{"gatewayVM": "gw-x"}))
		cycleVM := inNamespace(cycleNS, vm("gw-x", "vpc-x"))
		create(ctx, consumerA, cycleVPC, cycleVM)
		waitLabelled(ctx, consumerA, vpcA, reflabels.Key(vms.GroupResource(), "gw-a"))
		waitLabelled(ctx, consumerA, cycleVPC, reflabels.Key(vms.GroupResource(), "gw-x"))
		waitLabelled(ctx, consumerA, vm1, reflabels.Key(vpcs.GroupResource(), "vpc-a"))

		By("the waves: the VMs, then the VPC, then its gateway VM")
		var plan orderOutput
		Expect(pluginJSON(ctx, kubeconfig, &plan, "order", "vpcs,virtualmachines", "-n", stackNS)).To(Equal(0))
		Expect(plan.waveNames()).To(Equal([][]string{{"VirtualMachine/vm-1", "VirtualMachine/vm-2"}, {"VPC/vpc-a"}, {"VirtualMachine/gw-a"}}))
		Expect(plan.Cycles).To(BeEmpty())
		r := runPlugin(ctx, kubeconfig, "order", "vpc,virtualmachine", "-n", stackNS)
		Expect(r.code).To(Equal(0))
		Expect(r.stdout).To(MatchRegexp(`^WAVE\s+KIND\s+NAMESPACE\s+NAME\n1\s+VirtualMachine\s+plugin-stack\s+vm-1\n1\s+VirtualMachine\s+plugin-stack\s+vm-2\n2\s+VPC\s+plugin-stack\s+vpc-a\n3\s+VirtualMachine\s+plugin-stack\s+gw-a\n4 objects in 3 waves`))

		By("the same order from the manifests")
		manifests := filepath.Join(artifacts, "plugin-stack.yaml")
		var docs []string
		for _, o := range []*unstructured.Unstructured{vm1, vm2, vpcA, gw} {
			data, err := json.Marshal(o.Object)
			Expect(err).NotTo(HaveOccurred())
			docs = append(docs, string(data))
		}
		Expect(os.WriteFile(manifests, []byte(strings.Join(docs, "\n---\n")), 0o600)).To(Succeed())
		var fromFiles orderOutput
		Expect(pluginJSON(ctx, kubeconfig, &fromFiles, "order", "-f", manifests)).To(Equal(0))
		Expect(fromFiles.waveNames()).To(Equal(plan.waveNames()))

		By("a cycle: exit code 1, one wave, both objects named")
		var cyc orderOutput
		Expect(pluginJSON(ctx, kubeconfig, &cyc, "order", "vpcs,virtualmachines", "-n", cycleNS)).To(Equal(1))
		Expect(cyc.Cycles).To(HaveLen(1))
		Expect(cyc.Cycles[0].Objects).To(HaveLen(2))
		r = runPlugin(ctx, kubeconfig, "order", "vpcs,virtualmachines", "-n", cycleNS)
		Expect(r.stdout).To(ContainSubstring("Cycle 1 (wave 1): VPC/plugin-cycle/vpc-x, VirtualMachine/plugin-cycle/gw-x reference each other"))

		By("deleting wave after wave, as a script does: no DELETE meets a dependent")
		byName := map[string]*unstructured.Unstructured{"vm-1": vm1, "vm-2": vm2, "vpc-a": vpcA, "gw-a": gw}
		var earlier []string
		retries := 0
		for _, w := range plan.Waves {
			for _, o := range w.Objects {
				obj := byName[o.Name]
				Expect(obj).NotTo(BeNil(), o.Name)
				// The webhook's index sees a deletion milliseconds after it
				// returned: a refusal may name objects of earlier waves only.
				Eventually(func() error {
					err := cli.Cluster(consumerA).Delete(ctx, obj.DeepCopy())
					if err == nil || apierrors.IsNotFound(err) {
						return nil
					}
					for _, name := range earlier {
						if strings.Contains(err.Error(), "/"+stackNS+"/"+name) {
							retries++
							return err
						}
					}
					return StopTrying(fmt.Sprintf("deleting %s in wave %d", o.Name, w.Wave)).Wrap(err)
				}).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
			}
			for _, o := range w.Objects {
				earlier = append(earlier, o.Name)
			}
		}
		GinkgoWriter.Printf("deleted the stack in %d waves; %d DELETEs were refused while the index caught up\n", len(plan.Waves), retries)
		var left orderOutput
		Expect(pluginJSON(ctx, kubeconfig, &left, "order", "vpcs,virtualmachines", "-n", stackNS)).To(Equal(0))
		Expect(left.Waves).To(BeEmpty())
	})

	It("plugin: dangling lists the DanglingReference Events whose dependent still references a missing object (Events created by the spec)", func(ctx context.Context) {
		ensureNamespace(ctx, consumerA, pluginNamespace)
		kubeconfig := pluginKubeconfig(consumerA)
		dangler := inNamespace(pluginNamespace, vm("vm-dangling", "vpc-missing"))
		resolved := inNamespace(pluginNamespace, vm("vm-resolved", "vpc-free"))
		create(ctx, consumerA, dangler, resolved)
		waitLabelled(ctx, consumerA, dangler, reflabels.Key(vpcs.GroupResource(), "vpc-missing"))
		for _, o := range []*unstructured.Unstructured{dangler, resolved} {
			Expect(cli.Cluster(consumerA).Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
			target := o.Object["spec"].(map[string]any)["vpcRef"].(map[string]any)["name"].(string)
			now := metav1.Now()
			ev := &corev1.Event{
				ObjectMeta: metav1.ObjectMeta{GenerateName: o.GetName() + ".", Namespace: pluginNamespace},
				InvolvedObject: corev1.ObjectReference{
					APIVersion: vms.GroupVersion().String(), Kind: "VirtualMachine", Namespace: pluginNamespace, Name: o.GetName(), UID: o.GetUID(),
				},
				Type: corev1.EventTypeWarning, Reason: depv1alpha1.EventReasonDanglingReference,
				Message: fmt.Sprintf(`VirtualMachine/%s/%s references vpcs.network.test.io %q in namespace %q, which does not exist`, pluginNamespace, o.GetName(), target, pluginNamespace),
				Source:  corev1.EventSource{Component: "dependency-webhook"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
			}
			Expect(cli.Cluster(consumerA).Create(ctx, ev)).To(Succeed())
		}

		r := runPlugin(ctx, kubeconfig, "dangling")
		Expect(r.code).To(Equal(1))
		Expect(r.stdout).To(MatchRegexp(`^KIND\s+NAMESPACE\s+NAME\s+REFERENCE\s+AGE\nVirtualMachine\s+plugin\s+vm-dangling\s+vpcs.network.test.io/vpc-missing in plugin\s+\d+s\n1 object references objects that do not exist \(1 reported earlier no longer dangle\)\.\n$`))

		By("none once the missing VPC exists")
		create(ctx, consumerA, inNamespace(pluginNamespace, vpc("vpc-missing")))
		r = runPlugin(ctx, kubeconfig, "dangling")
		Expect(r.code).To(Equal(0))
		Expect(r.stdout).To(HavePrefix("No dangling references reported"))
	})
}
