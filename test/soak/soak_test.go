//go:build soak

// Package soak is a long-running test against a real kcp (one shard), with
// the controller and the webhook built by `make build` running as processes
// (see procenv): two tenants (consumer workspaces binding the network and
// compute providers) churn for SOAK_MINUTES while the rules change every
// SOAK_RULE_SECONDS, and the processes' memory, goroutines, the index size
// and the latency of DELETEs are sampled every SOAK_SAMPLE_SECONDS.
//
// Each tenant has a base population (SOAK_BASE VMs, each referencing a VPC
// and a Subnet of its own, which stay for the whole run) and SOAK_WORKERS
// churn workers, each in a namespace of its own, repeating: create two VPCs
// and a Subnet, create a VM referencing the first VPC and the Subnet, delete
// the first VPC (must be denied) and the Subnet (denied, deferred or allowed,
// as the rules of the moment say), change the VM to reference the second VPC
// (which must now be denied, and the first must become deletable), check that
// the referenced objects still exist, delete the VM, and delete the targets
// (each must be allowed within a minute). A checker per tenant sends dry-run
// DELETEs of the base population's VPCs and Subnets.
//
// The rules cycle through five phases: vm-to-vpc alone; a second rule
// vm-to-subnet (Deny) added; its deletionPolicy toggled to Replay; the second
// rule removed; vm-to-vpc given a second dependency on Subnets (an in-place
// edit), which the next phase removes again.
//
// Wrong decisions: a DELETE of a referenced object that is allowed (or a
// referenced object found gone), a DELETE of an object that no rule protects
// that is denied, and a DELETE of an unreferenced object still denied a
// minute after its last reference went. A decision counts only if the
// protection of its type was settled for the whole request: while a rule
// change is in progress, deletes that it newly protects may legitimately be
// allowed until the rule is in force. A change is settled once every rule is
// Ready and DependentsIndexed at its current generation, a removed rule is
// gone, and dry-run DELETEs of a probe in every tenant answer as the new
// rules say. Decisions during changes are reported, not counted.
//
// The test fails on any wrong decision, if RSS grows by more than 10% after
// warm-up (the first third of the run), if goroutines grow steadily after
// warm-up, or if the index does not hold exactly the VMs that exist at the
// end. Run it with `make soak`; it prints a table over time and a summary
// (and writes them to SOAK_OUTPUT if set).
package soak

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/opendefensecloud/dependency-controller/test/kcpenv"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

var (
	vpcs, subnets, vms = procenv.VPCs, procenv.Subnets, procenv.VMs
	dryRun             = metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
)

// config is the soak's configuration, from the environment.
type config struct {
	duration   time.Duration // SOAK_MINUTES, default 10
	sample     time.Duration // SOAK_SAMPLE_SECONDS, default 30
	rulePeriod time.Duration // SOAK_RULE_SECONDS, default 120
	workers    int           // SOAK_WORKERS per tenant, default 2
	base       int           // SOAK_BASE VMs per tenant, default 500
	pause      time.Duration // SOAK_PAUSE_MS between a worker's rounds, default 50
	output     string        // SOAK_OUTPUT
	artifacts  string        // SOAK_ARTIFACTS
}

func loadConfig(t *testing.T) config {
	num := func(name string, def float64) float64 {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			t.Fatalf("%s=%q: want a non-negative number", name, v)
		}
		return f
	}
	return config{
		duration:   time.Duration(num("SOAK_MINUTES", 10) * float64(time.Minute)),
		sample:     time.Duration(num("SOAK_SAMPLE_SECONDS", 30) * float64(time.Second)),
		rulePeriod: time.Duration(num("SOAK_RULE_SECONDS", 120) * float64(time.Second)),
		workers:    max(1, int(num("SOAK_WORKERS", 2))),
		base:       int(num("SOAK_BASE", 500)),
		pause:      time.Duration(num("SOAK_PAUSE_MS", 50) * float64(time.Millisecond)),
		output:     os.Getenv("SOAK_OUTPUT"),
		artifacts:  os.Getenv("SOAK_ARTIFACTS"),
	}
}

// tenant is a consumer workspace.
type tenant struct {
	name string
	dyn  dynamic.Interface
	*procenv.Consumer
}

// soak is the running test.
type soak struct {
	cfg     config
	env     *procenv.Env
	tenants []*tenant
	rules   *rules
	stats   *stats
	// stopped is closed when the churn is to end.
	stopped chan struct{}
}

func (s *soak) stopping() bool {
	select {
	case <-s.stopped:
		return true
	default:
		return false
	}
}

func TestSoak(t *testing.T) {
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	klog.SetLogger(logr.Discard()) // client-go's throttling notes
	ctx := context.Background()
	cfg := loadConfig(t)
	startedAt := time.Now()
	loadBefore := loadAverage()

	env := procenv.Start(ctx, t, procenv.Options{Consumers: []string{"tenant-a", "tenant-b"}})
	s := &soak{cfg: cfg, env: env, stats: newStats(), stopped: make(chan struct{})}
	for i, c := range env.Consumers {
		s.tenants = append(s.tenants, &tenant{name: string(rune('a' + i)), dyn: c.Dyn, Consumer: c})
	}
	s.rules = newRules(s)
	t.Logf("kcp, webhook and controller up after %s; logs in %s", time.Since(startedAt).Round(time.Second), env.Dir)

	s.populate(ctx, t)
	if err := s.rules.apply(ctx, 0); err != nil {
		t.Fatalf("the first rule did not take effect: %v", err)
	}
	s.waitIndexed(ctx, t)
	t.Logf("base population of %d VMs per tenant created and indexed after %s", cfg.base, time.Since(startedAt).Round(time.Second))

	// The churn.
	churnStart := time.Now()
	sampler := newSampler(s, churnStart)
	sampler.take(t)
	var wg sync.WaitGroup
	for _, tn := range s.tenants {
		for k := range cfg.workers {
			w := &worker{s: s, tenant: tn, ns: fmt.Sprintf("churn-%d", k)}
			wg.Go(func() { w.run(ctx) })
		}
		wg.Go(func() { (&worker{s: s, tenant: tn, ns: "base"}).check(ctx) })
	}
	rulesDone := make(chan struct{})
	go func() {
		defer close(rulesDone)
		s.rules.cycle(ctx, churnStart)
	}()
	ticker := time.NewTicker(cfg.sample)
	deadline := time.After(cfg.duration)
loop:
	for {
		select {
		case <-ticker.C:
			sampler.take(t)
			if t.Failed() {
				break loop
			}
		case <-deadline:
			break loop
		}
	}
	ticker.Stop()
	close(s.stopped)
	wg.Wait()
	<-rulesDone
	churned := time.Since(churnStart)
	sampler.take(t)

	// The end: everything the workers created is gone, and the index holds
	// exactly the VMs that exist.
	leftovers := s.leftovers(ctx, t)
	indexed, existing := s.indexMatches(ctx, t)

	creators := s.goroutines(t)

	report := s.report(sampler, reportInfo{
		started: startedAt, churned: churned, loadBefore: loadBefore, loadAfter: loadAverage(),
		leftovers: leftovers, indexed: indexed, existing: existing, creators: creators,
	})
	out := strings.Join(report.lines, "\n")
	t.Logf("\n%s", out)
	if cfg.output != "" {
		if err := os.WriteFile(cfg.output, []byte(out+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, f := range report.failures {
		t.Error(f)
	}
}

// baseName is the name of the i-th object of a type in the base population.
func baseName(prefix string, i int) string {
	return fmt.Sprintf("%s-%05d", prefix, i)
}

// vmSpec returns the spec of a VM referencing a VPC and a Subnet.
func vmSpec(vpc, subnet string) map[string]any {
	return map[string]any{"cpu": 2, "memory": "4Gi", "image": "registry.example/os:1.2.3",
		"vpcRef": map[string]any{"name": vpc}, "subnetRef": map[string]any{"name": subnet}}
}

// populate creates the namespaces of every tenant: "base" with the base
// population, "probe" with a VM that references a VPC and a Subnet (the
// rules' probes), and the workers' namespaces.
func (s *soak) populate(ctx context.Context, t *testing.T) {
	for _, tn := range s.tenants {
		namespaces := []string{"base", "probe"}
		for k := range s.cfg.workers {
			namespaces = append(namespaces, fmt.Sprintf("churn-%d", k))
		}
		for _, ns := range namespaces {
			if err := tn.createNamespace(ctx, s.env, ns); err != nil {
				t.Fatal(err)
			}
		}
		create := func(gvr schema.GroupVersionResource, ns string, n int, gen func(i int) (string, map[string]any)) {
			work := make(chan int)
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for i := range work {
						name, spec := gen(i)
						if _, err := tn.dyn.Resource(gvr).Namespace(ns).Create(ctx, procenv.NewObject(gvr, ns, name, spec), metav1.CreateOptions{}); err != nil {
							errs <- err
						}
					}
				})
			}
			for i := range n {
				work <- i
			}
			close(work)
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				t.Fatalf("creating the base population in tenant %s: %v", tn.name, err)
			}
		}
		create(vpcs, "base", s.cfg.base, func(i int) (string, map[string]any) { return baseName("vpc", i), map[string]any{} })
		create(subnets, "base", s.cfg.base, func(i int) (string, map[string]any) { return baseName("subnet", i), map[string]any{} })
		create(vms, "base", s.cfg.base, func(i int) (string, map[string]any) {
			return baseName("vm", i), vmSpec(baseName("vpc", i), baseName("subnet", i))
		})
		create(vpcs, "probe", 1, func(int) (string, map[string]any) { return "probe", map[string]any{} })
		create(subnets, "probe", 1, func(int) (string, map[string]any) { return "probe", map[string]any{} })
		create(vms, "probe", 1, func(int) (string, map[string]any) { return "probe", vmSpec("probe", "probe") })
	}
}

func (tn *tenant) createNamespace(ctx context.Context, env *procenv.Env, name string) error {
	return env.Cli.Cluster(tn.Path).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// vmCount returns how many VMs exist in every tenant.
func (s *soak) vmCount(ctx context.Context) (int, error) {
	n := 0
	for _, tn := range s.tenants {
		list, err := tn.dyn.Resource(vms).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		n += len(list.Items)
	}
	return n, nil
}

// indexed returns the number of dependents in the webhook's index.
func (s *soak) indexed() (int, error) {
	m, err := procenv.Scrape(s.env.WebhookMetrics)
	if err != nil {
		return 0, err
	}
	v, ok := m["dependency_webhook_indexed_dependents"]
	if !ok {
		return 0, fmt.Errorf("no dependency_webhook_indexed_dependents in the webhook's metrics")
	}
	return int(v), nil
}

// waitIndexed waits until the index holds every VM.
func (s *soak) waitIndexed(ctx context.Context, t *testing.T) {
	want, err := s.vmCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got int
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		got, err = s.indexed()
		return err == nil && got >= want, nil
	}); err != nil {
		t.Fatalf("the index holds %d dependents, want %d: %v", got, want, err)
	}
}

// indexMatches waits up to a minute until the index holds exactly the VMs
// that exist, and returns both numbers as last read.
func (s *soak) indexMatches(ctx context.Context, t *testing.T) (indexed, existing int) {
	_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		if existing, err = s.vmCount(ctx); err != nil {
			t.Logf("counting VMs: %v", err)
			return false, nil
		}
		if indexed, err = s.indexed(); err != nil {
			t.Logf("reading the index size: %v", err)
			return false, nil
		}
		return indexed == existing, nil
	})
	return indexed, existing
}

// leftovers returns the objects left in the workers' namespaces.
func (s *soak) leftovers(ctx context.Context, t *testing.T) []string {
	var left []string
	for _, tn := range s.tenants {
		for k := range s.cfg.workers {
			ns := fmt.Sprintf("churn-%d", k)
			for _, gvr := range []schema.GroupVersionResource{vms, vpcs, subnets} {
				list, err := tn.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Errorf("listing %s in tenant %s/%s: %v", gvr.Resource, tn.name, ns, err)
					continue
				}
				for _, item := range list.Items {
					left = append(left, fmt.Sprintf("%s %s/%s/%s", procenv.Kinds[gvr.Resource], tn.name, ns, item.GetName()))
				}
			}
		}
	}
	return left
}

// goroutines stops the webhook and the controller with a goroutine dump
// each and returns their goroutines by the function that started them. With
// SOAK_ARTIFACTS set, the dumps and the processes' logs are kept there.
func (s *soak) goroutines(t *testing.T) map[string]map[string]int {
	creators := map[string]map[string]int{}
	if s.cfg.artifacts != "" {
		if err := os.MkdirAll(s.cfg.artifacts, 0o755); err != nil {
			t.Error(err)
		}
	}
	for _, p := range []*kcpenv.Process{s.env.Webhook, s.env.Controller} {
		dump, err := procenv.DumpGoroutines(p)
		if err != nil {
			t.Logf("no goroutine dump of the %s: %v", p.Name, err)
			continue
		}
		creators[p.Name] = procenv.GoroutineCreators(dump)
		if s.cfg.artifacts == "" {
			continue
		}
		if log, err := os.ReadFile(p.LogPath); err != nil {
			t.Error(err)
		} else if err := os.WriteFile(filepath.Join(s.cfg.artifacts, p.Name+".log"), log, 0o644); err != nil {
			t.Error(err)
		}
	}
	if s.cfg.artifacts != "" {
		t.Logf("logs and goroutine dumps (at the end of the logs) in %s", s.cfg.artifacts)
	}
	return creators
}

// loadAverage returns the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
