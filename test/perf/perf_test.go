//go:build perf

// Package perf measures what the webhook adds to a DELETE on a real kcp:
// the time of a DELETE of a protected object (denied after listing N
// dependents through the front-proxy) next to kcp's own costs in the same
// run, a DELETE without webhook and a LIST of the N dependents. Run with
// `make measure`; it prints a table and fails only if a decision is wrong.
package perf

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"
	"github.com/kcp-dev/multicluster-provider/envtest"
	"github.com/kcp-dev/sdk/apis/core"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
)

var (
	vpcs = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"}
	vms  = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "virtualmachines"}
)

const samples = 30

func TestMeasure(t *testing.T) {
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	ctx := context.Background()
	env, cfg, err := kcpenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg.QPS, cfg.Burst = 2000, 4000
	cli, err := clusterclient.New(cfg, client.Options{Scheme: kcpenv.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}

	root := core.RootCluster.Path()
	_, depCtrl := envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix("dep-ctrl"))
	must(t, kcpenv.InstallDependencyAPI(ctx, cli.Cluster(depCtrl)))
	_, network := envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix("network"))
	must(t, kcpenv.InstallProviderAPI(ctx, cli.Cluster(network), "network.test.io", kcpenv.Resource{Kind: "VPC", Plural: "vpcs"}))
	_, compute := envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix("compute"))
	must(t, kcpenv.InstallProviderAPI(ctx, cli.Cluster(compute), "compute.test.io", kcpenv.Resource{Kind: "VirtualMachine", Plural: "virtualmachines"}))
	_, err = kcpenv.BindAPIExport(ctx, cli.Cluster(compute), cli.Cluster(depCtrl), depCtrl, kcpenv.DepCtrlExportName)
	must(t, err)
	_, consumer := envtest.NewWorkspaceFixture(t, cli, root, envtest.WithNamePrefix("consumer"))
	for _, p := range []struct {
		path logicalcluster.Path
		name string
	}{{network, "network.test.io"}, {compute, "compute.test.io"}} {
		_, err := kcpenv.BindAPIExport(ctx, cli.Cluster(consumer), cli.Cluster(p.path), p.path, p.name)
		must(t, err)
	}
	must(t, cli.Cluster(compute).Create(ctx, &depv1alpha1.DependencyRule{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-to-vpc"},
		Spec: depv1alpha1.DependencyRuleSpec{
			Dependent: depv1alpha1.DependentResource{APIExportName: "compute.test.io", Group: "compute.test.io", Version: "v1", Kind: "VirtualMachine", Resource: "virtualmachines"},
			Dependencies: []depv1alpha1.Dependency{{
				APIExportRef: depv1alpha1.APIExportReference{Path: network.String(), Name: "network.test.io"},
				Group:        "network.test.io", Version: "v1", Resource: "vpcs",
				FieldRef: depv1alpha1.FieldReference{Path: ".spec.vpcRef.name"},
			}},
		},
	}))

	depCtrlConfig := rest.CopyConfig(cfg)
	depCtrlConfig.Host += depCtrl.RequestPath()
	server, err := kcpenv.StartWebhook(ctx, depCtrlConfig, t.TempDir())
	must(t, err)
	t.Cleanup(func() { _ = server.Stop() })
	wh := webhookconfig.Build(webhookconfig.Target{Path: network, Resources: []schema.GroupVersionResource{vpcs}},
		webhookconfig.Options{URL: server.URL, CABundle: server.CABundle, TimeoutSeconds: 10, FailurePolicy: admissionregistrationv1.Fail})
	must(t, cli.Cluster(network).Create(ctx, wh))

	consumerCfg := rest.CopyConfig(cfg)
	consumerCfg.Host += consumer.RequestPath()
	dyn, err := dynamic.NewForConfig(consumerCfg)
	must(t, err)

	var rows []string
	for _, n := range []int{10, 1000, 10000} {
		ns := fmt.Sprintf("n%d", n)
		must(t, cli.Cluster(consumer).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		start := time.Now()
		createDependents(t, dyn, ns, n)
		t.Logf("created %d VirtualMachines in %s", n, time.Since(start).Round(time.Second))
		for _, name := range []string{"protected", "free"} {
			vpc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "network.test.io/v1", "kind": "VPC", "metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{}}}
			_, err := dyn.Resource(vpcs).Namespace(ns).Create(ctx, vpc, metav1.CreateOptions{})
			must(t, err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}}
		must(t, cli.Cluster(consumer).Create(ctx, cm))

		dryRun := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		plain := measure(t, func() error {
			return dyn.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns).Delete(ctx, "plain", dryRun)
		})
		list := measure(t, func() error {
			_, err := dyn.Resource(vms).Namespace(ns).List(ctx, metav1.ListOptions{})
			return err
		})
		denied := measure(t, func() error {
			err := dyn.Resource(vpcs).Namespace(ns).Delete(ctx, "protected", dryRun)
			switch {
			case err == nil:
				return fmt.Errorf("the delete of a referenced VPC was allowed")
			case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "VirtualMachine/"+ns+"/vm-target"):
				return fmt.Errorf("expected a denial naming vm-target: %w", err)
			}
			return nil
		})
		allowed := measure(t, func() error {
			return dyn.Resource(vpcs).Namespace(ns).Delete(ctx, "free", dryRun)
		})
		rows = append(rows, fmt.Sprintf("| %d | %s | %s | %s | %s |", n, plain, list, denied, allowed))
	}

	report := strings.Join(append([]string{
		"| dependents in the namespace | DELETE, no webhook | LIST of the dependents (decoded) | DELETE denied by the webhook | DELETE allowed by the webhook |",
		"|---|---|---|---|---|",
	}, rows...), "\n")
	t.Logf("p50 / p95 in milliseconds, %d samples each, dry-run deletes through kcp's admission chain:\n%s", samples, report)
	if out := os.Getenv("MEASURE_OUTPUT"); out != "" {
		must(t, os.WriteFile(out, []byte(report+"\n"), 0o644))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// measure runs f twice to warm up, then samples times, and returns
// "p50 / p95" in milliseconds.
func measure(t *testing.T, f func() error) string {
	t.Helper()
	var d []time.Duration
	for i := range samples + 2 {
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if i >= 2 {
			d = append(d, time.Since(start))
		}
	}
	slices.Sort(d)
	ms := func(x time.Duration) string { return fmt.Sprintf("%.1f", float64(x.Microseconds())/1000) }
	return ms(d[len(d)/2]) + " / " + ms(d[len(d)*95/100])
}

// createDependents creates n VirtualMachines in ns; vm-target references
// VPC "protected", the others other VPCs.
func createDependents(t *testing.T, dyn dynamic.Interface, ns string, n int) {
	t.Helper()
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name, vpc := fmt.Sprintf("vm-%05d", i), fmt.Sprintf("vpc-%d", i%50)
				if i == 0 {
					name, vpc = "vm-target", "protected"
				}
				vm := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "compute.test.io/v1", "kind": "VirtualMachine",
					"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"app": "web", "tier": "frontend"}},
					"spec": map[string]any{"cpu": 4, "memory": "8Gi", "image": "registry.example/os:1.2.3",
						"vpcRef": map[string]any{"name": vpc}, "nics": []any{map[string]any{"name": "eth0", "vpc": vpc}}},
				}}
				if _, err := dyn.Resource(vms).Namespace(ns).Create(context.Background(), vm, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}
