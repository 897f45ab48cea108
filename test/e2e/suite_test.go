//go:build e2e

// Package e2e runs the built controller and webhook as separate processes,
// each with its own non-admin identity, against a kcp started from the built
// binaries with one shard (E2E_SHARD_CONFIG=single-shard) or two shards, a
// cache server and a front-proxy (multi-shard). Everything kcp-side is
// installed with `make deploy` and the samples, so the shipped manifests and
// RBAC are what is tested.
package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"
	"github.com/kcp-dev/multicluster-provider/envtest"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	"github.com/opendefensecloud/dependency-controller/test/helmchart"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

const (
	timeout  = 90 * time.Second
	interval = 250 * time.Millisecond
)

var (
	shardConfig string
	repo        = kcpenv.RepoRoot()
	// binDir holds the project's binaries (make build), kcpBinDir the kcp
	// binaries (kcpenv.BinDirEnv).
	binDir    = filepath.Join(repo, "bin")
	kcpBinDir = kcpenv.BinDir()
	artifacts string
	topo      *Topology
	cli       clusterclient.ClusterClient

	depCtrl   = logicalcluster.NewPath("root:dep-ctrl")
	network   = logicalcluster.NewPath("root:org:network-provider")
	compute   = logicalcluster.NewPath("root:compute-provider")
	consumerA = logicalcluster.NewPath("root:consumer-a")
	consumerB = logicalcluster.NewPath("root:consumer-b")

	controllerProc, webhookProc *kcpenv.Process
	// webhookKubeconfig holds the webhook's identity.
	webhookKubeconfig string
	// suiteSecrets are the Secrets an installation provides, by name and
	// key: the kubeconfigs of both identities and the webhook's serving
	// certificate.
	suiteSecrets map[string]map[string][]byte
	// webhookChartValues are the values the suite renders the chart with.
	webhookChartValues map[string]any
)

func TestE2E(t *testing.T) {
	shardConfig = os.Getenv("E2E_SHARD_CONFIG")
	if shardConfig == "" {
		shardConfig = "single-shard"
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "e2e on "+shardConfig+" kcp")
}

var _ = BeforeSuite(func(ctx context.Context) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))

	shards := map[string]int{"single-shard": 1, "multi-shard": 2}[shardConfig]
	Expect(shards).NotTo(BeZero(), "E2E_SHARD_CONFIG must be single-shard or multi-shard, not %q", shardConfig)

	artifacts = os.Getenv("E2E_ARTIFACTS")
	if artifacts == "" {
		artifacts = GinkgoT().TempDir()
	}
	artifacts = filepath.Join(artifacts, shardConfig)
	Expect(os.RemoveAll(artifacts)).To(Succeed())
	Expect(os.MkdirAll(artifacts, 0o755)).To(Succeed())
	GinkgoWriter.Printf("Artifacts (kcp state and logs, process logs) in %s\n", artifacts)

	By(fmt.Sprintf("starting kcp with %d shard(s)", shards))
	start := time.Now()
	var err error
	topo, err = StartTopology(ctx, GinkgoWriter, kcpBinDir, filepath.Join(artifacts, "kcp"), shards)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(topo.Stop)
	GinkgoWriter.Printf("kcp ready after %s\n", time.Since(start).Round(time.Second))

	adminCfg, err := topo.AdminConfig()
	Expect(err).NotTo(HaveOccurred())
	// The suite's own requests must not be throttled on the client side:
	// the race scenario sends thousands concurrently.
	adminCfg.QPS, adminCfg.Burst = 1000, 2000
	cli, err = clusterclient.New(adminCfg, client.Options{Scheme: kcpenv.NewScheme()})
	Expect(err).NotTo(HaveOccurred())

	By("deploying with make deploy")
	makeTarget("deploy", "KUBECONFIG="+topo.AdminKubeconfig, "DEPCTRL_WORKSPACE="+depCtrl.String())

	By("creating the provider and consumer workspaces")
	lastShard := topo.Shards[len(topo.Shards)-1].Name
	org, _ := network.Parent()
	for _, w := range []struct {
		path  logicalcluster.Path
		shard string
	}{{org, "root"}, {network, lastShard}, {compute, "root"}, {consumerA, "root"}, {consumerB, lastShard}} {
		parent, name := w.path.Split()
		envtest.NewWorkspaceFixture(GinkgoT(), cli, parent, envtest.WithName("%s", name), envtest.WithShard(w.shard))
	}

	By("applying the samples: provider APIs and their bindings to the dependency API")
	applySample(ctx, network, "network-provider/apiresourceschema-vpcs.yaml")
	applySample(ctx, network, "network-provider/apiexport.yaml")
	applySample(ctx, network, "network-provider/apibinding-dependencies.yaml")
	applySample(ctx, network, "network-provider/webhook-access.yaml")
	applySample(ctx, compute, "compute-provider/apiresourceschema-virtualmachines.yaml")
	applySample(ctx, compute, "compute-provider/apiexport.yaml")
	applySample(ctx, compute, "compute-provider/apibinding-dependencies.yaml")
	applySample(ctx, compute, "compute-provider/webhook-access.yaml")
	for _, c := range []logicalcluster.Path{consumerA, consumerB} {
		applySample(ctx, c, "consumer/apibindings.yaml")
	}
	for _, ws := range []logicalcluster.Path{network, compute, consumerA, consumerB} {
		waitBound(ctx, ws)
	}

	By("starting the webhook and the controller with their own identities, with the arguments the Helm chart renders")
	servingDir := filepath.Join(artifacts, "serving-cert")
	ca, err := kcpenv.WriteServingCerts(servingDir, "127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	webhookPort, err := kcpenv.FreePort()
	Expect(err).NotTo(HaveOccurred())
	webhookKubeconfig = filepath.Join(artifacts, "webhook.kubeconfig")
	Expect(topo.WriteUserKubeconfig("dependency-webhook", depCtrl.String(), webhookKubeconfig)).To(Succeed())
	controllerKubeconfig := filepath.Join(artifacts, "controller.kubeconfig")
	Expect(topo.WriteUserKubeconfig("dependency-controller", depCtrl.String(), controllerKubeconfig)).To(Succeed())
	// The Secrets an installation provides: the kubeconfigs of both
	// identities (from kcp-operator) and the webhook's serving certificate.
	suiteSecrets = map[string]map[string][]byte{
		"dependency-controller-kubeconfig": {"kubeconfig": mustRead(controllerKubeconfig)},
		"dependency-webhook-kubeconfig":    {"kubeconfig": mustRead(webhookKubeconfig)},
		"webhook-serving-cert": {
			"tls.crt": mustRead(filepath.Join(servingDir, "tls.crt")), "tls.key": mustRead(filepath.Join(servingDir, "tls.key")), "ca.crt": ca,
		},
	}
	webhookHealth, controllerHealth := freeAddr(), freeAddr()
	webhookChartValues = chartValues(webhookPort, webhookHealth, controllerHealth)
	bins, err := helmchart.RenderBinaries(context.Background(), helmchart.Options{Values: webhookChartValues})
	Expect(err).NotTo(HaveOccurred())
	// The Secrets the chart generates (the record keys): rendered once,
	// as an installation keeps them.
	for name, data := range bins.Secrets {
		if _, ok := suiteSecrets[name]; !ok {
			suiteSecrets[name] = data
		}
	}
	Expect(err).NotTo(HaveOccurred())
	webhookProc = &kcpenv.Process{
		Name: "webhook", Binary: filepath.Join(binDir, "webhook"), LogPath: filepath.Join(artifacts, "webhook.log"),
		HealthAddr: webhookHealth, Args: localArgs(bins.Webhook, suiteSecrets),
	}
	controllerProc = &kcpenv.Process{
		Name: "controller", Binary: filepath.Join(binDir, "controller"), LogPath: filepath.Join(artifacts, "controller.log"),
		HealthAddr: controllerHealth, Args: localArgs(bins.Controller, suiteSecrets),
	}
	GinkgoWriter.Printf("webhook args: %q\ncontroller args: %q\n", webhookProc.Args, controllerProc.Args)
	for _, p := range []*kcpenv.Process{webhookProc, controllerProc} {
		Expect(p.Start()).To(Succeed())
		DeferCleanup(p.Stop)
		Eventually(p.Ready).WithTimeout(timeout).WithPolling(interval).Should(Succeed(), "%s log:\n%s", p.Name, p.LogTail(40))
	}
})

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() {
		for _, p := range []*kcpenv.Process{controllerProc, webhookProc} {
			if p != nil {
				AddReportEntry(p.Name+" log", p.LogTail(60))
			}
		}
	}
})

// ReportAfterSuite writes each failure in brief (the spec, where it failed,
// and the start of the message, one line each) to failures.txt in the
// artifacts, which make test-e2e prints last when the suite fails: the
// lines a CI log shows when it keeps only its end.
var _ = ReportAfterSuite("failures in brief", func(report Report) {
	if artifacts == "" {
		return
	}
	var b strings.Builder
	for _, spec := range report.SpecReports {
		if !spec.Failed() {
			continue
		}
		msg := strings.Join(strings.Fields(spec.Failure.Message), " ")
		if len(msg) > 1500 {
			msg = msg[:1500] + " ..."
		}
		fmt.Fprintf(&b, "[%s] %s\n  at %s\n  %s\n", spec.State, spec.FullText(), spec.Failure.Location, msg)
	}
	Expect(os.WriteFile(filepath.Join(artifacts, "failures.txt"), []byte(b.String()), 0o644)).To(Succeed())
})

// makeTarget runs a make target of the repository with extra variables.
func makeTarget(target string, vars ...string) {
	GinkgoHelper()
	cmd := exec.Command("make", append([]string{"-C", repo, target}, vars...)...)
	out, err := cmd.CombinedOutput()
	GinkgoWriter.Printf("make %s:\n%s\n", target, out)
	Expect(err).NotTo(HaveOccurred(), "make %s failed:\n%s", target, out)
}

// applySample applies a file from config/samples into ws, with workspace
// paths in references adjusted to this suite's workspaces.
func applySample(ctx context.Context, ws logicalcluster.Path, file string) {
	GinkgoHelper()
	objs := readSample(file)
	Eventually(func() error { return kcpenv.Apply(ctx, cli.Cluster(ws), objs...) }).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

// readSample reads a file from config/samples, with workspace paths adjusted.
func readSample(file string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := kcpenv.ReadYAMLFile(filepath.Join(repo, "config", "samples", file))
	Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		adjustPaths(o.Object)
	}
	return objs
}

// adjustPaths rewrites the sample's workspace paths (root:network-provider,
// root:compute-provider) to the suite's.
func adjustPaths(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && k == "path" {
				switch s {
				case "root:network-provider":
					x[k] = network.String()
				case "root:compute-provider":
					x[k] = compute.String()
				}
				continue
			}
			adjustPaths(val)
		}
	case []any:
		for _, e := range x {
			adjustPaths(e)
		}
	}
}

func waitBound(ctx context.Context, ws logicalcluster.Path) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		list := &apisv1alpha2.APIBindingList{}
		g.Expect(cli.Cluster(ws).List(ctx, list)).To(Succeed())
		g.Expect(list.Items).NotTo(BeEmpty())
		for _, b := range list.Items {
			g.Expect(b.Status.Phase).To(Equal(apisv1alpha2.APIBindingPhaseBound), "APIBinding %s in %s", b.Name, ws)
		}
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
}

func freeAddr() string {
	port, err := kcpenv.FreePort()
	Expect(err).NotTo(HaveOccurred())
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// chartValues are the values with which the suite renders the Helm chart:
// what an installation sets (the webhook's URL as kcp reaches it, the
// serving certificate from a Secret), with the ports of this machine, and a
// short resync so that the suite need not wait for repairs.
func chartValues(webhookPort int, webhookHealth, controllerHealth string) map[string]any {
	port := func(addr string) int {
		_, p, err := net.SplitHostPort(addr)
		Expect(err).NotTo(HaveOccurred())
		n, err := strconv.Atoi(p)
		Expect(err).NotTo(HaveOccurred())
		return n
	}
	return map[string]any{
		"metrics": map[string]any{"enabled": false},
		// Every decision in the logs of the artifacts.
		"logging": map[string]any{"level": "debug"},
		"tls":     map[string]any{"mode": "secret", "secret": map[string]any{"name": "webhook-serving-cert"}},
		"controller": map[string]any{
			"webhookURL": fmt.Sprintf("https://127.0.0.1:%d/validate", webhookPort),
			"healthPort": port(controllerHealth),
		},
		"webhook": map[string]any{
			"bindAddress": "127.0.0.1", "port": webhookPort, "healthPort": port(webhookHealth), "resyncPeriod": "1m",
			// Objects are cleared within seconds of becoming clearable.
			"clearanceInterval": "2s",
		},
	}
}

// localArgs returns the chart's arguments of a binary with the files of its
// mounted Secrets written to the artifacts directory, from secrets (Secret
// name -> key -> content), and their paths in the arguments pointing there.
func localArgs(inv helmchart.Invocation, secrets map[string]map[string][]byte) []string {
	GinkgoHelper()
	args, err := inv.LocalArgs(func(m helmchart.Mount) (string, error) {
		data, ok := secrets[m.Name]
		if m.Kind != "Secret" || !ok {
			return "", fmt.Errorf("the suite provides no %s %s", m.Kind, m.Name)
		}
		dir := filepath.Join(artifacts, "mounts", m.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
		files := m.Files
		if files == nil {
			files = map[string]string{}
			for key := range data {
				files[key] = key
			}
		}
		for file, key := range files {
			content, ok := data[key]
			if !ok {
				return "", fmt.Errorf("the suite's Secret %s has no key %q", m.Name, key)
			}
			if err := os.WriteFile(filepath.Join(dir, file), content, 0o600); err != nil {
				return "", err
			}
		}
		return dir, nil
	})
	Expect(err).NotTo(HaveOccurred())
	return args
}

func mustRead(path string) []byte {
	GinkgoHelper()
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	return data
}
