//go:build perf

// Package perf measures the cost of deletion protection on a real kcp (one
// shard), side by side with kcp's own costs, with the webhook built by `make
// build` running as a process (so that its memory can be read). Its parts
// (MEASURE_ONLY, comma-separated; all by default):
//
//   - single: single DELETEs with 1,000 and 10,000 dependents in the
//     namespace (MEASURE_SINGLE_N) of a never referenced, a formerly
//     referenced and a referenced object (and a burst of concurrent allowed
//     ones), the same DELETE without any rule, and the webhook's memory per
//     indexed dependent;
//   - create: a dependent's CREATE with the check of new references and
//     without any rule;
//   - bulk: bulk deletions (kubectl delete --all, and deleting a namespace)
//     with 500, 1,000 and 2,000 targets (MEASURE_BULK_N) and as many
//     dependents referencing them, with the rule and without it;
//   - stack: a three-level stack of 1,000 objects per level
//     (MEASURE_STACK_N) deleted in one go under Replay rules, against an
//     ordered deletion without rules.
//
// Run it with `make measure`; it prints tables (and writes them to
// MEASURE_OUTPUT if set).
package perf

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kcp-dev/logicalcluster/v3"
	clusterclient "github.com/kcp-dev/multicluster-provider/client"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// The resources of the test providers.
var (
	vpcs, subnets, vms = procenv.VPCs, procenv.Subnets, procenv.VMs
	// newObject returns an object of a test resource to create.
	newObject = procenv.NewObject
)

// dryRun deletes nothing; it passes kcp's admission chain like a DELETE.
var dryRun = metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}

const samples = 30

// burst is how many allowed DELETEs of one namespace are sent at once.
const burst = 16

// setup is the measured installation.
type setup struct {
	env        *procenv.Env
	cli        clusterclient.ClusterClient
	dyn        dynamic.Interface // the consumer workspace
	raw        *rest.RESTClient  // the consumer workspace, raw responses
	consumer   logicalcluster.Path
	compute    logicalcluster.Path
	network    logicalcluster.Path
	kubectl    []string // kubectl with the consumer's kubeconfig
	webhook    *kcpenv.Process
	controller *kcpenv.Process
	metrics    string // the webhook's metrics URL

	// standard is the rule that VirtualMachines reference VPCs (Deny).
	standard *protection
	// active is the installed protection, nil for none.
	active *protection
}

// parts are the parts of the measurement, in the order they run.
var parts = []string{"single", "create", "bulk", "stack"}

func TestMeasure(t *testing.T) {
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	klog.SetLogger(logr.Discard()) // client-go's throttling notes
	ctx := context.Background()
	run := parts
	if v := os.Getenv("MEASURE_ONLY"); v != "" {
		run = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); !slices.Contains(parts, p) {
				t.Fatalf("MEASURE_ONLY: unknown part %q (parts: %s)", p, strings.Join(parts, ", "))
			}
			run = append(run, strings.TrimSpace(p))
		}
	}
	singleN := sizes(t, "MEASURE_SINGLE_N", 1000, 10000)
	bulkN := sizes(t, "MEASURE_BULK_N", 500, 1000, 2000)
	stackN := sizes(t, "MEASURE_STACK_N", 1000)
	s := start(ctx, t)
	var report []string
	for _, part := range parts {
		if !slices.Contains(run, part) {
			continue
		}
		switch part {
		case "single":
			report = append(report, s.singles(ctx, t, singleN)...)
		case "create":
			report = append(report, s.creates(ctx, t)...)
		case "bulk":
			report = append(report, "## Bulk deletions (seconds): N targets and N dependents referencing them", "",
				"| N | `kubectl delete vpcs --all`, no rule | same, with the rule (all denied) | namespace, no rule | namespace, with the rule |",
				"|---|---|---|---|---|")
			for _, n := range bulkN {
				report = append(report, s.bulk(ctx, t, n))
			}
			report = append(report, "")
		case "stack":
			report = append(report, s.stacks(ctx, t, stackN)...)
		}
	}

	out := strings.Join(report, "\n")
	t.Logf("\n%s", out)
	if path := os.Getenv("MEASURE_OUTPUT"); path != "" {
		must(t, os.WriteFile(path, []byte(out+"\n"), 0o644))
	}
}

// singles measures single DELETEs with each number of dependents in the
// namespace, and the webhook's memory.
func (s *setup) singles(ctx context.Context, t *testing.T, sizes []int) []string {
	report := []string{"## Single DELETEs (p50 / p99, ms; dry-run, through kcp's admission chain)", "",
		fmt.Sprintf("| dependents in the namespace | DELETE, no rule | never referenced (allowed) | formerly referenced (allowed) | referenced (denied) | %d concurrent never referenced, whole burst | raw LIST of the dependents |", burst),
		"|---|---|---|---|---|---|---|"}
	s.protect(ctx, t, s.standard)
	// The memory per indexed dependent is read once the dependents are
	// indexed, before the DELETEs below add the garbage of their live reads.
	before := s.memory(t)
	for _, n := range sizes {
		s.populateSingle(ctx, t, n)
	}
	s.waitIndexed(ctx, t)
	indexed := s.indexed(t)
	after := s.memory(t)
	rows := make([]singleRow, len(sizes))
	for i, n := range sizes {
		rows[i] = s.single(ctx, t, n)
	}
	// The baseline: the same DELETE without any rule.
	s.protect(ctx, t, nil)
	var marked []string
	for i, row := range rows {
		rows[i].baseline = measure(t, func() error { return s.dyn.Resource(vpcs).Namespace(row.ns).Delete(ctx, "free", dryRun) })
		report = append(report, fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s |", row.n, rows[i].baseline, row.never, row.former, row.denied, row.burst, row.list))
		marked = append(marked, row.marked...)
	}
	if len(marked) > 0 {
		report = append(report, "", fmt.Sprintf("Marked %s before the DELETEs: %s.", depv1alpha1.LabelUnreferenced, strings.Join(marked, ", ")))
	}
	perTenK := func(before, after float64) float64 { return (after - before) / float64(indexed) * 10000 / (1 << 20) }
	rss, heap := perTenK(before.rss, after.rss), perTenK(before.heap, after.heap)
	report = append(report, "", "## Webhook memory", "",
		fmt.Sprintf("With %d dependents indexed: RSS %.0f MiB (%.0f MiB before), live Go heap %.0f MiB (%.0f MiB before).",
			indexed, after.rss/(1<<20), before.rss/(1<<20), after.heap/(1<<20), before.heap/(1<<20)),
		fmt.Sprintf("Per 10,000 indexed dependents: %.1f MiB RSS, %.1f MiB live heap; so per 100,000 (extrapolated linearly): %.0f MiB RSS, %.0f MiB live heap.",
			rss, heap, rss*10, heap*10), "")
	return report
}

// start starts kcp, the webhook and the controller and installs the
// topology (see procenv.Start): a network provider (VPCs and Subnets; it
// grants the webhook access to read, record and replay), a compute provider
// (VirtualMachines, which reference VPCs or Subnets; it grants the webhook
// read access) and a consumer binding both.
func start(ctx context.Context, t *testing.T) *setup {
	e := procenv.Start(ctx, t, procenv.Options{Consumers: []string{"consumer"}})
	c := e.Consumers[0]
	s := &setup{
		env: e, cli: e.Cli, dyn: c.Dyn, raw: c.Raw, consumer: c.Path, compute: e.Compute, network: e.Network,
		kubectl: []string{filepath.Join(kcpenv.RepoRoot(), "bin", "kubectl"), "--kubeconfig", c.Kubeconfig},
		webhook: e.Webhook, controller: e.Controller, metrics: e.WebhookMetrics,
	}
	s.standard = &protection{rules: []*depv1alpha1.DependencyRule{s.rule("vm-to-vpc", vms, vpcs, ".spec.vpcRef.name", depv1alpha1.DeletionPolicyDeny)}}
	return s
}

// populateSingle creates the namespace of single with n dependents and the
// VPCs to delete: "protected" (referenced by vm-target), "former"
// (referenced by vm-former until single deletes it), "free" and the burst's
// free-0 to free-15 (never referenced).
func (s *setup) populateSingle(ctx context.Context, t *testing.T, n int) {
	ns := fmt.Sprintf("n%d", n)
	must(t, s.cli.Cluster(s.consumer).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	start := time.Now()
	createObjects(t, s.dyn, vms, ns, n, func(i int) (string, map[string]any) {
		switch i {
		case 0:
			return "vm-target", vmSpec("protected")
		case 1:
			return "vm-former", vmSpec("former")
		}
		return fmt.Sprintf("vm-%05d", i), vmSpec(fmt.Sprintf("vpc-%d", i%50))
	})
	t.Logf("created %d VirtualMachines in %s", n, time.Since(start).Round(time.Second))
	createObjects(t, s.dyn, vpcs, ns, 3+burst, func(i int) (string, map[string]any) {
		if i < 3 {
			return []string{"protected", "former", "free"}[i], map[string]any{}
		}
		return fmt.Sprintf("free-%d", i-3), map[string]any{}
	})
}

// singleRow is a row of the single DELETEs: p50 / p99 of each column.
type singleRow struct {
	n                                            int
	ns                                           string
	baseline, never, former, denied, burst, list string
	// marked are the objects that carried the unreferenced mark.
	marked []string
}

// single measures single DELETEs with n dependents in the namespace that
// populateSingle created, under the standard rule, all but the baseline.
func (s *setup) single(ctx context.Context, t *testing.T, n int) singleRow {
	row := singleRow{n: n, ns: fmt.Sprintf("n%d", n)}
	vpcsIn := s.dyn.Resource(vpcs).Namespace(row.ns)
	// "former" was referenced: its dependent goes, and the index sees it go.
	must(t, s.dyn.Resource(vms).Namespace(row.ns).Delete(ctx, "vm-former", metav1.DeleteOptions{}))
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = vpcsIn.Delete(ctx, "former", dryRun)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("the formerly referenced VPC %s/former is still not deletable: %v", row.ns, last)
	}
	for _, name := range []string{"free", "former"} {
		if s.waitUnreferencedMarked(ctx, t, vpcs, row.ns, name) {
			row.marked = append(row.marked, row.ns+"/"+name)
		}
	}

	row.list = measure(t, func() error {
		_, err := s.raw.Get().AbsPath("apis", vms.Group, vms.Version, "namespaces", row.ns, vms.Resource).DoRaw(ctx)
		return err
	})
	row.denied = measure(t, func() error {
		err := vpcsIn.Delete(ctx, "protected", dryRun)
		switch {
		case err == nil:
			return fmt.Errorf("the delete of a referenced VPC was allowed")
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "VirtualMachine/"+row.ns+"/vm-target"):
			return fmt.Errorf("expected a denial naming vm-target: %w", err)
		}
		return nil
	})
	row.never = measure(t, func() error { return vpcsIn.Delete(ctx, "free", dryRun) })
	row.former = measure(t, func() error { return vpcsIn.Delete(ctx, "former", dryRun) })
	row.burst = measure(t, func() error {
		return parallel(burst, burst, func(i int) error { return vpcsIn.Delete(ctx, fmt.Sprintf("free-%d", i), dryRun) })
	})
	return row
}

// markWait is how long waitUnreferencedMarked waits for a mark to take
// effect: --unreferenced-after, a pass of the cleaner, the controller's
// object selector and kcp's admission picking it up.
const markWait = time.Minute

// waitUnreferencedMarked waits until deleting the object no longer reaches
// the webhook (it carries the unreferenced mark that the DELETE webhook's
// object selector skips), as a dry run that the webhook does not count
// shows, and reports whether it came to that within markWait.
func (s *setup) waitUnreferencedMarked(ctx context.Context, t *testing.T, gvr schema.GroupVersionResource, ns, name string) bool {
	const allowedLive = `dependency_webhook_decisions_total{outcome="allowed",via="live"}`
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, markWait, true, func(context.Context) (bool, error) {
		before := s.counter(t, allowedLive)
		if err := s.dyn.Resource(gvr).Namespace(ns).Delete(ctx, name, dryRun); err != nil {
			return false, err
		}
		return s.counter(t, allowedLive) == before, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
	return err == nil
}

// bulk measures deleting n VPCs referenced by n VMs with kubectl delete
// --all and by deleting their namespace, without the rule and with it.
func (s *setup) bulk(ctx context.Context, t *testing.T, n int) string {
	populate := func(ns string) {
		must(t, s.cli.Cluster(s.consumer).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		createObjects(t, s.dyn, vpcs, ns, n, func(i int) (string, map[string]any) { return fmt.Sprintf("vpc-%05d", i), map[string]any{} })
		createObjects(t, s.dyn, vms, ns, n, func(i int) (string, map[string]any) {
			return fmt.Sprintf("vm-%05d", i), vmSpec(fmt.Sprintf("vpc-%05d", i))
		})
	}
	deleteAll := func(ns string, protected bool) string {
		populate(ns)
		if protected {
			s.waitIndexed(ctx, t)
		}
		start := time.Now()
		out, err := exec.CommandContext(ctx, s.kubectl[0], append(s.kubectl[1:], "delete", "vpcs", "--all", "-n", ns, "--wait=false")...).CombinedOutput()
		took := time.Since(start)
		denied := strings.Count(string(out), "is still referenced by")
		switch {
		case protected && denied != n:
			t.Fatalf("kubectl delete --all with the rule: %d of %d denied:\n%s", denied, n, tail(out))
		case !protected && err != nil:
			t.Fatalf("kubectl delete --all without the rule: %v\n%s", err, tail(out))
		}
		return fmt.Sprintf("%.1f", took.Seconds())
	}
	deleteNamespace := func(ns string, protected bool) string {
		populate(ns)
		if protected {
			s.waitIndexed(ctx, t)
		}
		start := time.Now()
		must(t, s.cli.Cluster(s.consumer).Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		must(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := s.cli.Cluster(s.consumer).Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
			return apierrors.IsNotFound(err), nil
		}))
		return fmt.Sprintf("%.1f", time.Since(start).Seconds())
	}

	s.protect(ctx, t, nil)
	allFree := deleteAll(fmt.Sprintf("all-free-%d", n), false)
	nsFree := deleteNamespace(fmt.Sprintf("ns-free-%d", n), false)
	s.protect(ctx, t, s.standard)
	allProtected := deleteAll(fmt.Sprintf("all-protected-%d", n), true)
	nsProtected := deleteNamespace(fmt.Sprintf("ns-protected-%d", n), true)
	return fmt.Sprintf("| %d | %s | %s | %s | %s |", n, allFree, allProtected, nsFree, nsProtected)
}

// waitIndexed waits until the webhook's index holds every dependent of the
// active rules.
func (s *setup) waitIndexed(ctx context.Context, t *testing.T) {
	want := 0
	for _, gvr := range s.dependents() {
		list, err := s.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		must(t, err)
		want += len(list.Items)
	}
	must(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return s.indexed(t) >= want, nil
	}))
}

// indexed returns the number of dependents in the webhook's index.
func (s *setup) indexed(t *testing.T) int {
	return int(s.metric(t, "dependency_webhook_indexed_dependents"))
}

// metric returns the value of an unlabelled metric of the webhook.
func (s *setup) metric(t *testing.T, name string) float64 {
	v, ok := s.lookup(t, name)
	if !ok {
		t.Fatalf("no %s in the webhook's metrics", name)
	}
	return v
}

// counter returns the value of a series of the webhook's metrics, written
// as in the exposition format (name{label="value"}), 0 if it is not there
// (a counter that was never incremented).
func (s *setup) counter(t *testing.T, series string) float64 {
	v, _ := s.lookup(t, series)
	return v
}

// lookup returns the value of a series of the webhook's metrics.
func (s *setup) lookup(t *testing.T, series string) (float64, bool) {
	m, err := procenv.Scrape(s.metrics)
	must(t, err)
	v, ok := m[series]
	return v, ok
}

// usage is the webhook's memory: its resident set size and its live Go heap
// as of the last garbage collection, in bytes.
type usage struct {
	rss, heap float64
}

// memory returns the webhook's memory, after its runtime had a moment to
// collect garbage and return freed memory.
func (s *setup) memory(t *testing.T) usage {
	time.Sleep(5 * time.Second)
	rss, err := procenv.RSS(s.webhook.Pid())
	must(t, err)
	return usage{rss: rss, heap: s.metric(t, "go_gc_heap_live_bytes")}
}

func vmSpec(vpc string) map[string]any {
	return map[string]any{"cpu": 4, "memory": "8Gi", "image": "registry.example/os:1.2.3",
		"vpcRef": map[string]any{"name": vpc}, "nics": []any{map[string]any{"name": "eth0", "vpc": vpc}}}
}

// createObjects creates n objects of gvr in ns with 16 workers; object i
// gets the name and spec of gen(i).
func createObjects(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, n int, gen func(i int) (string, map[string]any)) {
	t.Helper()
	must(t, parallel(n, 16, func(i int) error {
		name, spec := gen(i)
		_, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), newObject(gvr, ns, name, spec), metav1.CreateOptions{})
		return err
	}))
}

// parallel calls f(0) to f(n-1) with the given number of workers and returns
// the first error.
func parallel(n, workers int, f func(i int) error) error {
	work := make(chan int)
	var (
		wg    sync.WaitGroup
		lock  sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					lock.Lock()
					first = cmp.Or(first, err)
					lock.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// sizes returns the comma-separated numbers of the environment variable
// name, or defaults if it is unset.
func sizes(t *testing.T, name string, defaults ...int) []int {
	v := os.Getenv(name)
	if v == "" {
		return defaults
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		must(t, err)
		out = append(out, n)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// measure runs f twice to warm up, then samples times, and returns
// "p50 / p99" in milliseconds.
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
	return ms(d[len(d)/2]) + " / " + ms(d[len(d)*99/100])
}

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}
