// Package procenv starts what the perf and soak tests run against: a
// single-shard kcp with a network provider (VPCs and Subnets), a compute
// provider (VirtualMachines), consumer workspaces binding both, and the
// controller and the webhook built by `make build` running as processes,
// each with its own identity and the RBAC that `make deploy` gives it.
//
// The binaries are taken from DEPCTRL_BIN_DIR, or bin/ at the repository
// root when it is unset (a long run can build them into a directory of its
// own, so that a rebuild of bin/ meanwhile does not change what it starts).
package procenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// BinDirEnv names the environment variable with the directory of the
// controller and webhook binaries.
const BinDirEnv = "DEPCTRL_BIN_DIR"

// The resources of the test providers.
var (
	VPCs    = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"}
	Subnets = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "subnets"}
	VMs     = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "virtualmachines"}
	// Kinds are the kinds of the test resources, by resource.
	Kinds = map[string]string{VPCs.Resource: "VPC", Subnets.Resource: "Subnet", VMs.Resource: "VirtualMachine"}
)

// Options say what Start creates.
type Options struct {
	// Consumers are the name prefixes of the consumer workspaces, each of
	// which binds both providers; one "consumer" if empty.
	Consumers []string
	// WebhookArgs are added to the webhook's arguments.
	WebhookArgs []string
}

// Env is the running installation.
type Env struct {
	// Kcp is the kcp server.
	Kcp *kcpenv.Env
	// Config is an admin config without a workspace, with a high rate
	// limit (QPS 2000, burst 4000).
	Config *rest.Config
	// Cli is an admin client for every workspace, with Config's limits.
	Cli clusterclient.ClusterClient
	// DepCtrl, Network and Compute are the workspaces of the dependencies
	// APIExport and of the two providers.
	DepCtrl, Network, Compute logicalcluster.Path
	// Clusters are the logical clusters of the provider workspaces, by path.
	Clusters map[string]logicalcluster.Name
	// Consumers are the consumer workspaces, in the order of
	// Options.Consumers.
	Consumers []*Consumer
	// Webhook and Controller are the processes.
	Webhook, Controller *kcpenv.Process
	// WebhookMetrics and ControllerMetrics are the URLs of their metrics.
	WebhookMetrics, ControllerMetrics string
	// Dir holds kubeconfigs, certificates and the processes' logs.
	Dir string
}

// Consumer is a consumer workspace.
type Consumer struct {
	Path logicalcluster.Path
	// Config is an admin config for the workspace.
	Config *rest.Config
	// Dyn is a dynamic client for the workspace.
	Dyn dynamic.Interface
	// Raw is a client for the workspace that returns raw responses.
	Raw *rest.RESTClient
	// Kubeconfig is the path of an admin kubeconfig for the workspace.
	Kubeconfig string
}

// BinDir returns the directory of the controller and webhook binaries.
func BinDir() string {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir
	}
	return filepath.Join(kcpenv.RepoRoot(), "bin")
}

// Start starts kcp, installs the topology and starts the webhook and the
// controller. The network provider grants the webhook access to read,
// record and replay, the compute provider to read (the samples'
// webhook-access.yaml). Everything is stopped when the test ends.
//
// The webhook and the controller are the only replicas, so they need no
// election. The webhook signs records with a key of its own, and looks for
// unlabelled dependents every 2s (production: 30s).
func Start(ctx context.Context, t testing.TB, opts Options) *Env {
	t.Helper()
	if len(opts.Consumers) == 0 {
		opts.Consumers = []string{"consumer"}
	}
	kcp, err := kcpenv.Start()
	must(t, err)
	t.Cleanup(func() { _ = kcp.Stop() })
	cfg := rest.CopyConfig(kcp.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	cli, err := clusterclient.New(cfg, client.Options{Scheme: kcpenv.NewScheme()})
	must(t, err)
	e := &Env{Kcp: kcp, Config: cfg, Cli: cli, Dir: t.TempDir()}

	root := core.RootCluster.Path()
	_, e.DepCtrl = envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix("dep-ctrl"))
	must(t, kcpenv.InstallDependencyAPI(ctx, cli.Cluster(e.DepCtrl)))
	for _, dir := range []string{"config/rbac/webhook", "config/rbac/controller"} {
		rbac, err := kcpenv.LoadManifests(dir)
		must(t, err)
		must(t, kcpenv.Apply(ctx, cli.Cluster(e.DepCtrl), rbac...))
	}
	networkWS, network := envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix("network"))
	must(t, kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), VPCs.Group,
		kcpenv.Resource{Kind: Kinds[VPCs.Resource], Plural: VPCs.Resource}, kcpenv.Resource{Kind: Kinds[Subnets.Resource], Plural: Subnets.Resource}))
	computeWS, compute := envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix("compute"))
	must(t, kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), VMs.Group, kcpenv.Resource{Kind: Kinds[VMs.Resource], Plural: VMs.Resource}))
	for _, p := range []struct {
		path     logicalcluster.Path
		provider string
	}{{network, "network-provider"}, {compute, "compute-provider"}} {
		grant, err := kcpenv.ReadYAMLFile(filepath.Join(kcpenv.RepoRoot(), "config/samples", p.provider, "webhook-access.yaml"))
		must(t, err)
		must(t, kcpenv.Apply(ctx, cli.Cluster(p.path), grant...))
	}
	for _, p := range []logicalcluster.Path{network, compute} {
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(p), cli.Cluster(e.DepCtrl), e.DepCtrl, kcpenv.DepCtrlExportName)
		must(t, err)
	}
	e.Network, e.Compute = network, compute
	e.Clusters = map[string]logicalcluster.Name{
		network.String(): logicalcluster.Name(networkWS.Spec.Cluster), compute.String(): logicalcluster.Name(computeWS.Spec.Cluster),
	}
	for _, prefix := range opts.Consumers {
		_, path := envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix(prefix))
		for _, p := range []struct {
			path logicalcluster.Path
			name string
		}{{network, VPCs.Group}, {compute, VMs.Group}} {
			_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(path), cli.Cluster(p.path), p.path, p.name)
			must(t, err)
		}
		e.Consumers = append(e.Consumers, e.consumer(t, path))
	}

	kubeconfig := func(name string) string {
		user, err := kcp.AddUser(name)
		must(t, err)
		user.Host += e.DepCtrl.RequestPath()
		path := filepath.Join(e.Dir, name+".kubeconfig")
		WriteKubeconfig(t, path, user)
		return path
	}
	certs := filepath.Join(e.Dir, "certs")
	ca, err := kcpenv.WriteServingCerts(certs, "127.0.0.1")
	must(t, err)
	caFile := filepath.Join(e.Dir, "ca.crt")
	must(t, os.WriteFile(caFile, ca, 0o600))
	port, err := kcpenv.FreePort()
	must(t, err)
	keys, err := kcpenv.WriteRecordKey(filepath.Join(e.Dir, "record-keys"))
	must(t, err)
	health, metrics := FreeAddr(t), FreeAddr(t)
	e.Webhook = &kcpenv.Process{
		Name: "webhook", Binary: filepath.Join(BinDir(), "webhook"), LogPath: filepath.Join(e.Dir, "webhook.log"), HealthAddr: health,
		Args: append([]string{"--kubeconfig=" + kubeconfig("dependency-webhook"), "--bind-address=127.0.0.1", fmt.Sprintf("--port=%d", port), "--cert-dir=" + certs,
			"--health-probe-bind-address=" + health, "--metrics-bind-address=" + metrics, "--leader-elect=false",
			"--record-keys-dir=" + keys, "--relabel-interval=2s"}, opts.WebhookArgs...),
	}
	e.WebhookMetrics = "http://" + metrics + "/metrics"
	e.Webhook.Env = []string{"GOTRACEBACK=all"} // SIGQUIT dumps every goroutine
	controllerHealth, controllerMetrics := FreeAddr(t), FreeAddr(t)
	e.Controller = &kcpenv.Process{
		Name: "controller", Binary: filepath.Join(BinDir(), "controller"), LogPath: filepath.Join(e.Dir, "controller.log"), HealthAddr: controllerHealth,
		Args: []string{"--kubeconfig=" + kubeconfig("dependency-controller"), fmt.Sprintf("--webhook-url=https://127.0.0.1:%d/validate", port),
			"--webhook-ca-bundle=" + caFile, "--webhook-timeout-seconds=10", "--leader-elect=false", "--metrics-bind-address=" + controllerMetrics,
			"--health-probe-bind-address=" + controllerHealth},
	}
	e.Controller.Env = []string{"GOTRACEBACK=all"}
	e.ControllerMetrics = "http://" + controllerMetrics + "/metrics"
	for _, p := range []*kcpenv.Process{e.Webhook, e.Controller} {
		must(t, p.Start())
		t.Cleanup(p.Stop)
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			return p.Ready() == nil, nil
		}); err != nil {
			t.Fatalf("the %s is not ready: %v; log:\n%s", p.Name, err, p.LogTail(20))
		}
	}
	return e
}

// consumer returns the clients of a consumer workspace.
func (e *Env) consumer(t testing.TB, path logicalcluster.Path) *Consumer {
	c := &Consumer{Path: path, Config: rest.CopyConfig(e.Config)}
	c.Config.Host += path.RequestPath()
	var err error
	c.Dyn, err = dynamic.NewForConfig(c.Config)
	must(t, err)
	rawCfg := rest.CopyConfig(c.Config)
	rawCfg.APIPath = "/"
	rawCfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c.Raw, err = rest.UnversionedRESTClientFor(rawCfg)
	must(t, err)
	c.Kubeconfig = filepath.Join(e.Dir, strings.ReplaceAll(path.String(), ":", "_")+".kubeconfig")
	WriteKubeconfig(t, c.Kubeconfig, c.Config)
	return c
}

// Provider returns the workspace of the provider that exports gvr.
func (e *Env) Provider(gvr schema.GroupVersionResource) logicalcluster.Path {
	if gvr.Group == VMs.Group {
		return e.Compute
	}
	return e.Network
}

// Rule returns a rule in the workspace of the dependent's provider: the
// dependent references target by name at path. It carries the
// kcp.io/cluster annotation of that workspace, as rules do on the server;
// ServerCopy removes it before the rule is sent.
func (e *Env) Rule(name string, dependent, target schema.GroupVersionResource, path string, policy depv1alpha1.DeletionPolicy) *depv1alpha1.DependencyRule {
	return &depv1alpha1.DependencyRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			logicalcluster.AnnotationKey: e.Clusters[e.Provider(dependent).String()].String(),
		}},
		Spec: depv1alpha1.DependencyRuleSpec{
			Dependent: depv1alpha1.DependentResource{APIExportName: dependent.Group, Group: dependent.Group, Version: dependent.Version,
				Kind: Kinds[dependent.Resource], Resource: dependent.Resource},
			Dependencies:   []depv1alpha1.Dependency{e.Dependency(target, path)},
			DeletionPolicy: policy,
		},
	}
}

// Dependency returns a dependency on target (of a test provider),
// referenced at path.
func (e *Env) Dependency(target schema.GroupVersionResource, path string) depv1alpha1.Dependency {
	return depv1alpha1.Dependency{
		APIExportRef: depv1alpha1.APIExportReference{Path: e.Provider(target).String(), Name: target.Group},
		Group:        target.Group, Version: target.Version, Resource: target.Resource,
		FieldRef: depv1alpha1.FieldReference{Path: path},
	}
}

// ServerCopy returns a copy of a rule to send to the server, without the
// kcp.io/cluster annotation that the server sets.
func ServerCopy(r *depv1alpha1.DependencyRule) *depv1alpha1.DependencyRule {
	r = r.DeepCopy()
	delete(r.Annotations, logicalcluster.AnnotationKey)
	return r
}

// NewObject returns an object of gvr (a test resource) to create.
func NewObject(gvr schema.GroupVersionResource, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": Kinds[gvr.Resource],
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"app": "web", "tier": "frontend"}},
		"spec":     spec,
	}}
}

// Metrics are the series of a Prometheus text exposition, by their name
// and labels as written there (name{label="value",...}).
type Metrics map[string]float64

// Scrape reads the metrics at url.
func Scrape(url string) (Metrics, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(string(body)), nil
}

// ParseMetrics reads a Prometheus text exposition.
func ParseMetrics(exposition string) Metrics {
	m := Metrics{}
	for line := range strings.SplitSeq(exposition, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

var vmRSS = regexp.MustCompile(`VmRSS:\s+(\d+) kB`)

// RSS returns the resident set size of a process in bytes.
func RSS(pid int) (float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	m := vmRSS.FindSubmatch(status)
	if m == nil {
		return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	kb, err := strconv.ParseInt(string(m[1]), 10, 64)
	return float64(kb << 10), err
}

// CPU returns the CPU time a process has used so far, user and system, in
// seconds (from /proc/<pid>/stat, in clock ticks of 1/100 s as Linux
// reports them to user space).
func CPU(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields after
	// it start with the state (field 3); utime and stime are fields 14 and
	// 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, stat)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, stat)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc/%d/stat: %q: %w", pid, stat, err)
		}
		ticks += v
	}
	return ticks / 100, nil
}

// FreeAddr returns a free address on 127.0.0.1.
func FreeAddr(t testing.TB) string {
	port, err := kcpenv.FreePort()
	must(t, err)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// WriteKubeconfig writes a kubeconfig with the server and credentials of cfg.
func WriteKubeconfig(t testing.TB, path string, cfg *rest.Config) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kcp"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["kcp"] = &clientcmdapi.Context{Cluster: "kcp", AuthInfo: "user"}
	kc.CurrentContext = "kcp"
	must(t, clientcmd.WriteToFile(*kc, path))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// DumpGoroutines stops a process with SIGQUIT, which makes the Go runtime
// write the stacks of every goroutine to its log (Start sets
// GOTRACEBACK=all), and returns what the process wrote from then on.
func DumpGoroutines(p *kcpenv.Process) (string, error) {
	if !p.Running() {
		return "", fmt.Errorf("the %s is not running", p.Name)
	}
	info, err := os.Stat(p.LogPath)
	if err != nil {
		return "", err
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGQUIT); err != nil {
		return "", err
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("the %s did not exit within 30s of SIGQUIT", p.Name)
	}
	f, err := os.Open(p.LogPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Seek(info.Size(), io.SeekStart); err != nil {
		return "", err
	}
	b, err := io.ReadAll(f)
	return string(b), err
}

// GoroutineCreators counts the goroutines of a dump (see DumpGoroutines)
// by the function that started them ("created by"), "main" for those
// without.
func GoroutineCreators(dump string) map[string]int {
	counts := map[string]int{}
	for block := range strings.SplitSeq(dump, "\n\n") {
		if !strings.HasPrefix(strings.TrimLeft(block, "\n"), "goroutine ") {
			continue
		}
		creator := "main"
		for line := range strings.SplitSeq(block, "\n") {
			if rest, ok := strings.CutPrefix(line, "created by "); ok {
				creator, _, _ = strings.Cut(rest, " in goroutine ")
			}
		}
		counts[creator]++
	}
	return counts
}
