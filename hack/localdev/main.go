// Command localdev runs the dependency-controller on a local kcp, as the
// Makefile's run-local and demo targets:
//
//	localdev run    start kcp (state in .kcp/, reused), deploy, create the demo
//	                topology, run controller and webhook, and wait for Ctrl-C
//	localdev demo   the same in a temporary directory, then a scripted
//	                walkthrough (kubectl delete, and the kubectl plugin
//	                `kubectl dependencies`) that fails on any unexpected
//	                answer, and clean up
//
// kcp runs as one process with embedded etcd on 127.0.0.1. The project is
// deployed with `make deploy`, like users do. The
// controller and the webhook run as local processes with their own
// non-admin identities (static tokens in the state directory).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

// Workspaces of the demo topology, as the samples in config/samples expect.
var (
	depCtrl  = logicalcluster.NewPath("root:dep-ctrl")
	network  = logicalcluster.NewPath("root:network-provider")
	compute  = logicalcluster.NewPath("root:compute-provider")
	consumer = logicalcluster.NewPath("root:consumer")
)

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "run" && os.Args[1] != "demo") {
		fmt.Fprintln(os.Stderr, "usage: localdev run|demo")
		os.Exit(2)
	}
	log.SetLogger(zap.New(zap.WriteTo(discard{})))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if os.Args[1] == "run" {
		err = runLocal(ctx)
	} else {
		err = runDemo(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nError: %v\n", err)
		os.Exit(1)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// env is a local kcp with the project deployed and running.
type env struct {
	// bin holds the project's binaries and kubectl, kcpBin the kcp binary
	// (kcpenv.BinDirEnv).
	repo, bin, kcpBin, state string
	port                     int
	kcp                      *kcpenv.Process
	webhook                  *kcpenv.Process
	controller               *kcpenv.Process
	cli                      clusterclient.ClusterClient
	adminKubeconfig          string
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func newEnv(state string, port int) *env {
	repo := kcpenv.RepoRoot()
	return &env{repo: repo, bin: filepath.Join(repo, "bin"), kcpBin: kcpenv.BinDir(), state: state, port: port,
		adminKubeconfig: filepath.Join(state, "admin.kubeconfig")}
}

// up starts kcp, deploys the project, creates the demo topology, starts
// the webhook and the controller, and then creates the sample VPC and
// VirtualMachine if withObjects: with the state of an earlier run, kcp
// already calls the webhooks that run configured (failing closed), so
// nothing is written to the consumer before the webhook serves.
func (e *env) up(ctx context.Context, withObjects bool) error {
	if err := os.MkdirAll(e.state, 0o755); err != nil {
		return err
	}
	tokens, err := e.tokens()
	if err != nil {
		return err
	}
	if err := e.startKCP(ctx); err != nil {
		return err
	}

	step("Deploying with make deploy (the same manifests users apply)")
	if err := e.make(ctx, "deploy", "KUBECONFIG="+e.adminKubeconfig, "DEPCTRL_WORKSPACE="+depCtrl.String()); err != nil {
		return err
	}

	admin, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: e.adminKubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: "base"}).ClientConfig()
	if err != nil {
		return err
	}
	if e.cli, err = clusterclient.New(admin, client.Options{Scheme: kcpenv.NewScheme()}); err != nil {
		return err
	}

	if err := e.topology(ctx); err != nil {
		return err
	}
	if err := e.startBinaries(ctx, tokens); err != nil {
		return err
	}
	if err := e.waitRuleReady(ctx); err != nil {
		return err
	}
	if withObjects {
		return e.applySamples(ctx, consumer, "config/samples/consumer/objects.yaml")
	}
	return nil
}

// topology creates the demo workspaces from config/samples and writes an
// admin kubeconfig for each.
func (e *env) topology(ctx context.Context) error {
	step("Creating the demo topology from config/samples: %s, %s, %s", network, compute, consumer)
	for _, ws := range []logicalcluster.Path{network, compute, consumer} {
		if err := e.ensureWorkspace(ctx, ws); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		ws  logicalcluster.Path
		dir string
	}{{network, "network-provider"}, {compute, "compute-provider"}} {
		if err := e.applySamples(ctx, s.ws, "config/samples/"+s.dir+"/*.yaml"); err != nil {
			return err
		}
	}
	if err := e.applySamples(ctx, consumer, "config/samples/consumer/apibindings.yaml"); err != nil {
		return err
	}
	for _, ws := range []logicalcluster.Path{network, compute, consumer} {
		if err := e.kubectl(ctx, ws, "wait", "--for=jsonpath={.status.phase}=Bound", "--timeout=120s", "apibindings.apis.kcp.io", "--all"); err != nil {
			return err
		}
	}
	for _, ws := range []logicalcluster.Path{network, compute, consumer, depCtrl} {
		if err := e.writeKubeconfig(filepath.Join(e.state, ws.Base()+".kubeconfig"), "kcp-admin", ws, nil); err != nil {
			return err
		}
	}
	return nil
}

// startBinaries starts the webhook and the controller as local processes
// with their own identities (tokens), and waits until both are ready.
func (e *env) startBinaries(ctx context.Context, tokens map[string]string) error {
	step("Starting the webhook and the controller as local processes with their own identities")
	certDir := filepath.Join(e.state, "webhook-certs")
	ca, err := kcpenv.WriteServingCerts(certDir, "127.0.0.1")
	if err != nil {
		return err
	}
	caFile := filepath.Join(certDir, "ca.crt")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		return err
	}
	for _, user := range []string{"dependency-webhook", "dependency-controller"} {
		if err := e.writeKubeconfig(filepath.Join(e.state, user+".kubeconfig"), user, depCtrl, &clientcmdapi.AuthInfo{Token: tokens[user]}); err != nil {
			return err
		}
	}
	webhookPort, err := kcpenv.FreePort()
	if err != nil {
		return err
	}
	// The key that signs deferred deletions' records, as the chart's
	// record-keys Secret provides it; kept across restarts, like the
	// Secret, so that records written before still verify.
	recordKeys := filepath.Join(e.state, "record-keys")
	if _, err := os.Stat(filepath.Join(recordKeys, "key-1")); errors.Is(err, fs.ErrNotExist) {
		if _, err := kcpenv.WriteRecordKey(recordKeys); err != nil {
			return err
		}
	}
	e.webhook = &kcpenv.Process{
		Name: "webhook", Binary: filepath.Join(e.bin, "webhook"), LogPath: filepath.Join(e.state, "webhook.log"), HealthAddr: freeAddr(),
		Args: []string{"--kubeconfig=" + filepath.Join(e.state, "dependency-webhook.kubeconfig"),
			"--bind-address=127.0.0.1", fmt.Sprintf("--port=%d", webhookPort), "--cert-dir=" + certDir, "--metrics-bind-address=0",
			"--record-keys-dir=" + recordKeys},
	}
	e.webhook.Args = append(e.webhook.Args, "--health-probe-bind-address="+e.webhook.HealthAddr)
	e.controller = &kcpenv.Process{
		Name: "controller", Binary: filepath.Join(e.bin, "controller"), LogPath: filepath.Join(e.state, "controller.log"), HealthAddr: freeAddr(),
		Args: []string{"--kubeconfig=" + filepath.Join(e.state, "dependency-controller.kubeconfig"),
			fmt.Sprintf("--webhook-url=https://127.0.0.1:%d/validate", webhookPort), "--webhook-ca-bundle=" + caFile,
			"--leader-elect=false", "--metrics-bind-address=0"},
	}
	e.controller.Args = append(e.controller.Args, "--health-probe-bind-address="+e.controller.HealthAddr)
	for _, p := range []*kcpenv.Process{e.webhook, e.controller} {
		if err := p.Start(); err != nil {
			return err
		}
		if err := waitFor(ctx, 2*time.Minute, p.Name+" ready", p.Ready); err != nil {
			return fmt.Errorf("%w; log:\n%s", err, p.LogTail(20))
		}
	}
	return nil
}

// tokens returns the static tokens of the controller and webhook users,
// creating the token file kcp reads on first use.
func (e *env) tokens() (map[string]string, error) {
	path := filepath.Join(e.state, "tokens.csv")
	tokens := map[string]string{}
	if raw, err := os.ReadFile(path); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if f := strings.Split(line, ","); len(f) >= 2 {
				tokens[f[1]] = f[0]
			}
		}
		return tokens, nil
	}
	var lines []string
	for i, user := range []string{"dependency-controller", "dependency-webhook"} {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		tokens[user] = hex.EncodeToString(b)
		lines = append(lines, fmt.Sprintf("%s,%s,%d,\"\"", tokens[user], user, 1000+i))
	}
	return tokens, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

func (e *env) startKCP(ctx context.Context) error {
	for _, b := range []string{"controller", "webhook", "kubectl"} {
		if _, err := os.Stat(filepath.Join(e.bin, b)); err != nil {
			return fmt.Errorf("%s is missing in bin/: run `make build`", b)
		}
	}
	if _, err := kcpenv.CheckBinaries(os.Stdout, e.kcpBin, "kcp"); err != nil {
		return err
	}
	etcdClient, err := kcpenv.FreePort()
	if err != nil {
		return err
	}
	etcdPeer, err := kcpenv.FreePort()
	if err != nil {
		return err
	}
	root := filepath.Join(e.state, "kcp")
	reused := ""
	if _, err := os.Stat(root); err == nil {
		reused = ", reusing its state"
	}
	step("Starting kcp on https://127.0.0.1:%d (state in %s%s; log %s)", e.port, rel(e.repo, root), reused, rel(e.repo, filepath.Join(e.state, "kcp.log")))
	e.kcp = &kcpenv.Process{
		Name: "kcp", Binary: filepath.Join(e.kcpBin, "kcp"), LogPath: filepath.Join(e.state, "kcp.log"),
		Args: []string{"start",
			"--root-directory=" + root, "--kubeconfig-path=" + e.adminKubeconfig,
			"--bind-address=127.0.0.1", "--external-hostname=127.0.0.1", "--secure-port=" + strconv.Itoa(e.port),
			"--embedded-etcd-client-port=" + strconv.Itoa(etcdClient), "--embedded-etcd-peer-port=" + strconv.Itoa(etcdPeer),
			"--token-auth-file=" + filepath.Join(e.state, "tokens.csv"),
		},
	}
	if err := e.kcp.Start(); err != nil {
		return err
	}
	start := time.Now()
	err = waitFor(ctx, 5*time.Minute, "kcp ready", func() error {
		if !e.kcp.Running() {
			return fmt.Errorf("kcp exited; log:\n%s", e.kcp.LogTail(20))
		}
		return e.kubectl(ctx, logicalcluster.Path{}, "get", "--raw", "/readyz")
	})
	if err != nil {
		return err
	}
	fmt.Printf("    kcp is ready (%s)\n", time.Since(start).Round(time.Second))
	return nil
}

// stop stops what up started, the controller first.
func (e *env) stop() {
	for _, p := range []*kcpenv.Process{e.controller, e.webhook, e.kcp} {
		if p != nil && p.Running() {
			fmt.Printf("    stopping %s\n", p.Name)
			p.Stop()
		}
	}
}

func (e *env) make(ctx context.Context, target string, vars ...string) error {
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", e.repo, target}, vars...)...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if !strings.HasPrefix(line, "KUBECTL=") && !strings.Contains(line, "hack/build-kcp.sh") {
			fmt.Println("    " + line)
		}
	}
	if err != nil {
		return fmt.Errorf("make %s: %w", target, err)
	}
	return nil
}

// kubectl runs bin/kubectl as admin against a workspace (or the server root
// if ws is empty) and returns an error with its output if it fails.
func (e *env) kubectl(ctx context.Context, ws logicalcluster.Path, args ...string) error {
	_, err := e.kubectlOutput(ctx, ws, args...)
	return err
}

func (e *env) kubectlOutput(ctx context.Context, ws logicalcluster.Path, args ...string) (string, error) {
	base := []string{"--kubeconfig=" + e.adminKubeconfig}
	if !ws.Empty() {
		base = append(base, fmt.Sprintf("--server=https://127.0.0.1:%d%s", e.port, ws.RequestPath()))
	}
	out, err := exec.CommandContext(ctx, filepath.Join(e.bin, "kubectl"), append(base, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (e *env) ensureWorkspace(ctx context.Context, ws logicalcluster.Path) error {
	parent, name := ws.Split()
	manifest := fmt.Sprintf("apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata:\n  name: %s\n", name)
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "kubectl"), "--kubeconfig="+e.adminKubeconfig,
		fmt.Sprintf("--server=https://127.0.0.1:%d%s", e.port, parent.RequestPath()), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to create workspace %s: %w: %s", ws, err, out)
	}
	return e.kubectl(ctx, parent, "wait", "--for=jsonpath={.status.phase}=Ready", "--timeout=120s", "workspaces.tenancy.kcp.io/"+name)
}

// applySamples applies sample files (a glob relative to the repository)
// into ws, retrying while the APIs they need are being bound.
func (e *env) applySamples(ctx context.Context, ws logicalcluster.Path, glob string) error {
	files, err := filepath.Glob(filepath.Join(e.repo, glob))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no sample files match %s", glob)
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		objs, err := kcpenv.ReadYAMLFile(f)
		if err != nil {
			return err
		}
		err = waitFor(ctx, 2*time.Minute, "applying "+rel(e.repo, f), func() error {
			return kcpenv.Apply(ctx, e.cli.Cluster(ws), objs...)
		})
		if err != nil {
			return err
		}
		for _, o := range objs {
			fmt.Printf("    %s %s/%s applied\n", ws, strings.ToLower(o.GetKind()), o.GetName())
		}
	}
	return nil
}

func (e *env) waitRuleReady(ctx context.Context) error {
	return waitFor(ctx, 2*time.Minute, "DependencyRule vm-dependencies Ready", func() error {
		out, err := e.kubectlOutput(ctx, compute, "get", "dependencyrules", "vm-dependencies",
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "True" {
			return fmt.Errorf("not ready yet (%q)", out)
		}
		return nil
	})
}

// writeKubeconfig writes a kubeconfig for ws with auth (or the admin's
// credentials if auth is nil).
func (e *env) writeKubeconfig(path, user string, ws logicalcluster.Path, auth *clientcmdapi.AuthInfo) error {
	admin, err := clientcmd.LoadFromFile(e.adminKubeconfig)
	if err != nil {
		return err
	}
	if auth == nil {
		auth = admin.AuthInfos["kcp-admin"]
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kcp"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d%s", e.port, ws.RequestPath()),
		CertificateAuthorityData: admin.Clusters["root"].CertificateAuthorityData,
	}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[ws.Base()] = &clientcmdapi.Context{Cluster: "kcp", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = ws.Base()
	return clientcmd.WriteToFile(*cfg, path)
}

// waitFor polls check every second until it succeeds, printing progress
// every 15s.
func waitFor(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	start := time.Now()
	lastReport := start
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, err)
		}
		if time.Since(lastReport) > 15*time.Second {
			fmt.Printf("    still waiting for %s (%s)...\n", what, time.Since(start).Round(time.Second))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while waiting for %s", what)
		case <-time.After(time.Second):
		}
	}
}

func freeAddr() string {
	port, err := kcpenv.FreePort()
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func rel(base, path string) string {
	if r, err := filepath.Rel(base, path); err == nil {
		return r
	}
	return path
}

// runLocal is `make run-local`.
func runLocal(ctx context.Context) error {
	port := 6443
	if p := os.Getenv("KCP_PORT"); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("invalid KCP_PORT %q", p)
		}
	}
	e := newEnv(filepath.Join(kcpenv.RepoRoot(), ".kcp"), port)
	defer func() {
		step("Stopping")
		e.stop()
	}()
	if err := e.up(ctx, true); err != nil {
		return err
	}

	state := rel(e.repo, e.state)
	fmt.Printf(`
The dependency-controller is running on a local kcp.

  kcp            https://127.0.0.1:%[1]d   admin kubeconfig: %[2]s/admin.kubeconfig
  logs           %[2]s/kcp.log, %[2]s/controller.log, %[2]s/webhook.log
  kubeconfigs    %[2]s/consumer.kubeconfig, compute-provider.kubeconfig, network-provider.kubeconfig, dep-ctrl.kubeconfig

Try it (the consumer workspace has VPC vpc-a and VirtualMachine vm-1 using it):

  export KUBECONFIG=%[2]s/consumer.kubeconfig PATH=$PWD/bin:$PATH
  kubectl get vpcs,virtualmachines
  kubectl dependencies why vpc/vpc-a            # BLOCKED by VirtualMachine/default/vm-1 (a dry run)
  kubectl dependencies refs vpc/vpc-a           # what references it, for those who may only read
  kubectl delete vpc vpc-a                      # denied: still referenced by VirtualMachine/default/vm-1
  kubectl delete virtualmachine vm-1
  kubectl delete vpc vpc-a                      # allowed
  KUBECONFIG=%[2]s/compute-provider.kubeconfig kubectl get dependencyrules

Press Ctrl-C to stop kcp, the controller and the webhook (the state in %[2]s is kept).
`, e.port, state)

	select {
	case <-ctx.Done():
		return nil
	case <-e.kcp.Done():
		return fmt.Errorf("kcp exited; log:\n%s", e.kcp.LogTail(20))
	case <-e.controller.Done():
		return fmt.Errorf("the controller exited; log:\n%s", e.controller.LogTail(20))
	case <-e.webhook.Done():
		return fmt.Errorf("the webhook exited; log:\n%s", e.webhook.LogTail(20))
	}
}

// runDemo is `make demo`.
func runDemo(ctx context.Context) (err error) {
	state, err := os.MkdirTemp(filepath.Join(kcpenv.RepoRoot()), ".kcp-demo-")
	if err != nil {
		return err
	}
	port, err := kcpenv.FreePort()
	if err != nil {
		return err
	}
	e := newEnv(state, port)
	defer func() {
		step("Cleaning up")
		e.stop()
		if err == nil {
			_ = os.RemoveAll(state)
		} else {
			fmt.Printf("    kept %s for inspection (logs: kcp.log, controller.log, webhook.log)\n", rel(e.repo, state))
		}
	}()
	if err := e.up(ctx, false); err != nil {
		return err
	}
	return demo(ctx, e)
}

// demo is the scripted walkthrough; every step checks kcp's answer.
func demo(ctx context.Context, e *env) error {
	// kubectl runs bin/kubectl with the kubeconfig of a workspace of the
	// topology, prints the command and its output, and checks the outcome.
	kubectl := func(ws, stdin string, expectSuccess bool, want string, args ...string) error {
		shown := "kubectl " + strings.Join(args, " ")
		if ws != "consumer" {
			shown = "KUBECONFIG=" + ws + ".kubeconfig " + shown
		}
		if stdin != "" {
			shown += " <<EOF\n" + stdin + "EOF"
		}
		fmt.Printf("\n$ %s\n", shown)
		cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "kubectl"), append([]string{"--kubeconfig=" + filepath.Join(e.state, ws+".kubeconfig")}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		fmt.Print(indent(string(out)))
		switch {
		case expectSuccess && err != nil:
			return fmt.Errorf("expected `%s` to succeed: %w", shown, err)
		case !expectSuccess && err == nil:
			return fmt.Errorf("expected `%s` to be denied, but it succeeded", shown)
		case !strings.Contains(string(out), want):
			return fmt.Errorf("expected the output of `%s` to contain %q", shown, want)
		}
		return nil
	}
	// plugin runs the kubectl plugin as kubectl finds it (bin/ on the
	// PATH, `kubectl dependencies ...`) in the consumer workspace, prints
	// the command and its output, and checks its exit code and output.
	// With retry, it asks again for up to a minute while the answer is not
	// the expected one (a dependent created a moment before may not be
	// labelled yet, and refs reads the labels).
	plugin := func(retry bool, wantCode int, want string, args ...string) error {
		shown := "kubectl dependencies " + strings.Join(args, " ")
		deadline := time.Now().Add(time.Minute)
		for {
			// kubectl takes no flags before a plugin's name.
			cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "kubectl"), append([]string{"dependencies"}, args...)...)
			cmd.Env = append(os.Environ(), "PATH="+e.bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+filepath.Join(e.state, "consumer.kubeconfig"))
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			switch {
			case errors.As(err, &exit):
				code = exit.ExitCode()
			case err != nil:
				return fmt.Errorf("running `%s`: %w", shown, err)
			}
			ok := code == wantCode && strings.Contains(string(out), want)
			if ok || !retry || time.Now().After(deadline) {
				fmt.Printf("\n$ %s\n%s", shown, indent(string(out)))
				if !ok {
					return fmt.Errorf("expected `%s` to exit with %d and print %q, got exit code %d", shown, wantCode, want, code)
				}
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	vpcAndVM := func(vpc, vm string) string {
		return fmt.Sprintf("apiVersion: network.test.io/v1\nkind: VPC\nmetadata:\n  name: %s\nspec:\n  cidr: 10.0.0.0/16\n---\n"+
			"apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\nspec:\n  vpcRef:\n    name: %s\n", vpc, vm, vpc)
	}

	step("Demo in the consumer workspace %s (kubeconfigs in %s)", consumer, rel(e.repo, e.state))
	steps := []func() error{
		func() error {
			return kubectl("compute-provider", "", true, "vm-dependencies", "get", "dependencyrules")
		},
		func() error {
			return kubectl("consumer", vpcAndVM("vpc-a", "vm-1"), true, "created", "apply", "-f", "-")
		},
		func() error {
			return plugin(false, 1, "BLOCKED: vpcs.network.test.io \"vpc-a\" in namespace \"default\" is still referenced by 1 object", "why", "vpc/vpc-a")
		},
		func() error {
			return plugin(true, 1, "1 object references vpcs.network.test.io \"vpc-a\"", "refs", "vpc/vpc-a")
		},
		func() error {
			return kubectl("consumer", "", false, "is still referenced by VirtualMachine/default/vm-1", "delete", "vpc", "vpc-a")
		},
		func() error { return kubectl("consumer", "", true, "deleted", "delete", "virtualmachine", "vm-1") },
		func() error { return plugin(true, 0, "ALLOWED: ", "why", "vpc/vpc-a") },
		func() error { return plugin(false, 0, "No object references", "refs", "vpc/vpc-a") },
		func() error { return kubectl("consumer", "", true, "deleted", "delete", "vpc", "vpc-a") },
		func() error {
			return kubectl("consumer", vpcAndVM("vpc-b", "vm-2"), true, "created", "apply", "-f", "-")
		},
		func() error {
			return kubectl("consumer", "", false, "is still referenced by VirtualMachine/default/vm-2", "delete", "vpc", "vpc-b")
		},
		func() error {
			return kubectl("consumer", "", true, "annotated", "annotate", "vpc", "vpc-b", "dependencies.opendefense.cloud/skip-protection=true")
		},
		func() error { return kubectl("consumer", "", true, "bypassed by kcp-admin", "delete", "vpc", "vpc-b") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	fmt.Println("\nDemo passed: the plugin said why the delete would be denied and what referenced the VPC, the delete was denied while referenced, allowed once the reference was gone, and allowed with a warning when skip-protection was set.")
	return nil
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}
